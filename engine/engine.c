/*
 * engine.c - the happens-before analysis of one accelerator process.
 *
 * The sync state follows torch.cuda._sanitizer's StreamSynchronizations:
 * a vector clock per stream, one per recorded event and one for the host.
 * The access history follows its TensorInfo, but per byte range instead of
 * per data pointer, and the record_stream check follows torch_npu's
 * NPUEventHandler. docs/trace-format.md is the contract; the
 * comments below name the rule of it that each piece implements.
 *
 * DESIGN
 *  1. Streams are numbered densely in order of first mention; a clock is an
 *     array of int64 indexed by stream number, -1 meaning "missing". Merges
 *     are element-wise max, so a missing entry behaves exactly like the
 *     dictionaries' .get(stream, -1).
 *  2. The history of some bytes is their last write and the reads since,
 *     as pointers to refcounted access records ("hist"); a launch's access
 *     is one record however many histories hold it. Bytes without a hist
 *     have no history.
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
 *  5. A read (T, n) is dead once n <= floor[T] = min(host[T], state[S][T]
 *     for every S): clocks only grow and new streams copy the host, so no
 *     later access can conflict with it. Dead reads are dropped when a read
 *     list grows. Past READS_COALESCE live reads on one range, older reads
 *     that repeat a newer read's stream, operator and stack are merged into
 *     it: that bounds memory in loops that never synchronize, and can only
 *     lower the occurrence count of a finding, never hide a distinct one.
 *  6. A flush checks only the allocations with a use that may still be
 *     unsettled: a usage found ordered stays ordered (clocks only grow), and
 *     a reported or recorded one never reports again, so an allocation
 *     needs a check only after a launch gave it a new latest use. Such an
 *     allocation is `pending`, its start in e->pending; flush checks those
 *     in address order, as a walk of every allocation would. When the list
 *     outgrows the live allocations, the next flush walks them all instead.
 *  7. Every allocation of memory that could fail happens before the state
 *     it would change is touched, except while updating the history after
 *     a launch; a failure there forgets the history as `gap` does, which
 *     can only lose findings, never invent them.
 */
#include "engine.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "rbtree.h"
#include "u64map.h"

#define STREAM_NONE UINT16_MAX
/* Small slabs: after a step frees its activations, the fewer objects a
 * slab holds, the likelier it empties and goes back to malloc. */
#define POOL_CHUNK (4 * 1024)
#define READS_COALESCE 64
#define SEQ_MAX ((UINT64_C(1) << 48) - 1)
#define SEEN_LIST 16

_Static_assert(ENGINE_MAX_STREAMS < STREAM_NONE, "stream numbers fit u16");

static const char *const finding_kind_names[] = {
#define FINDING_KIND_NAME(name, str) str,
	FINDING_KINDS(FINDING_KIND_NAME)
#undef FINDING_KIND_NAME
};

static const char *const detected_at_names[] = {
#define DETECTED_AT_NAME(name, str) str,
	DETECTED_AT(DETECTED_AT_NAME)
#undef DETECTED_AT_NAME
};

const char *finding_kind_name(enum finding_kind kind)
{
	return (unsigned)kind < FINDING_KIND_COUNT ? finding_kind_names[kind]
						   : NULL;
}

const char *detected_at_name(enum detected_at at)
{
	return (unsigned)at < DETECTED_AT_COUNT ? detected_at_names[at] : NULL;
}

/*
 * One access of one launch, shared by the histories of the bytes it
 * touched. 24 bytes: the history holds a few per live allocation, so their
 * size is much of the engine's memory. Sequence numbers get 48 bits: 2^48
 * launches is centuries of a process's life.
 */
struct access {
	uint64_t ptr; /* start of the element as written */
	uint64_t seq : 48;
	uint64_t sidx : 15;
	uint64_t write : 1;
	uint32_t refs;
	uint32_t site; /* operator and stack, see site_get() */
};

_Static_assert(sizeof(struct access) == 24, "access records stay small");
_Static_assert(ENGINE_MAX_STREAMS <= (1 << 15), "stream numbers fit sidx");

/* The history of some bytes: their last write and the reads since. */
struct hist {
	struct access *write;
	union {
		struct access *one;   /* cap == 0 */
		struct access **many; /* cap > 0 */
	} rd;
	uint32_t nreads;
	uint32_t cap;
};

/* The history of the bytes [start, last], in a tree of such ranges. */
struct seg {
	struct rb_node node;
	uint64_t start;
	uint64_t last;
	struct hist h;
};

enum {
	USAGE_USED = 1,
	USAGE_WROTE = 2,
	USAGE_RECORDED = 4,
	USAGE_REPORTED = 8,
};

/* What one stream other than the allocation stream did with an allocation. */
struct usage {
	uint64_t seq;
	uint32_t site;
	uint16_t sidx;
	uint8_t flags;
};

struct alloc {
	struct rb_node node;
	struct alloc *hnext; /* chain in the exact-start hash */
	uint64_t start;
	uint64_t last;
	struct usage *usages; /* usage_cap(nusage) entries */
	union {                 /* the history of its bytes (DESIGN 3) */
		struct hist whole;   /* tree == 0: one record for all */
		struct rb_root segs; /* tree == 1: segments */
	};
	uint32_t stack;
	uint16_t sidx; /* STREAM_NONE when unknown */
	uint16_t nusage : 12;
	uint16_t pending : 1; /* DESIGN 6 */
	uint16_t tree : 1;
	uint16_t exempt : 1; /* live across a gap: no record_stream check */
	uint16_t size0 : 1;  /* allocated with size=0 */
};

_Static_assert(sizeof(struct alloc) == 88, "one per live allocation");
_Static_assert(ENGINE_MAX_STREAMS < (1 << 12), "usage count fits nusage");

struct stream {
	uint64_t id;
	int64_t *state;
};

struct event {
	int64_t *rec;
	uint32_t n;
};

/*
 * A slab of POOL_CHUNK bytes, aligned to its size so that an object finds
 * its chunk by masking its address. Chunks that become empty go back to
 * malloc (all but one per pool), so the engine's memory follows the live
 * working set down as well as up.
 */
struct chunk {
	struct chunk *next; /* every chunk of the pool */
	struct chunk *prev;
	struct chunk *pnext; /* chunks with a free object */
	struct chunk *pprev;
	void *free;
	uint32_t nfree;
	uint32_t cap;
};

struct pool {
	size_t size;
	struct chunk *all;
	struct chunk *partial;
	struct chunk *empty; /* the one empty chunk kept for reuse */
};

/* An operator and a stack: what an access reports besides where and when. */
struct site {
	uint32_t op;
	uint32_t stack;
};

/* One element of a launch's read or write list. */
struct elem {
	uint64_t start;
	uint64_t last;
	struct alloc *alloc; /* the allocation containing start, if any */
	struct access *acc;
	uint32_t piece0; /* reads: first of its pieces in e->pieces */
	uint32_t npieces;
	uint8_t dup;
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
	struct u64map stream_ids;
	uint64_t last_stream_id; /* one-entry cache in front of stream_ids */
	uint16_t last_sidx;
	struct u64map events; /* id -> struct event * */

	struct rb_root allocs;
	struct alloc *last_view; /* see alloc_containing() */
	struct alloc **abuckets; /* exact-start hash (DESIGN 3) */
	size_t amask;
	struct rb_root outside; /* history of bytes no allocation covers */
	uint64_t *pending;	/* DESIGN 6: starts of pending allocations */
	size_t npending;
	size_t pending_cap;
	bool pending_all;	/* the list overflowed: flush walks them all */
	struct pool access_pool;
	struct pool seg_pool;
	struct pool alloc_pool;
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
	struct u64map site_ids; /* op << 32 | stack -> site id */
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

	struct engine_stats st;
	size_t bytes;
};

/* ---- memory ---------------------------------------------------------- */

static size_t engine_bytes(const struct engine *e)
{
	return e->bytes + u64map_bytes(&e->stream_ids) +
	       u64map_bytes(&e->events) + u64map_bytes(&e->site_ids);
}

static void note_bytes(struct engine *e, size_t add)
{
	e->bytes += add;
	if (engine_bytes(e) > e->st.peak_bytes)
		e->st.peak_bytes = engine_bytes(e);
}

static bool over_limit(const struct engine *e, size_t add)
{
	return e->o.max_bytes != 0 && engine_bytes(e) + add > e->o.max_bytes;
}

/* realloc() that counts bytes and honours max_bytes. */
static void *e_realloc(struct engine *e, void *p, size_t old, size_t new)
{
	void *q;

	if (new > old && over_limit(e, new - old))
		return NULL;
	q = realloc(p, new);
	if (q == NULL)
		return NULL;
	e->bytes -= old;
	note_bytes(e, new);
	return q;
}

static void e_free(struct engine *e, void *p, size_t size)
{
	if (p == NULL)
		return;
	e->bytes -= size;
	free(p);
}

/* Grows *arr to hold at least `need` items of `size` bytes. */
static int grow_array(struct engine *e, void **arr, size_t *cap, size_t need,
		      size_t size)
{
	size_t ncap = *cap ? *cap : 8;
	void *p;

	if (need <= *cap)
		return 0;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2 / size)
			return -ENOMEM;
		ncap *= 2;
	}
	p = e_realloc(e, *arr, *cap * size, ncap * size);
	if (p == NULL)
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}

static struct chunk *chunk_of(const void *o)
{
	return (struct chunk *)((uintptr_t)o & ~(uintptr_t)(POOL_CHUNK - 1));
}

static void partial_add(struct pool *p, struct chunk *c)
{
	c->pprev = NULL;
	c->pnext = p->partial;
	if (p->partial != NULL)
		p->partial->pprev = c;
	p->partial = c;
}

static void partial_del(struct pool *p, struct chunk *c)
{
	if (c->pprev != NULL)
		c->pprev->pnext = c->pnext;
	else
		p->partial = c->pnext;
	if (c->pnext != NULL)
		c->pnext->pprev = c->pprev;
}

static struct chunk *chunk_new(struct engine *e, struct pool *p)
{
	size_t first = (sizeof(struct chunk) + 15) & ~(size_t)15;
	struct chunk *c;

	if (over_limit(e, POOL_CHUNK) ||
	    (c = aligned_alloc(POOL_CHUNK, POOL_CHUNK)) == NULL)
		return NULL;
	note_bytes(e, POOL_CHUNK);
	memset(c, 0, sizeof(*c));
	c->cap = (uint32_t)((POOL_CHUNK - first) / p->size);
	for (uint32_t i = c->cap; i-- > 0;) {
		void *o = (char *)c + first + i * p->size;

		memcpy(o, &c->free, sizeof(void *));
		c->free = o;
	}
	c->nfree = c->cap;
	c->next = p->all;
	if (p->all != NULL)
		p->all->prev = c;
	p->all = c;
	partial_add(p, c);
	return c;
}

static void chunk_release(struct engine *e, struct pool *p, struct chunk *c)
{
	partial_del(p, c);
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		p->all = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	e->bytes -= POOL_CHUNK;
	free(c);
}

static void *pool_get(struct engine *e, struct pool *p)
{
	struct chunk *c = p->partial;
	void *o;

	if (c == NULL && (c = chunk_new(e, p)) == NULL)
		return NULL;
	if (c == p->empty)
		p->empty = NULL;
	o = c->free;
	memcpy(&c->free, o, sizeof(void *));
	if (--c->nfree == 0)
		partial_del(p, c);
	return o;
}

static void pool_put(struct engine *e, struct pool *p, void *o)
{
	struct chunk *c = chunk_of(o);

	memcpy(o, &c->free, sizeof(void *));
	c->free = o;
	if (c->nfree++ == 0)
		partial_add(p, c);
	if (c->nfree < c->cap)
		return;
	/* Keep one empty chunk so that a free/alloc pair at a chunk's edge
	 * does not call malloc every time. */
	if (p->empty == NULL)
		p->empty = c;
	else
		chunk_release(e, p, c);
}

static void pool_fini(struct pool *p)
{
	struct chunk *c = p->all, *next;

	for (; c != NULL; c = next) {
		next = c->next;
		free(c);
	}
}

/* ---- streams, events and clocks ---------------------------------------- */

static void merge(int64_t *dst, const int64_t *src, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (src[i] > dst[i])
			dst[i] = src[i];
	}
}

/* DESIGN 5. Raising a clock only marks the floor stale: recomputing it
 * costs O(streams^2), and only a growing read list needs it. */
static void clocks_raised(struct engine *e)
{
	e->floor_stale = true;
}

static const int64_t *current_floor(struct engine *e)
{
	if (!e->floor_stale)
		return e->floor;
	e->floor_stale = false;
	for (uint32_t t = 0; t < e->nstreams; t++) {
		int64_t m = e->host[t];

		for (uint32_t s = 0; s < e->nstreams; s++) {
			if (e->streams[s].state[t] < m)
				m = e->streams[s].state[t];
		}
		e->floor[t] = m;
	}
	return e->floor;
}

/* Allocates every new clock array before replacing any, so that a failure
 * leaves the engine exactly as it was. */
static int grow_clocks(struct engine *e)
{
	uint32_t n = e->nstreams, ncap = e->scap ? e->scap * 2 : 8;
	size_t size, arrays = n + 2; /* every stream's, host, floor */
	struct stream *streams;
	int64_t **fresh;

	if (ncap > ENGINE_MAX_STREAMS)
		ncap = ENGINE_MAX_STREAMS;
	size = ncap * sizeof(int64_t);
	fresh = calloc(arrays, sizeof(*fresh));
	if (fresh == NULL)
		return -ENOMEM;
	streams = e_realloc(e, NULL, 0, ncap * sizeof(*streams));
	for (size_t i = 0; streams != NULL && i < arrays; i++) {
		if ((fresh[i] = e_realloc(e, NULL, 0, size)) == NULL)
			break;
	}
	if (streams == NULL || fresh[arrays - 1] == NULL) {
		for (size_t i = 0; i < arrays; i++)
			e_free(e, fresh[i], size);
		e_free(e, streams, ncap * sizeof(*streams));
		free(fresh);
		return -ENOMEM;
	}
	for (size_t i = 0; i < arrays; i++) {
		int64_t **old = i < n ? &e->streams[i].state
				: i == n ? &e->host : &e->floor;

		for (uint32_t t = 0; t < ncap; t++)
			fresh[i][t] = t < e->scap ? (*old)[t] : -1;
		e_free(e, *old, e->scap * sizeof(int64_t));
		*old = fresh[i];
	}
	if (n > 0)
		memcpy(streams, e->streams, n * sizeof(*streams));
	e_free(e, e->streams, e->scap * sizeof(*streams));
	e->streams = streams;
	e->scap = ncap;
	free(fresh);
	return 0;
}

/* `stream_create S`: host[S] = 0; state[S] = copy(host). */
static int stream_create(struct engine *e, uint64_t id, uint16_t *out)
{
	uint32_t s = e->nstreams;
	int64_t *state;
	int err;

	if (s == ENGINE_MAX_STREAMS)
		return -E2BIG;
	if (s == e->scap && (err = grow_clocks(e)) < 0)
		return err;
	state = e_realloc(e, NULL, 0, e->scap * sizeof(int64_t));
	if (state == NULL)
		return -ENOMEM;
	if ((err = u64map_put(&e->stream_ids, id, s)) < 0) {
		e_free(e, state, e->scap * sizeof(int64_t));
		return err;
	}
	e->host[s] = 0;
	memcpy(state, e->host, e->scap * sizeof(int64_t));
	e->streams[s] = (struct stream){ id, state };
	e->nstreams++;
	e->st.streams = e->nstreams;
	clocks_raised(e);
	*out = (uint16_t)s;
	return 0;
}

/* The number of stream `id`, or -1 when it is new. A job uses a handful
 * of streams, and scanning those beats hashing. */
static int stream_find(const struct engine *e, uint64_t id)
{
	const uint64_t *v;

	if (e->nstreams <= 8) {
		for (uint32_t i = 0; i < e->nstreams; i++) {
			if (e->streams[i].id == id)
				return (int)i;
		}
		return -1;
	}
	v = u64map_get(&e->stream_ids, id);
	return v != NULL ? (int)*v : -1;
}

/* The number of stream `id`, created on the spot when new ("backfill"). */
static int stream_get(struct engine *e, uint64_t id, uint16_t *out)
{
	int s, err;

	if (id == e->last_stream_id) {
		*out = e->last_sidx;
		return 0;
	}
	if ((s = stream_find(e, id)) >= 0)
		*out = (uint16_t)s;
	else if ((err = stream_create(e, id, out)) < 0)
		return err;
	e->last_stream_id = id;
	e->last_sidx = *out;
	return 0;
}

static bool stream_known(const struct engine *e, uint64_t id)
{
	return stream_find(e, id) >= 0;
}

/* Fails with -E2BIG before anything changes when `n` new streams would not
 * fit. stream_get() refuses one new stream by itself; an op that names two
 * asks here first, so that it cannot create the first and then fail. */
static int streams_fit(const struct engine *e, const uint64_t *ids, int n)
{
	uint32_t need = 0;

	for (int i = 0; i < n; i++) {
		bool seen = stream_known(e, ids[i]);

		for (int j = 0; j < i && !seen; j++)
			seen = ids[j] == ids[i];
		need += !seen;
	}
	return e->nstreams + need > ENGINE_MAX_STREAMS ? -E2BIG : 0;
}

static struct event *event_find(const struct engine *e, uint64_t id)
{
	const uint64_t *v = u64map_get(&e->events, id);

	return v != NULL ? (struct event *)(uintptr_t)*v : NULL;
}

static void event_drop(struct engine *e, uint64_t id)
{
	struct event *ev = event_find(e, id);

	if (ev == NULL)
		return;
	u64map_del(&e->events, id);
	e_free(e, ev->rec, ev->n * sizeof(int64_t));
	e_free(e, ev, sizeof(*ev));
}

/* `event_record E S`: recorded[E] = copy(state[S]). */
static int event_record(struct engine *e, uint64_t id, uint16_t s)
{
	struct event *ev = event_find(e, id);
	size_t size = e->nstreams * sizeof(int64_t);
	int64_t *rec;

	if (ev == NULL) {
		ev = e_realloc(e, NULL, 0, sizeof(*ev));
		if (ev == NULL)
			return -ENOMEM;
		*ev = (struct event){ NULL, 0 };
		if (u64map_put(&e->events, id, (uintptr_t)ev) < 0) {
			e_free(e, ev, sizeof(*ev));
			return -ENOMEM;
		}
	}
	if (ev->n != e->nstreams) {
		rec = e_realloc(e, ev->rec, ev->n * sizeof(int64_t), size);
		if (rec == NULL)
			return -ENOMEM;
		ev->rec = rec;
		ev->n = e->nstreams;
	}
	memcpy(ev->rec, e->streams[s].state, size);
	return 0;
}

static void all_streams_merge(struct engine *e, const int64_t *src,
			      uint32_t n)
{
	for (uint32_t s = 0; s < e->nstreams; s++)
		merge(e->streams[s].state, src, n);
	merge(e->host, src, n);
	clocks_raised(e);
}

/* ---- sites ------------------------------------------------------------- */

/* The id of the (operator, stack) pair, interned on first use. */
static int site_get(struct engine *e, uint32_t op, uint32_t stack,
		    uint32_t *out)
{
	uint64_t key = (uint64_t)op << 32 | stack;
	const uint64_t *v;
	int err;

	if (e->nsites > 0 && key == e->last_site_key) {
		*out = e->last_site;
		return 0;
	}
	if ((v = u64map_get(&e->site_ids, key)) != NULL) {
		*out = (uint32_t)*v;
	} else {
		if (e->nsites == UINT32_MAX)
			return -E2BIG;
		if ((err = grow_array(e, (void **)&e->sites, &e->sites_cap,
				      e->nsites + 1, sizeof(*e->sites))) < 0 ||
		    (err = u64map_put(&e->site_ids, key, e->nsites)) < 0)
			return err;
		e->sites[e->nsites] = (struct site){ op, stack };
		*out = (uint32_t)e->nsites++;
	}
	e->last_site_key = key;
	e->last_site = *out;
	return 0;
}

/* ---- findings ----------------------------------------------------------- */

static uint64_t dkey_hash(const struct finding_key *k)
{
	return hash_bytes(k, sizeof(*k));
}

/* The dedup row of `k`, inserted with count 0 when new; NULL when the table
 * cannot grow, in which case the occurrence is reported undeduplicated. */
static struct dent *dedup_row(struct engine *e,
			      const struct finding_key *k)
{
	size_t i;

	if ((e->dedup_count + 1) * 2 > e->dedup_mask + 1) {
		size_t nmask = e->dedup_mask ? e->dedup_mask * 2 + 1 : 63;
		struct dent *t = e_realloc(e, NULL, 0, (nmask + 1) * sizeof(*t));

		if (t == NULL)
			return NULL;
		memset(t, 0, (nmask + 1) * sizeof(*t));
		for (size_t j = 0; e->dedup && j <= e->dedup_mask; j++) {
			if (!e->dedup[j].used)
				continue;
			i = dkey_hash(&e->dedup[j].key) & nmask;
			while (t[i].used)
				i = (i + 1) & nmask;
			t[i] = e->dedup[j];
		}
		if (e->dedup != NULL)
			e_free(e, e->dedup, (e->dedup_mask + 1) * sizeof(*t));
		e->dedup = t;
		e->dedup_mask = nmask;
	}
	i = dkey_hash(k) & e->dedup_mask;
	while (e->dedup[i].used && memcmp(&e->dedup[i].key, k, sizeof(*k)) != 0)
		i = (i + 1) & e->dedup_mask;
	if (!e->dedup[i].used) {
		e->dedup[i].used = 1;
		e->dedup[i].key = *k;
		e->dedup_count++;
	}
	return &e->dedup[i];
}

void finding_key(const struct finding *f, const struct finding_text *t,
		 struct finding_key *k)
{
	struct finding_text own = {
		.op = f->access.op,
		.stack = f->access.stack,
		.prev_op = f->previous.op,
		.prev_stack = f->previous.stack,
		.alloc_stack = f->alloc.stack,
	};

	if (t == NULL)
		t = &own;
	memset(k, 0, sizeof(*k));
	k->kind = (uint8_t)f->kind;
	k->s1 = f->access.stream;
	k->op1 = t->op;
	k->st1 = t->stack;
	k->w1 = f->access.write;
	k->has_previous = f->has_previous;
	if (f->has_previous) {
		k->s2 = f->previous.stream;
		k->has_s2 = 1;
		k->op2 = t->prev_op;
		k->st2 = t->prev_stack;
		k->w2 = f->previous.write;
	} else if (f->has_alloc) {
		k->s2 = f->alloc.has_stream ? f->alloc.stream : 0;
		k->has_s2 = f->alloc.has_stream;
		k->st2 = t->alloc_stack;
	}
}

int finding_key_text(const struct finding_key *k,
		     char buf[FINDING_KEY_TEXT_MAX])
{
	const char *kind = finding_kind_name((enum finding_kind)k->kind);
	int n;

	n = snprintf(buf, FINDING_KEY_TEXT_MAX,
		     "%s %" PRIu64 " %c %" PRIu64 " %" PRIu64,
		     kind != NULL ? kind : "?", k->s1, k->w1 ? 'w' : 'r',
		     k->op1, k->st1);
	/* A previous access as before allocations joined the key, so that
	 * the rows of data races keep their keys. */
	if (k->has_previous)
		n += snprintf(buf + n, FINDING_KEY_TEXT_MAX - (size_t)n,
			      " %" PRIu64 " %c %" PRIu64 " %" PRIu64, k->s2,
			      k->w2 ? 'w' : 'r', k->op2, k->st2);
	else if (k->has_s2)
		n += snprintf(buf + n, FINDING_KEY_TEXT_MAX - (size_t)n,
			      " - %" PRIu64 " %" PRIu64, k->s2, k->st2);
	else
		n += snprintf(buf + n, FINDING_KEY_TEXT_MAX - (size_t)n,
			      " - ? %" PRIu64, k->st2);
	return n;
}

static void emit(struct engine *e, struct finding *f)
{
	struct dent *row = NULL;
	struct finding_key k;
	bool first = true;

	e->st.occurrences++;
	if (e->o.dedup) {
		finding_key(f, NULL, &k);
		row = dedup_row(e, &k);
	}
	if (row != NULL && row->count > 0) {
		first = false;
		f->id = row->id;
		f->count = ++row->count;
	} else {
		f->id = ++e->st.findings;
		f->count = 1;
		if (row != NULL) {
			row->id = f->id;
			row->count = 1;
		}
	}
	e->o.finding_cb(f, first, e->o.arg);
}

static void fill_alloc(const struct engine *e, const struct alloc *a,
		       struct finding *f)
{
	if (a == NULL)
		return;
	f->has_alloc = true;
	f->alloc.ptr = a->start;
	f->alloc.size = a->size0 ? 0 : a->last - a->start + 1;
	f->alloc.has_stream = a->sidx != STREAM_NONE;
	f->alloc.stream = f->alloc.has_stream ? e->streams[a->sidx].id : 0;
	f->alloc.stack = a->stack;
}

static void fill_access(const struct engine *e, const struct access *a,
			struct finding_access *out)
{
	out->stream = e->streams[a->sidx].id;
	out->seq = a->seq;
	out->write = a->write;
	out->op = e->sites[a->site].op;
	out->stack = e->sites[a->site].stack;
}

/* ---- allocations ------------------------------------------------------- */

static struct alloc *alloc_of(struct rb_node *n)
{
	return n != NULL ? rb_container_of(n, struct alloc, node) : NULL;
}

static struct alloc **alloc_bucket(const struct engine *e, uint64_t start)
{
	return &e->abuckets[hash_u64(start) & e->amask];
}

/* The allocation that starts exactly at `start`, if any. */
static struct alloc *alloc_at(const struct engine *e, uint64_t start)
{
	struct alloc *a = *alloc_bucket(e, start);

	while (a != NULL && a->start != start)
		a = a->hnext;
	return a;
}

/* Doubles the exact-start hash so that chains stay two long on average:
 * a bucket costs as much as two allocations' chain links. */
static int alloc_hash_grow(struct engine *e)
{
	size_t n = e->amask + 1, nn = n * 2;
	struct alloc **b = e_realloc(e, NULL, 0, nn * sizeof(*b));

	if (b == NULL)
		return -ENOMEM;
	memset(b, 0, nn * sizeof(*b));
	for (size_t i = 0; i < n; i++) {
		struct alloc *a = e->abuckets[i], *next;

		for (; a != NULL; a = next) {
			size_t j = hash_u64(a->start) & (nn - 1);

			next = a->hnext;
			a->hnext = b[j];
			b[j] = a;
		}
	}
	e_free(e, e->abuckets, n * sizeof(*b));
	e->abuckets = b;
	e->amask = nn - 1;
	return 0;
}

/* Where an allocation starting at some address goes in the tree. */
struct alloc_slot {
	struct rb_node *parent;
	struct rb_node **link;
};

/*
 * One descent: the allocation with the greatest start <= ptr and the one
 * with the least start > ptr, either NULL when there is none, and in *slot
 * (when not NULL) where an allocation starting at ptr would be linked.
 */
static void alloc_neighbors(const struct engine *e, uint64_t ptr,
			    struct alloc **below, struct alloc **above,
			    struct alloc_slot *slot)
{
	struct rb_node *const *link = &e->allocs.node;
	struct rb_node *n, *parent = NULL, *lo = NULL, *hi = NULL;

	while ((n = *link) != NULL) {
		parent = n;
		if (alloc_of(n)->start <= ptr) {
			lo = n;
			link = &n->right;
		} else {
			hi = n;
			link = &n->left;
		}
	}
	*below = alloc_of(lo);
	*above = alloc_of(hi);
	if (slot != NULL)
		*slot = (struct alloc_slot){ parent, (struct rb_node **)link };
}

/* The allocation containing ptr: the one starting there (a hash probe),
 * else the last one found (views of one tensor come in runs), else the
 * tree's. */
static struct alloc *alloc_containing(struct engine *e, uint64_t ptr)
{
	struct alloc *a = alloc_at(e, ptr), *above;

	if (a != NULL)
		return a;
	a = e->last_view;
	if (a != NULL && ptr >= a->start && ptr <= a->last)
		return a;
	alloc_neighbors(e, ptr, &a, &above, NULL);
	if (a == NULL || ptr > a->last)
		return NULL;
	e->last_view = a;
	return a;
}

/* Links `a` at `slot` when given (found by alloc_neighbors() with no
 * change to the tree since), else where it belongs. */
static void alloc_link(struct engine *e, struct alloc *a,
		       const struct alloc_slot *slot)
{
	struct rb_node **link = &e->allocs.node, *parent = NULL;
	struct alloc **bucket = alloc_bucket(e, a->start);

	if (slot != NULL) {
		parent = slot->parent;
		link = slot->link;
	}
	while (*link != NULL) {
		parent = *link;
		link = a->start < alloc_of(parent)->start ? &parent->left
							  : &parent->right;
	}
	rb_insert(&e->allocs, &a->node, parent, link);
	a->hnext = *bucket;
	*bucket = a;
	e->st.live_allocs++;
}

/* Usage arrays hold 2, 4, 8... entries: the capacity follows the count. */
static size_t usage_cap(size_t n)
{
	size_t cap = 2;

	while (cap < n)
		cap *= 2;
	return n == 0 ? 0 : cap;
}

/* The usage entry of stream `s` in `a`, added when new. */
static struct usage *usage_get(struct engine *e, struct alloc *a, uint16_t s)
{
	size_t n = a->nusage;
	struct usage *u;

	for (size_t i = 0; i < n; i++) {
		if (a->usages[i].sidx == s)
			return &a->usages[i];
	}
	if (usage_cap(n) == n) {
		u = e_realloc(e, a->usages, usage_cap(n) * sizeof(*u),
			      usage_cap(n + 1) * sizeof(*u));
		if (u == NULL)
			return NULL;
		a->usages = u;
	}
	u = &a->usages[a->nusage++];
	memset(u, 0, sizeof(*u));
	u->sidx = s;
	return u;
}

static void usages_free(struct engine *e, struct alloc *a)
{
	e_free(e, a->usages, usage_cap(a->nusage) * sizeof(*a->usages));
	a->usages = NULL;
	a->nusage = 0;
}

static void alloc_history_clear(struct engine *e, struct alloc *a);

/* Forgets allocation `a` with its history and usages. */
static void alloc_unlink(struct engine *e, struct alloc *a)
{
	struct alloc **p = alloc_bucket(e, a->start);

	while (*p != a)
		p = &(*p)->hnext;
	*p = a->hnext;
	if (e->last_view == a)
		e->last_view = NULL;
	rb_erase(&e->allocs, &a->node);
	alloc_history_clear(e, a);
	usages_free(e, a);
	pool_put(e, &e->alloc_pool, a);
	e->st.live_allocs--;
}

/*
 * The record_stream check at free or flush: every usage (U, n) of a
 * stream not named by record_stream, with not n <= state[C][U], is a
 * finding, once per allocation and usage stream.
 */
static void check_record_stream(struct engine *e, struct alloc *a,
				enum detected_at at)
{
	const int64_t *cstate;

	if (a->exempt || a->sidx == STREAM_NONE)
		return;
	cstate = e->streams[a->sidx].state;
	for (size_t i = 0; i < a->nusage; i++) {
		struct usage *u = &a->usages[i];
		struct finding f = { .kind = FINDING_MISSING_RECORD_STREAM,
				     .detected_at = at };

		if ((u->flags & (USAGE_USED | USAGE_RECORDED |
				 USAGE_REPORTED)) != USAGE_USED)
			continue;
		if ((int64_t)u->seq <= cstate[u->sidx])
			continue;
		u->flags |= USAGE_REPORTED;
		f.ptr = a->start;
		fill_alloc(e, a, &f);
		f.access.stream = e->streams[u->sidx].id;
		f.access.seq = u->seq;
		f.access.write = (u->flags & USAGE_WROTE) != 0;
		f.access.op = e->sites[u->site].op;
		f.access.stack = e->sites[u->site].stack;
		emit(e, &f);
	}
}

/* ---- access history ---------------------------------------------------- */

static struct access **hist_reads(struct hist *h)
{
	return h->cap == 0 ? &h->rd.one : h->rd.many;
}

static bool hist_empty(const struct hist *h)
{
	return h->write == NULL && h->nreads == 0;
}

static void access_put(struct engine *e, struct access *a)
{
	if (a != NULL && --a->refs == 0) {
		pool_put(e, &e->access_pool, a);
		e->st.accesses--;
	}
}

static void hist_clear_reads(struct engine *e, struct hist *h)
{
	struct access **r = hist_reads(h);

	for (uint32_t i = 0; i < h->nreads; i++)
		access_put(e, r[i]);
	if (h->cap > 0)
		e_free(e, h->rd.many, h->cap * sizeof(*h->rd.many));
	h->cap = 0;
	h->nreads = 0;
	h->rd.one = NULL;
}

static void hist_clear(struct engine *e, struct hist *h)
{
	access_put(e, h->write);
	h->write = NULL;
	hist_clear_reads(e, h);
}

/* `acc` becomes the last write, with no reads since. */
static void hist_set_write(struct engine *e, struct hist *h,
			   struct access *acc)
{
	hist_clear(e, h);
	h->write = acc;
	acc->refs++;
}

/* A copy of `src` in *dst, sharing its access records; 0 or -ENOMEM. */
static int hist_copy(struct engine *e, struct hist *dst, struct hist *src)
{
	struct access **r = hist_reads(src);

	memset(dst, 0, sizeof(*dst));
	if (src->nreads > 1) {
		dst->rd.many = e_realloc(e, NULL, 0,
					 src->nreads * sizeof(*dst->rd.many));
		if (dst->rd.many == NULL)
			return -ENOMEM;
		dst->cap = src->nreads;
	}
	dst->nreads = src->nreads;
	for (uint32_t i = 0; i < src->nreads; i++) {
		hist_reads(dst)[i] = r[i];
		r[i]->refs++;
	}
	dst->write = src->write;
	if (dst->write != NULL)
		dst->write->refs++;
	return 0;
}

static bool same_site(const struct access *a, const struct access *b)
{
	return a->sidx == b->sidx && a->site == b->site;
}

/* DESIGN 5: makes room in a full read list by dropping dead reads, then,
 * past READS_COALESCE, older repeats of a newer read's site. */
static void hist_prune_reads(struct engine *e, struct hist *h)
{
	struct access **r = hist_reads(h);
	const int64_t *floor = current_floor(e);
	uint32_t n = 0;

	for (uint32_t i = 0; i < h->nreads; i++) {
		if ((int64_t)r[i]->seq <= floor[r[i]->sidx])
			access_put(e, r[i]);
		else
			r[n++] = r[i];
	}
	h->nreads = n;
	if (n < READS_COALESCE)
		return;
	n = 0;
	for (uint32_t i = 0; i < h->nreads; i++) {
		bool repeated = false;

		for (uint32_t j = i + 1; j < h->nreads && !repeated; j++)
			repeated = same_site(r[i], r[j]);
		if (repeated)
			access_put(e, r[i]);
		else
			r[n++] = r[i];
	}
	h->nreads = n;
}

static int hist_add_read(struct engine *e, struct hist *h, struct access *acc)
{
	if (h->cap == 0 && h->nreads == 0) {
		h->rd.one = acc;
	} else {
		if (h->nreads >= 4 && h->nreads == h->cap)
			hist_prune_reads(e, h);
		if (h->cap == 0) {
			struct access *one = h->nreads ? h->rd.one : NULL;
			struct access **many = e_realloc(e, NULL, 0,
							 2 * sizeof(*many));

			if (many == NULL)
				return -ENOMEM;
			many[0] = one;
			h->rd.many = many;
			h->cap = 2;
		} else if (h->nreads == h->cap) {
			struct access **many = e_realloc(
				e, h->rd.many, h->cap * sizeof(*many),
				2 * h->cap * sizeof(*many));

			if (many == NULL)
				return -ENOMEM;
			h->rd.many = many;
			h->cap *= 2;
		}
		h->rd.many[h->nreads] = acc;
	}
	h->nreads++;
	acc->refs++;
	return 0;
}

/* Drops the accesses that start at `p`; returns whether `h` is now empty. */
static bool hist_drop_starting_at(struct engine *e, struct hist *h,
				  uint64_t p)
{
	struct access **r = hist_reads(h);
	uint32_t n = 0;

	if (h->write != NULL && h->write->ptr == p) {
		access_put(e, h->write);
		h->write = NULL;
	}
	for (uint32_t i = 0; i < h->nreads; i++) {
		if (r[i]->ptr == p)
			access_put(e, r[i]);
		else
			r[n++] = r[i];
	}
	h->nreads = n;
	return hist_empty(h);
}

/* ---- segments: history in byte ranges ------------------------------------ */

static struct seg *seg_of(struct rb_node *n)
{
	return n != NULL ? rb_container_of(n, struct seg, node) : NULL;
}

static void seg_remove(struct engine *e, struct rb_root *root, struct seg *g)
{
	rb_erase(root, &g->node);
	hist_clear(e, &g->h);
	pool_put(e, &e->seg_pool, g);
	e->st.segments--;
}

static void seg_insert(struct engine *e, struct rb_root *root, struct seg *g)
{
	struct rb_node **link = &root->node, *parent = NULL;

	while (*link != NULL) {
		parent = *link;
		link = g->start < seg_of(parent)->start ? &parent->left
							: &parent->right;
	}
	rb_insert(root, &g->node, parent, link);
	e->st.segments++;
}

static struct seg *seg_new(struct engine *e, uint64_t start, uint64_t last)
{
	struct seg *g = pool_get(e, &e->seg_pool);

	if (g == NULL)
		return NULL;
	memset(g, 0, sizeof(*g));
	g->start = start;
	g->last = last;
	return g;
}

/* The first segment of `root` with a byte at or after `ptr`. */
static struct seg *seg_first_from(const struct rb_root *root, uint64_t ptr)
{
	struct rb_node *n = root->node, *best = NULL, *after = NULL;

	while (n != NULL) {
		if (seg_of(n)->start <= ptr) {
			best = n;
			n = n->right;
		} else {
			after = n;
			n = n->left;
		}
	}
	if (best != NULL && seg_of(best)->last >= ptr)
		return seg_of(best);
	return seg_of(after);
}

static struct seg *seg_next(struct seg *g)
{
	return seg_of(rb_next(&g->node));
}

/* Splits `g` so that `at` (start < at <= last) begins a new segment with
 * the same history; returns the new segment, NULL on -ENOMEM. */
static struct seg *seg_split(struct engine *e, struct rb_root *root,
			     struct seg *g, uint64_t at)
{
	struct seg *h = seg_new(e, at, g->last);

	if (h == NULL)
		return NULL;
	if (hist_copy(e, &h->h, &g->h) < 0) {
		pool_put(e, &e->seg_pool, h);
		return NULL;
	}
	g->last = at - 1;
	seg_insert(e, root, h);
	return h;
}

/*
 * Forgets the history of [a, b] in `root`. Only a segment that sticks out
 * on both sides needs splitting (and so memory); the others are trimmed or
 * go.
 */
static int history_drop(struct engine *e, struct rb_root *root, uint64_t a,
			uint64_t b)
{
	struct seg *g = seg_first_from(root, a), *next;

	if (g != NULL && g->start < a && g->last > b) {
		if (seg_split(e, root, g, b + 1) == NULL)
			return -ENOMEM;
		g->last = a - 1;
		return 0;
	}
	if (g != NULL && g->start < a) {
		g->last = a - 1;
		g = seg_next(g);
	}
	while (g != NULL && g->start <= b) {
		next = seg_next(g);
		if (g->last > b) {
			/* Its start moves up past b, staying below next's. */
			g->start = b + 1;
			break;
		}
		seg_remove(e, root, g);
		g = next;
	}
	return 0;
}

static void history_clear(struct engine *e, struct rb_root *root)
{
	while (root->node != NULL)
		seg_remove(e, root, seg_of(root->node));
}

/* Adds read `acc` to the history of [a, b] in `root`, splitting segments
 * at the edges and filling the holes between them. */
static int history_add_read(struct engine *e, struct rb_root *root,
			    uint64_t a, uint64_t b, struct access *acc)
{
	struct seg *g = seg_first_from(root, a), *h;
	uint64_t cur = a;
	bool done = false;

	if (g != NULL && g->start < a) {
		if (seg_split(e, root, g, a) == NULL)
			return -ENOMEM;
		g = seg_next(g);
	}
	while (!done && g != NULL && g->start <= b) {
		if (g->start > cur) {
			if ((h = seg_new(e, cur, g->start - 1)) == NULL)
				return -ENOMEM;
			seg_insert(e, root, h);
			if (hist_add_read(e, &h->h, acc) < 0)
				return -ENOMEM;
		}
		if (g->last > b && seg_split(e, root, g, b + 1) == NULL)
			return -ENOMEM;
		if (hist_add_read(e, &g->h, acc) < 0)
			return -ENOMEM;
		done = g->last >= b;
		cur = g->last + 1;
		g = seg_next(g);
	}
	if (!done) {
		if ((h = seg_new(e, cur, b)) == NULL)
			return -ENOMEM;
		seg_insert(e, root, h);
		if (hist_add_read(e, &h->h, acc) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* Makes `acc` the last write of [a, b] in `root`, with no reads since. */
static int history_set_write(struct engine *e, struct rb_root *root,
			     uint64_t a, uint64_t b, struct access *acc)
{
	struct seg *g = seg_first_from(root, a);

	if (g == NULL || g->start != a || g->last != b) {
		if ((g = seg_new(e, a, b)) == NULL)
			return -ENOMEM;
		if (history_drop(e, root, a, b) < 0) {
			pool_put(e, &e->seg_pool, g);
			return -ENOMEM;
		}
		seg_insert(e, root, g);
	}
	hist_set_write(e, &g->h, acc);
	return 0;
}

/* ---- the history of an allocation (DESIGN 3) ------------------------------ */

/* Moves a whole-allocation history into a tree of segments, so that part
 * of the allocation can be given a history of its own. */
static int alloc_to_tree(struct engine *e, struct alloc *a)
{
	struct hist one = a->whole;
	struct seg *g = NULL;

	if (!hist_empty(&one)) {
		if ((g = seg_new(e, a->start, a->last)) == NULL)
			return -ENOMEM;
		g->h = one;
	}
	a->segs.node = NULL;
	a->tree = 1;
	if (g != NULL)
		seg_insert(e, &a->segs, g);
	return 0;
}

static void alloc_history_clear(struct engine *e, struct alloc *a)
{
	if (a->tree)
		history_clear(e, &a->segs);
	else
		hist_clear(e, &a->whole);
	memset(&a->whole, 0, sizeof(a->whole));
	a->tree = 0;
}

/* `gap`: forget history and usages; exempt what is live. */
static void forget(struct engine *e)
{
	history_clear(e, &e->outside);
	for (struct rb_node *n = rb_first(&e->allocs); n; n = rb_next(n)) {
		struct alloc *a = alloc_of(n);

		alloc_history_clear(e, a);
		usages_free(e, a);
		a->exempt = 1;
	}
}

/* ---- regions: where the history of a byte range lives ------------------- */

/* `in` must be the allocation containing `start`, or NULL when none does. */
static void walk_init(const struct engine *e, struct region_walk *w,
		      uint64_t start, uint64_t last, struct alloc *in)
{
	struct alloc *below;

	w->cur = start;
	w->last = last;
	w->in = in;
	w->next = NULL;
	w->done = false;
	if (in == NULL)
		alloc_neighbors(e, start, &below, &w->next, NULL);
}

static bool walk_next(struct region_walk *w, struct region *r)
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
		struct alloc *n = alloc_of(rb_next(&w->in->node));

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
static struct rb_root *region_tree(struct engine *e, const struct region *r)
{
	if (r->alloc == NULL)
		return &e->outside;
	return r->alloc->tree ? &r->alloc->segs : NULL;
}

static bool region_whole(const struct region *r)
{
	return r->alloc != NULL && r->start == r->alloc->start &&
	       r->last == r->alloc->last;
}

/*
 * Iterates over the histories that hold bytes of `r`: the allocation's
 * whole-allocation record, or the segments of its tree that overlap.
 * `*cursor` carries the position; start it NULL.
 */
static struct hist *region_hist(struct engine *e, const struct region *r,
				struct seg **cursor, bool first)
{
	struct rb_root *tree = region_tree(e, r);

	if (tree == NULL) {
		if (!first || hist_empty(&r->alloc->whole))
			return NULL;
		return &r->alloc->whole;
	}
	*cursor = first ? seg_first_from(tree, r->start) : seg_next(*cursor);
	if (*cursor == NULL || (*cursor)->start > r->last)
		return NULL;
	return &(*cursor)->h;
}

#define for_each_region_hist(e, r, h, cursor)                       \
	for ((h) = region_hist((e), (r), &(cursor), true); (h) != NULL; \
	     (h) = region_hist((e), (r), &(cursor), false))

static int region_set_write(struct engine *e, const struct region *r,
			    struct access *acc)
{
	struct alloc *a = r->alloc;

	if (region_whole(r)) {
		/* A write of the whole allocation makes its history one
		 * record again, however it was cut before. */
		if (a->tree)
			alloc_history_clear(e, a);
		hist_set_write(e, &a->whole, acc);
		return 0;
	}
	if (a != NULL && !a->tree && alloc_to_tree(e, a) < 0)
		return -ENOMEM;
	return history_set_write(e, region_tree(e, r), r->start, r->last, acc);
}

static int region_add_read(struct engine *e, const struct region *r,
			   struct access *acc)
{
	struct alloc *a = r->alloc;

	if (a != NULL && !a->tree && region_whole(r))
		return hist_add_read(e, &a->whole, acc);
	if (a != NULL && !a->tree && alloc_to_tree(e, a) < 0)
		return -ENOMEM;
	return history_add_read(e, region_tree(e, r), r->start, r->last, acc);
}

static struct alloc *alloc_for(struct engine *e, const struct elem *el,
			       uint64_t ptr)
{
	return ptr == el->start ? el->alloc : alloc_containing(e, ptr);
}

/*
 * `free P` where no allocation starts at P: drop the accesses that start
 * at P. They all lie within max_access_len bytes of P.
 */
static void history_drop_starting_at(struct engine *e, uint64_t p)
{
	uint64_t end = p > UINT64_MAX - (e->max_access_len - 1)
			       ? UINT64_MAX
			       : p + (e->max_access_len - 1);
	struct region_walk w;
	struct region r;

	if (e->max_access_len == 0)
		return;
	walk_init(e, &w, p, end, alloc_containing(e, p));
	while (walk_next(&w, &r)) {
		struct rb_root *tree = region_tree(e, &r);
		struct seg *g, *next;

		if (tree == NULL) {
			hist_drop_starting_at(e, &r.alloc->whole, p);
			continue;
		}
		for (g = seg_first_from(tree, r.start);
		     g != NULL && g->start <= r.last; g = next) {
			next = seg_next(g);
			if (hist_drop_starting_at(e, &g->h, p))
				seg_remove(e, tree, g);
		}
	}
}

/* ---- launches ---------------------------------------------------------- */

static bool ordered(const struct engine *e, uint16_t s, const struct access *p)
{
	return (int64_t)p->seq <= e->streams[s].state[p->sidx];
}

static bool seen_lookup(const struct engine *e, const struct access *a)
{
	size_t i = hash_u64((uintptr_t)a) & e->seen_mask;

	for (; e->seen_set[i] != NULL; i = (i + 1) & e->seen_mask) {
		if (e->seen_set[i] == a)
			return true;
	}
	return false;
}

static void seen_insert(struct engine *e, const struct access *a)
{
	size_t i = hash_u64((uintptr_t)a) & e->seen_mask;

	while (e->seen_set[i] != NULL)
		i = (i + 1) & e->seen_mask;
	e->seen_set[i] = a;
}

/* Rehashes the list into a set at most half full. */
static int seen_rebuild(struct engine *e)
{
	size_t size = 64, old = e->seen_set ? e->seen_mask + 1 : 0;

	while (size < 2 * e->nseen)
		size *= 2;
	if (size > old) {
		const struct access **set = e_realloc(e, e->seen_set,
						      old * sizeof(*set),
						      size * sizeof(*set));

		if (set == NULL)
			return -ENOMEM;
		e->seen_set = set;
		e->seen_mask = size - 1;
	}
	memset(e->seen_set, 0, (e->seen_mask + 1) * sizeof(*e->seen_set));
	for (size_t i = 0; i < e->nseen; i++)
		seen_insert(e, e->seen[i]);
	return 0;
}

/* Starts the pairs of a new current access. */
static void seen_reset(struct engine *e)
{
	if (e->nseen > SEEN_LIST)
		memset(e->seen_set, 0,
		       (e->seen_mask + 1) * sizeof(*e->seen_set));
	e->nseen = 0;
}

/*
 * Whether `prev` was paired with the current access already; records it.
 * A short list covers the usual zero to few pairs, a hash set the access
 * that spans thousands of segments. When memory runs out the pair is
 * reported again rather than missed.
 */
static bool pair_seen(struct engine *e, const struct access *prev)
{
	bool hashed = e->nseen > SEEN_LIST;

	if (hashed) {
		if (seen_lookup(e, prev))
			return true;
	} else {
		for (size_t i = 0; i < e->nseen; i++) {
			if (e->seen[i] == prev)
				return true;
		}
	}
	if (grow_array(e, (void **)&e->seen, &e->seen_cap, e->nseen + 1,
		       sizeof(*e->seen)) < 0)
		return false;
	e->seen[e->nseen++] = prev;
	if (e->nseen > SEEN_LIST &&
	    (!hashed || 2 * e->nseen > e->seen_mask + 1))
		seen_rebuild(e);
	else if (hashed)
		seen_insert(e, prev);
	return false;
}

static void report_race(struct engine *e, const struct elem *cur,
			struct access *prev, const struct access *tmpl)
{
	struct finding f = { .kind = FINDING_DATA_RACE,
			     .detected_at = DETECTED_AT_LAUNCH };

	/* Each pair is one finding however many segments it shares. */
	if (pair_seen(e, prev))
		return;
	f.ptr = cur->start;
	fill_alloc(e, cur->alloc, &f);
	fill_access(e, tmpl, &f.access);
	f.has_previous = true;
	fill_access(e, prev, &f.previous);
	emit(e, &f);
}

/* A read is checked against the last write of each of its bytes. */
static void check_read(struct engine *e, uint16_t s, const struct elem *el,
		       const struct access *tmpl)
{
	seen_reset(e);
	for (uint32_t i = 0; i < el->npieces; i++) {
		const struct span *p = &e->pieces[el->piece0 + i];
		struct region_walk w;
		struct region r;
		struct seg *cursor = NULL;
		struct hist *h;

		walk_init(e, &w, p->start, p->last, alloc_for(e, el, p->start));
		while (walk_next(&w, &r)) {
			for_each_region_hist(e, &r, h, cursor) {
				if (h->write != NULL && !ordered(e, s, h->write))
					report_race(e, el, h->write, tmpl);
			}
		}
	}
}

/* A write is checked against the reads since the last write of each of
 * its bytes, or against that last write when there are none. */
static void check_write(struct engine *e, uint16_t s, const struct elem *el,
			const struct access *tmpl)
{
	struct region_walk w;
	struct region r;
	struct seg *cursor = NULL;
	struct hist *h;

	seen_reset(e);
	walk_init(e, &w, el->start, el->last, el->alloc);
	while (walk_next(&w, &r)) {
		for_each_region_hist(e, &r, h, cursor) {
			struct access **rd = hist_reads(h);

			for (uint32_t i = 0; i < h->nreads; i++) {
				if (!ordered(e, s, rd[i]))
					report_race(e, el, rd[i], tmpl);
			}
			if (h->nreads == 0 && h->write != NULL &&
			    !ordered(e, s, h->write))
				report_race(e, el, h->write, tmpl);
		}
	}
}

static int span_cmp(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->last != y->last)
		return x->last < y->last ? -1 : 1;
	if (x->pos != y->pos)
		return x->pos < y->pos ? -1 : 1;
	return 0;
}

/* Insertion sort for the usual handful of elements, qsort for long lists. */
static void sort_spans(struct span *v, size_t n)
{
	if (n > 16) {
		qsort(v, n, sizeof(*v), span_cmp);
		return;
	}
	for (size_t i = 1; i < n; i++) {
		struct span x = v[i];
		size_t j = i;

		while (j > 0 && span_cmp(&v[j - 1], &x) > 0) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

/* Copies `n` elements into e->spans sorted by (start, last, position). */
static void sorted_spans(struct engine *e, const struct elem *el, size_t n)
{
	for (size_t i = 0; i < n; i++)
		e->spans[i] = (struct span){ el[i].start, el[i].last,
					     (uint32_t)i };
	sort_spans(e->spans, n);
}

/* An element listed twice in one list is one access: marks later copies. */
static void mark_dups(struct engine *e, struct elem *el, size_t n)
{
	if (n < 2)
		return;
	sorted_spans(e, el, n);
	for (size_t i = 1; i < n; i++) {
		if (e->spans[i].start == e->spans[i - 1].start &&
		    e->spans[i].last == e->spans[i - 1].last)
			el[e->spans[i].pos].dup = 1;
	}
}

/* The union of the writes as sorted disjoint spans in e->spans; returns
 * their number. */
static size_t write_union(struct engine *e, const struct elem *w, size_t n)
{
	size_t m = 0;

	sorted_spans(e, w, n);
	for (size_t i = 0; i < n; i++) {
		struct span *u = &e->spans[m - (m > 0)];

		if (m > 0 && (u->last == UINT64_MAX ||
			      e->spans[i].start <= u->last + 1)) {
			if (e->spans[i].last > u->last)
				u->last = e->spans[i].last;
		} else {
			e->spans[m++] = e->spans[i];
		}
	}
	return m;
}

static int add_piece(struct engine *e, size_t *npieces, uint64_t start,
		     uint64_t last)
{
	if (grow_array(e, (void **)&e->pieces, &e->pieces_cap, *npieces + 1,
		       sizeof(*e->pieces)) < 0)
		return -ENOMEM;
	e->pieces[(*npieces)++] = (struct span){ start, last, 0 };
	return 0;
}

/* The bytes of read `r` that no write covers, given the write union in
 * e->spans[0..nunion), appended to e->pieces. */
static int read_pieces(struct engine *e, struct elem *r, size_t nunion,
		       size_t *npieces)
{
	size_t lo = 0, hi = nunion;
	uint64_t cur = r->start;
	bool covered = false;

	while (lo < hi) { /* the first span ending at or after r->start */
		size_t mid = lo + (hi - lo) / 2;

		if (e->spans[mid].last < r->start)
			lo = mid + 1;
		else
			hi = mid;
	}
	r->piece0 = (uint32_t)*npieces;
	for (size_t i = lo; i < nunion && !covered &&
			    e->spans[i].start <= r->last; i++) {
		if (e->spans[i].start > cur &&
		    add_piece(e, npieces, cur, e->spans[i].start - 1) < 0)
			return -ENOMEM;
		if (e->spans[i].last >= r->last)
			covered = true;
		else
			cur = e->spans[i].last + 1;
	}
	if (!covered && add_piece(e, npieces, cur, r->last) < 0)
		return -ENOMEM;
	r->npieces = (uint32_t)(*npieces - r->piece0);
	return 0;
}

static bool range_ok(const struct op_range *r)
{
	return r->len >= 1 && r->ptr <= UINT64_MAX - (r->len - 1);
}

/*
 * Lays out a launch's elements in e->elems (writes first, then reads, in
 * listed order), marks duplicates, cuts each read down to the bytes no
 * write covers and finds the allocation each access belongs to. Allocates
 * scratch only; touches no analysis state.
 */
static int launch_prepare(struct engine *e, const struct op *op)
{
	size_t nw = op->nwrites, nr = op->nreads, nu, npieces = 0;
	struct elem *w, *r;

	if (nw + nr == 0)
		return 0;
	if (grow_array(e, (void **)&e->elems, &e->elems_cap, nw + nr,
		       sizeof(*e->elems)) < 0 ||
	    grow_array(e, (void **)&e->spans, &e->spans_cap, nw + nr,
		       sizeof(*e->spans)) < 0)
		return -ENOMEM;
	w = e->elems;
	r = e->elems + nw;
	for (size_t i = 0; i < nw + nr; i++) {
		const struct op_range *x = i < nw ? &op->writes[i]
						  : &op->reads[i - nw];

		e->elems[i] = (struct elem){ .start = x->ptr,
					     .last = x->ptr + (x->len - 1) };
	}
	mark_dups(e, w, nw);
	mark_dups(e, r, nr);
	nu = write_union(e, w, nw);
	for (size_t i = 0; i < nr; i++) {
		if (!r[i].dup && read_pieces(e, &r[i], nu, &npieces) < 0)
			return -ENOMEM;
	}
	for (size_t i = 0; i < nw + nr; i++) {
		struct elem *el = &e->elems[i];

		if (!el->dup && (i < nw || el->npieces > 0))
			el->alloc = alloc_containing(e, el->start);
	}
	return 0;
}

/* DESIGN 6: `a` has a use the next flush must check. Past twice the live
 * allocations (or without memory) the list gives way to a walk of all. */
static void pending_add(struct engine *e, struct alloc *a)
{
	if (a->pending)
		return;
	a->pending = 1;
	if (e->pending_all)
		return;
	if (e->npending >= 2 * e->st.live_allocs + 64 ||
	    grow_array(e, (void **)&e->pending, &e->pending_cap,
		       e->npending + 1, sizeof(*e->pending)) < 0) {
		e->pending_all = true;
		e->npending = 0;
		return;
	}
	e->pending[e->npending++] = a->start;
}

/* The record_stream bookkeeping: a use of an allocation on a stream other
 * than its (known) allocation stream. */
static int note_usage(struct engine *e, const struct elem *el, uint16_t s,
		      uint32_t site)
{
	struct alloc *a = el->alloc;
	struct usage *u;

	if (a == NULL || a->exempt || a->sidx == STREAM_NONE || a->sidx == s)
		return 0;
	if ((u = usage_get(e, a, s)) == NULL)
		return -ENOMEM;
	if (!(u->flags & USAGE_USED) || u->seq != e->seq) {
		/* a new latest use: its own op, stack and write flag */
		u->flags = (uint8_t)((u->flags & ~USAGE_WROTE) | USAGE_USED);
		u->seq = e->seq;
		u->site = site;
	}
	if (el->acc->write)
		u->flags |= USAGE_WROTE;
	pending_add(e, a);
	return 0;
}

/*
 * A write element that belongs to another allocation, or to none, and runs
 * into allocation A still wrote A: the usage of A this launch recorded
 * (through an access that belongs to A) says so. Runs after every access
 * of the launch has recorded its usage; a usage from an earlier launch is
 * left alone, since this launch has no access that belongs to A.
 */
static void note_wrote_beyond(struct engine *e, const struct elem *el,
			      uint16_t s)
{
	struct region_walk w;
	struct region r;

	walk_init(e, &w, el->start, el->last, el->alloc);
	while (walk_next(&w, &r)) {
		struct alloc *a = r.alloc;

		if (a == NULL || a == el->alloc)
			continue;
		for (size_t i = 0; i < a->nusage; i++) {
			struct usage *u = &a->usages[i];

			if (u->sidx == s && (u->flags & USAGE_USED) &&
			    u->seq == e->seq)
				u->flags |= USAGE_WROTE;
		}
	}
}

static struct access *access_new(struct engine *e, uint16_t s,
				 uint32_t site, uint64_t ptr, bool write)
{
	struct access *a = pool_get(e, &e->access_pool);

	if (a == NULL)
		return NULL;
	*a = (struct access){ .ptr = ptr, .seq = e->seq, .sidx = s,
			      .write = write, .refs = 1, .site = site };
	e->st.accesses++;
	return a;
}

static int update_range(struct engine *e, const struct elem *el,
			uint64_t start, uint64_t last)
{
	struct region_walk w;
	struct region r;
	int err = 0;

	walk_init(e, &w, start, last, alloc_for(e, el, start));
	while (err == 0 && walk_next(&w, &r)) {
		if (el->acc->write)
			err = region_set_write(e, &r, el->acc);
		else
			err = region_add_read(e, &r, el->acc);
	}
	return err;
}

/* Applies the launch's accesses to history and usages (DESIGN 4, 6). */
static int launch_update(struct engine *e, uint16_t s, uint32_t site,
			 const struct op *op)
{
	size_t nw = op->nwrites, n = nw + op->nreads;
	int err = 0;

	for (size_t i = 0; i < n && err == 0; i++) {
		struct elem *el = &e->elems[i];
		bool write = i < nw;

		if (el->dup || (!write && el->npieces == 0))
			continue;
		el->acc = access_new(e, s, site, el->start, write);
		if (el->acc == NULL)
			return -ENOMEM;
		if (write) {
			err = update_range(e, el, el->start, el->last);
		} else {
			for (uint32_t j = 0; j < el->npieces && err == 0; j++) {
				const struct span *p = &e->pieces[el->piece0 + j];

				err = update_range(e, el, p->start, p->last);
			}
		}
		if (err == 0)
			err = note_usage(e, el, s, site);
		access_put(e, el->acc); /* the history holds its own refs */
	}
	for (size_t i = 0; i < nw && err == 0; i++) {
		if (!e->elems[i].dup)
			note_wrote_beyond(e, &e->elems[i], s);
	}
	return err;
}

static int on_launch(struct engine *e, const struct op *op)
{
	size_t nw = op->nwrites;
	struct access tmpl;
	uint32_t site;
	uint16_t s;
	int err;

	if (e->seq == SEQ_MAX)
		return -EOVERFLOW;
	if ((err = launch_prepare(e, op)) < 0 ||
	    (err = site_get(e, op->name, op->stack, &site)) < 0 ||
	    (err = stream_get(e, op->stream, &s)) < 0)
		return err;
	e->seq++;
	e->st.launches++;
	e->streams[s].state[s] = (int64_t)e->seq;

	tmpl = (struct access){ .site = site, .sidx = s, .seq = e->seq };
	/* Reads first, then writes, as torch.cuda._sanitizer reports. */
	for (size_t i = nw; i < nw + op->nreads; i++) {
		if (!e->elems[i].dup && e->elems[i].npieces > 0)
			check_read(e, s, &e->elems[i], &tmpl);
	}
	tmpl.write = 1;
	for (size_t i = 0; i < nw; i++) {
		if (!e->elems[i].dup)
			check_write(e, s, &e->elems[i], &tmpl);
	}
	for (size_t i = 0; i < nw + op->nreads; i++) {
		uint64_t len = e->elems[i].last - e->elems[i].start + 1;

		if (len == 0) /* the whole address space */
			len = UINT64_MAX;
		if (len > e->max_access_len)
			e->max_access_len = len;
	}
	if ((err = launch_update(e, s, site, op)) < 0)
		forget(e);
	return err;
}

/* ---- memory operations ------------------------------------------------- */

static int on_alloc(struct engine *e, const struct op *op)
{
	uint64_t last = op->ptr + (op->size ? op->size - 1 : 0);
	struct alloc *a, *old, *above;
	struct alloc_slot slot;
	bool moved = false;
	uint16_t s = STREAM_NONE;
	int err;

	if (e->st.live_allocs >= 2 * (e->amask + 1) &&
	    (err = alloc_hash_grow(e)) < 0)
		return err;
	if ((a = pool_get(e, &e->alloc_pool)) == NULL)
		return -ENOMEM;
	if (op->has_stream && (err = stream_get(e, op->stream, &s)) < 0) {
		pool_put(e, &e->alloc_pool, a);
		return err;
	}
	/* Live allocations it overlaps were freed unseen: release them
	 * silently, dropping their history as a free would. */
	alloc_neighbors(e, op->ptr, &old, &above, &slot);
	if (old == NULL || old->last < op->ptr)
		old = above;
	while (old != NULL && old->start <= last) {
		struct alloc *next = alloc_of(rb_next(&old->node));

		alloc_unlink(e, old);
		old = next;
		moved = true;
	}
	if (history_drop(e, &e->outside, op->ptr, last) < 0) {
		pool_put(e, &e->alloc_pool, a);
		forget(e);
		return -ENOMEM;
	}
	*a = (struct alloc){ .start = op->ptr, .last = last,
			     .stack = op->stack, .sidx = s,
			     .size0 = op->size == 0 };
	alloc_link(e, a, moved ? NULL : &slot);
	return 0;
}

static int on_free(struct engine *e, const struct op *op)
{
	struct alloc *a = alloc_at(e, op->ptr);

	if (a == NULL) {
		history_drop_starting_at(e, op->ptr);
		return 0;
	}
	check_record_stream(e, a, DETECTED_AT_FREE);
	alloc_unlink(e, a);
	return 0;
}

static int on_record_stream(struct engine *e, const struct op *op)
{
	struct alloc *a;
	struct usage *u;
	uint16_t s;
	int err;

	if ((err = stream_get(e, op->stream, &s)) < 0)
		return err;
	a = alloc_containing(e, op->ptr);
	if (a == NULL)
		return 0;
	if ((u = usage_get(e, a, s)) == NULL) {
		/* a lost record_stream must not become a false finding */
		forget(e);
		return -ENOMEM;
	}
	u->flags |= USAGE_RECORDED;
	return 0;
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

static void flush_one(struct engine *e, struct alloc *a)
{
	check_record_stream(e, a, DETECTED_AT_FLUSH);
	a->pending = 0;
}

/* DESIGN 6: the pending allocations, in address order. A start listed
 * twice, or whose allocation was freed (and perhaps another made there),
 * names no pending allocation the second time. */
static void on_flush(struct engine *e)
{
	if (e->pending_all) {
		for (struct rb_node *n = rb_first(&e->allocs); n;
		     n = rb_next(n))
			flush_one(e, alloc_of(n));
		e->pending_all = false;
	} else if (e->npending > 0) {
		qsort(e->pending, e->npending, sizeof(*e->pending), u64_cmp);
		for (size_t i = 0; i < e->npending; i++) {
			struct alloc *a = alloc_at(e, e->pending[i]);

			if (a != NULL && a->pending)
				flush_one(e, a);
		}
	}
	e->npending = 0;
}

/* ---- sync operations --------------------------------------------------- */

static int on_sync_op(struct engine *e, const struct op *op)
{
	uint64_t ids[2] = { op->stream, op->on };
	struct event *ev;
	uint16_t s, b;
	int err;

	switch (op->kind) {
	case OP_STREAM_CREATE:
		return stream_get(e, op->stream, &s);
	case OP_EVENT_CREATE:
	case OP_EVENT_DESTROY:
		/* recorded[E] = empty; an absent event is an empty one */
		event_drop(e, op->event);
		return 0;
	case OP_EVENT_RECORD:
		if ((err = stream_get(e, op->stream, &s)) < 0)
			return err;
		return event_record(e, op->event, s);
	case OP_EVENT_WAIT:
		if ((err = stream_get(e, op->stream, &s)) < 0)
			return err;
		if ((ev = event_find(e, op->event)) != NULL) {
			merge(e->streams[s].state, ev->rec, ev->n);
			clocks_raised(e);
		}
		return 0;
	case OP_EVENT_SYNC:
		if ((ev = event_find(e, op->event)) != NULL)
			all_streams_merge(e, ev->rec, ev->n);
		return 0;
	case OP_STREAM_WAIT:
		if ((err = streams_fit(e, ids, 2)) < 0 ||
		    (err = stream_get(e, op->stream, &s)) < 0 ||
		    (err = stream_get(e, op->on, &b)) < 0)
			return err;
		merge(e->streams[s].state, e->streams[b].state, e->nstreams);
		clocks_raised(e);
		return 0;
	case OP_STREAM_SYNC:
		if ((err = stream_get(e, op->stream, &s)) < 0)
			return err;
		all_streams_merge(e, e->streams[s].state, e->nstreams);
		return 0;
	case OP_DEVICE_SYNC:
		for (uint32_t t = 0; t < e->nstreams; t++)
			e->host[t] = e->streams[t].state[t];
		all_streams_merge(e, e->host, e->nstreams);
		return 0;
	default:
		return -EINVAL;
	}
}

static bool op_valid(const struct op *op)
{
	if ((unsigned)op->kind >= OP_KIND_COUNT)
		return false;
	if (op->kind == OP_LAUNCH) {
		if (op->nreads + op->nwrites > UINT32_MAX)
			return false;
		for (size_t i = 0; i < op->nreads; i++) {
			if (!range_ok(&op->reads[i]))
				return false;
		}
		for (size_t i = 0; i < op->nwrites; i++) {
			if (!range_ok(&op->writes[i]))
				return false;
		}
	}
	if (op->kind == OP_ALLOC && op->size > 1 &&
	    op->ptr > UINT64_MAX - (op->size - 1))
		return false;
	return true;
}

int engine_feed(struct engine *e, const struct op *op)
{
	int err = 0;

	if (!op_valid(op))
		return -EINVAL;
	switch (op->kind) {
	case OP_LAUNCH:
		err = on_launch(e, op);
		break;
	case OP_ALLOC:
		err = on_alloc(e, op);
		break;
	case OP_FREE:
		err = on_free(e, op);
		break;
	case OP_RECORD_STREAM:
		err = on_record_stream(e, op);
		break;
	case OP_FLUSH:
		on_flush(e);
		break;
	case OP_GAP:
		forget(e);
		e->st.gaps++;
		break;
	case OP_CAPTURE_BEGIN:
	case OP_CAPTURE_END:
	case OP_GRAPH_REPLAY:
	case OP_GRAPH_DESTROY:
		/* graph semantics: issue 14, next step (an alloc's graph too) */
		break;
	default:
		err = on_sync_op(e, op);
		break;
	}
	if (err == 0 || err == -ENOMEM)
		e->st.ops++;
	return err;
}

int engine_feed_or_skip(struct engine *e, const struct op *op,
			bool *skipping)
{
	struct op gap = { .kind = OP_GAP };
	int err = engine_feed(e, op);

	if (err != -E2BIG) {
		if (err == 0 || err == -ENOMEM) /* analysed, or forgotten */
			*skipping = false;
		return err;
	}
	if (*skipping)
		return ENGINE_SKIPPED;
	*skipping = true;
	(void)engine_feed(e, &gap);
	return ENGINE_SKIPPED_GAP;
}

/* ---- lifetime ---------------------------------------------------------- */

int engine_new(const struct engine_opts *o, struct engine **out)
{
	struct engine *e;
	uint16_t s;

	if (o == NULL || o->finding_cb == NULL)
		return -EINVAL;
	if ((e = calloc(1, sizeof(*e))) == NULL)
		return -ENOMEM;
	e->o = *o;
	e->access_pool.size = sizeof(struct access);
	e->seg_pool.size = sizeof(struct seg);
	e->alloc_pool.size = sizeof(struct alloc);
	e->amask = 63;
	note_bytes(e, sizeof(*e));
	e->abuckets = e_realloc(e, NULL, 0, (e->amask + 1) * sizeof(void *));
	if (e->abuckets == NULL || u64map_init(&e->stream_ids) < 0 ||
	    u64map_init(&e->events) < 0 || u64map_init(&e->site_ids) < 0 ||
	    stream_create(e, 0, &s) < 0) {
		engine_free(e);
		return -ENOMEM;
	}
	memset(e->abuckets, 0, (e->amask + 1) * sizeof(void *));
	e->last_stream_id = 0;
	e->last_sidx = s;
	*out = e;
	return 0;
}

void engine_free(struct engine *e)
{
	if (e == NULL)
		return;
	for (size_t i = 0; e->events.used && i <= e->events.mask; i++) {
		if (e->events.used[i]) {
			struct event *ev =
				(struct event *)(uintptr_t)e->events.slots[i].val;

			free(ev->rec);
			free(ev);
		}
	}
	history_clear(e, &e->outside);
	while (e->allocs.node != NULL)
		alloc_unlink(e, alloc_of(e->allocs.node));
	for (uint32_t s = 0; s < e->nstreams; s++)
		free(e->streams[s].state);
	free(e->streams);
	free(e->host);
	free(e->floor);
	free(e->abuckets);
	free(e->pending);
	free(e->elems);
	free(e->spans);
	free(e->pieces);
	free(e->dedup);
	free(e->sites);
	free(e->seen);
	free(e->seen_set);
	u64map_fini(&e->stream_ids);
	u64map_fini(&e->events);
	u64map_fini(&e->site_ids);
	pool_fini(&e->access_pool);
	pool_fini(&e->seg_pool);
	pool_fini(&e->alloc_pool);
	free(e);
}

void engine_get_stats(const struct engine *e, struct engine_stats *out)
{
	*out = e->st;
	out->bytes = engine_bytes(e);
}

/* ---- invariants ---------------------------------------------------------- */

/*
 * engine_check() walks everything the engine keeps and compares it with
 * what every operation promises to leave behind. Tests run it after each
 * operation, so that a bookkeeping slip (an overlapping segment, a lost
 * reference, a count that drifts) fails where it happens rather than as
 * a wrong finding many operations later.
 */
struct check {
	const struct engine *e;
	struct u64map refs; /* access address -> references seen */
	bool compare;	    /* second pass: compare refs with the counts */
	uint64_t accesses;  /* distinct, first pass */
	uint64_t segments;  /* first pass */
	const char *why;
};

static void check_fail(struct check *c, const char *why)
{
	if (c->why == NULL)
		c->why = why;
}

static void check_access_ref(struct check *c, const struct access *a)
{
	uint64_t *n;

	if (a->sidx >= c->e->nstreams || a->seq > c->e->seq ||
	    a->site >= c->e->nsites)
		check_fail(c, "an access names a stream, launch or site that "
			      "does not exist");
	n = u64map_get(&c->refs, (uintptr_t)a);
	if (c->compare) {
		if (n == NULL || *n != a->refs)
			check_fail(c, "an access's reference count differs "
				      "from the histories that hold it");
	} else if (n != NULL) {
		(*n)++;
	} else if (u64map_put(&c->refs, (uintptr_t)a, 1) < 0) {
		check_fail(c, "out of memory while checking");
	} else {
		c->accesses++;
	}
}

static void check_hist(struct check *c, const struct hist *h)
{
	struct access *const *r = h->cap == 0 ? &h->rd.one : h->rd.many;

	if (h->cap == 0 ? h->nreads > 1 : h->nreads > h->cap)
		check_fail(c, "a read list holds more than its capacity");
	if (h->write != NULL)
		check_access_ref(c, h->write);
	for (uint32_t i = 0; i < h->nreads; i++) {
		if (r[i] == NULL) {
			check_fail(c, "a read list holds a null access");
			continue;
		}
		if (!r[i]->write)
			check_access_ref(c, r[i]);
		else
			check_fail(c, "a write is in a read list");
	}
	if (h->write != NULL && h->write->write == 0)
		check_fail(c, "a read is a segment's last write");
}

/* The segments of `root`: ordered, disjoint, within [lo, hi], none empty. */
static void check_segs(struct check *c, const struct rb_root *root,
		       uint64_t lo, uint64_t hi)
{
	const struct seg *prev = NULL;

	if (rb_check(root) < 0)
		check_fail(c, "a history tree is not a red-black tree");
	for (struct rb_node *n = rb_first(root); n != NULL; n = rb_next(n)) {
		const struct seg *g = seg_of(n);

		if (g->start > g->last || g->start < lo || g->last > hi)
			check_fail(c, "a history segment lies outside its "
				      "allocation or ends before it starts");
		if (prev != NULL && g->start <= prev->last)
			check_fail(c, "history segments overlap or are out of "
				      "order");
		if (hist_empty(&g->h))
			check_fail(c, "an empty history segment is kept");
		check_hist(c, &g->h);
		c->segments += !c->compare;
		prev = g;
	}
}

static void check_usages(struct check *c, const struct alloc *a)
{
	for (size_t i = 0; i < a->nusage; i++) {
		const struct usage *u = &a->usages[i];

		if (u->sidx >= c->e->nstreams)
			check_fail(c, "a usage names a stream that does not "
				      "exist");
		if ((u->flags & USAGE_USED) &&
		    (u->sidx == a->sidx || a->exempt || u->seq > c->e->seq))
			check_fail(c, "a usage is recorded that the "
				      "record_stream rule never records");
		for (size_t j = 0; j < i; j++) {
			if (a->usages[j].sidx == u->sidx)
				check_fail(c, "two usages of one stream");
		}
	}
}

/* DESIGN 6: an allocation a flush would skip has nothing to report. */
static void check_pending(struct check *c, const struct alloc *a)
{
	const struct engine *e = c->e;
	bool listed = false;

	if (e->pending_all)
		return;
	if (a->pending) {
		for (size_t i = 0; i < e->npending && !listed; i++)
			listed = e->pending[i] == a->start;
		if (!listed)
			check_fail(c, "a pending allocation is not listed");
		return;
	}
	if (a->exempt || a->sidx == STREAM_NONE)
		return;
	for (size_t i = 0; i < a->nusage; i++) {
		const struct usage *u = &a->usages[i];

		if ((u->flags & (USAGE_USED | USAGE_RECORDED |
				 USAGE_REPORTED)) == USAGE_USED &&
		    (int64_t)u->seq > e->streams[a->sidx].state[u->sidx])
			check_fail(c, "an allocation a flush would skip has an "
				      "unordered use to report");
	}
}

static void check_allocs(struct check *c)
{
	const struct engine *e = c->e;
	const struct alloc *prev = NULL;
	uint64_t live = 0;

	if (rb_check(&e->allocs) < 0)
		check_fail(c, "the allocation tree is not a red-black tree");
	for (struct rb_node *n = rb_first(&e->allocs); n; n = rb_next(n)) {
		const struct alloc *a = alloc_of(n);
		const struct alloc *h = *alloc_bucket(e, a->start);

		while (h != NULL && h != a)
			h = h->hnext;
		if (h == NULL)
			check_fail(c, "a live allocation is missing from the "
				      "start hash");
		if (a->start > a->last ||
		    (prev != NULL && a->start <= prev->last))
			check_fail(c, "live allocations overlap or are out of "
				      "order");
		if (a->sidx != STREAM_NONE && a->sidx >= e->nstreams)
			check_fail(c, "an allocation names a stream that does "
				      "not exist");
		if (a->tree)
			check_segs(c, &a->segs, a->start, a->last);
		else
			check_hist(c, &a->whole);
		check_usages(c, a);
		check_pending(c, a);
		live++;
		prev = a;
	}
	if (!c->compare && live != e->st.live_allocs)
		check_fail(c, "live_allocs differs from the allocation tree");
}

/* Bytes no allocation covers keep their history outside; never both. */
static void check_outside(struct check *c)
{
	const struct engine *e = c->e;

	check_segs(c, &e->outside, 0, UINT64_MAX);
	for (struct rb_node *n = rb_first(&e->outside); n; n = rb_next(n)) {
		const struct seg *g = seg_of(n);
		struct alloc *a = alloc_containing((struct engine *)e,
						   g->start);
		struct rb_node *after;

		if (a == NULL) {
			after = rb_first(&e->allocs);
			while (after != NULL && alloc_of(after)->last < g->start)
				after = rb_next(after);
			a = after != NULL ? alloc_of(after) : NULL;
		}
		if (a != NULL && a->start <= g->last && a->last >= g->start)
			check_fail(c, "bytes of a live allocation have history "
				      "outside it");
	}
}

const char *engine_check(const struct engine *e)
{
	struct check c = { .e = e };

	if (u64map_init(&c.refs) < 0)
		return "out of memory while checking";
	for (uint32_t s = 0; s < e->nstreams; s++) {
		if (e->streams[s].state[s] > (int64_t)e->seq)
			check_fail(&c, "a stream is ahead of the last launch");
	}
	check_allocs(&c);
	check_outside(&c);
	if (c.segments != e->st.segments)
		check_fail(&c, "the segments count differs from the trees");
	if (c.accesses != e->st.accesses)
		check_fail(&c, "the accesses count differs from the accesses "
			       "the histories hold");
	/* The same walk again, now comparing each access's references. */
	c.compare = true;
	check_allocs(&c);
	check_segs(&c, &e->outside, 0, UINT64_MAX);
	u64map_fini(&c.refs);
	return c.why;
}
