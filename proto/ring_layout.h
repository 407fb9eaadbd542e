/*
 * ring_layout.h - the layout of the shared-memory ring between one agent and one
 * consumer, and the encoding of the records it carries.
 *
 * Every accelerator process owns one ring: a memfd the agent creates, seals
 * against resizing and hands to the daemon with SCM_RIGHTS. Any number of
 * the process's threads produce (agent/ring.h); exactly one consumer reads
 * (common/ringread.h): the daemon's ingest, or the agent's own recorder.
 * This header is the whole contract between them; the consumer trusts none
 * of it, because the producer may be buggy, dead or hostile.
 *
 * DESIGN
 *
 * 1. The mapping is RING_HEADER_SIZE bytes of header, then `capacity` bytes
 *    of data, capacity a power of two, then `max_record` bytes of slack
 *    (ring_map_size()). The header holds offsets and sizes only, never
 *    pointers; each hot counter has a 128-byte line to itself (two 64-byte
 *    lines, because adjacent-line prefetch pairs them).
 * 2. `head` and `tail` are free-running byte positions; used = head - tail,
 *    a position's offset is pos & (capacity - 1). Producers advance head by
 *    compare-and-swap (a reservation); the consumer alone advances tail.
 * 3. A record is an 8-byte header (struct ring_rec) and its payload, padded
 *    to a multiple of 8. Its `word` is 0 until the producer writes it, then
 *    RING_BUSY with the length and type, then RING_COMMIT once the payload is
 *    complete (a release store). Its `tag` is its position / 8, truncated to
 *    32 bits, so a header left from an earlier lap never passes for a new one.
 * 4. A record never wraps: one that starts near the end of the data area
 *    runs on, contiguous, into the slack that follows it. The positions it
 *    spans past the end are not used at the start of the data area in that
 *    lap (they stay zero), and only one record at a time can run into the
 *    slack, since the ring holds at most one lap. The consumer zeroes the
 *    slack bytes a record used with the rest of it (DESIGN 5). Layout 1 had
 *    no slack: a RING_REC_PAD record filled the end instead. No producer of
 *    layout 2 writes a pad: a consumer takes one for a corrupt header.
 * 5. The consumer zeroes every byte it has consumed before it publishes the
 *    new tail (a release store that pairs with the producers' acquire load of
 *    tail), so a producer always reserves zeroed memory, and a zero word at
 *    the tail means "reserved, header not written yet".
 * 6. A record that finds too little room is dropped (or, with RING_F_BLOCK,
 *    waits for a live consumer) and counted in `dropped` and `pending`. The
 *    next producer to reserve moves `pending` into a gap operation placed
 *    just before its own record, so the consumer sees where records were
 *    lost and how many.
 * 7. `consumed` counts the operation records (RING_REC_OP, RING_REC_LAUNCH)
 *    every consumer of the ring has taken, ever; the consumer stores it
 *    just before it publishes a new tail. A consumer that maps a ring
 *    another one drained before (a restarted daemon) goes on counting from
 *    it, and compares it with what the previous one saved, to know how
 *    many operations were taken but never accounted for. It was reserved
 *    (zero) space in the first layout, so version 1 still describes it.
 *
 * All integers are in the host's byte order: producer and consumer share the
 * host.
 */
#ifndef NPUSAN_PROTO_RING_LAYOUT_H
#define NPUSAN_PROTO_RING_LAYOUT_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* "NPUSRING" read as a little-endian integer. */
#define RING_MAGIC UINT64_C(0x474e49525355504e)
#define RING_VERSION 2u /* 2: the slack past the data area (DESIGN 4) */
#define RING_HEADER_SIZE 4096u

#define RING_MIN_CAPACITY (UINT64_C(64) << 10)
#define RING_MAX_CAPACITY (UINT64_C(1) << 30)
#define RING_DEFAULT_CAPACITY (UINT64_C(8) << 20)

/* header.flags */
#define RING_F_BLOCK 1u /* producers wait for room instead of dropping */

/*
 * The named memory orders of the ring. Every use says what it orders and
 * what it pairs with.
 */
#define ring_load_relaxed(p) atomic_load_explicit((p), memory_order_relaxed)
#define ring_load_acquire(p) atomic_load_explicit((p), memory_order_acquire)
#define ring_store_relaxed(p, v) \
	atomic_store_explicit((p), (v), memory_order_relaxed)
#define ring_store_release(p, v) \
	atomic_store_explicit((p), (v), memory_order_release)

struct ring_header {
	/* Written once by the producer before the fd leaves the process. */
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;
	uint64_t capacity;    /* data bytes, a power of two */
	uint32_t max_record;  /* the longest record a producer writes, bytes */
	uint32_t flags;       /* RING_F_* */
	uint64_t producer_pid;
	alignas(128) _Atomic uint64_t head;    /* producers: next position to reserve */
	alignas(128) _Atomic uint64_t tail;    /* consumer: first unconsumed position */
	alignas(128) _Atomic uint64_t dropped; /* producers: records dropped, ever */
	_Atomic uint64_t pending; /* producers: dropped, not yet in a gap record */
	alignas(128) _Atomic uint64_t beat; /* consumer: bumped at map and every drain */
	_Atomic uint64_t consumed; /* consumer: operation records taken, ever */
	uint8_t reserved[RING_HEADER_SIZE - 528];
};

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2,
	       "the ring needs address-free 64-bit atomics");
_Static_assert(sizeof(_Atomic uint64_t) == 8, "atomic u64 is 8 bytes");
_Static_assert(sizeof(struct ring_header) == RING_HEADER_SIZE,
	       "the header is one page");
/* Layout 2 kept the header of layout 1 byte for byte. */
_Static_assert(RING_VERSION == 2, "the layout asserted here");
_Static_assert(offsetof(struct ring_header, capacity) == 16, "layout v1");
_Static_assert(offsetof(struct ring_header, producer_pid) == 32, "layout v1");
_Static_assert(offsetof(struct ring_header, head) == 128, "layout v1");
_Static_assert(offsetof(struct ring_header, tail) == 256, "layout v1");
_Static_assert(offsetof(struct ring_header, dropped) == 384, "layout v1");
_Static_assert(offsetof(struct ring_header, pending) == 392, "layout v1");
_Static_assert(offsetof(struct ring_header, beat) == 512, "layout v1");
_Static_assert(offsetof(struct ring_header, consumed) == 520, "layout v1");

/* The bytes of a ring's mapping: header, data and slack (DESIGN 1). */
static inline uint64_t ring_map_size(uint64_t capacity, uint32_t max_record)
{
	return RING_HEADER_SIZE + capacity + max_record;
}

/*
 * A record header. `word` packs the length in 8-byte units (bits 0-23),
 * the type (bits 24-29) and the state (bits 30-31).
 */
struct ring_rec {
	_Atomic uint32_t word;
	_Atomic uint32_t tag;
};

_Static_assert(sizeof(struct ring_rec) == 8, "record header is 8 bytes");
_Static_assert(sizeof(_Atomic uint32_t) == 4, "atomic u32 is 4 bytes");

#define RING_ALIGN 8u
#define RING_LEN_MASK UINT32_C(0x00ffffff)
#define RING_TYPE_SHIFT 24
#define RING_TYPE_MASK UINT32_C(0x3f)
#define RING_BUSY UINT32_C(0x40000000)
#define RING_COMMIT UINT32_C(0x80000000)
/* The length field's limit; a ring's max_record is far below it. */
#define RING_REC_LIMIT ((uint64_t)RING_LEN_MASK * RING_ALIGN)

/* Record types. Numbers are never reused. */
enum ring_rec_type {
	RING_REC_PAD = 1,    /* layout 1 filled the end with one; no payload */
	RING_REC_STRING = 2, /* struct ring_string: defines a string id */
	RING_REC_STACK = 3,  /* struct ring_stack: defines a stack id */
	RING_REC_OP = 4,     /* struct ring_op: any operation but launch */
	RING_REC_LAUNCH = 5, /* struct ring_launch */
};

static inline uint32_t ring_word(uint32_t state, unsigned type, uint64_t len)
{
	return state | (uint32_t)type << RING_TYPE_SHIFT |
	       (uint32_t)(len / RING_ALIGN);
}

static inline uint64_t ring_word_len(uint32_t word)
{
	return (uint64_t)(word & RING_LEN_MASK) * RING_ALIGN;
}

static inline unsigned ring_word_type(uint32_t word)
{
	return (word >> RING_TYPE_SHIFT) & RING_TYPE_MASK;
}

static inline uint32_t ring_tag(uint64_t pos)
{
	return (uint32_t)(pos / RING_ALIGN);
}

/* The bytes a record with `payload` bytes of payload takes in the ring. */
static inline uint64_t ring_rec_size(uint64_t payload)
{
	return (sizeof(struct ring_rec) + payload + RING_ALIGN - 1) &
	       ~(uint64_t)(RING_ALIGN - 1);
}

/*
 * Strings (operator names, stack frames) and stacks are defined once per
 * ring, before the first record that uses their id; ids are the agent's own,
 * starting at 1 (0 is "none"). A consumer that meets an id it never saw
 * defined (it attached late) shows the id instead of the text.
 */
struct ring_string {
	uint32_t id;
	uint32_t len; /* bytes that follow, no NUL */
	char bytes[];
};

struct ring_stack {
	uint32_t id;
	uint32_t nframes; /* string ids that follow, innermost first */
	uint32_t frames[];
};

/*
 * The operation kinds of struct ring_op and ring_launch, numbered here
 * because they are wire numbers: an agent and a daemon of different builds
 * must agree on them. common/ringop.h checks that common/op.h's enum
 * op_kind gives every kind the same number. Numbers are never reused.
 */
enum ring_op_kind {
	RING_OP_STREAM_CREATE = 0,
	RING_OP_EVENT_CREATE = 1,
	RING_OP_EVENT_DESTROY = 2,
	RING_OP_EVENT_RECORD = 3,
	RING_OP_EVENT_WAIT = 4,
	RING_OP_EVENT_SYNC = 5,
	RING_OP_STREAM_WAIT = 6,
	RING_OP_STREAM_SYNC = 7,
	RING_OP_DEVICE_SYNC = 8,
	RING_OP_ALLOC = 9,
	RING_OP_FREE = 10,
	RING_OP_RECORD_STREAM = 11,
	RING_OP_LAUNCH = 12,
	RING_OP_FLUSH = 13,
	RING_OP_GAP = 14,
	/* Trace format v2 (graphs); a consumer that predates them reads
	 * each as a malformed record, that is one operation lost. */
	RING_OP_CAPTURE_BEGIN = 15,
	RING_OP_CAPTURE_END = 16,
	RING_OP_GRAPH_REPLAY = 17,
	RING_OP_GRAPH_DESTROY = 18,
	RING_OP_KIND_COUNT = 19, /* one past the highest number */
};

/* ring_op.flags */
#define RING_OP_HAS_STREAM 1u /* alloc: `c` holds the allocation stream */
#define RING_OP_HAS_LOST 2u   /* gap: `a` holds the number lost */
#define RING_OP_HAS_GRAPH 4u  /* alloc: a struct ring_op_graph, whose
				 `graph` holds the pool's graph */

/*
 * Any operation but launch. `kind` is an enum ring_op_kind;
 * the fields it uses:
 *
 *   stream_create, stream_sync       a = stream
 *   event_create, event_destroy,
 *   event_sync                       a = event
 *   event_record, event_wait         a = event, b = stream
 *   stream_wait                      a = stream, b = on
 *   alloc                            a = ptr, b = size, c = stream
 *   free                             a = ptr
 *   record_stream                    a = ptr, b = stream
 *   gap                              a = lost
 *   device_sync, flush               -
 *   capture_begin, capture_end       a = stream, b = graph
 *   graph_replay                     a = graph, b = stream
 *   graph_destroy                    a = graph
 *
 * An alloc from a graph's private pool needs a fourth number: it is a
 * struct ring_op_graph, a struct ring_op with RING_OP_HAS_GRAPH followed
 * by the graph id, in a RING_REC_OP record of that length (40 bytes).
 * Every other op record stays the 32 bytes of layout v1, byte for byte;
 * the record type is the same, so that `consumed` counts it with no
 * change (DESIGN 7), and a consumer that predates it finds a RING_REC_OP
 * of the wrong length, a malformed record, which it counts as one
 * operation lost rather than mistake for an ordinary alloc.
 */
struct ring_op {
	uint8_t kind;
	uint8_t flags;
	uint16_t reserved;
	uint32_t stack;
	uint64_t a;
	uint64_t b;
	uint64_t c;
};

/* An alloc with RING_OP_HAS_GRAPH (see above). */
struct ring_op_graph {
	struct ring_op op;
	uint64_t graph;
};

/* The payload bytes of `op`: a struct ring_op_graph when it carries a
 * graph, which `op` is then the first member of. */
static inline size_t ring_op_size(const struct ring_op *op)
{
	return op->flags & RING_OP_HAS_GRAPH ? sizeof(struct ring_op_graph) :
					       sizeof(struct ring_op);
}

struct ring_range {
	uint64_t ptr;
	uint64_t len;
};

/* ring_launch.flags */
#define RING_LAUNCH_HAS_ARGS 1u /* the ranges are followed by args */

/*
 * A launch: `nreads` read ranges, then `nwrites` write ranges. With
 * RING_LAUNCH_HAS_ARGS, the ranges are followed by nreads + nwrites
 * uint32 string ids, the operator's argument of each range in the same
 * order (0: none), and zero padding to RING_ALIGN. The record type is the
 * same; a consumer that predates the flag finds a launch whose ranges do
 * not match its length, a malformed record, which it counts as one
 * operation lost rather than misread.
 */
struct ring_launch {
	uint8_t kind; /* RING_OP_LAUNCH, so that every op record starts alike */
	uint8_t flags;
	uint16_t reserved;
	uint32_t stack;
	uint64_t stream;
	uint32_t name;
	uint32_t nreads;
	uint32_t nwrites;
	uint32_t reserved2;
	struct ring_range ranges[];
};

_Static_assert(sizeof(struct ring_string) == 8, "layout v1");
_Static_assert(sizeof(struct ring_stack) == 8, "layout v1");
_Static_assert(sizeof(struct ring_op) == 32, "layout v1");
_Static_assert(sizeof(struct ring_range) == 16, "layout v1");
_Static_assert(sizeof(struct ring_op_graph) == 40, "graph alloc record");
_Static_assert(offsetof(struct ring_op_graph, op) == 0,
	       "a graph alloc starts as any op record");
_Static_assert(offsetof(struct ring_op_graph, graph) == 32,
	       "the graph follows a v1 op record");
_Static_assert(sizeof(struct ring_launch) == 32, "layout v1");

/* The payload bytes of a launch of `n` ranges, with their args or not. */
static inline uint64_t ring_launch_size(uint64_t n, int args)
{
	uint64_t len = sizeof(struct ring_launch) + n * sizeof(struct ring_range);

	if (args)
		len += (n * sizeof(uint32_t) + RING_ALIGN - 1) &
		       ~(uint64_t)(RING_ALIGN - 1);
	return len;
}
_Static_assert(offsetof(struct ring_launch, ranges) == 32, "layout v1");

#endif
