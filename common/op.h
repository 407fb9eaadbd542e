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

/*
 * X(enum suffix, trace directive) for every operation: those of trace
 * format v1, then those version 2 adds (graphs). New kinds go at the end:
 * the numbers are the ring's wire numbers (ringop.h).
 */
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
	X(GAP, "gap")                      \
	X(CAPTURE_BEGIN, "capture_begin")  \
	X(CAPTURE_END, "capture_end")      \
	X(GRAPH_REPLAY, "graph_replay")    \
	X(GRAPH_DESTROY, "graph_destroy")

/* The first kind of trace format v2: a v1 trace holds only kinds below it. */
#define OP_FIRST_V2 OP_CAPTURE_BEGIN

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

/* The longest name of an operator's argument, in bytes. */
#define OP_MAX_ARG 255

/*
 * Whether the `len` bytes at `s` may name an operator's argument
 * (`PTR+LEN@NAME` in a trace): 1 to OP_MAX_ARG bytes, none of them a blank,
 * a control character or one of `" # = , @`. The one rule of the reader,
 * the writer and ringdec, which makes every other name none, so that a
 * recording always reads back and the daemon and `analyze` see one name.
 */
static inline bool op_arg_ok(const char *s, size_t len)
{
	if (s == NULL || len == 0 || len > OP_MAX_ARG)
		return false;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c <= ' ' || c == 0x7f || c == '"' || c == '#' ||
		    c == '=' || c == ',' || c == '@')
			return false;
	}
	return true;
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
 *   alloc           ptr, size, stream when has_stream, graph when has_graph
 *   free            ptr
 *   record_stream   ptr, stream
 *   launch          stream, name, reads, writes, read_args, write_args
 *   flush           -
 *   gap             lost when has_lost
 *   capture_begin   stream, graph       capture_end    stream, graph
 *   graph_replay    graph, stream       graph_destroy  graph
 *
 * Every kind may carry `stack`. Fields an operation does not use are zero;
 * has_stream and has_graph are used by alloc only, whose stream and graph
 * (the graph whose private pool the memory comes from) are optional.
 * op_is_v2() tells whether an op needs trace format version 2.
 */
struct op {
	enum op_kind kind;
	uint32_t stack; /* symtab stack id; 0 when none */
	uint32_t name;  /* launch: symtab string id of the operator */
	bool has_stream;
	bool has_lost;
	bool has_graph;
	uint64_t stream;
	uint64_t on;
	uint64_t event;
	uint64_t ptr;
	uint64_t size; /* alloc: as written; 0 counts as one byte */
	uint64_t lost;
	uint64_t graph;
	const struct op_range *reads;
	const struct op_range *writes;
	/* launch: the operator's argument of each range, a symtab string id
	 * (0: none); NULL when no range of the list names one. */
	const uint32_t *read_args;
	const uint32_t *write_args;
	size_t nreads;
	size_t nwrites;
};

/* Whether `op` needs trace format version 2: a graph kind, or an alloc
 * from a graph's pool. */
static inline bool op_is_v2(const struct op *op)
{
	return op->kind >= OP_FIRST_V2 || (op->kind == OP_ALLOC && op->has_graph);
}

#endif
