/*
 * alloc.c - the allocation table (DESIGN 3): live allocations as disjoint
 * ranges in a red-black tree keyed by start, plus a hash by exact start;
 * each allocation's usages (what streams other than its own did with it)
 * and the record_stream check over them at free and flush (DESIGN 6); and
 * the ops alloc, free, record_stream and flush.
 *
 * Owns every struct alloc (from e->alloc_pool) with its usages (one from
 * e->usage_pool, more in an array), the hash buckets and the pending
 * list; alloc__fini() frees them all. The
 * history an allocation holds belongs to history.c, which clears it when
 * the allocation goes.
 */
#include "engine_int.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

/* ---- allocations ------------------------------------------------------- */

uint32_t *alloc__bucket(const struct engine *e, uint64_t start)
{
	return &e->abuckets[hash_u64(start) & e->amask];
}

/* The allocation that starts exactly at `start`, if any. */
struct alloc *alloc__at(const struct engine *e, uint64_t start)
{
	uint32_t i = *alloc__bucket(e, start);

	for (; i != 0; i = alloc__of_nz(e, i)->hnext) {
		if (alloc__of_nz(e, i)->start == start)
			return alloc__of_nz(e, i);
	}
	return NULL;
}

/* Doubles the exact-start hash so that chains stay two long on average:
 * a bucket costs as much as two allocations' chain links. */
static int alloc_hash_grow(struct engine *e)
{
	size_t n = e->amask + 1, nn = n * 2;
	uint32_t *b = pool__realloc(e, NULL, 0, nn * sizeof(*b));

	assert((n & (n - 1)) == 0);
	if (b == NULL)
		return -ENOMEM;
	memset(b, 0, nn * sizeof(*b));
	for (size_t i = 0; i < n; i++) {
		struct alloc *a = alloc__of(e, e->abuckets[i]), *next;

		for (; a != NULL; a = next) {
			size_t j = hash_u64(a->start) & (nn - 1);

			next = alloc__of(e, a->hnext);
			a->hnext = b[j];
			b[j] = alloc__idx(e, a);
		}
	}
	pool__free(e, e->abuckets, n * sizeof(*b));
	e->abuckets = b;
	e->amask = nn - 1;
	return 0;
}

/*
 * One descent: the allocation with the greatest start <= ptr and the one
 * with the least start > ptr, either NULL when there is none, and in *slot
 * (when not NULL) where an allocation starting at ptr would be linked.
 */
void alloc__neighbors(const struct engine *e, uint64_t ptr,
		      struct alloc **below, struct alloc **above,
		      struct alloc_slot *slot)
{
	const uint32_t *link = &e->allocs.node;
	uint32_t parent = 0, lo = 0, hi = 0;

	while (*link != 0) {
		struct alloc *n = alloc__of_nz(e, *link);

		parent = *link;
		if (n->start <= ptr) {
			lo = parent;
			link = &n->node.right;
		} else {
			hi = parent;
			link = &n->node.left;
		}
	}
	*below = alloc__of(e, lo);
	*above = alloc__of(e, hi);
	if (slot != NULL)
		*slot = (struct alloc_slot){ parent, (uint32_t *)link };
}

/* The allocation containing ptr: the one starting there (a hash probe),
 * else the last one found (views of one tensor come in runs), else the
 * tree's. */
struct alloc *alloc__containing(struct engine *e, uint64_t ptr)
{
	struct alloc *a = alloc__at(e, ptr), *above;

	if (a != NULL)
		return a;
	a = e->last_view;
	if (a != NULL && ptr >= a->start && ptr <= a->last)
		return a;
	alloc__neighbors(e, ptr, &a, &above, NULL);
	if (a == NULL || ptr > a->last)
		return NULL;
	e->last_view = a;
	return a;
}

/* Links `a` at `slot` when given (found by alloc__neighbors() with no
 * change to the tree since), else where it belongs. */
static void alloc_link(struct engine *e, struct alloc *a,
		       const struct alloc_slot *slot)
{
	uint32_t *link = &e->allocs.node, parent = 0;
	uint32_t *bucket = alloc__bucket(e, a->start);
	struct alloc *p;

	assert(a->start <= a->last);
	if (slot != NULL) {
		parent = slot->parent;
		link = slot->link;
	}
	while (*link != 0) {
		parent = *link;
		p = alloc__of_nz(e, parent);
		link = a->start < p->start ? &p->node.left : &p->node.right;
	}
	rb32_insert(&e->alloc_pool.dir, &e->allocs, alloc__idx(e, a), parent,
		    link);
	a->hnext = *bucket;
	*bucket = alloc__idx(e, a);
	e->st.live_allocs++;
}

/*
 * The capacity of a usage array follows its count, without a field of its
 * own: exact up to USAGE_EXACT entries (one stream's new use of an
 * allocation is rare next to its launches, so a realloc each is cheap),
 * then powers of two. A single usage, the usual case, is an object of
 * e->usage_pool (malloc would round it up to twice its size); more are an
 * array.
 */
#define USAGE_EXACT 8

size_t alloc__usage_cap(size_t n)
{
	size_t cap = USAGE_EXACT;

	if (n <= USAGE_EXACT)
		return n;
	while (cap < n)
		cap *= 2;
	return cap;
}

static void alloc_usages_put(struct engine *e, struct usage *u, size_t n)
{
	if (n == 1)
		pool__put(e, &e->usage_pool, u);
	else if (n > 1)
		pool__free(e, u, alloc__usage_cap(n) * sizeof(*u));
}

/* Room for usage n + 1 of `a` (holding n); 0 or -ENOMEM. */
static int alloc_usages_grow(struct engine *e, struct alloc *a, size_t n)
{
	struct usage *u;

	if (alloc__usage_cap(n + 1) == alloc__usage_cap(n))
		return 0;
	if (n == 0) {
		u = pool__get(e, &e->usage_pool);
	} else if (n == 1) {
		if ((u = pool__realloc(e, NULL, 0, 2 * sizeof(*u))) != NULL) {
			u[0] = a->usages[0];
			pool__put(e, &e->usage_pool, a->usages);
		}
	} else {
		u = pool__realloc(e, a->usages, alloc__usage_cap(n) * sizeof(*u),
				  alloc__usage_cap(n + 1) * sizeof(*u));
	}
	if (u == NULL)
		return -ENOMEM;
	a->usages = u;
	return 0;
}

/* The usage entry of stream `s` in `a`, added when new. */
struct usage *alloc__usage_get(struct engine *e, struct alloc *a, uint16_t s)
{
	size_t n = a->nusage;
	struct usage *u;

	assert(s < e->nstreams);
	for (size_t i = 0; i < n; i++) {
		if (a->usages[i].sidx == s)
			return &a->usages[i];
	}
	if (alloc_usages_grow(e, a, n) < 0)
		return NULL;
	assert(n < e->nstreams); /* one usage per stream at most */
	u = &a->usages[a->nusage++];
	memset(u, 0, sizeof(*u));
	u->sidx = s;
	return u;
}

void alloc__usages_free(struct engine *e, struct alloc *a)
{
	alloc_usages_put(e, a->usages, a->nusage);
	a->usages = NULL;
	a->nusage = 0;
}

/* DESIGN 6: takes `a` off the pending list; the last entry fills its
 * place, since flush sorts the list anyway. */
static void alloc_pending_del(struct engine *e, struct alloc *a)
{
	struct alloc *moved;

	if (!a->pending || e->pending_all)
		return;
	assert(a->pidx < e->npending && e->pending[a->pidx] == a);
	moved = e->pending[--e->npending];
	e->pending[a->pidx] = moved;
	moved->pidx = a->pidx;
}

/* Forgets allocation `a` with its history and usages. */
static void alloc_unlink(struct engine *e, struct alloc *a)
{
	uint32_t *p = alloc__bucket(e, a->start), i = alloc__idx(e, a);

	while (*p != i)
		p = &alloc__of(e, *p)->hnext;
	*p = a->hnext;
	if (e->last_view == a)
		e->last_view = NULL;
	rb32_erase(&e->alloc_pool.dir, &e->allocs, i);
	alloc_pending_del(e, a);
	history__alloc_clear(e, a);
	alloc__usages_free(e, a);
	pool__put(e, &e->alloc_pool, a);
	e->st.live_allocs--;
	e->unlinks++; /* graph.c: replays recheck their allocations */
}

/* The record_stream rule for one usage of an allocation whose stream's
 * clock is `cstate`: a use not named by record_stream, not reported yet,
 * and not ordered before the stream's present (not n <= state[C][U]). */
static bool alloc_usage_unordered(const struct usage *u, const int64_t *cstate)
{
	return (u->flags & (USAGE_USED | USAGE_RECORDED | USAGE_REPORTED)) ==
		       USAGE_USED &&
	       (int64_t)usage__seq(u) > cstate[u->sidx];
}

/* The clock of `a`'s stream, or NULL when `a` is exempt from the rule. */
static const int64_t *alloc_rule_clock(const struct engine *e,
				       const struct alloc *a)
{
	assert(a->sidx == STREAM_NONE || a->sidx < e->nstreams);
	if (a->exempt || a->sidx == STREAM_NONE)
		return NULL;
	return e->streams[a->sidx].state;
}

/* Whether the record_stream check of `a` would report now. */
static bool alloc_would_report(const struct engine *e, const struct alloc *a)
{
	const int64_t *cstate = alloc_rule_clock(e, a);

	for (size_t i = 0; cstate != NULL && i < a->nusage; i++) {
		if (alloc_usage_unordered(&a->usages[i], cstate))
			return true;
	}
	return false;
}

/*
 * The record_stream check at free or flush: every usage (U, n) of a
 * stream not named by record_stream, with not n <= state[C][U], is a
 * finding, once per allocation and usage stream. `free` is the free that
 * checks, whose stack the finding names; NULL at a flush.
 */
static void alloc_check_record_stream(struct engine *e, struct alloc *a,
				      enum detected_at at,
				      const struct op *free)
{
	const int64_t *cstate = alloc_rule_clock(e, a);

	for (size_t i = 0; cstate != NULL && i < a->nusage; i++) {
		struct usage *u = &a->usages[i];
		struct finding f = { .kind = FINDING_MISSING_RECORD_STREAM,
				     .detected_at = at };

		if (!alloc_usage_unordered(u, cstate))
			continue;
		u->flags |= USAGE_REPORTED;
		f.ptr = a->start;
		finding__fill_alloc(e, a, &f);
		f.access.stream = e->streams[u->sidx].id;
		f.access.seq = usage__seq(u);
		f.access.write = (u->flags & USAGE_WROTE) != 0;
		finding__fill_site(e, u->site, &f.access);
		f.has_free = free != NULL;
		f.free_stack = free != NULL ? free->stack : 0;
		finding__emit(e, &f);
	}
}

/* DESIGN 6: `a` has a use the next flush must check. Past
 * ALLOC_PENDING_MAX pending allocations (or without memory) the list
 * gives way to a walk of all. */
void alloc__pending_add(struct engine *e, struct alloc *a)
{
	if (a->pending)
		return;
	a->pending = 1;
	if (e->pending_all)
		return;
	if (e->npending >= ALLOC_PENDING_MAX ||
	    pool__grow_array(e, (void **)&e->pending, &e->pending_cap,
			     e->npending + 1, sizeof(*e->pending)) < 0) {
		e->pending_all = true;
		e->npending = 0;
		return;
	}
	a->pidx = (uint32_t)e->npending;
	e->pending[e->npending++] = a;
}


/* ---- memory operations ------------------------------------------------- */

int alloc__on_alloc(struct engine *e, const struct op *op)
{
	uint64_t last = op->ptr + (op->size ? op->size - 1 : 0);
	struct alloc *a, *old, *above;
	struct alloc_slot slot;
	bool moved = false;
	uint16_t s = STREAM_NONE;
	int err;

	if (e->next_serial >= ALLOC_SERIAL_MAX)
		return -EOVERFLOW;
	if (e->st.live_allocs >= 2 * (e->amask + 1) &&
	    (err = alloc_hash_grow(e)) < 0)
		return err;
	if ((a = pool__get(e, &e->alloc_pool)) == NULL)
		return -ENOMEM;
	if (op->has_stream && (err = sync__stream_get(e, op->stream, &s)) < 0) {
		pool__put(e, &e->alloc_pool, a);
		return err;
	}
	/* Live allocations it overlaps were freed unseen: release them
	 * silently, dropping their history as a free would. */
	alloc__neighbors(e, op->ptr, &old, &above, &slot);
	if (old == NULL || old->last < op->ptr)
		old = above;
	while (old != NULL && old->start <= last) {
		struct alloc *next = alloc__next(e, old);

		alloc_unlink(e, old);
		old = next;
		moved = true;
	}
	if (history__segs_drop(e, &e->outside, op->ptr, last) < 0) {
		pool__put(e, &e->alloc_pool, a);
		history__forget(e);
		return -ENOMEM;
	}
	*a = (struct alloc){ .start = op->ptr, .last = last,
			     .serial = ++e->next_serial,
			     .stack = op->stack, .sidx = s,
			     .graph_pool = op->has_graph,
			     .size0 = op->size == 0 };
	alloc_link(e, a, moved ? NULL : &slot);
	return 0;
}

int alloc__on_free(struct engine *e, const struct op *op)
{
	struct alloc *a = alloc__at(e, op->ptr);

	if (a == NULL) {
		history__drop_starting_at(e, op->ptr);
		return 0;
	}
	alloc_check_record_stream(e, a, DETECTED_AT_FREE, op);
	alloc_unlink(e, a);
	return 0;
}

int alloc__on_record_stream(struct engine *e, const struct op *op)
{
	struct alloc *a;
	struct usage *u;
	uint16_t s;
	int err;

	if ((err = sync__stream_get(e, op->stream, &s)) < 0)
		return err;
	a = alloc__containing(e, op->ptr);
	if (a == NULL)
		return 0;
	if ((u = alloc__usage_get(e, a, s)) == NULL) {
		/* a lost record_stream must not become a false finding */
		history__forget(e);
		return -ENOMEM;
	}
	u->flags |= USAGE_RECORDED;
	return 0;
}

static int alloc_start_cmp(const void *a, const void *b)
{
	uint64_t x = (*(struct alloc *const *)a)->start;
	uint64_t y = (*(struct alloc *const *)b)->start;

	return (x > y) - (x < y);
}

static void alloc_flush_one(struct engine *e, struct alloc *a)
{
	alloc_check_record_stream(e, a, DETECTED_AT_FLUSH, NULL);
	a->pending = 0;
}

/*
 * DESIGN 6: the pending allocations, in address order. A freed one left
 * the list as it went, so the list holds exactly the pending ones. Most
 * have nothing to report: those that do move to the front of the list, and
 * only they are sorted and checked.
 */
void alloc__on_flush(struct engine *e)
{
	size_t nreport = 0;

	if (e->pending_all) {
		for (struct alloc *a = alloc__first(e); a != NULL;
		     a = alloc__next(e, a))
			alloc_flush_one(e, a);
		e->pending_all = false;
		return;
	}
	for (size_t i = 0; i < e->npending; i++) {
		struct alloc *a = e->pending[i];

		a->pending = 0;
		if (alloc_would_report(e, a)) {
			e->pending[i] = e->pending[nreport];
			e->pending[nreport++] = a;
		}
	}
	if (nreport > 1)
		qsort(e->pending, nreport, sizeof(*e->pending),
		      alloc_start_cmp);
	for (size_t i = 0; i < nreport; i++)
		alloc_check_record_stream(e, e->pending[i], DETECTED_AT_FLUSH,
					  NULL);
	e->npending = 0;
}

/* The empty table of a new engine. 0 or -ENOMEM. */
int alloc__init(struct engine *e)
{
	e->amask = 63;
	e->abuckets =
		pool__realloc(e, NULL, 0, (e->amask + 1) * sizeof(*e->abuckets));
	if (e->abuckets == NULL)
		return -ENOMEM;
	memset(e->abuckets, 0, (e->amask + 1) * sizeof(*e->abuckets));
	return 0;
}

/* Frees every allocation with its history and usages, then the table. */
void alloc__fini(struct engine *e)
{
	while (e->allocs.node != 0)
		alloc_unlink(e, alloc__of(e, e->allocs.node));
	free(e->abuckets);
	free(e->pending);
}
