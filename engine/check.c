/*
 * check.c - engine_check(): walks everything the engine keeps and compares
 * it with what every operation promises to leave behind (the DESIGN
 * invariants of engine_int.h and the counts of engine_get_stats()).
 *
 * Owns nothing beyond one walk: the map of references it builds is freed
 * before it returns.
 */
#include "engine_int.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/*
 * Tests run engine_check() after each operation, so that a bookkeeping
 * slip (an overlapping segment, a lost reference, a count that drifts)
 * fails where it happens rather than as a wrong finding many operations
 * later.
 */
struct check {
	const struct engine *e;
	struct u64map refs; /* access address -> references seen */
	bool compare;	    /* second pass: compare refs with the counts */
	uint64_t accesses;  /* distinct, first pass */
	uint64_t segments;  /* first pass */
	uint64_t max_seq;   /* the highest seq the tree being walked holds */
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

	if (a->sidx >= c->e->nstreams || a->seq > c->max_seq ||
	    a->site >= c->e->nsites)
		check_fail(c, "an access names a stream, launch or site that "
			      "does not exist");
	n = u64map_get(&c->refs, (uintptr_t)a);
	if (c->compare) {
		if (n == NULL || *n != history__access_refs(c->e, a))
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
	const struct engine *e = c->e;
	const uint32_t *r = history__reads(e, (struct hist *)h);
	const struct reads *m = history__many(e, h);
	const struct access *w = history__write(e, h);

	if (m != NULL && m->n > m->cap)
		check_fail(c, "a read list holds more than its capacity");
	if (w != NULL)
		check_access_ref(c, w);
	for (uint32_t i = 0; i < history__nreads(e, h); i++) {
		const struct access *a = history__acc(e, r[i]);

		if (a == NULL) {
			check_fail(c, "a read list holds a null access");
			continue;
		}
		if (!a->write)
			check_access_ref(c, a);
		else
			check_fail(c, "a write is in a read list");
	}
	if (w != NULL && w->write == 0)
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
		const struct seg *g = history__seg_of(n);

		if (g->start > g->last || g->start < lo || g->last > hi)
			check_fail(c, "a history segment lies outside its "
				      "allocation or ends before it starts");
		if (prev != NULL && g->start <= prev->last)
			check_fail(c, "history segments overlap or are out of "
				      "order");
		if (history__empty(c->e, &g->h))
			check_fail(c, "an empty history segment is kept");
		check_hist(c, &g->h);
		c->segments += !c->compare;
		prev = g;
	}
}

static const struct usage_live *check_live_of(const struct engine *e,
					      uint32_t i)
{
	return pool__object(&e->live_pool, i);
}

/* A latest use is kept only for a used usage of its allocation that may
 * still report, one per usage (DESIGN 6), and names a launch there was. */
static void check_live(struct check *c, const struct alloc *a)
{
	const struct engine *e = c->e;
	uint32_t i = a->nusage > 0 ? a->usages->live : 0;

	for (; i != 0; i = check_live_of(e, i)->next) {
		const struct usage_live *l = check_live_of(e, i);
		const struct usage *u = alloc__usage_find(a, l->sidx);

		if (u == NULL || (u->flags & (USAGE_USED | USAGE_RECORDED |
					      USAGE_REPORTED)) != USAGE_USED)
			check_fail(c, "a usage keeps a latest use that can "
				      "never report");
		if (l != alloc__live_find(e, a, l->sidx))
			check_fail(c, "a usage keeps two latest uses");
		if (usage__seq(l) > e->seq)
			check_fail(c, "a usage is recorded that the "
				      "record_stream rule never records");
	}
}

static void check_usages(struct check *c, const struct alloc *a)
{
	for (size_t i = 0; i < a->nusage; i++) {
		const struct usage *u = &a->usages->u[i];

		if (u->sidx >= c->e->nstreams)
			check_fail(c, "a usage names a stream that does not "
				      "exist");
		if ((u->flags & USAGE_USED) &&
		    (u->sidx == a->sidx || a->exempt))
			check_fail(c, "a usage is recorded that the "
				      "record_stream rule never records");
		for (size_t j = 0; j < i; j++) {
			if (a->usages->u[j].sidx == u->sidx)
				check_fail(c, "two usages of one stream");
		}
	}
	check_live(c, a);
}

/* DESIGN 6: the list holds exactly the pending allocations, each at its
 * pidx, and an allocation a flush would skip has nothing to report. */
static void check_pending(struct check *c, const struct alloc *a)
{
	const struct engine *e = c->e;
	uint32_t i = a->nusage > 0 ? a->usages->live : 0;

	if (e->pending_all)
		return;
	if (a->pending) {
		if (a->pidx >= e->npending || e->pending[a->pidx] != a)
			check_fail(c, "a pending allocation is not listed at "
				      "its place");
		return;
	}
	if (a->exempt || a->sidx == STREAM_NONE)
		return;
	for (; i != 0; i = check_live_of(e, i)->next) {
		const struct usage_live *l = check_live_of(e, i);

		if ((int64_t)usage__seq(l) >
		    e->streams[a->sidx].state[l->sidx])
			check_fail(c, "an allocation a flush would skip has an "
				      "unordered use to report");
	}
}

static void check_allocs(struct check *c)
{
	const struct engine *e = c->e;
	const struct alloc *prev = NULL;
	uint64_t live = 0, pending = 0;

	if (rb32_check(&e->alloc_pool.dir, &e->allocs) < 0)
		check_fail(c, "the allocation tree is not a red-black tree");
	for (const struct alloc *a = alloc__first(e); a;
	     a = alloc__next(e, a)) {
		const struct alloc *h = alloc__of(e, *alloc__bucket(e, a->start));

		while (h != NULL && h != a)
			h = alloc__of(e, h->hnext);
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
		pending += a->pending;
		live++;
		prev = a;
	}
	if (!c->compare && live != e->st.live_allocs)
		check_fail(c, "live_allocs differs from the allocation tree");
	if (!e->pending_all && pending != e->npending)
		check_fail(c, "the pending list holds what is not pending");
}

/* Bytes no allocation covers keep their history outside; never both. */
static void check_outside(struct check *c)
{
	const struct engine *e = c->e;

	check_segs(c, &e->outside, 0, UINT64_MAX);
	for (struct rb_node *n = rb_first(&e->outside); n; n = rb_next(n)) {
		const struct seg *g = history__seg_of(n);
		struct alloc *a =
			alloc__containing((struct engine *)e, g->start);

		if (a == NULL) {
			a = alloc__first(e);
			while (a != NULL && a->last < g->start)
				a = alloc__next(e, a);
		}
		if (a != NULL && a->start <= g->last && a->last >= g->start)
			check_fail(c, "bytes of a live allocation have history "
				      "outside it");
	}
}

/* The spare read lists: as many as counted, of their class's capacity
 * (their n is stale, their v[] holds the link). */
static void check_spares(struct check *c)
{
	for (int k = 0; k < READS_SPARE_CLASSES; k++) {
		const struct reads *m = c->e->reads_spare[k];
		uint32_t n = 0;

		for (; m != NULL && n <= READS_SPARE_MAX; n++) {
			if (m->cap != READS_SPARE_CAP(k))
				check_fail(c, "a spare read list has another "
					      "class's capacity");
			memcpy(&m, m->v, sizeof(m));
		}
		if (n != c->e->reads_nspare[k] || n > READS_SPARE_MAX)
			check_fail(c, "the spare read lists differ from "
				      "their count");
	}
}

/* A capture's history: capture-local numbers, no allocations. */
static void check_capture_segs(void *arg, const struct rb_root *root,
			       uint64_t max_seq)
{
	struct check *c = arg;

	c->max_seq = max_seq;
	check_segs(c, root, 0, UINT64_MAX);
	c->max_seq = c->e->seq;
}

const char *engine_check(const struct engine *e)
{
	struct check c = { .e = e, .max_seq = e->seq };
	const char *why;

	if (u64map_init(&c.refs) < 0)
		return "out of memory while checking";
	for (uint32_t s = 0; s < e->nstreams; s++) {
		if (e->streams[s].state[s] > (int64_t)e->seq)
			check_fail(&c, "a stream is ahead of the last launch");
	}
	check_allocs(&c);
	check_outside(&c);
	check_spares(&c);
	if ((why = graph__check(e, check_capture_segs, &c)) != NULL)
		check_fail(&c, why);
	if (c.segments != e->st.segments)
		check_fail(&c, "the segments count differs from the trees");
	if (c.accesses != e->st.accesses)
		check_fail(&c, "the accesses count differs from the accesses "
			       "the histories hold");
	/* The same walk again, now comparing each access's references. */
	c.compare = true;
	check_allocs(&c);
	check_segs(&c, &e->outside, 0, UINT64_MAX);
	(void)graph__check(e, check_capture_segs, &c);
	u64map_fini(&c.refs);
	return c.why;
}
