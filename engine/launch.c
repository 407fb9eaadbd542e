/*
 * launch.c - a kernel launch (DESIGN 4): lays out its reads and writes,
 * checks each against the history from before the launch, reporting data
 * races, and only then records the launch's accesses in the history and
 * its usages of allocations for the record_stream check.
 *
 * Owns the launch scratch (e->elems, e->spans, e->pieces) and the set of
 * pairs already reported for the current access (e->seen, e->seen_set),
 * kept between launches to save allocations and freed by launch__fini().
 * The access records it creates pass to the history, which frees them.
 */
#include "engine_int.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

static struct alloc *launch_alloc_for(struct engine *e, const struct elem *el,
				      uint64_t ptr)
{
	return ptr == el->start ? el->alloc : alloc__containing(e, ptr);
}

/* Whether access `p` happened before the present of the stream whose
 * clock is `state`: the launching stream's, which a launch's checks
 * take once. */
static bool launch_ordered(const struct engine *e, const int64_t *state,
			   const struct access *p)
{
	assert(p->sidx < e->nstreams);
	(void)e;
	return (int64_t)p->seq <= state[p->sidx];
}

static bool launch_seen_lookup(const struct engine *e, const struct access *a)
{
	size_t i = hash_u64((uintptr_t)a) & e->seen_mask;

	for (; e->seen_set[i] != NULL; i = (i + 1) & e->seen_mask) {
		if (e->seen_set[i] == a)
			return true;
	}
	return false;
}

static void launch_seen_insert(struct engine *e, const struct access *a)
{
	size_t i = hash_u64((uintptr_t)a) & e->seen_mask;

	while (e->seen_set[i] != NULL)
		i = (i + 1) & e->seen_mask;
	e->seen_set[i] = a;
}

/* Rehashes the list into a set at most half full. Without memory for it
 * there is no set: the list, which holds every pair, is searched instead. */
static int launch_seen_rebuild(struct engine *e)
{
	size_t size = 64, old = e->seen_set ? e->seen_mask + 1 : 0;

	while (size < 2 * e->nseen)
		size *= 2;
	if (size > old) {
		const struct access **set =
			pool__realloc(e, e->seen_set, old * sizeof(*set),
				      size * sizeof(*set));

		if (set == NULL) {
			pool__free(e, e->seen_set, old * sizeof(*set));
			e->seen_set = NULL;
			e->seen_mask = 0;
			return -ENOMEM;
		}
		e->seen_set = set;
		e->seen_mask = size - 1;
	}
	memset(e->seen_set, 0, (e->seen_mask + 1) * sizeof(*e->seen_set));
	for (size_t i = 0; i < e->nseen; i++)
		launch_seen_insert(e, e->seen[i]);
	return 0;
}

/* Starts the pairs of a new current access. */
void launch__seen_reset(struct engine *e)
{
	if (e->nseen > SEEN_LIST && e->seen_set != NULL)
		memset(e->seen_set, 0,
		       (e->seen_mask + 1) * sizeof(*e->seen_set));
	e->nseen = 0;
}

/*
 * Whether `prev` was paired with the current access already; records it.
 * A short list covers the usual zero to few pairs, a hash set the access
 * that spans thousands of segments. When memory runs out the pair is
 * reported again rather than missed (no room in the list), or found by
 * searching the list (no room for the set).
 */
bool launch__pair_seen(struct engine *e, const struct access *prev)
{
	bool hashed = e->nseen > SEEN_LIST && e->seen_set != NULL;

	if (hashed) {
		if (launch_seen_lookup(e, prev))
			return true;
	} else {
		for (size_t i = 0; i < e->nseen; i++) {
			if (e->seen[i] == prev)
				return true;
		}
	}
	if (pool__grow_array(e, (void **)&e->seen, &e->seen_cap, e->nseen + 1,
			     sizeof(*e->seen)) < 0)
		return false;
	e->seen[e->nseen++] = prev;
	if (e->nseen > SEEN_LIST &&
	    (!hashed || 2 * e->nseen > e->seen_mask + 1))
		launch_seen_rebuild(e);
	else if (hashed)
		launch_seen_insert(e, prev);
	return false;
}

/* A race of element `cur` of the launch on stream `s`, a write when
 * `write`, with access `prev`. The current access is described here, as
 * its record will be, rather than by each check on the way. */
static void launch_report_race(struct engine *e, const struct elem *cur,
			       struct access *prev, uint16_t s, bool write)
{
	struct finding f = { .kind = FINDING_DATA_RACE,
			     .detected_at = e->launch_at };
	struct access now = { .seq = e->seq, .sidx = s, .write = write,
			      .site = cur->site };

	/* Each pair is one finding however many segments it shares. */
	if (launch__pair_seen(e, prev))
		return;
	f.ptr = cur->start;
	finding__fill_alloc(e, cur->alloc, &f);
	finding__fill_access(e, &now, &f.access);
	f.has_previous = true;
	finding__fill_access(e, prev, &f.previous);
	finding__emit(e, &f);
}

/* launch_check_read() of the bytes whose history is `h`. */
static void launch_check_read_hist(struct engine *e, const int64_t *state,
				   const struct elem *el, struct hist *h,
				   uint16_t s)
{
	struct access *lw = history__write(e, h);

	if (lw != NULL && !launch_ordered(e, state, lw))
		launch_report_race(e, el, lw, s, false);
}

/* launch_check_write() of the bytes whose history is `h`. */
static inline void launch_check_write_hist(struct engine *e,
					   const int64_t *state,
					   const struct elem *el,
					   struct hist *h, uint16_t s)
{
	const uint32_t *rd = history__reads(e, h);
	uint32_t nreads = history__nreads(e, h);
	struct access *lw = history__write(e, h);

	for (uint32_t i = 0; i < nreads; i++) {
		struct access *a = history__acc(e, rd[i]);

		if (!launch_ordered(e, state, a))
			launch_report_race(e, el, a, s, true);
	}
	if (nreads == 0 && lw != NULL && !launch_ordered(e, state, lw))
		launch_report_race(e, el, lw, s, true);
}

/* A read is checked against the last write of each of its bytes. */
static void launch_check_read(struct engine *e, const int64_t *state,
			      const struct elem *el, uint16_t s)
{
	launch__seen_reset(e);
	for (uint32_t i = 0; i < el->npieces; i++) {
		struct span p = launch__piece(e, el, i);
		struct alloc *in = launch_alloc_for(e, el, p.start);
		struct hist *h = history__whole_of(in, p.start, p.last);
		struct region_walk w;
		struct region r;
		struct seg *cursor = NULL;

		if (h != NULL) {
			launch_check_read_hist(e, state, el, h, s);
			continue;
		}
		history__walk_init(e, &w, p.start, p.last, in);
		while (history__walk_next(&w, &r)) {
			history__for_each_hist (e, &r, h, cursor)
				launch_check_read_hist(e, state, el, h, s);
		}
	}
}

/* A write is checked against the reads since the last write of each of
 * its bytes, or against that last write when there are none. */
static void launch_check_write(struct engine *e, const int64_t *state,
			       const struct elem *el, uint16_t s)
{
	struct hist *h = history__whole_of(el->alloc, el->start, el->last);
	struct region_walk w;
	struct region r;
	struct seg *cursor = NULL;

	launch__seen_reset(e);
	if (h != NULL) {
		launch_check_write_hist(e, state, el, h, s);
		return;
	}
	history__walk_init(e, &w, el->start, el->last, el->alloc);
	while (history__walk_next(&w, &r)) {
		history__for_each_hist (e, &r, h, cursor)
			launch_check_write_hist(e, state, el, h, s);
	}
}

static int launch_span_cmp(const void *a, const void *b)
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
static void launch_sort_spans(struct span *v, size_t n)
{
	if (n > 16) {
		qsort(v, n, sizeof(*v), launch_span_cmp);
		return;
	}
	for (size_t i = 1; i < n; i++) {
		struct span x = v[i];
		size_t j = i;

		while (j > 0 && launch_span_cmp(&v[j - 1], &x) > 0) {
			v[j] = v[j - 1];
			j--;
		}
		v[j] = x;
	}
}

/* Copies `n` elements into e->spans sorted by (start, last, position). */
static inline void launch_sorted_spans(struct engine *e,
				       const struct elem *el, size_t n)
{
	for (size_t i = 0; i < n; i++)
		e->spans[i] = (struct span){ el[i].start, el[i].last,
					     (uint32_t)i };
	launch_sort_spans(e->spans, n);
}

/* An element listed twice in one list is one access: marks later copies.
 * A short list compares each pair, cheaper than sorting it. */
static inline void launch_mark_dups(struct engine *e, struct elem *el, size_t n)
{
	assert(n > 1);
	if (n <= 8) {
		for (size_t j = 1; j < n; j++) {
			for (size_t i = 0; i < j && !el[j].dup; i++)
				el[j].dup = el[i].start == el[j].start &&
					    el[i].last == el[j].last;
		}
		return;
	}
	launch_sorted_spans(e, el, n);
	for (size_t i = 1; i < n; i++) {
		if (e->spans[i].start == e->spans[i - 1].start &&
		    e->spans[i].last == e->spans[i - 1].last)
			el[e->spans[i].pos].dup = 1;
	}
}

/* The union of the writes as sorted disjoint spans in e->spans; returns
 * their number. */
static size_t launch_write_union(struct engine *e, const struct elem *w,
				 size_t n)
{
	size_t m = 0;

	if (n == 1) { /* the usual launch: nothing to sort or merge */
		e->spans[0] = (struct span){ w->start, w->last, 0 };
		return 1;
	}
	launch_sorted_spans(e, w, n);
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

static int launch_add_piece(struct engine *e, size_t *npieces, uint64_t start,
			    uint64_t last)
{
	if (pool__grow_array(e, (void **)&e->pieces, &e->pieces_cap,
			     *npieces + 1, sizeof(*e->pieces)) < 0)
		return -ENOMEM;
	e->pieces[(*npieces)++] = (struct span){ start, last, 0 };
	return 0;
}

/* The bytes of read `r` that no write covers, given the write union in
 * e->spans[0..nunion), appended to e->pieces. */
static int launch_read_pieces(struct engine *e, struct elem *r, size_t nunion,
			      size_t *npieces)
{
	size_t lo = 0, hi = nunion;
	uint64_t cur = r->start;
	bool covered = false;

	assert(r->start <= r->last);
	r->piece0 = (uint32_t)*npieces;
	if (nunion == 0 || r->last < e->spans[0].start ||
	    r->start > e->spans[nunion - 1].last) { /* the usual read */
		r->uncut = 1;
		r->npieces = 1;
		return 0;
	}
	while (lo < hi) { /* the first span ending at or after r->start */
		size_t mid = lo + (hi - lo) / 2;

		if (e->spans[mid].last < r->start)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < nunion && !covered &&
			    e->spans[i].start <= r->last; i++) {
		if (e->spans[i].start > cur &&
		    launch_add_piece(e, npieces, cur, e->spans[i].start - 1) <
			    0)
			return -ENOMEM;
		if (e->spans[i].last >= r->last)
			covered = true;
		else
			cur = e->spans[i].last + 1;
	}
	if (!covered && launch_add_piece(e, npieces, cur, r->last) < 0)
		return -ENOMEM;
	r->npieces = (uint32_t)(*npieces - r->piece0);
	return 0;
}

/* Lays out the `n` ranges of `x` as e->elems[at..at+n), each at `site`;
 * returns the longest's length. */
static uint64_t launch_layout(struct engine *e, size_t at,
			      const struct op_range *x, size_t n,
			      uint32_t site)
{
	struct elem *el = e->elems + at;
	uint64_t longest = 0;

	for (size_t i = 0; i < n; i++) {
		el[i] = (struct elem){ .start = x[i].ptr,
				       .last = x[i].ptr + (x[i].len - 1),
				       .site = site };
		if (x[i].len > longest)
			longest = x[i].len;
	}
	return longest;
}

/* What launch__run() learns of a launch while laying it out. */
struct launch_shape {
	uint64_t longest; /* the longest element's length */
	bool beyond;	  /* a write runs past its own allocation, or has none */
};

/*
 * launch__prepare() with every element at `site`, saying what it saw in
 * *shape. Each list is laid out in a loop of its own.
 */
static int launch_prepare_at(struct engine *e, const struct op *op,
			     uint32_t site, struct launch_shape *shape)
{
	size_t nw = op->nwrites, nr = op->nreads, nu, npieces = 0;
	struct elem *w, *r;
	uint64_t lr;

	*shape = (struct launch_shape){ 0 };
	if (nw + nr == 0)
		return 0;
	if (pool__grow_array(e, (void **)&e->elems, &e->elems_cap, nw + nr,
			     sizeof(*e->elems)) < 0 ||
	    pool__grow_array(e, (void **)&e->spans, &e->spans_cap, nw + nr,
			     sizeof(*e->spans)) < 0)
		return -ENOMEM;
	w = e->elems;
	r = e->elems + nw;
	shape->longest = launch_layout(e, 0, op->writes, nw, site);
	lr = launch_layout(e, nw, op->reads, nr, site);
	if (lr > shape->longest)
		shape->longest = lr;
	if (nw > 1)
		launch_mark_dups(e, w, nw);
	if (nr > 1)
		launch_mark_dups(e, r, nr);
	for (size_t i = 0; i < nw; i++) {
		if (w[i].dup)
			continue;
		w[i].alloc = alloc__containing(e, w[i].start);
		if (w[i].alloc == NULL || w[i].last > w[i].alloc->last)
			shape->beyond = true;
	}
	nu = launch_write_union(e, w, nw);
	for (size_t i = 0; i < nr; i++) {
		if (r[i].dup)
			continue;
		if (launch_read_pieces(e, &r[i], nu, &npieces) < 0)
			return -ENOMEM;
		if (r[i].npieces > 0)
			r[i].alloc = alloc__containing(e, r[i].start);
	}
	return 0;
}

/*
 * Lays out a launch's elements in e->elems (writes first, then reads, in
 * listed order), marks duplicates, cuts each read down to the bytes no
 * write covers and finds the allocation each access belongs to. Allocates
 * scratch only; touches no analysis state.
 */
int launch__prepare(struct engine *e, const struct op *op)
{
	struct launch_shape shape;

	return launch_prepare_at(e, op, 0, &shape);
}

/* Whether a use of `a` on stream `s` is a usage for the record_stream
 * check: a use of an allocation on a stream other than its (known)
 * allocation stream. The usual use, on its own stream, is not. */
static bool launch_is_usage(const struct alloc *a, uint16_t s)
{
	return a != NULL && a->sidx != s && !a->exempt &&
	       a->sidx != STREAM_NONE;
}

/* The record_stream bookkeeping of a use that launch_is_usage(). */
static int launch_note_usage(struct engine *e, const struct elem *el,
			     uint16_t s, uint32_t site)
{
	struct alloc *a = el->alloc;
	struct usage_live *l;
	struct usage *u;

	assert(launch_is_usage(a, s));
	if ((u = alloc__usage_get(e, a, s)) == NULL)
		return -ENOMEM;
	if (u->flags & (USAGE_RECORDED | USAGE_REPORTED)) {
		/* it never reports again: no latest use to keep (DESIGN 6) */
		u->flags |= USAGE_USED | (el->acc->write ? USAGE_WROTE : 0);
		alloc__pending_add(e, a);
		return 0;
	}
	if ((l = alloc__live_get(e, a, s)) == NULL)
		return -ENOMEM;
	if (!(u->flags & USAGE_USED) || usage__seq(l) != e->seq) {
		/* a new latest use: its own op, stack and write flag */
		u->flags = (uint16_t)((u->flags & ~USAGE_WROTE) | USAGE_USED);
		usage__set_seq(l, e->seq);
		l->site = site;
	}
	if (el->acc->write)
		u->flags |= USAGE_WROTE;
	alloc__pending_add(e, a);
	return 0;
}

/*
 * A write element that belongs to another allocation, or to none, and runs
 * into allocation A still wrote A: the usage of A this launch recorded
 * (through an access that belongs to A) says so. Runs after every access
 * of the launch has recorded its usage; a usage from an earlier launch is
 * left alone, since this launch has no access that belongs to A.
 */
static void launch_note_wrote_beyond(struct engine *e, const struct elem *el,
				     uint16_t s)
{
	struct region_walk w;
	struct region r;

	if (el->alloc != NULL && el->last <= el->alloc->last)
		return; /* a write within its own allocation */
	history__walk_init(e, &w, el->start, el->last, el->alloc);
	while (history__walk_next(&w, &r)) {
		struct alloc *a = r.alloc;
		struct usage_live *l;

		if (a == NULL || a == el->alloc)
			continue;
		l = alloc__live_find(e, a, s);
		if (l != NULL && usage__seq(l) == e->seq)
			alloc__usage_find(a, s)->flags |= USAGE_WROTE;
	}
}

/* Records read `el` in the history of the bytes it kept (its pieces). */
static int launch_record_read(struct engine *e, const struct elem *el)
{
	int err = 0;

	for (uint32_t j = 0; j < el->npieces && err == 0; j++) {
		struct span p = launch__piece(e, el, j);
		struct alloc *in = launch_alloc_for(e, el, p.start);

		err = history__record(e, p.start, p.last, in, el->acc);
	}
	return err;
}

/* Records element `el`, a write when `write`, in the history and its
 * usage of its allocation (DESIGN 4, 6). */
static int launch_update_elem(struct engine *e, struct elem *el, uint16_t s,
			      bool write)
{
	int err;

	el->acc = history__access_new(e, el, s, el->site, e->seq, write);
	if (el->acc == NULL)
		return -ENOMEM;
	if (write)
		err = history__record(e, el->start, el->last, el->alloc,
				      el->acc);
	else
		err = launch_record_read(e, el);
	if (err == 0 && launch_is_usage(el->alloc, s))
		err = launch_note_usage(e, el, s, el->site);
	/* the history holds its own references */
	history__access_put(e, el->acc);
	return err;
}

/* Applies the launch's accesses to history and usages (DESIGN 4, 6),
 * writes first; `beyond` as struct launch_shape says. */
static int launch_update(struct engine *e, uint16_t s, const struct op *op,
			 bool beyond)
{
	size_t nw = op->nwrites, n = nw + op->nreads;
	int err = 0;

	assert(s < e->nstreams);
	for (size_t i = 0; i < n && err == 0; i++) {
		struct elem *el = &e->elems[i];

		if (!el->dup && (i < nw || el->npieces > 0))
			err = launch_update_elem(e, el, s, i < nw);
	}
	for (size_t i = 0; beyond && i < nw && err == 0; i++) {
		if (!e->elems[i].dup)
			launch_note_wrote_beyond(e, &e->elems[i], s);
	}
	return err;
}

/*
 * Each element's site, when the op names arguments: `site`, which
 * launch_prepare_at() set, with the element's argument. Interns only,
 * before any state changes (DESIGN 7).
 */
static int launch_sites_args(struct engine *e, const struct op *op,
			     uint32_t site)
{
	int err;

	for (size_t i = 0; i < op->nwrites + op->nreads; i++) {
		uint32_t arg = launch__arg(op, i);

		if (arg != 0 && (err = finding__site_with_arg(
					 e, site, arg, &e->elems[i].site)) < 0)
			return err;
	}
	return 0;
}

/*
 * Each element's site: `site`, with the element's argument when the op
 * names one. Interns only, before any state changes (DESIGN 7).
 */
int launch__sites(struct engine *e, const struct op *op, uint32_t site)
{
	for (size_t i = 0; i < op->nwrites + op->nreads; i++)
		e->elems[i].site = site;
	return launch_sites_args(e, op, site);
}

/*
 * The launch `op` as version 1 runs it, its accesses at `site` (which
 * names the graph of a replay) with their arguments: takes the next
 * sequence number, checks, then updates the history and the usages.
 */
int launch__run(struct engine *e, const struct op *op, uint32_t site)
{
	size_t nw = op->nwrites;
	struct launch_shape shape;
	int64_t *state;
	uint16_t s;
	int err;

	if (e->seq == SEQ_MAX)
		return -EOVERFLOW;
	if ((err = launch_prepare_at(e, op, site, &shape)) < 0 ||
	    ((op->write_args != NULL || op->read_args != NULL) &&
	     (err = launch_sites_args(e, op, site)) < 0) ||
	    (err = sync__stream_get(e, op->stream, &s)) < 0)
		return err;
	e->seq++;
	e->st.launches++;
	state = e->streams[s].state;
	state[s] = (int64_t)e->seq;

	/* Reads first, then writes, as torch.cuda._sanitizer reports. */
	for (size_t i = nw; i < nw + op->nreads; i++) {
		if (!e->elems[i].dup && e->elems[i].npieces > 0)
			launch_check_read(e, state, &e->elems[i], s);
	}
	for (size_t i = 0; i < nw; i++) {
		if (!e->elems[i].dup)
			launch_check_write(e, state, &e->elems[i], s);
	}
	if (shape.longest > e->max_access_len)
		e->max_access_len = shape.longest;
	if ((err = launch_update(e, s, op, shape.beyond)) < 0)
		history__forget(e);
	return err;
}

int launch__on_op(struct engine *e, const struct op *op)
{
	int64_t site = finding__site_get(e, op->name, op->stack);

	if (site < 0)
		return (int)site;
	return launch__run(e, op, (uint32_t)site);
}

void launch__fini(struct engine *e)
{
	free(e->elems);
	free(e->spans);
	free(e->pieces);
	free(e->seen);
	free(e->seen_set);
}
