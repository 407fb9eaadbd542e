/*
 * op.c - names of the operations of the trace format (v1 and v2).
 */
#include "op.h"

static const char *const op_names[] = {
#define OP_KIND_NAME(name, str) str,
	OP_KINDS(OP_KIND_NAME)
#undef OP_KIND_NAME
};

_Static_assert(sizeof(op_names) / sizeof(op_names[0]) == OP_KIND_COUNT,
	       "one name per op kind");

const char *op_kind_name(enum op_kind kind)
{
	if ((unsigned)kind >= OP_KIND_COUNT)
		return NULL;
	return op_names[kind];
}
