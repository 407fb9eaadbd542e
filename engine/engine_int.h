/*
 * engine_int.h - what the files of the engine share and nothing else sees:
 * its structs, its limits and the functions one part calls in another (named
 * part__name, as libuv's uv__ internals are). engine.h is the public side.
 *
 * The engine is the happens-before analysis of one accelerator process, cut
 * into parts that each own one kind of state:
 *   pool.c     memory: byte accounting, max_bytes, slabs of small objects
 *   sync.c     streams, events and their vector clocks; the sync ops
 *   finding.c  sites (operator, stack), findings, their deduplication
 *   alloc.c    the allocation table, usages and the record_stream check;
 *              alloc, free, record_stream and flush
 *   history.c  the access history of byte ranges (hists, segments, regions)
 *   launch.c   a launch: checks its accesses, then updates the history
 *   graph.c    graph capture and replay (trace format v2): captures with
 *              their capture-local clocks and history, footprints, replays
 *   check.c    engine_check(), the invariants below walked in full
 *   engine.c   engine_feed()'s dispatch over op kinds, and the lifetime
 * Everything the engine holds is counted by pool.c and freed by the part that
 * owns it, from engine_free().
 *
 * The sync state follows torch.cuda._sanitizer's StreamSynchronizations:
 * a vector clock per stream, one per recorded event and one for the host.
 * The access history follows its TensorInfo, but per byte range instead of
 * per data pointer, and the record_stream check follows torch_npu's
 * NPUEventHandler. docs/trace-format.md is the contract; the comments in
 * the parts name the rule of it that each piece implements.
 *
 * DESIGN
 *  1. Streams are numbered densely in order of first mention; a clock is an
 *     array of int64 indexed by stream number, -1 meaning "missing". Merges
 *     are element-wise max, so a missing entry behaves exactly like the
 *     dictionaries' .get(stream, -1).
 *  2. The history of some bytes is their last write and the reads since,
 *     as 32-bit names of refcounted access records ("hist"); a launch's
 *     access is one record however many histories hold it. Bytes without
 *     a hist have no history.
 *  3. Allocations are disjoint ranges in an rbtree keyed by start, plus a
 *     hash by exact start, which is what nearly every access and every
 *     free names. An allocation whose bytes all share one history (the
 *     usual whole-tensor use) keeps it inline; once part of it is used on
 *     its own, it keeps a tree of disjoint byte ranges ("segments") until
 *     a write of the whole allocation makes it uniform again. A global
 *     tree of segments holds the history of bytes no allocation covers.
 *     So the history of a byte lives in exactly one place, a whole-tensor
 *     access costs one hash probe, and a free drops its history without
 *     searching. An access belongs to the allocation containing its first
 *     byte as written.
 *  4. A launch first checks all its accesses against the history from
 *     before it and only then updates the history, so it never conflicts
 *     with itself and overlapping writes all see the same past.
 *  5. An access (T, n) is dead once n <= floor[T] = min(host[T],
 *     state[S][T] for every S): clocks only grow and new streams copy the
 *     host, so no later access can conflict with it. Dead reads are dropped
 *     when a read list grows, a dead last write when its hist gains a read
 *     and every dead last write at a host sync.
 *     Past READS_COALESCE live reads on one range, older reads that repeat
 *     a newer read's stream, operator and stack are merged into it: that
 *     bounds memory in loops that never synchronize, and can only lower
 *     the occurrence count of a finding, never hide a distinct one.
 *  6. A flush checks only the allocations with a use that may still be
 *     unsettled: a usage found ordered stays ordered (clocks only grow), and
 *     a reported or recorded one never reports again, so an allocation
 *     needs a check only after a launch gave it a new latest use. Such an
 *     allocation is `pending` and listed in e->pending at its pidx until
 *     a flush checks it or it is freed, so flush and free cost what has
 *     something to check; flush sorts the list into address order, as a
 *     walk of every allocation would go. When the list cannot grow (out of
 *     memory, or ALLOC_PENDING_MAX), the next flush walks them all.
 *     For the same reasons a usage keeps its latest use (launch and site,
 *     a struct usage_live) only while that use may still report: a check
 *     that finds it ordered, reports it, or a record_stream of its stream
 *     lets it go ("settles" it). A used usage without one is ordered.
 *  7. Every allocation of memory that could fail happens before the state
 *     it would change is touched, except while updating the history after
 *     a launch; a failure there forgets the history as `gap` does, which
 *     can only lose findings, never invent them.
 *  8. Graphs (graph.c). A stream is in at most one active capture
 *     (stream.cap), whose members list it. A capture's clocks are a
 *     square matrix over its members, in the order they joined; its
 *     history is a tree of segments like e->outside, of access records
 *     whose seq is capture-local and whose site names the graph. A graph
 *     is capturing (g->cap set) or captured; its footprint holds ranges,
 *     never bytes, and for each range the allocation its first byte
 *     belonged to at capture, by serial number: an allocation is still
 *     live exactly when the one starting at its start has its serial.
 *     An event's captured record (e->crecs) names its capture by serial;
 *     one whose capture is no longer active is dead and dropped when met.
 *  9. An access record keeps its element's start (struct access_at) unless
 *     it starts the allocation it belongs to and ends within it. Such an
 *     "inside" record is held only by that allocation's history (or a
 *     capture's), which goes when the allocation stops being live: in the
 *     live history it never starts at an address where no allocation
 *     starts, the one question `free` asks of a record's start.
 * 10. Segments move in memory: when the segment slabs hold a slab more
 *     than the segments need, clearing an allocation's history
 *     (history__alloc_clear()) moves those of the emptiest slab into the
 *     others (history.c), so that the memory follows the live segments
 *     down after a step frees its activations. So nothing keeps a pointer
 *     to a segment across a call that may clear an allocation's history.
 * 11. An access record counts its references in a byte, `refs`: nearly
 *     every one is held by a history or two and its launch. A record
 *     with `big` set has 255 more for each carry in e->big_refs[its
 *     address]: the byte wraps to 0 at the 256th reference, which moves
 *     255 of them into the carries, and when it falls to 0 with carries
 *     left it takes 255 of them back. So the common paths cost what a
 *     plain count does, taking a reference may need memory (it fails as
 *     any allocation does, DESIGN 7), and dropping one never does.
 */
#ifndef NPUSAN_ENGINE_INT_H
#define NPUSAN_ENGINE_INT_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "engine.h"
#include "hash.h"
#include "op.h"
#include "rbtree.h"
#include "u64map.h"

/* "no stream": above every stream number, and within struct alloc's
 * 11 bits. */
#define STREAM_NONE 0x7ff
/* Small slabs: after a step frees its activations, the fewer objects a
 * slab holds, the likelier it empties and goes back to malloc. */
#define POOL_CHUNK (4 * 1024)
#define READS_COALESCE 64
/* A hist's reads alternate between one and a short list. The list starts
 * with room for READS_FIRST_CAP: most that reach two reads reach a third
 * before the next write, and growing them from 2 to 4 took 1% of the
 * engine's instructions on engine_bench's training shape, for 1 B less
 * per allocation. Lists are pruned when full from 4 reads on either way,
 * so the capacity changes no finding. A few freed lists of the first
 * capacities are kept to spare malloc and free (history.c), a few hundred
 * bytes at most. */
#define READS_FIRST_CAP 4u
#define READS_SPARE_CLASSES 2
#define READS_SPARE_CAP(i) (READS_FIRST_CAP << (i))
#define READS_SPARE_MAX 8
#define SEQ_MAX ((UINT64_C(1) << 48) - 1)
#define SEEN_LIST 16

_Static_assert(ENGINE_MAX_STREAMS < STREAM_NONE, "stream numbers fit u16");

/*
 * One access of one launch, shared by the histories of the bytes it
 * touched. 12 bytes: the history holds a few per live allocation, so their
 * size is much of the engine's memory. Sequence numbers get 48 bits: 2^48
 * launches is centuries of a process's life; sites 24 (ENGINE_MAX_SITES).
 * Packed to 4-byte alignment, so that a slab holds them end to end, with
 * the reference count a byte of its own, which every history an access
 * joins or leaves changes (the rest of a big count in e->big_refs,
 * DESIGN 11).
 *
 * Where the element started (its ptr) is read only by `free P` where no
 * allocation starts at P, and it can start there only when it is not the
 * start of a live allocation holding all of it. So an access that starts
 * the allocation it belongs to and ends within it ("inside") keeps no ptr:
 * every history holding it is that allocation's, which drops it with its
 * history while still live and starting at ptr (DESIGN 9). Any other is
 * a struct access_at, from e->access_at_pool, named as the others are.
 */
struct access {
	uint64_t seq : 48;
	uint64_t sidx : 10;
	uint64_t write : 1;
	uint64_t at : 1;  /* a struct access_at: its ptr is kept */
	uint64_t big : 1; /* e->big_refs holds more references */
	uint64_t : 3;
	uint32_t site : 24; /* operator and stack, see finding__site_get() */
	uint8_t refs;	    /* references, less those in e->big_refs */
} __attribute__((packed, aligned(4)));

struct access_at {
	struct access a;
	uint64_t ptr; /* start of the element as written */
} __attribute__((packed, aligned(4)));

/* The references one carry into e->big_refs stands for (DESIGN 11). */
#define ACCESS_REFS_CARRY UINT8_MAX

_Static_assert(sizeof(struct access) == 12, "access records stay small");
_Static_assert(sizeof(struct access_at) == 20, "so do those with a ptr");
_Static_assert(ENGINE_MAX_STREAMS <= (1 << 10), "stream numbers fit sidx");
_Static_assert(ENGINE_MAX_SITES <= (1 << 24), "site numbers fit site");

/* A read list of more than one read, or one that had more (DESIGN 2):
 * access records by their 32-bit names (history__acc()). */
struct reads {
	uint32_t n;
	uint32_t cap;
	uint32_t v[];
};

/*
 * The history of some bytes: their last write and the reads since. 8
 * bytes, since every allocation and segment holds one: access records are
 * named by pool__index() in e->access_pool (0: none), which is even, so
 * that the reads are either one record (`rd` even, 0 for none) or, with
 * `rd` odd, the struct reads e->readv[rd >> 1].
 */
struct hist {
	uint32_t write;
	uint32_t rd;
};

_Static_assert(sizeof(struct hist) == 8, "a history is one word");

/* The history of the bytes [start, last], in a tree of such ranges: 48
 * bytes. */
struct seg {
	struct rb_node node;
	uint64_t start;
	uint64_t last;
	struct hist h;
};

_Static_assert(sizeof(struct seg) == 48, "segments stay small");

enum {
	USAGE_USED = 1,
	USAGE_WROTE = 2,
	USAGE_RECORDED = 4,
	USAGE_REPORTED = 8,
};

/* What one stream other than the allocation stream did with an allocation:
 * 2 bytes. An allocation's usages keep the order of their first use, the
 * order a check reports them in. */
struct usage {
	uint16_t sidx : 11;
	uint16_t flags : 5;
};

_Static_assert(sizeof(struct usage) == 2, "usages pack");
_Static_assert(ENGINE_MAX_STREAMS <= (1 << 11), "stream numbers fit usage");

/* An allocation's usages, a->nusage of them, after the first latest use
 * that may still report (struct usage_live, by pool__index() in
 * e->live_pool; 0 when none). Up to USAGE_SMALL usages fit an object of
 * e->usage_pool; more are an array (alloc__usages_size()). */
struct usages {
	uint32_t live;
	struct usage u[];
};

#define USAGE_SMALL 2

/* The latest use of a usage that may still report (DESIGN 6): its launch,
 * the sequence number's 48 bits split in two (usage__seq()), and its
 * site. 16 bytes, in a list from struct usages. */
struct usage_live {
	uint32_t site;
	uint32_t seq_lo;
	uint16_t seq_hi;
	uint16_t sidx;
	uint32_t next; /* the next of the allocation, 0 ends */
};

_Static_assert(sizeof(struct usage_live) == 16, "live usages stay small");

static inline uint64_t usage__seq(const struct usage_live *l)
{
	return (uint64_t)l->seq_hi << 32 | l->seq_lo;
}

static inline void usage__set_seq(struct usage_live *l, uint64_t seq)
{
	assert(seq <= SEQ_MAX);
	l->seq_lo = (uint32_t)seq;
	l->seq_hi = (uint16_t)(seq >> 32);
}

/*
 * One per live allocation, so every byte counts: 64 bytes. Its links in
 * the tree and in the hash are 32-bit names of allocations
 * (pool__index() in e->alloc_pool, an indexed pool), its history names
 * access records likewise, and the numbers are packed into two words. A stream number needs 11 bits (STREAM_NONE
 * included), a serial 48 (2^48 allocations outlast any process, as
 * SEQ_MAX's launches do) and a place in e->pending 21: past 2^21 pending
 * allocations the next flush walks them all (DESIGN 6).
 */
struct alloc {
	struct rb32_node node; /* in e->allocs */
	uint32_t hnext;	       /* chain in the exact-start hash, 0 ends */
	uint64_t start;
	uint64_t last;
	struct usages *usages; /* NULL while nusage is 0 */
	union {                 /* the history of its bytes (DESIGN 3) */
		struct hist whole;   /* tree == 0: one record for all */
		struct rb_root segs; /* tree == 1: segments */
	};
	uint64_t serial : 48; /* this allocation, never reused (DESIGN 8) */
	uint64_t sidx : 11;   /* STREAM_NONE when unknown */
	uint64_t graph_pool : 1; /* `alloc ... graph=`: never stale */
	uint64_t pending : 1; /* DESIGN 6 */
	uint64_t tree : 1;
	uint64_t exempt : 1; /* live across a gap: no record_stream check */
	uint64_t size0 : 1;  /* allocated with size=0 */
	uint64_t stack : 32;
	uint64_t nusage : 11;
	uint64_t pidx : 21; /* its place in e->pending while pending */
};

#define ALLOC_SERIAL_MAX ((UINT64_C(1) << 48) - 1)
#define ALLOC_PENDING_MAX (UINT32_C(1) << 21)

_Static_assert(sizeof(struct alloc) == 64, "one per live allocation");
_Static_assert(offsetof(struct alloc, node) == 0, "an alloc is its node");
_Static_assert(STREAM_NONE < (1 << 11), "stream numbers fit sidx");
_Static_assert(ENGINE_MAX_STREAMS < (1 << 11), "usage count fits nusage");

struct capture;

struct stream {
	uint64_t id;
	int64_t *state;
	struct capture *cap; /* the active capture it is in, or NULL */
	uint32_t member;     /* its index among cap's members */
};

/* A recorded event: the clock it copied, of n streams, in one block. */
struct event {
	uint32_t n;
	int64_t rec[];
};

/*
 * A slab of POOL_CHUNK bytes, aligned to its size so that an object finds
 * its chunk by masking its address. Chunks that become empty go back to
 * malloc (all but one per pool), so the engine's memory follows the live
 * working set down as well as up. The chunks of an indexed pool also have
 * a number, their place in the pool's directory, so that an object can be
 * named in 32 bits (pool__index(), rbtree.h's rb32 links).
 */
struct chunk {
	struct chunk *next; /* every chunk of the pool */
	struct chunk *prev;
	struct chunk *pnext; /* chunks with a free object */
	struct chunk *pprev;
	void *free;
	uint16_t nfree;
	uint16_t cap;
	uint32_t no; /* indexed pools: its place in dir */
};

struct pool {
	size_t size;
	struct chunk *all;
	struct chunk *partial;
	struct chunk *empty; /* the one empty chunk kept for reuse */
	bool indexed;
	/* An indexed pool whose chunks another pool numbers, in its dir,
	 * so that the objects of both share one space of names; NULL: it
	 * numbers its own. */
	struct pool *names;
	uint32_t nchunks;
	/* Indexed pools: chunk number -> chunk (as rbtree.h's rb32_dir
	 * says), ndir slots; a free slot holds the next free one's number
	 * + 1 as (that << 1 | 1), and dir_free is the first's number + 1
	 * (0: none). */
	struct rb32_dir dir;
	uint32_t ndir;
	uint32_t dir_free;
};

/* Chunks an indexed pool may number: 4 GiB of one kind of object (66
 * million allocations, 176 million access records). Past it the pool
 * refuses as it does at max_bytes, and the engine forgets (DESIGN 7). */
#define POOL_DIR_MAX (UINT32_C(1) << (32 - RB32_SHIFT))

_Static_assert(POOL_CHUNK == 1 << RB32_SHIFT, "rb32 links name chunks");
_Static_assert(POOL_CHUNK / sizeof(void *) <= UINT16_MAX, "chunk counts");

/* An operator, a stack, the operator's argument (0: none) and, for an
 * access a capture recorded or a replay made, the graph: what an access
 * reports besides where and when. The argument lives here, not in struct
 * access, so that naming it costs nothing per access. 16 bytes: the graph
 * id, which few sites have, is e->site_graphs[graph - 1] (0: none), so
 * that equal sites are equal structs. */
struct site {
	uint32_t op;
	uint32_t stack;
	uint32_t arg;
	uint32_t graph;
};

_Static_assert(sizeof(struct site) == 16, "sites stay small");

/* One element of a launch's read or write list. */
struct elem {
	uint64_t start;
	uint64_t last;
	struct alloc *alloc; /* the allocation containing start, if any */
	struct access *acc;
	uint32_t site;	 /* the launch's site, with this element's argument */
	uint32_t piece0; /* reads a write cuts: first piece in e->pieces */
	uint32_t npieces;
	uint8_t dup;
	uint8_t uncut; /* reads: no write cuts it, its one piece is itself */
};

struct span {
	uint64_t start;
	uint64_t last;
	uint32_t pos; /* index of the element it came from */
};

/* A stretch of bytes within one allocation, or within no allocation. */
struct region {
	struct alloc *alloc; /* NULL: the bytes are in no allocation */
	uint64_t start;
	uint64_t last;
};

/* Cuts [cur, last] into regions, in address order. */
struct region_walk {
	const struct engine *e;
	uint64_t cur;
	uint64_t last;
	struct alloc *in;   /* the allocation containing cur, or NULL */
	struct alloc *next; /* when `in` is NULL: the first one after cur */
	bool done;
};

struct dent {
	struct finding_key key;
	uint64_t id;
	uint64_t count;
	uint8_t used;
};

struct engine {
	struct engine_opts o;
	uint64_t seq;

	struct stream *streams;
	uint32_t nstreams;
	uint32_t scap; /* length of every clock array */
	int64_t *host;
	int64_t *floor; /* DESIGN 5 */
	bool floor_stale;
	uint64_t swept_at; /* launches at the last history__drop_dead_writes() */
	struct u64map stream_ids;
	uint64_t last_stream_id; /* one-entry cache in front of stream_ids */
	uint16_t last_sidx;
	struct u64map events; /* id -> struct event * */

	struct rb32_root allocs; /* links: pool__index() in alloc_pool */
	struct alloc *last_view; /* see alloc__containing() */
	uint32_t *abuckets; /* exact-start hash (DESIGN 3), likewise */
	size_t amask;
	struct rb_root outside; /* history of bytes no allocation covers */
	struct alloc **pending; /* DESIGN 6: the pending allocations */
	size_t npending;
	size_t pending_cap;
	bool pending_all;	/* the list overflowed: flush walks them all */
	struct pool access_pool; /* indexed: hists name its records */
	struct pool access_at_pool; /* struct access_at, named by access_pool */
	/* DESIGN 11: record address -> its carries, for the records with
	 * `big` set; slots == NULL until the first */
	struct u64map big_refs;
	/* history.c: freed read lists of capacity READS_SPARE_CAP(i) kept
	 * for reuse, at most READS_SPARE_MAX each, linked through v[] */
	struct reads *reads_spare[READS_SPARE_CLASSES];
	uint32_t reads_nspare[READS_SPARE_CLASSES];
	struct reads **readv; /* hist.rd >> 1 -> read list; a free slot
				 holds (next free + 1) << 1 | 1 */
	size_t readv_cap;
	uint32_t readv_free; /* first free slot + 1, 0 when none */
	struct pool seg_pool;
	struct pool alloc_pool;
	struct pool usage_pool; /* an allocation's first USAGE_SMALL usages */
	struct pool live_pool;	/* indexed: struct usage_live */
	uint64_t max_access_len;

	struct elem *elems; /* launch scratch: writes, then reads */
	size_t elems_cap;
	struct span *spans; /* launch scratch: sorted elements, write union */
	size_t spans_cap;
	struct span *pieces; /* launch scratch: bytes each read keeps */
	size_t pieces_cap;

	struct site *sites; /* site id -> operator and stack */
	size_t nsites;
	size_t sites_cap;
	/* The graphs of sites that have one, named from 1 by their place
	 * here (struct site), and graph id -> that name; slots == NULL until
	 * the first */
	uint64_t *site_graphs;
	size_t nsite_graphs;
	size_t site_graphs_cap;
	struct u64map site_graph_names;
	uint32_t *site_tab; /* open hash of site id + 1, at most 3/4 full */
	size_t site_mask;
	uint64_t last_site_key;
	uint32_t last_site;

	/* The previous accesses already paired with the current one: a list,
	 * and past SEEN_LIST entries also a hash set of them. */
	const struct access **seen;
	size_t nseen;
	size_t seen_cap;
	const struct access **seen_set;
	size_t seen_mask;

	struct dent *dedup;
	size_t dedup_mask;
	size_t dedup_count;

	/* Graphs (DESIGN 8), owned by graph.c. */
	struct u64map graphs;	   /* id -> struct graph * */
	struct capture *captures;  /* the active ones */
	struct u64map crecs;	   /* event id -> struct crec *: captured */
	uint64_t next_serial;	   /* of allocations and captures */
	uint64_t unlinks;	   /* allocations that stopped being live */
	enum detected_at launch_at; /* LAUNCH, or REPLAY during a replay */
	bool hist_local;	   /* updating a capture's history: no floor */

	struct engine_stats st;
	size_t bytes;
};

/* Where an allocation starting at some address goes in the tree. */
struct alloc_slot {
	uint32_t parent;
	uint32_t *link;
};

/* ---- what the parts call in one another ------------------------------ */

/* pool.c: the memory the engine holds, and what may still be taken. */
size_t pool__bytes(const struct engine *e);
void pool__note(struct engine *e, size_t add);
void *pool__realloc(struct engine *e, void *p, size_t old, size_t new);
void pool__free(struct engine *e, void *p, size_t size);
int pool__grow(struct engine *e, void **arr, size_t *cap, size_t need,
	       size_t size);
void *pool__get_slow(struct engine *e, struct pool *p);
void pool__put_slow(struct engine *e, struct pool *p, struct chunk *c,
		     void *o);
void pool__fini(struct pool *p);
struct chunk *pool__sparse_chunk(const struct pool *p, size_t live);
size_t pool__chunk_objects(const struct pool *p, const struct chunk *c,
			   void **out);
void *pool__get_other(struct pool *p, const struct chunk *c);

/* The chunk holding object `o` of any pool. */
static inline struct chunk *pool__chunk_of(const void *o)
{
	return (struct chunk *)((uintptr_t)o & ~(uintptr_t)(POOL_CHUNK - 1));
}

/* An object of pool `p`, NULL when out of memory. Inline for the common
 * case, a chunk keeping more than one free object; pool__get_slow()
 * does the rest. */
static inline void *pool__get(struct engine *e, struct pool *p)
{
	struct chunk *c = p->partial;
	void *o;

	if (c == NULL || c == p->empty || c->nfree == 1)
		return pool__get_slow(e, p);
	assert(c->nfree > 1 && c->free != NULL);
	o = c->free;
	memcpy(&c->free, o, sizeof(void *));
	c->nfree--;
	return o;
}

/* Returns object `o` to pool `p`. Inline for the common case, a chunk
 * neither full nor becoming empty; pool__put_slow() does the rest. */
static inline void pool__put(struct engine *e, struct pool *p, void *o)
{
	struct chunk *c = pool__chunk_of(o);

	assert(c->nfree < c->cap);
	if (c->nfree == 0 || c->nfree + 1 == c->cap) {
		pool__put_slow(e, p, c, o);
		return;
	}
	memcpy(o, &c->free, sizeof(void *));
	c->free = o;
	c->nfree++;
}

/* The 32-bit name of object `o` of indexed pool `p`: pool__object()
 * finds it again, and so does rb32_node() of p->dir. Never 0, since no
 * object starts a chunk, and even, since objects are. */
static inline uint32_t pool__index(const struct pool *p, const void *o)
{
	uintptr_t c = (uintptr_t)o & ~(uintptr_t)(POOL_CHUNK - 1);

	assert(p->indexed && p->dir.base[((const struct chunk *)c)->no] +
					  ((uintptr_t)((const struct chunk *)c)->no
					   << RB32_SHIFT) ==
				     c);
	assert(((uintptr_t)o & 1) == 0);
	(void)p;
	return ((const struct chunk *)c)->no << RB32_SHIFT |
	       (uint32_t)((uintptr_t)o - c);
}

static inline void *pool__object(const struct pool *p, uint32_t i)
{
	return rb32_node(&p->dir, i);
}

/* sync.c: streams, events, clocks. */
int sync__stream_create(struct engine *e, uint64_t id, uint16_t *out);
int sync__stream_get_slow(struct engine *e, uint64_t id, uint16_t *out);
int sync__stream_find(const struct engine *e, uint64_t id);
int sync__streams_fit(const struct engine *e, const uint64_t *ids, int n);
void sync__merge(int64_t *dst, const int64_t *src, uint32_t n);
const int64_t *sync__floor(struct engine *e);
int sync__on_op(struct engine *e, const struct op *op);
void sync__fini(struct engine *e);

/* finding.c: sites and findings. */
int64_t finding__site_get_slow(struct engine *e, uint32_t op,
			       uint32_t stack);
int finding__site_get_graph(struct engine *e, uint32_t op, uint32_t stack,
			    uint64_t graph, uint32_t *out);
int finding__site_with_arg(struct engine *e, uint32_t site, uint32_t arg,
			   uint32_t *out);
void finding__fill_site(const struct engine *e, uint32_t site,
			struct finding_access *out);
bool finding__site_graph(const struct engine *e, uint32_t site,
			 uint64_t *graph);
size_t finding__bytes(const struct engine *e);
void finding__fill_alloc(const struct engine *e, const struct alloc *a,
			 struct finding *f);
void finding__fill_access(const struct engine *e, const struct access *a,
			  struct finding_access *out);
void finding__emit(struct engine *e, struct finding *f);
void finding__fini(struct engine *e);

/* alloc.c: the allocation table and the ops on it. */
int alloc__init(struct engine *e);
void alloc__neighbors(const struct engine *e, uint64_t ptr,
		      struct alloc **below, struct alloc **above,
		      struct alloc_slot *slot);
struct alloc *alloc__containing_slow(struct engine *e, uint64_t ptr);
size_t alloc__usages_size(size_t n);
struct usage *alloc__usage_find(const struct alloc *a, uint16_t s);
struct usage *alloc__usage_get(struct engine *e, struct alloc *a, uint16_t s);
struct usage_live *alloc__live_find(const struct engine *e,
				    const struct alloc *a, uint16_t s);
struct usage_live *alloc__live_get(struct engine *e, struct alloc *a,
				   uint16_t s);
void alloc__usages_free(struct engine *e, struct alloc *a);
void alloc__settle(struct engine *e, struct alloc *a);
void alloc__pending_add(struct engine *e, struct alloc *a);
int alloc__on_alloc(struct engine *e, const struct op *op);
int alloc__on_free(struct engine *e, const struct op *op);
int alloc__on_record_stream(struct engine *e, const struct op *op);
void alloc__on_flush(struct engine *e);
void alloc__fini(struct engine *e);

/* history.c: the access history and the regions it lives in. */
void history__access_free(struct engine *e, struct access *a);
int history__access_carry(struct engine *e, struct access *a);
void history__access_borrow(struct engine *e, struct access *a);
uint64_t history__access_refs(const struct engine *e,
			      const struct access *a);
size_t history__big_refs_bytes(const struct engine *e);
void history__alloc_clear(struct engine *e, struct alloc *a);
void history__forget(struct engine *e);
void history__drop_dead_writes(struct engine *e);
struct seg *history__seg_first_from(const struct rb_root *root, uint64_t ptr);
int history__record(struct engine *e, uint64_t start, uint64_t last,
		    struct alloc *in, struct access *acc);
void history__drop_starting_at(struct engine *e, uint64_t p);
int history__segs_drop(struct engine *e, struct rb_root *root, uint64_t a,
		       uint64_t b);
int history__segs_add_read(struct engine *e, struct rb_root *root,
			   uint64_t a, uint64_t b, struct access *acc);
int history__segs_set_write(struct engine *e, struct rb_root *root,
			    uint64_t a, uint64_t b, struct access *acc);
void history__segs_clear(struct engine *e, struct rb_root *root);
void history__fini(struct engine *e);
size_t history__spare_bytes(const struct engine *e);

/* launch.c */
int launch__prepare(struct engine *e, const struct op *op);
int launch__sites(struct engine *e, const struct op *op, uint32_t site);

/* The name of element i's argument in launch `op` (writes first, then
 * reads, as e->elems), 0 for none. */
static inline uint32_t launch__arg(const struct op *op, size_t i)
{
	size_t nw = op->nwrites;
	const uint32_t *args = i < nw ? op->write_args : op->read_args;

	return args != NULL ? args[i < nw ? i : i - nw] : 0;
}
/* Piece j of read `el`, the bytes it keeps that no write of its launch
 * covers: the element itself when no write cuts it (the usual read, which
 * then takes no room in e->pieces), else e->pieces[el->piece0 + j]. */
static inline struct span launch__piece(const struct engine *e,
					const struct elem *el, uint32_t j)
{
	assert(j < el->npieces);
	if (el->uncut)
		return (struct span){ el->start, el->last, 0 };
	return e->pieces[el->piece0 + j];
}
void launch__seen_reset(struct engine *e);
bool launch__pair_seen(struct engine *e, const struct access *prev);
int launch__run(struct engine *e, const struct op *op, uint32_t site);
int launch__on_op(struct engine *e, const struct op *op);
void launch__fini(struct engine *e);

/* graph.c */
int graph__on_op(struct engine *e, const struct op *op);
int graph__intercept(struct engine *e, const struct op *op);
void graph__forget(struct engine *e);
void graph__fini(struct engine *e);
const char *graph__check(const struct engine *e,
			 void (*segs_cb)(void *arg, const struct rb_root *root,
					 uint64_t max_seq),
			 void *arg);

/*
 * Whether `op` may need graph semantics before its version 1 handling:
 * only while a capture is active or an event holds a captured record,
 * so that a version 1 trace never leaves the fast path.
 */
static inline bool graph__active(const struct engine *e)
{
	return e->captures != NULL || e->crecs.count > 0;
}

/*
 * The number of stream `id`, created on the spot when new ("backfill").
 * Inline for its one-entry cache: nearly every op names the stream the last
 * one named.
 */
static inline int sync__stream_get(struct engine *e, uint64_t id, uint16_t *out)
{
	if (id == e->last_stream_id) {
		*out = e->last_sidx;
		return 0;
	}
	return sync__stream_get_slow(e, id, out);
}

/* The id of the (operator, stack) pair, interned on first use; -E2BIG or
 * -ENOMEM. Inline for its one-entry cache, as sync__stream_get(). It
 * returns the id rather than store it, so that the launch after it can be
 * a tail call: the address of a local would keep the caller's frame. */
static inline int64_t finding__site_get(struct engine *e, uint32_t op,
					uint32_t stack)
{
	if (e->nsites > 0 && ((uint64_t)op << 32 | stack) == e->last_site_key)
		return e->last_site;
	return finding__site_get_slow(e, op, stack);
}

/* pool__grow() when *cap holds fewer than `need` items: most calls, from
 * every launch, find the array big enough. */
static inline int pool__grow_array(struct engine *e, void **arr, size_t *cap,
				   size_t need, size_t size)
{
	return need <= *cap ? 0 : pool__grow(e, arr, cap, need, size);
}

/* The allocation that 32-bit link `i` names: alloc__of_nz() for i != 0,
 * alloc__of() NULL for 0. */
static inline struct alloc *alloc__of_nz(const struct engine *e, uint32_t i)
{
	return (struct alloc *)(void *)rb32_node_of(&e->alloc_pool.dir, i);
}

static inline struct alloc *alloc__of(const struct engine *e, uint32_t i)
{
	return i != 0 ? alloc__of_nz(e, i) : NULL;
}

static inline uint32_t alloc__idx(const struct engine *e,
				  const struct alloc *a)
{
	return pool__index(&e->alloc_pool, a);
}

/*
 * Which of mask + 1 buckets of the exact-start hash an allocation starting
 * at `start` goes in. Starts are addresses, aligned and spread over a few
 * dozen bits: hash_fold_u64() spreads them as well as hash_u64() does, at
 * half its cost, and every free and nearly every access hashes one.
 */
static inline size_t alloc__hash(uint64_t start, size_t mask)
{
	return hash_fold_u64(start) & mask;
}

/* The exact-start hash's bucket for an allocation starting at `start`. */
static inline uint32_t *alloc__bucket(const struct engine *e, uint64_t start)
{
	return &e->abuckets[alloc__hash(start, e->amask)];
}

/* The allocation that starts exactly at `start`, if any. */
static inline struct alloc *alloc__at(const struct engine *e, uint64_t start)
{
	uint32_t i = *alloc__bucket(e, start);

	for (; i != 0; i = alloc__of_nz(e, i)->hnext) {
		if (alloc__of_nz(e, i)->start == start)
			return alloc__of_nz(e, i);
	}
	return NULL;
}

/* The allocation containing ptr: the one starting there (a hash probe,
 * inline since most accesses start an allocation), else
 * alloc__containing_slow()'s. */
static inline struct alloc *alloc__containing(struct engine *e, uint64_t ptr)
{
	struct alloc *a = alloc__at(e, ptr);

	return a != NULL ? a : alloc__containing_slow(e, ptr);
}

/* The allocations in address order: alloc__first(), alloc__next(). */
static inline struct alloc *alloc__first(const struct engine *e)
{
	return alloc__of(e, rb32_first(&e->alloc_pool.dir, &e->allocs));
}

static inline struct alloc *alloc__next(const struct engine *e,
					const struct alloc *a)
{
	return alloc__of(e, rb32_next(&e->alloc_pool.dir, alloc__idx(e, a)));
}

/* Whether element `el` is "inside" (DESIGN 9): it starts the allocation it
 * belongs to and ends within it, so its record need not keep its start. */
static inline bool history__elem_inside(const struct elem *el)
{
	return el->alloc != NULL && el->start == el->alloc->start &&
	       el->last <= el->alloc->last;
}

/* A new access record for element `el` with one reference, the caller's;
 * NULL when out of memory. Inline: every access of every launch makes one. */
static inline struct access *history__access_new(struct engine *e,
						 const struct elem *el,
						 uint16_t s, uint32_t site,
						 uint64_t seq, bool write)
{
	bool inside = history__elem_inside(el);
	struct access *a;

	assert(s < e->nstreams && site < e->nsites);
	a = pool__get(e, inside ? &e->access_pool : &e->access_at_pool);
	if (a == NULL)
		return NULL;
	*a = (struct access){ .seq = seq, .sidx = s, .write = write,
			      .at = !inside, .refs = 1, .site = site };
	if (!inside)
		((struct access_at *)(void *)a)->ptr = el->start;
	e->st.accesses++;
	return a;
}

/* One more reference to access record `a`: 0, or -ENOMEM when its count
 * needs one more carry and e->big_refs cannot grow (DESIGN 11). Inline:
 * every history an access joins takes one. */
static inline int history__access_ref(struct engine *e, struct access *a)
{
	assert(a->refs > 0);
	if (++a->refs == 0)
		return history__access_carry(e, a);
	return 0;
}

/* Drops a reference to access record `a`, if any, freeing it with its
 * last. Inline: every access of every launch drops its maker's. */
static inline void history__access_put(struct engine *e, struct access *a)
{
	assert(a == NULL || a->refs > 0);
	if (a == NULL || --a->refs != 0)
		return;
	if (a->big)
		history__access_borrow(e, a);
	else
		history__access_free(e, a);
}

/* The access record that 32-bit name `i` names, NULL for 0. */
static inline struct access *history__acc(const struct engine *e,
					  uint32_t i)
{
	return (struct access *)pool__object(&e->access_pool, i);
}

static inline uint32_t history__acc_idx(const struct engine *e,
					const struct access *a)
{
	return a != NULL ? pool__index(&e->access_pool, a) : 0;
}

static inline struct access *history__write(const struct engine *e,
					    const struct hist *h)
{
	return history__acc(e, h->write);
}

static inline size_t history__reads_size(uint32_t cap)
{
	return sizeof(struct reads) + cap * sizeof(uint32_t);
}

/* The read list of `h` when it is a struct reads, else NULL. */
static inline struct reads *history__many(const struct engine *e,
					  const struct hist *h)
{
	return (h->rd & 1) ? e->readv[h->rd >> 1] : NULL;
}

static inline uint32_t history__nreads(const struct engine *e,
				       const struct hist *h)
{
	const struct reads *m = history__many(e, h);

	return m != NULL ? m->n : h->rd != 0;
}

/* The reads of `h` by name, history__nreads() of them. */
static inline uint32_t *history__reads(const struct engine *e,
				       struct hist *h)
{
	struct reads *m = history__many(e, h);

	return m != NULL ? m->v : &h->rd;
}

static inline bool history__empty(const struct engine *e,
				  const struct hist *h)
{
	return h->write == 0 && history__nreads(e, h) == 0;
}

static inline struct seg *history__seg_of(struct rb_node *n)
{
	return n != NULL ? rb_container_of(n, struct seg, node) : NULL;
}

/* ---- regions, inline: every access of every launch walks them ---------- */

/* The one history of [start, last] when it is all of allocation `in`,
 * kept as one whole-allocation record: most accesses are, and need no
 * walk. NULL otherwise. */
static inline struct hist *history__whole_of(struct alloc *in, uint64_t start,
					     uint64_t last)
{
	if (in == NULL || in->tree || start != in->start || last != in->last)
		return NULL;
	return &in->whole;
}

static inline struct seg *history__seg_next(struct seg *g)
{
	return history__seg_of(rb_next(&g->node));
}

/* `in` must be the allocation containing `start`, or NULL when none does. */
static inline void history__walk_init(const struct engine *e,
				      struct region_walk *w, uint64_t start,
				      uint64_t last, struct alloc *in)
{
	struct alloc *below;

	assert(start <= last);
	assert(in == NULL || (in->start <= start && start <= in->last));
	w->e = e;
	w->cur = start;
	w->last = last;
	w->in = in;
	w->next = NULL;
	w->done = false;
	if (in == NULL)
		alloc__neighbors(e, start, &below, &w->next, NULL);
}

static inline bool history__walk_next(struct region_walk *w, struct region *r)
{
	uint64_t end;

	if (w->done)
		return false;
	r->alloc = w->in;
	if (w->in != NULL)
		end = w->in->last;
	else
		end = w->next != NULL ? w->next->start - 1 : UINT64_MAX;
	r->start = w->cur;
	r->last = end < w->last ? end : w->last;
	if (r->last == w->last) {
		w->done = true;
		return true;
	}
	w->cur = r->last + 1;
	if (w->in != NULL) {
		struct alloc *n = alloc__next(w->e, w->in);

		w->in = n != NULL && n->start == w->cur ? n : NULL;
		w->next = w->in == NULL ? n : NULL;
	} else {
		w->in = w->next; /* which starts at cur */
		w->next = NULL;
	}
	return true;
}

/* The tree holding the region's history, or NULL when the region is (part
 * of) an allocation whose history is one whole-allocation record. */
static inline struct rb_root *history__region_tree(struct engine *e,
						   const struct region *r)
{
	if (r->alloc == NULL)
		return &e->outside;
	return r->alloc->tree ? &r->alloc->segs : NULL;
}

/*
 * Iterates over the histories that hold bytes of `r`: the allocation's
 * whole-allocation record, or the segments of its tree that overlap.
 * `*cursor` carries the position; start it NULL.
 */
static inline struct hist *history__region_hist(struct engine *e,
						const struct region *r,
						struct seg **cursor, bool first)
{
	struct rb_root *tree = history__region_tree(e, r);

	if (tree == NULL) {
		if (!first || history__empty(e, &r->alloc->whole))
			return NULL;
		return &r->alloc->whole;
	}
	*cursor = first ? history__seg_first_from(tree, r->start)
			: history__seg_next(*cursor);
	if (*cursor == NULL || (*cursor)->start > r->last)
		return NULL;
	return &(*cursor)->h;
}

/*
 * Iterates over the histories that hold bytes of region `r`, `cursor` (a
 * struct seg *) carrying the position; see history__region_hist().
 */
#define history__for_each_hist(e, r, h, cursor)                      \
	for ((h) = history__region_hist((e), (r), &(cursor), true);   \
	     (h) != NULL;                                             \
	     (h) = history__region_hist((e), (r), &(cursor), false))

#endif
