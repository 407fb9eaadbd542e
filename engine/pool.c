/*
 * pool.c - the engine's memory: every byte it holds is counted here, so that
 * engine_get_stats() can report it and max_bytes can refuse growth past it.
 * Small fixed-size objects (access records, segments, allocations, the
 * usages of most and their latest uses) come from per-kind pools of
 * slabs; everything else from
 * pool__realloc().
 *
 * The allocation, access record and latest use pools are indexed: their chunks are
 * numbered in a directory, so that an object has a 32-bit name
 * (pool__index(), pool__object()) that the allocation tree, the
 * histories and the usages link by. The records that keep their start
 * (struct access_at) come from a pool of their own whose chunks the
 * access records' directory numbers (struct pool's `names`), so that
 * both kinds share one space of names. engine_get_memory() says where
 * the bytes go.
 *
 * Owns the slabs and the directories: pool__put() returns an object,
 * pool__fini() frees every slab of a pool and its directory at
 * engine_free(). Arrays got from pool__realloc() belong
 * to the part that asked, which frees them with pool__free().
 */
#include "engine_int.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"

/* ---- byte accounting ------------------------------------------------- */

size_t pool__bytes(const struct engine *e)
{
	return e->bytes + u64map_bytes(&e->stream_ids) +
	       u64map_bytes(&e->events) + u64map_bytes(&e->graphs) +
	       u64map_bytes(&e->crecs) + history__big_refs_bytes(e) +
	       finding__bytes(e);
}

void pool__note(struct engine *e, size_t add)
{
	size_t bytes;

	e->bytes += add;
	bytes = pool__bytes(e);
	if (bytes > e->st.peak_bytes)
		e->st.peak_bytes = bytes;
}

static bool pool_over_limit(const struct engine *e, size_t add)
{
	return e->o.max_bytes != 0 && pool__bytes(e) + add > e->o.max_bytes;
}

/* realloc() that counts bytes and honours max_bytes. */
void *pool__realloc(struct engine *e, void *p, size_t old, size_t new)
{
	void *q;

	assert(p != NULL || old == 0);
	if (new > old && pool_over_limit(e, new - old))
		return NULL;
	q = realloc(p, new);
	if (q == NULL)
		return NULL;
	e->bytes -= old;
	pool__note(e, new);
	return q;
}

void pool__free(struct engine *e, void *p, size_t size)
{
	assert(e->bytes >= size);
	if (p == NULL)
		return;
	e->bytes -= size;
	free(p);
}

/*
 * grow_array() of common/grow.h with the bytes counted: grows *arr, of
 * *cap items of `size` bytes, to hold at least `need` items. 0, or -ENOMEM
 * (also past max_bytes) with *arr and *cap unchanged.
 */
int pool__grow(struct engine *e, void **arr, size_t *cap, size_t need,
	       size_t size)
{
	size_t ncap = grow_capacity(*cap, need, size);
	void *p;

	assert(size > 0);
	if (ncap == *cap)
		return 0;
	if (ncap == 0)
		return -ENOMEM;
	assert(ncap >= need);
	p = pool__realloc(e, *arr, *cap * size, ncap * size);
	if (p == NULL)
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}

/* ---- slabs ----------------------------------------------------------- */

static void pool_partial_add(struct pool *p, struct chunk *c)
{
	c->pprev = NULL;
	c->pnext = p->partial;
	if (p->partial != NULL)
		p->partial->pprev = c;
	p->partial = c;
}

static void pool_partial_del(struct pool *p, struct chunk *c)
{
	if (c->pprev != NULL)
		c->pprev->pnext = c->pnext;
	else
		p->partial = c->pnext;
	if (c->pnext != NULL)
		c->pnext->pprev = c->pprev;
}

/*
 * A number for chunk `c` of indexed pool `p`, its place in p->dir: a free
 * slot, else a new one. 0, or -ENOMEM (also past POOL_DIR_MAX chunks).
 */
static int pool_dir_take(struct engine *e, struct pool *p, struct chunk *c)
{
	size_t cap;
	uint32_t no;

	if (p->names != NULL)
		p = p->names;
	cap = p->ndir;

	if (p->dir_free != 0) {
		no = p->dir_free - 1;
		p->dir_free = (uint32_t)(p->dir.base[no] >> 1);
	} else {
		if (p->ndir >= POOL_DIR_MAX ||
		    pool__grow_array(e, (void **)&p->dir.base, &cap,
				     p->ndir + 1, sizeof(*p->dir.base)) < 0)
			return -ENOMEM;
		/* the slots past ndir join the free list */
		for (size_t i = cap; i-- > p->ndir + 1;) {
			p->dir.base[i] = (uintptr_t)p->dir_free << 1 | 1;
			p->dir_free = (uint32_t)i + 1;
		}
		no = p->ndir;
		p->ndir = (uint32_t)cap;
	}
	p->dir.base[no] = (uintptr_t)c - ((uintptr_t)no << RB32_SHIFT);
	c->no = no;
	return 0;
}

static void pool_dir_give(struct pool *p, const struct chunk *c)
{
	if (p->names != NULL)
		p = p->names;
	p->dir.base[c->no] = (uintptr_t)p->dir_free << 1 | 1;
	p->dir_free = c->no + 1;
}

/* Where a chunk's first object starts: past its header, 16-aligned. */
#define POOL_FIRST ((sizeof(struct chunk) + 15) & ~(size_t)15)

static struct chunk *pool_chunk_new(struct engine *e, struct pool *p)
{
	size_t first = POOL_FIRST;
	struct chunk *c;

	assert(p->size >= sizeof(void *) && p->size <= POOL_CHUNK / 4);
	if (pool_over_limit(e, POOL_CHUNK) ||
	    (c = aligned_alloc(POOL_CHUNK, POOL_CHUNK)) == NULL)
		return NULL;
	memset(c, 0, sizeof(*c));
	if (p->indexed && pool_dir_take(e, p, c) < 0) {
		free(c);
		return NULL;
	}
	pool__note(e, POOL_CHUNK);
	c->cap = (uint16_t)((POOL_CHUNK - first) / p->size);
	for (uint32_t i = c->cap; i-- > 0;) {
		void *o = (char *)c + first + i * p->size;

		memcpy(o, &c->free, sizeof(void *));
		c->free = o;
	}
	c->nfree = c->cap;
	p->nchunks++;
	c->next = p->all;
	if (p->all != NULL)
		p->all->prev = c;
	p->all = c;
	pool_partial_add(p, c);
	return c;
}

static void pool_chunk_release(struct engine *e, struct pool *p,
			       struct chunk *c)
{
	assert(c->nfree == c->cap && c != p->empty);
	pool_partial_del(p, c);
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		p->all = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	if (p->indexed)
		pool_dir_give(p, c);
	p->nchunks--;
	e->bytes -= POOL_CHUNK;
	free(c);
}

/* pool__get_slow() of a pool with no room: a new chunk first. Out of
 * line, so that the rest, mostly a chunk about to fill up, needs no
 * frame. */
static __attribute__((noinline)) void *pool_get_new_chunk(struct engine *e,
							  struct pool *p)
{
	if (pool_chunk_new(e, p) == NULL)
		return NULL;
	return pool__get_slow(e, p);
}

/* pool__get() when the first partial chunk is missing, kept empty, or
 * about to fill up: the bookkeeping the common case skips. */
void *pool__get_slow(struct engine *e, struct pool *p)
{
	struct chunk *c = p->partial;
	void *o;

	if (c == NULL)
		return pool_get_new_chunk(e, p);
	if (c == p->empty)
		p->empty = NULL;
	assert(c->nfree > 0 && c->free != NULL);
	o = c->free;
	memcpy(&c->free, o, sizeof(void *));
	if (--c->nfree == 0)
		pool_partial_del(p, c);
	return o;
}

/* pool__put() of `o` into chunk `c` when `c` was full or becomes empty:
 * the partial list and the chunk's release. */
void pool__put_slow(struct engine *e, struct pool *p, struct chunk *c,
		     void *o)
{
	memcpy(o, &c->free, sizeof(void *));
	c->free = o;
	if (c->nfree++ == 0)
		pool_partial_add(p, c);
	if (c->nfree < c->cap)
		return;
	/* Keep an empty chunk only while no other has room, so that a
	 * free/alloc pair at a full pool's edge does not call malloc every
	 * time, yet a pool with room elsewhere gives its memory back. */
	if (p->empty == NULL && p->partial == c && c->pnext == NULL)
		p->empty = c;
	else
		pool_chunk_release(e, p, c);
}

/* ---- moving objects out of a sparse chunk ----------------------------- */

/*
 * The chunk of `p` to empty by moving its objects into the others: the
 * partial one holding the fewest, when `p`, holding `live` objects in all,
 * keeps at least one chunk more than they need (the others then have
 * room for them); else NULL. Walks the partial chunks only past that
 * threshold, which each move takes a chunk's worth of frees, or a new
 * chunk, to reach again; a new chunk is the emptiest, cheap to move.
 */
struct chunk *pool__sparse_chunk(const struct pool *p, size_t live)
{
	size_t per = (POOL_CHUNK - POOL_FIRST) / p->size;
	struct chunk *c, *best = NULL;

	if ((size_t)p->nchunks * per < live + per)
		return NULL;
	for (c = p->partial; c != NULL; c = c->pnext) {
		if (c != p->empty && (best == NULL || c->nfree > best->nfree))
			best = c;
	}
	return best;
}

/* The objects of chunk `c` of `p` in use, in *out (room for c->cap);
 * returns how many. */
size_t pool__chunk_objects(const struct pool *p, const struct chunk *c,
			   void **out)
{
	uint64_t isfree[POOL_CHUNK / sizeof(void *) / 64] = { 0 };
	size_t n = 0;

	for (void *o = c->free, *next; o != NULL; o = next) {
		size_t i = ((size_t)((char *)o - (char *)c) - POOL_FIRST) /
			   p->size;

		isfree[i / 64] |= UINT64_C(1) << (i % 64);
		memcpy(&next, o, sizeof(next));
	}
	for (size_t i = 0; i < c->cap; i++) {
		if (!(isfree[i / 64] >> (i % 64) & 1))
			out[n++] = (char *)c + POOL_FIRST + i * p->size;
	}
	assert(n == (size_t)(c->cap - c->nfree));
	return n;
}

/* An object of `p` from a chunk other than `c`, preferring one in use to
 * the empty one kept; NULL when no other has room (pool__sparse_chunk()
 * says there is). Never allocates. */
void *pool__get_other(struct pool *p, const struct chunk *c)
{
	struct chunk *d = p->partial;
	void *o;

	while (d != NULL && (d == c || d == p->empty))
		d = d->pnext;
	if (d == NULL && (d = p->empty) == c)
		d = NULL;
	if (d == NULL)
		return NULL;
	if (d == p->empty)
		p->empty = NULL;
	o = d->free;
	memcpy(&d->free, o, sizeof(void *));
	if (--d->nfree == 0)
		pool_partial_del(p, d);
	return o;
}

void pool__fini(struct pool *p)
{
	struct chunk *c = p->all, *next;

	for (; c != NULL; c = next) {
		next = c->next;
		free(c);
	}
	free(p->dir.base);
}

/* ---- engine_get_memory() --------------------------------------------- */

static void pool_slabs(const struct pool *p, size_t *slabs, size_t *used)
{
	for (const struct chunk *c = p->all; c != NULL; c = c->next) {
		*slabs += POOL_CHUNK;
		*used += (size_t)(c->cap - c->nfree) * p->size;
	}
}

static size_t pool_hist_reads(const struct engine *e, const struct hist *h)
{
	const struct reads *m = history__many(e, h);

	return m != NULL ? history__reads_size(m->cap) : 0;
}

static size_t pool_segs_reads(const struct engine *e,
			      const struct rb_root *root)
{
	size_t n = 0;

	for (struct rb_node *g = rb_first(root); g != NULL; g = rb_next(g))
		n += pool_hist_reads(e, &history__seg_of(g)->h);
	return n;
}

static void pool_allocs_memory(const struct engine *e,
			       struct engine_memory *m)
{
	for (struct alloc *a = alloc__first(e); a; a = alloc__next(e, a)) {
		m->read_lists += a->tree ? pool_segs_reads(e, &a->segs)
					 : pool_hist_reads(e, &a->whole);
		if (a->nusage > USAGE_SMALL)
			m->usage_arrays += alloc__usages_size(a->nusage);
	}
}

void engine_get_memory(const struct engine *e, struct engine_memory *out)
{
	struct engine_memory m = { 0 };

	pool_slabs(&e->alloc_pool, &m.alloc_slabs, &m.alloc_used);
	pool_slabs(&e->access_pool, &m.access_slabs, &m.access_used);
	pool_slabs(&e->access_at_pool, &m.access_slabs, &m.access_used);
	pool_slabs(&e->seg_pool, &m.seg_slabs, &m.seg_used);
	pool_slabs(&e->usage_pool, &m.usage_slabs, &m.usage_used);
	pool_slabs(&e->live_pool, &m.usage_slabs, &m.usage_used);
	m.read_lists = pool_segs_reads(e, &e->outside) +
		       e->readv_cap * sizeof(*e->readv) +
		       history__spare_bytes(e);
	pool_allocs_memory(e, &m);
	m.alloc_hash = (e->amask + 1) * sizeof(*e->abuckets);
	m.other = pool__bytes(e) - m.alloc_slabs - m.access_slabs -
		  m.seg_slabs - m.usage_slabs - m.read_lists -
		  m.usage_arrays - m.alloc_hash;
	*out = m;
}
