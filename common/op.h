/*
 * op.h - one operation of an accelerator process.
 *
 * This is the in-memory form of a line of docs/trace-format.md: the
 * trace reader produces it, the trace writer consumes it, and the engine
 * analyses it. Strings (operator names, stack frames) never travel inside an
 * op; they are interned in a symtab (symtab.h) and referred to by id.
 *
 * An op owns nothing: `reads` and `writes` point into memory owned by
 * whoever produced the op (the trace reader's line buffer, a test's array)
 * and stay valid only until that producer's next call.
 */
#ifndef NPUSAN_OP_H
#define NPUSAN_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* X(enum suffix, trace directive) for every operation of trace format v1. */
#define OP_KINDS(X)                        \
	X(STREAM_CREATE, "stream_create")  \
	X(EVENT_CREATE, "event_create")    \
	X(EVENT_DESTROY, "event_destroy")  \
	X(EVENT_RECORD, "event_record")    \
	X(EVENT_WAIT, "event_wait")        \
	X(EVENT_SYNC, "event_sync")        \
	X(STREAM_WAIT, "stream_wait")      \
	X(STREAM_SYNC, "stream_sync")      \
	X(DEVICE_SYNC, "device_sync")      \
	X(ALLOC, "alloc")                  \
	X(FREE, "free")                    \
	X(RECORD_STREAM, "record_stream")  \
	X(LAUNCH, "launch")                \
	X(FLUSH, "flush")                  \
	X(GAP, "gap")

enum op_kind {
#define OP_KIND_ENUM(name, str) OP_##name,
	OP_KINDS(OP_KIND_ENUM)
#undef OP_KIND_ENUM
	OP_KIND_COUNT
};

/*
 * What the live path carries of a trace's text, defined once: a stack's
 * innermost OP_MAX_FRAMES frames, and a string's first OP_MAX_STRING bytes,
 * cut at a character boundary (op_cut_string()). The agent interns that
 * much; the trace reader keeps the same, so that `analyze` and the daemon
 * see one text.
 */
#define OP_MAX_FRAMES 256
#define OP_MAX_STRING (64u << 10)

/* The length of the `len` bytes at `s` cut to at most OP_MAX_STRING, never
 * inside a UTF-8 sequence. */
static inline size_t op_cut_string(const char *s, size_t len)
{
	if (len <= OP_MAX_STRING)
		return len;
	len = OP_MAX_STRING;
	while (len > 0 && ((unsigned char)s[len] & 0xc0) == 0x80)
		len--;
	return len;
}

/* The trace directive of `kind`, or NULL when `kind` is out of range. */
const char *op_kind_name(enum op_kind kind);

/*
 * The bytes [ptr, ptr + len). `len` is at least 1 and ptr + len is at most
 * 2^64, so the last byte, ptr + (len - 1), never overflows. A bare `PTR` in
 * a trace is the range with len 1.
 */
struct op_range {
	uint64_t ptr;
	uint64_t len;
};

/*
 * Which fields an operation uses:
 *
 *   stream_create   stream
 *   event_create    event               event_destroy  event
 *   event_record    event, stream       event_wait     event, stream
 *   event_sync      event
 *   stream_wait     stream (A), on (B)
 *   stream_sync     stream              device_sync    -
 *   alloc           ptr, size, stream when has_stream
 *   free            ptr
 *   record_stream   ptr, stream
 *   launch          stream, name, reads, writes
 *   flush           -
 *   gap             lost when has_lost
 *
 * Every kind may carry `stack`. Fields an operation does not use are zero;
 * has_stream is used by alloc only, whose stream is optional.
 */
struct op {
	enum op_kind kind;
	uint32_t stack; /* symtab stack id; 0 when none */
	uint32_t name;  /* launch: symtab string id of the operator */
	bool has_stream;
	bool has_lost;
	uint64_t stream;
	uint64_t on;
	uint64_t event;
	uint64_t ptr;
	uint64_t size; /* alloc: as written; 0 counts as one byte */
	uint64_t lost;
	const struct op_range *reads;
	const struct op_range *writes;
	size_t nreads;
	size_t nwrites;
};

#endif
