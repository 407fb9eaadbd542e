/*
 * alloc.c - the allocation table (DESIGN 3): live allocations as disjoint
 * ranges in a red-black tree keyed by start, plus a hash by exact start;
 * each allocation's usages (what streams other than its own did with it)
 * and the record_stream check over them at free and flush (DESIGN 6); and
 * the ops alloc, free, record_stream and flush.
 *
 * Owns every struct alloc (from e->alloc_pool) with its usages (from
 * e->usage_pool, or an array past USAGE_SMALL) and their latest uses (from
 * e->live_pool), the hash buckets and the pending
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
			size_t j = alloc__hash(a->start, nn - 1);

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

/* alloc__containing() when no allocation starts at ptr: the last one
 * found (views of one tensor come in runs), else the tree's. */
struct alloc *alloc__containing_slow(struct engine *e, uint64_t ptr)
{
	struct alloc *a = e->last_view, *above;

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
 * The room of an allocation's usages follows their count, without a field
 * of its own: an object of e->usage_pool for up to USAGE_SMALL (a new
 * stream's use of an allocation is rare next to its launches), then arrays
 * of powers of two. Returns the bytes for `n` usages.
 */
size_t alloc__usages_size(size_t n)
{
	size_t cap = 2 * USAGE_SMALL;

	if (n <= USAGE_SMALL)
		return sizeof(struct usages) + USAGE_SMALL * sizeof(struct usage);
	while (cap < n)
		cap *= 2;
	return sizeof(struct usages) + cap * sizeof(struct usage);
}

static struct usage_live *alloc_live_of(const struct engine *e, uint32_t i)
{
	return pool__object(&e->live_pool, i);
}

/* Frees `a`'s usages (n of them) with their latest uses. */
static void alloc_usages_put(struct engine *e, struct usages *b, size_t n)
{
	uint32_t i, next;

	if (n == 0)
		return;
	for (i = b->live; i != 0; i = next) {
		next = alloc_live_of(e, i)->next;
		pool__put(e, &e->live_pool, alloc_live_of(e, i));
	}
	if (n <= USAGE_SMALL)
		pool__put(e, &e->usage_pool, b);
	else
		pool__free(e, b, alloc__usages_size(n));
}

/* Room for usage n + 1 of `a` (holding n); 0 or -ENOMEM. */
static int alloc_usages_grow(struct engine *e, struct alloc *a, size_t n)
{
	size_t old = alloc__usages_size(n), new = alloc__usages_size(n + 1);
	struct usages *b;

	if (n > 0 && old == new)
		return 0;
	if (n == 0) {
		if ((b = pool__get(e, &e->usage_pool)) != NULL)
			b->live = 0;
	} else if (n == USAGE_SMALL) {
		if ((b = pool__realloc(e, NULL, 0, new)) != NULL) {
			memcpy(b, a->usages, old);
			pool__put(e, &e->usage_pool, a->usages);
		}
	} else {
		b = pool__realloc(e, a->usages, old, new);
	}
	if (b == NULL)
		return -ENOMEM;
	a->usages = b;
	return 0;
}

/* The usage of stream `s` in `a`, NULL when none. */
struct usage *alloc__usage_find(const struct alloc *a, uint16_t s)
{
	for (size_t i = 0; i < a->nusage; i++) {
		if (a->usages->u[i].sidx == s)
			return &a->usages->u[i];
	}
	return NULL;
}

/* The usage of stream `s` in `a`, added when new. */
struct usage *alloc__usage_get(struct engine *e, struct alloc *a, uint16_t s)
{
	struct usage *u = alloc__usage_find(a, s);

	assert(s < e->nstreams);
	if (u != NULL)
		return u;
	if (alloc_usages_grow(e, a, a->nusage) < 0)
		return NULL;
	assert(a->nusage < e->nstreams); /* one usage per stream at most */
	u = &a->usages->u[a->nusage++];
	*u = (struct usage){ .sidx = s };
	return u;
}

/* The latest use of `a`'s usage of stream `s` that may still report, if
 * it keeps one (DESIGN 6). */
struct usage_live *alloc__live_find(const struct engine *e,
				    const struct alloc *a, uint16_t s)
{
	uint32_t i = a->nusage > 0 ? a->usages->live : 0;

	for (; i != 0; i = alloc_live_of(e, i)->next) {
		if (alloc_live_of(e, i)->sidx == s)
			return alloc_live_of(e, i);
	}
	return NULL;
}

/* alloc__live_find(), added with launch 0 when none: `a` must have the
 * usage already. NULL on -ENOMEM. */
struct usage_live *alloc__live_get(struct engine *e, struct alloc *a,
				   uint16_t s)
{
	struct usage_live *l = alloc__live_find(e, a, s);

	assert(alloc__usage_find(a, s) != NULL);
	if (l != NULL || (l = pool__get(e, &e->live_pool)) == NULL)
		return l;
	*l = (struct usage_live){ .sidx = s, .next = a->usages->live };
	a->usages->live = pool__index(&e->live_pool, l);
	return l;
}

/* DESIGN 6: `a`'s usage of stream `s` settles; its latest use goes. */
static void alloc_live_drop(struct engine *e, struct alloc *a, uint16_t s)
{
	uint32_t *p = a->nusage > 0 ? &a->usages->live : NULL;
	struct usage_live *l;

	while (p != NULL && *p != 0 && alloc_live_of(e, *p)->sidx != s)
		p = &alloc_live_of(e, *p)->next;
	if (p == NULL || *p == 0)
		return;
	l = alloc_live_of(e, *p);
	*p = l->next;
	pool__put(e, &e->live_pool, l);
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

/* The link of the exact-start hash naming the allocation that starts at
 * `start`, or the 0 ending its chain when none does. */
static uint32_t *alloc_hash_link(const struct engine *e, uint64_t start)
{
	uint32_t *p = alloc__bucket(e, start);

	while (*p != 0 && alloc__of_nz(e, *p)->start != start)
		p = &alloc__of_nz(e, *p)->hnext;
	return p;
}

/* Forgets allocation `a`, which hash link `*link` names, with its history
 * and usages. */
static inline void alloc_unlink_at(struct engine *e, struct alloc *a,
				   uint32_t *link)
{
	uint32_t i = alloc__idx(e, a);

	assert(*link == i);
	*link = a->hnext;
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

static void alloc_unlink(struct engine *e, struct alloc *a)
{
	alloc_unlink_at(e, a, alloc_hash_link(e, a->start));
}

/* The record_stream rule for one latest use (U, n) of an allocation whose
 * stream's clock is `cstate`: not ordered before the stream's present (not
 * n <= state[C][U]). Only a usage not named by record_stream and not
 * reported yet keeps its latest use (DESIGN 6). */
static bool alloc_live_unordered(const struct usage_live *l,
				 const int64_t *cstate)
{
	return (int64_t)usage__seq(l) > cstate[l->sidx];
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
	uint32_t i = cstate != NULL && a->nusage > 0 ? a->usages->live : 0;

	for (; i != 0; i = alloc_live_of(e, i)->next) {
		if (alloc_live_unordered(alloc_live_of(e, i), cstate))
			return true;
	}
	return false;
}

/* DESIGN 6: the latest uses of `a` found ordered settle. */
void alloc__settle(struct engine *e, struct alloc *a)
{
	const int64_t *cstate = alloc_rule_clock(e, a);
	uint32_t *p = cstate != NULL && a->nusage > 0 ? &a->usages->live : NULL;

	while (p != NULL && *p != 0) {
		struct usage_live *l = alloc_live_of(e, *p);

		if (alloc_live_unordered(l, cstate)) {
			p = &l->next;
			continue;
		}
		*p = l->next;
		pool__put(e, &e->live_pool, l);
	}
}

/*
 * The record_stream check at free or flush: every usage (U, n) of a
 * stream not named by record_stream, with not n <= state[C][U], is a
 * finding, once per allocation and usage stream. `free` is the free that
 * checks, whose stack the finding names; NULL at a flush.
 */
static __attribute__((noinline)) void
alloc_check_usages(struct engine *e, struct alloc *a, enum detected_at at,
		   const struct op *free)
{
	const int64_t *cstate = alloc_rule_clock(e, a);

	for (size_t i = 0; cstate != NULL && i < a->nusage; i++) {
		struct usage *u = &a->usages->u[i];
		struct usage_live *l = alloc__live_find(e, a, u->sidx);
		struct finding f = { .kind = FINDING_MISSING_RECORD_STREAM,
				     .detected_at = at };

		if (l == NULL || !alloc_live_unordered(l, cstate))
			continue;
		u->flags |= USAGE_REPORTED;
		f.ptr = a->start;
		finding__fill_alloc(e, a, &f);
		f.access.stream = e->streams[u->sidx].id;
		f.access.seq = usage__seq(l);
		f.access.write = (u->flags & USAGE_WROTE) != 0;
		finding__fill_site(e, l->site, &f.access);
		f.has_free = free != NULL;
		f.free_stack = free != NULL ? free->stack : 0;
		alloc_live_drop(e, a, u->sidx); /* reported: it settles */
		finding__emit(e, &f);
	}
}

/* Most allocations are used on their own stream only, with no usage to
 * check: the check of their usages, and its finding's room on the stack,
 * stay out of line, off the path of every free. */
static void alloc_check_record_stream(struct engine *e, struct alloc *a,
				      enum detected_at at,
				      const struct op *free)
{
	if (a->nusage > 0)
		alloc_check_usages(e, a, at, free);
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
	/* Most jobs access no bytes outside their allocations. */
	if (e->outside.node != NULL &&
	    history__segs_drop(e, &e->outside, op->ptr, last) < 0) {
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

/* A free names the start of an allocation: one probe of the hash finds
 * it and the link to unlink it by. */
int alloc__on_free(struct engine *e, const struct op *op)
{
	uint32_t *link = alloc_hash_link(e, op->ptr);
	struct alloc *a;

	if (*link == 0) {
		history__drop_starting_at(e, op->ptr);
		return 0;
	}
	a = alloc__of_nz(e, *link);
	alloc_check_record_stream(e, a, DETECTED_AT_FREE, op);
	alloc_unlink_at(e, a, link);
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
	alloc_live_drop(e, a, s); /* recorded: it settles (DESIGN 6) */
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
	alloc__settle(e, a);
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
		} else {
			alloc__settle(e, a);
		}
	}
	if (nreport > 1)
		qsort(e->pending, nreport, sizeof(*e->pending),
		      alloc_start_cmp);
	for (size_t i = 0; i < nreport; i++) {
		alloc_check_record_stream(e, e->pending[i], DETECTED_AT_FLUSH,
					  NULL);
		alloc__settle(e, e->pending[i]);
	}
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
