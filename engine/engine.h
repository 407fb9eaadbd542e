/*
 * engine.h - the sync-state analysis of one accelerator process.
 *
 * The engine implements the semantics of docs/trace-format.md: fed one
 * operation at a time, in the order the process issued them, it keeps the
 * streams' vector clocks, the per-byte access history and the allocation
 * table, and hands every synchronization error it finds to a callback, as
 * docs/findings.md defines it. It does no I/O of any kind, which is
 * what lets `npusanctl analyze` and the daemon share it.
 *
 * Caller owns the engine; release with engine_free(), which accepts NULL.
 * The engine never touches a symtab: operator and stack ids in findings are
 * the ones the ops carried.
 */
#ifndef NPUSAN_ENGINE_H
#define NPUSAN_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "op.h"

/* The most distinct streams one process may name. */
#define ENGINE_MAX_STREAMS 1024
/* The most distinct sites (operator, stack, argument and graph of an
 * access) one process may name: 16 million. */
#define ENGINE_MAX_SITES (1u << 24)

/* X(enum suffix, name in findings.md) */
#define FINDING_KINDS(X)                                  \
	X(DATA_RACE, "data_race")                         \
	X(MISSING_RECORD_STREAM, "missing_record_stream") \
	X(STALE_GRAPH_ADDRESS, "stale_graph_address")     \
	X(UNJOINED_CAPTURE, "unjoined_capture")

enum finding_kind {
#define FINDING_KIND_ENUM(name, str) FINDING_##name,
	FINDING_KINDS(FINDING_KIND_ENUM)
#undef FINDING_KIND_ENUM
	FINDING_KIND_COUNT
};

/* X(enum suffix, value of `detected_at`) */
#define DETECTED_AT(X)                  \
	X(LAUNCH, "launch")             \
	X(FREE, "free")                 \
	X(FLUSH, "flush")               \
	X(CAPTURE, "capture")           \
	X(CAPTURE_END, "capture_end")   \
	X(REPLAY, "replay")

enum detected_at {
#define DETECTED_AT_ENUM(name, str) DETECTED_AT_##name,
	DETECTED_AT(DETECTED_AT_ENUM)
#undef DETECTED_AT_ENUM
	DETECTED_AT_COUNT
};

const char *finding_kind_name(enum finding_kind kind);
const char *detected_at_name(enum detected_at at);

/* One access of a launch, as a finding reports it. */
struct finding_access {
	uint64_t stream;
	uint64_t seq;
	bool write;
	uint32_t op;    /* symtab string id of the operator */
	uint32_t stack; /* symtab stack id; 0 when unknown */
	/* The graph whose capture recorded this access, or whose replay
	 * made it (trace format v2); has_graph false otherwise. */
	bool has_graph;
	uint64_t graph;
	/* symtab string id of the operator's argument the access was made
	 * through; 0 when unknown. Not part of the deduplication key. */
	uint32_t arg;
};

struct finding_alloc {
	uint64_t ptr;
	uint64_t size; /* as the alloc gave it */
	bool has_stream;
	uint64_t stream;
	uint32_t stack;
};

struct finding {
	enum finding_kind kind;
	enum detected_at detected_at;
	uint64_t id;    /* 1, 2, 3... per engine, in order of first detection */
	uint64_t count; /* occurrences this finding stands for so far */
	uint64_t ptr;
	bool has_alloc;
	bool has_previous;
	struct finding_alloc alloc;
	struct finding_access access;
	struct finding_access previous;
	/* A missing_record_stream found at a free (detected_at "free"):
	 * has_free, with that free's stack id (0 when it had none). Not part
	 * of the deduplication key: a repeat keeps the first one's. */
	bool has_free;
	uint32_t free_stack;
};

/*
 * The deduplication key of findings.md, its one definition: kind, both
 * streams, both access types, both operators, both stacks and both graphs;
 * never the pointer. A missing_record_stream's other side is its
 * allocation: the allocation stream (when known) and the allocation's
 * stack; a stale_graph_address's is the captured allocation's stack only
 * (graphs.md); an unjoined_capture has no other side. The engine
 * merges occurrences by it, and the daemon's store merges rows by it, so
 * that both count the same distinct findings.
 *
 * Text is named by ids that are equal exactly when the texts are: a
 * finding's own symtab ids, or a caller's own numbering (the store's row
 * ids of strings and stacks), passed as a struct finding_text.
 */
struct finding_key {
	uint64_t s1, s2;
	uint64_t op1, op2, st1, st2; /* 0: none */
	uint64_t g1, g2;	     /* the accesses' graphs (graphs.md) */
	uint8_t kind;
	uint8_t has_previous; /* side 2 is the previous access, else the
				 allocation (no operator, no access type) */
	uint8_t has_s2;
	uint8_t w1, w2;
	uint8_t has_g1, has_g2;
	uint8_t zero[1]; /* no padding: keys compare and hash as bytes */
};

_Static_assert(sizeof(struct finding_key) == 72, "a key has no padding");

/* Text ids naming a finding's operators and stacks; 0 for none. */
struct finding_text {
	uint64_t op, stack;           /* the access's */
	uint64_t prev_op, prev_stack; /* the previous access's */
	uint64_t alloc_stack;
};

/*
 * The key of `f` into *k, every byte of it written (keys compare and hash
 * as bytes). `t` names f's text in the caller's ids; NULL takes f's own.
 */
void finding_key(const struct finding *f, const struct finding_text *t,
		 struct finding_key *k);

/* The longest text of a key, its NUL included. */
#define FINDING_KEY_TEXT_MAX 256

/*
 * `k` as text into `buf`, for a database column: equal keys give equal
 * texts and distinct keys distinct texts. Returns its length.
 */
int finding_key_text(const struct finding_key *k,
		     char buf[FINDING_KEY_TEXT_MAX]);

/*
 * Called for every occurrence of a finding, during engine_feed(). Without
 * deduplication every call has `first` true, its own id and count 1. With
 * it, `first` is true for the first occurrence of a key (finding_key());
 * later
 * occurrences come with `first` false, the first one's id and the new
 * count, while the other fields describe the repeat. `f` is valid only
 * during the call.
 */
typedef void (*engine_finding_cb)(const struct finding *f, bool first,
				  void *arg);

struct engine_opts {
	bool dedup;
	engine_finding_cb finding_cb;
	void *arg;
	/* Memory the engine may hold, in bytes; 0 for no limit. */
	size_t max_bytes;
};

struct engine;

struct engine_stats {
	uint64_t ops;
	uint64_t launches;
	uint64_t findings;    /* distinct findings (rows when deduplicating) */
	uint64_t occurrences; /* every occurrence */
	uint64_t gaps;
	uint64_t live_allocs;
	uint64_t streams;
	uint64_t segments;    /* ranges of the access history */
	uint64_t accesses;    /* accesses the history still refers to */
	size_t bytes;         /* memory held now */
	size_t peak_bytes;
};

/* 0; -ENOMEM; -EINVAL when `o` has no callback. */
int engine_new(const struct engine_opts *o, struct engine **out);
void engine_free(struct engine *e);

/*
 * Analyses one operation, calling the finding callback for what it finds.
 * 0 on success. -EINVAL when the op is malformed (an unknown kind, an empty
 * range, a range past 2^64); the engine is unchanged. -E2BIG when the op
 * names a stream beyond ENGINE_MAX_STREAMS, or a site beyond
 * ENGINE_MAX_SITES; the engine is unchanged.
 * -ENOMEM when memory ran out (or max_bytes was reached) part way; the
 * engine then forgets its access history as a `gap` would, so that it
 * never reports a false finding, and can go on being fed.
 */
int engine_feed(struct engine *e, const struct op *op);

/* engine_feed_or_skip()'s results beyond engine_feed()'s. */
enum {
	ENGINE_SKIPPED_GAP = 1, /* skipped, and a new gap put in its place */
	ENGINE_SKIPPED = 2,     /* skipped within the gap put before it */
};

/*
 * engine_feed(), except that an op naming a stream or a site beyond the
 * limits is skipped: the engine forgets its history as at a
 * gap, so that no pair across the skipped op is reported, and the caller
 * counts the op lost (and, for ENGINE_SKIPPED_GAP, one more gap). Ops
 * skipped one after another make one gap; *skipping (false at first,
 * the caller's per engine) says whether the last op was skipped. The one
 * policy the daemon and `npusanctl analyze` share, so that they count and
 * find the same. Returns engine_feed()'s result, -E2BIG replaced by
 * ENGINE_SKIPPED_GAP or ENGINE_SKIPPED.
 */
int engine_feed_or_skip(struct engine *e, const struct op *op,
			bool *skipping);

void engine_get_stats(const struct engine *e, struct engine_stats *out);

/* Where engine_stats.bytes go, for benchmarks: the slabs of each kind of
 * small object (used: what their live objects fill), the read lists and
 * usage arrays of the allocations and of the bytes outside them, the
 * exact-start hash, and the rest (clocks, sites, findings, graphs,
 * scratch). */
struct engine_memory {
	size_t alloc_slabs, alloc_used;
	size_t access_slabs, access_used;
	size_t seg_slabs, seg_used;
	size_t usage_slabs, usage_used; /* with their latest uses */
	size_t read_lists; /* with their table and the freed ones kept */
	size_t usage_arrays;
	size_t alloc_hash;
	size_t other;
};

/* Walks everything, so it is for benchmarks, never per operation. */
void engine_get_memory(const struct engine *e, struct engine_memory *out);

/*
 * Checks what every operation must leave behind: history segments ordered,
 * disjoint, never empty and inside their allocation (or outside every
 * allocation); allocations ordered, disjoint and in their hash; usages
 * only where the record_stream rule records them; every access's
 * reference count and the counts of engine_get_stats(). NULL when all
 * hold, else a static message naming the first that does not. It walks
 * everything, so it is for tests and fuzzers, after each operation.
 */
const char *engine_check(const struct engine *e);

#endif
