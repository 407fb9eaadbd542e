/*
 * ringop.h - the bridge between the ring's wire numbers for operation kinds
 * (proto/ring_layout.h, enum ring_op_kind) and the in-memory enum op_kind
 * (op.h). They are equal by construction, checked here at compile time, so
 * that reordering OP_KINDS cannot silently change what an agent of another
 * build means. The producer (agent/ring.h) and the consumer (ringdec.c)
 * include this header rather than the two enums on their own.
 */
#ifndef NPUSAN_COMMON_RINGOP_H
#define NPUSAN_COMMON_RINGOP_H

#include "op.h"
#include "ring_layout.h"

#define RINGOP_SAME_NUMBER(name, str)                  \
	_Static_assert((int)OP_##name == (int)RING_OP_##name, \
		       "op_kind " str " keeps its ring number");
OP_KINDS(RINGOP_SAME_NUMBER)
#undef RINGOP_SAME_NUMBER

_Static_assert((int)OP_KIND_COUNT == (int)RING_OP_KIND_COUNT,
	       "every op_kind has a ring number and no more");

#endif
