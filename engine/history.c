/*
 * history.c - the access history (DESIGN 2 and 3): for any byte, its last
 * write and the reads since, as refcounted access records. A hist holds one
 * such history; a segment is a hist for a byte range, kept in a tree; a
 * region is a stretch of bytes within one allocation or within none, and
 * says where its history lives (the allocation's whole-allocation hist, its
 * tree of segments, or the tree of bytes outside every allocation).
 *
 * Owns the segments (from e->seg_pool), the read arrays of hists (from
 * pool__realloc()) with the table e->readv that names them and the spare
 * arrays kept for reuse (e->reads_spare), and the tree e->outside, freed by
 * history__fini() and history__alloc_clear(). An access record is freed
 * here when its last reference goes.
 */
#include "engine_int.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- access history ---------------------------------------------------- */

/* history__access_ref() that wrapped the count's byte to 0: 255 of the
 * references move into a carry (DESIGN 11). 0, or -ENOMEM with `a` as
 * before the call. */
int history__access_carry(struct engine *e, struct access *a)
{
	uint64_t *n;

	assert(a->refs == 0);
	if (a->big) {
		n = u64map_get(&e->big_refs, (uintptr_t)a);
		assert(n != NULL && *n > 0);
		(*n)++;
	} else if ((e->big_refs.slots == NULL &&
		    u64map_init(&e->big_refs) < 0) ||
		   u64map_put(&e->big_refs, (uintptr_t)a, 1) < 0) {
		a->refs = ACCESS_REFS_CARRY;
		return -ENOMEM;
	} else {
		a->big = 1;
		pool__note(e, 0); /* the map may have grown */
	}
	a->refs = 1;
	return 0;
}

/* history__access_put() of the last reference. */
void history__access_free(struct engine *e, struct access *a)
{
	assert(a->refs == 0 && !a->big);
	pool__put(e, a->at ? &e->access_at_pool : &e->access_pool, a);
	e->st.accesses--;
}

/* history__access_put() that brought the count's byte to 0 with carries
 * left: it takes 255 references back from them (DESIGN 11). */
void history__access_borrow(struct engine *e, struct access *a)
{
	uint64_t *n = u64map_get(&e->big_refs, (uintptr_t)a);

	assert(a->refs == 0 && a->big);
	assert(n != NULL && *n > 0);
	if (--*n == 0) {
		u64map_del(&e->big_refs, (uintptr_t)a);
		a->big = 0;
	}
	a->refs = ACCESS_REFS_CARRY;
}

/* How many references record `a` has, for engine_check(). */
uint64_t history__access_refs(const struct engine *e, const struct access *a)
{
	const uint64_t *n;

	if (!a->big)
		return a->refs;
	n = u64map_get(&e->big_refs, (uintptr_t)a);
	return a->refs + (n != NULL ? *n * ACCESS_REFS_CARRY : 0);
}

size_t history__big_refs_bytes(const struct engine *e)
{
	return e->big_refs.slots != NULL ? u64map_bytes(&e->big_refs) : 0;
}

/* Whether the record named `i`, held by a history of allocation `in` (NULL:
 * of no allocation), starts at `p`, where no allocation starts. */
static bool history_starts_at(const struct engine *e, uint32_t i,
			      const struct alloc *in, uint64_t p)
{
	const struct access *a = history__acc(e, i);

	/* DESIGN 9: an inside record starts `in`, and `in` is live */
	assert(a->at || (in != NULL && in->start != p));
	(void)in;
	return a->at && ((const struct access_at *)(const void *)a)->ptr == p;
}

/* history__access_put() of the record named `i`, if any. */
static inline void history_put(struct engine *e, uint32_t i)
{
	history__access_put(e, history__acc(e, i));
}

/* Which class of e->reads_spare keeps lists of capacity `cap`; -1: none. */
static int history_spare_class(uint32_t cap)
{
	for (int i = 0; i < READS_SPARE_CLASSES; i++)
		if (cap == READS_SPARE_CAP(i))
			return i;
	return -1;
}

/* A read list of capacity `cap` with no reads: a spare one, else from
 * pool__realloc(); NULL when out of memory. */
static struct reads *history_reads_new(struct engine *e, uint32_t cap)
{
	int c = history_spare_class(cap);
	struct reads *m;

	if (c >= 0 && e->reads_spare[c] != NULL) {
		m = e->reads_spare[c];
		memcpy(&e->reads_spare[c], m->v, sizeof(m));
		e->reads_nspare[c]--;
	} else {
		m = pool__realloc(e, NULL, 0, history__reads_size(cap));
		if (m == NULL)
			return NULL;
	}
	m->n = 0;
	m->cap = cap;
	return m;
}

/* Keeps `m` as a spare when its class has room, else frees it. */
static void history_reads_free(struct engine *e, struct reads *m)
{
	int c = history_spare_class(m->cap);

	_Static_assert(sizeof(struct reads) + 2 * sizeof(uint32_t) >=
			       sizeof(struct reads) + sizeof(m),
		       "a spare list holds the link");
	if (c >= 0 && e->reads_nspare[c] < READS_SPARE_MAX) {
		memcpy(m->v, &e->reads_spare[c], sizeof(m));
		e->reads_spare[c] = m;
		e->reads_nspare[c]++;
		return;
	}
	pool__free(e, m, history__reads_size(m->cap));
}

/* `m` with twice the capacity, its reads kept; NULL (with `m` unchanged)
 * when out of memory. */
static struct reads *history_reads_grow(struct engine *e, struct reads *m)
{
	struct reads *g;

	if (history_spare_class(m->cap) < 0 &&
	    history_spare_class(2 * m->cap) < 0) {
		g = pool__realloc(e, m, history__reads_size(m->cap),
				  history__reads_size(2 * m->cap));
		if (g != NULL)
			g->cap *= 2;
		return g;
	}
	if ((g = history_reads_new(e, 2 * m->cap)) == NULL)
		return NULL;
	memcpy(g->v, m->v, m->n * sizeof(m->v[0]));
	g->n = m->n;
	history_reads_free(e, m);
	return g;
}

static void history_readv_give(struct engine *e, uint32_t slot)
{
	e->readv[slot] = (struct reads *)((uintptr_t)e->readv_free << 1 | 1);
	e->readv_free = slot + 1;
}

/* A slot of e->readv holding `m`, named in *rd as a hist names it. 0, or
 * -ENOMEM with nothing changed. */
static int history_readv_take(struct engine *e, struct reads *m,
			      uint32_t *rd)
{
	size_t cap = e->readv_cap;
	uint32_t slot;

	if (e->readv_free == 0) {
		if (cap >= (size_t)1 << 30 ||
		    pool__grow_array(e, (void **)&e->readv, &cap, cap + 1,
				     sizeof(*e->readv)) < 0)
			return -ENOMEM;
		for (size_t i = cap; i-- > e->readv_cap;)
			history_readv_give(e, (uint32_t)i);
		e->readv_cap = cap;
	}
	slot = e->readv_free - 1;
	e->readv_free = (uint32_t)((uintptr_t)e->readv[slot] >> 1);
	e->readv[slot] = m;
	*rd = slot << 1 | 1;
	return 0;
}

/* Out of line: most last writes have no reads since, and their
 * history_hist_clear() then needs no frame for this loop. */
static __attribute__((noinline)) void
history_hist_clear_reads(struct engine *e, struct hist *h)
{
	struct reads *m = history__many(e, h);
	uint32_t *r = history__reads(e, h);
	uint32_t n = history__nreads(e, h);

	for (uint32_t i = 0; i < n; i++)
		history_put(e, r[i]);
	if (m != NULL) {
		history_readv_give(e, h->rd >> 1);
		history_reads_free(e, m);
	}
	h->rd = 0;
}

static void history_hist_clear(struct engine *e, struct hist *h)
{
	history_put(e, h->write);
	h->write = 0;
	if (h->rd != 0)
		history_hist_clear_reads(e, h);
}

/* history_hist_set_write() past its usual case: 0, or -ENOMEM with `h`
 * unchanged. Out of line, so that the usual case needs no frame. */
static __attribute__((noinline)) int
history_hist_set_write_slow(struct engine *e, struct hist *h,
			    struct access *acc)
{
	if (history__access_ref(e, acc) < 0)
		return -ENOMEM;
	history_hist_clear(e, h);
	h->write = history__acc_idx(e, acc);
	return 0;
}

/* `acc` becomes the last write, with no reads since. 0, or -ENOMEM with
 * `h` unchanged. The usual case, the first write of bytes with no
 * history, lets nothing go and takes no carry: it only names `acc`. */
static int history_hist_set_write(struct engine *e, struct hist *h,
				  struct access *acc)
{
	assert(acc->write && acc->refs > 0);
	if (h->write != 0 || h->rd != 0 || acc->refs == ACCESS_REFS_CARRY)
		return history_hist_set_write_slow(e, h, acc);
	acc->refs++;
	h->write = history__acc_idx(e, acc);
	return 0;
}

/* history_hist_copy() that failed having copied `n` reads: *dst lets
 * them go, holding nothing again. */
static int history_hist_copy_undo(struct engine *e, struct hist *dst,
				  uint32_t n)
{
	struct reads *m = history__many(e, dst);

	assert(dst->write == 0);
	if (m != NULL)
		m->n = n;
	history_hist_clear(e, dst);
	return -ENOMEM;
}

/* A copy of `src` in *dst, sharing its access records. 0, or -ENOMEM with
 * *dst holding nothing. */
static int history_hist_copy(struct engine *e, struct hist *dst,
			     struct hist *src)
{
	const uint32_t *r = history__reads(e, src);
	uint32_t n = history__nreads(e, src);

	memset(dst, 0, sizeof(*dst));
	if (n > 1) {
		struct reads *m = history_reads_new(e, n);

		if (m == NULL)
			return -ENOMEM;
		if (history_readv_take(e, m, &dst->rd) < 0) {
			history_reads_free(e, m);
			return -ENOMEM;
		}
		m->n = n;
	}
	for (uint32_t i = 0; i < n; i++) {
		if (history__access_ref(e, history__acc(e, r[i])) < 0)
			return history_hist_copy_undo(e, dst, i);
		history__reads(e, dst)[i] = r[i];
	}
	if (src->write != 0 &&
	    history__access_ref(e, history__write(e, src)) < 0)
		return history_hist_copy_undo(e, dst, n);
	dst->write = src->write;
	return 0;
}

static bool history_same_site(const struct access *a, const struct access *b)
{
	return a->sidx == b->sidx && a->site == b->site;
}

/* DESIGN 5: makes room in a full read list by dropping dead reads, then,
 * past READS_COALESCE, older repeats of a newer read's site. */
static void history_reads_prune(struct engine *e, struct reads *m)
{
	uint32_t *r = m->v;
	const int64_t *floor = e->hist_local ? NULL : sync__floor(e);
	uint32_t n = 0;

	/* A capture's reads carry capture-local numbers: the eager floor
	 * says nothing of them. */
	for (uint32_t i = 0; i < m->n; i++) {
		struct access *a = history__acc(e, r[i]);

		if (floor != NULL && (int64_t)a->seq <= floor[a->sidx])
			history__access_put(e, a);
		else
			r[n++] = r[i];
	}
	m->n = n;
	if (n < READS_COALESCE)
		return;
	n = 0;
	for (uint32_t i = 0; i < m->n; i++) {
		const struct access *a = history__acc(e, r[i]);
		bool repeated = false;

		for (uint32_t j = i + 1; j < m->n && !repeated; j++)
			repeated = history_same_site(a, history__acc(e, r[j]));
		if (repeated)
			history_put(e, r[i]);
		else
			r[n++] = r[i];
	}
	m->n = n;
}

/* DESIGN 5 for a last write: once dead, no later read or write can race
 * it, so a hist gaining a read lets it go. Not in a capture's history,
 * whose numbers are capture-local. The host's clock bounds the floor and
 * moves only at host syncs: checked first, it spares recomputing a floor
 * that every event op makes stale. Whether last write `w` may be dead by
 * that first check: */
static bool history_write_may_be_dead(const struct engine *e,
				      const struct access *w)
{
	return w != NULL && !e->hist_local &&
	       (int64_t)w->seq <= e->host[w->sidx];
}

static void history_hist_drop_dead_write(struct engine *e, struct hist *h)
{
	struct access *w = history__write(e, h);

	if (!history_write_may_be_dead(e, w))
		return;
	if ((int64_t)w->seq <= sync__floor(e)[w->sidx]) {
		history__access_put(e, w);
		h->write = 0;
	}
}

/* Room for one more read in a read list of more than one; 0 or -ENOMEM
 * with `h` unchanged. */
static int history_reads_make_room(struct engine *e, struct hist *h)
{
	struct reads *m = history__many(e, h);

	if (m != NULL && m->n >= 4 && m->n == m->cap)
		history_reads_prune(e, m);
	if (m == NULL) {
		if ((m = history_reads_new(e, READS_FIRST_CAP)) == NULL)
			return -ENOMEM;
		m->v[0] = h->rd;
		m->n = 1;
		if (history_readv_take(e, m, &h->rd) < 0) {
			history_reads_free(e, m);
			return -ENOMEM;
		}
	} else if (m->n == m->cap) {
		if ((m = history_reads_grow(e, m)) == NULL)
			return -ENOMEM;
		e->readv[h->rd >> 1] = m;
	}
	return 0;
}

/* history_hist_add_read() past its usual case: 0, or -ENOMEM with `h`
 * unchanged. Out of line, so that the usual case needs no frame. */
static __attribute__((noinline)) int
history_hist_add_read_slow(struct engine *e, struct hist *h,
			   struct access *acc)
{
	struct reads *m;

	if (history__access_ref(e, acc) < 0)
		return -ENOMEM;
	history_hist_drop_dead_write(e, h);
	if (h->rd == 0) {
		h->rd = history__acc_idx(e, acc);
		return 0;
	}
	if (history_reads_make_room(e, h) < 0) {
		history__access_put(e, acc);
		return -ENOMEM;
	}
	m = history__many(e, h);
	assert(m->n < m->cap);
	m->v[m->n++] = history__acc_idx(e, acc);
	return 0;
}

/* `acc` becomes one more read of `h`. The usual case is the first read
 * since a last write that cannot be dead yet, of a record whose count
 * needs no carry: it only takes the reference and names the read. */
static int history_hist_add_read(struct engine *e, struct hist *h,
				 struct access *acc)
{
	assert(!acc->write && acc->refs > 0);
	if (h->rd != 0 || acc->refs == ACCESS_REFS_CARRY ||
	    history_write_may_be_dead(e, history__write(e, h)))
		return history_hist_add_read_slow(e, h, acc);
	acc->refs++;
	h->rd = history__acc_idx(e, acc);
	return 0;
}

/* Drops the accesses that start at `p`, from `h`, a history of allocation
 * `in` (NULL: of no allocation); returns whether `h` is now empty. */
static bool history_hist_drop_starting_at(struct engine *e, struct hist *h,
					  const struct alloc *in, uint64_t p)
{
	struct reads *m = history__many(e, h);
	uint32_t *r = history__reads(e, h);
	uint32_t n = 0, nreads = history__nreads(e, h);

	if (h->write != 0 && history_starts_at(e, h->write, in, p)) {
		history_put(e, h->write);
		h->write = 0;
	}
	for (uint32_t i = 0; i < nreads; i++) {
		if (history_starts_at(e, r[i], in, p))
			history_put(e, r[i]);
		else
			r[n++] = r[i];
	}
	if (m != NULL)
		m->n = n;
	else if (n == 0)
		h->rd = 0;
	return history__empty(e, h);
}

/* ---- segments: history in byte ranges ------------------------------------ */

/* Frees segment `g`, out of its tree already, with its history. */
static void history_seg_free(struct engine *e, struct seg *g)
{
	history_hist_clear(e, &g->h);
	pool__put(e, &e->seg_pool, g);
	e->st.segments--;
}

static void history_seg_remove(struct engine *e, struct rb_root *root,
			       struct seg *g)
{
	rb_erase(root, &g->node);
	history_seg_free(e, g);
}

static void history_seg_insert(struct engine *e, struct rb_root *root,
			       struct seg *g)
{
	struct rb_node **link = &root->node, *parent = NULL;

	while (*link != NULL) {
		parent = *link;
		link = g->start < history__seg_of(parent)->start
			       ? &parent->left
			       : &parent->right;
	}
	rb_insert(root, &g->node, parent, link);
	e->st.segments++;
}

static struct seg *history_seg_new(struct engine *e, uint64_t start,
				   uint64_t last)
{
	struct seg *g = pool__get(e, &e->seg_pool);

	assert(start <= last);
	if (g == NULL)
		return NULL;
	memset(g, 0, sizeof(*g));
	g->start = start;
	g->last = last;
	return g;
}

/* The first segment of `root` with a byte at or after `ptr`. */
struct seg *history__seg_first_from(const struct rb_root *root,
					  uint64_t ptr)
{
	struct rb_node *n = root->node, *best = NULL, *after = NULL;

	while (n != NULL) {
		if (history__seg_of(n)->start <= ptr) {
			best = n;
			n = n->right;
		} else {
			after = n;
			n = n->left;
		}
	}
	if (best != NULL && history__seg_of(best)->last >= ptr)
		return history__seg_of(best);
	return history__seg_of(after);
}

/* Splits `g` so that `at` (start < at <= last) begins a new segment with
 * the same history; returns the new segment, NULL on -ENOMEM. */
static struct seg *history_seg_split(struct engine *e, struct rb_root *root,
				     struct seg *g, uint64_t at)
{
	struct seg *h = history_seg_new(e, at, g->last);

	assert(g->start < at && at <= g->last);
	if (h == NULL)
		return NULL;
	if (history_hist_copy(e, &h->h, &g->h) < 0) {
		pool__put(e, &e->seg_pool, h);
		return NULL;
	}
	g->last = at - 1;
	history_seg_insert(e, root, h);
	return h;
}

/*
 * Forgets the history of [a, b] in `root`, whose first segment with a byte
 * at or after a is `g` (history__seg_first_from()). Only a segment that
 * sticks out on both sides needs splitting (and so memory); the others are
 * trimmed or go.
 */
static int history_segs_drop_from(struct engine *e, struct rb_root *root,
				  struct seg *g, uint64_t a, uint64_t b)
{
	struct seg *next;

	assert(a <= b);
	assert(g == history__seg_first_from(root, a));
	if (g != NULL && g->start < a && g->last > b) {
		if (history_seg_split(e, root, g, b + 1) == NULL)
			return -ENOMEM;
		g->last = a - 1;
		return 0;
	}
	if (g != NULL && g->start < a) {
		g->last = a - 1;
		g = history__seg_next(g);
	}
	while (g != NULL && g->start <= b) {
		next = history__seg_next(g);
		if (g->last > b) {
			/* Its start moves up past b, staying below next's. */
			g->start = b + 1;
			break;
		}
		history_seg_remove(e, root, g);
		g = next;
	}
	return 0;
}

/* Forgets the history of [a, b] in `root`: 0, or -ENOMEM when a segment
 * to split could not be. */
int history__segs_drop(struct engine *e, struct rb_root *root, uint64_t a,
		       uint64_t b)
{
	return history_segs_drop_from(e, root, history__seg_first_from(root, a),
				      a, b);
}

/* Empties `root`. A tree that goes whole needs no rebalancing: each leaf
 * in turn is cut from its parent and freed, its parent then the next. */
void history__segs_clear(struct engine *e, struct rb_root *root)
{
	struct rb_node *n = root->node, *p;

	root->node = NULL;
	while (n != NULL) {
		if (n->left != NULL || n->right != NULL) {
			n = n->left != NULL ? n->left : n->right;
			continue;
		}
		p = rb_parent(n);
		if (p != NULL && p->left == n)
			p->left = NULL;
		else if (p != NULL)
			p->right = NULL;
		history_seg_free(e, history__seg_of(n));
		n = p;
	}
}

/* Adds read `acc` to the history of [a, b] in `root`, splitting segments
 * at the edges and filling the holes between them. */
int history__segs_add_read(struct engine *e, struct rb_root *root,
			   uint64_t a, uint64_t b, struct access *acc)
{
	struct seg *g = history__seg_first_from(root, a), *h;
	uint64_t cur = a;
	bool done = false;

	assert(a <= b);
	if (g != NULL && g->start < a) {
		if (history_seg_split(e, root, g, a) == NULL)
			return -ENOMEM;
		g = history__seg_next(g);
	}
	while (!done && g != NULL && g->start <= b) {
		if (g->start > cur) {
			if ((h = history_seg_new(e, cur, g->start - 1)) == NULL)
				return -ENOMEM;
			history_seg_insert(e, root, h);
			if (history_hist_add_read(e, &h->h, acc) < 0)
				return -ENOMEM;
		}
		if (g->last > b && history_seg_split(e, root, g, b + 1) == NULL)
			return -ENOMEM;
		if (history_hist_add_read(e, &g->h, acc) < 0)
			return -ENOMEM;
		done = g->last >= b;
		cur = g->last + 1;
		g = history__seg_next(g);
	}
	if (!done) {
		if ((h = history_seg_new(e, cur, b)) == NULL)
			return -ENOMEM;
		history_seg_insert(e, root, h);
		if (history_hist_add_read(e, &h->h, acc) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* Makes `acc` the last write of [a, b] in `root`, with no reads since. */
int history__segs_set_write(struct engine *e, struct rb_root *root,
			    uint64_t a, uint64_t b, struct access *acc)
{
	struct seg *first = history__seg_first_from(root, a), *g = first;

	assert(a <= b);
	if (g == NULL || g->start != a || g->last != b) {
		/* Making g moves no segment: `first` stays valid. */
		if ((g = history_seg_new(e, a, b)) == NULL)
			return -ENOMEM;
		if (history_segs_drop_from(e, root, first, a, b) < 0) {
			pool__put(e, &e->seg_pool, g);
			return -ENOMEM;
		}
		history_seg_insert(e, root, g);
	}
	return history_hist_set_write(e, &g->h, acc);
}

/* ---- the history of an allocation (DESIGN 3) ------------------------ */

/* Moves a whole-allocation history into a tree of segments, so that part
 * of the allocation can be given a history of its own. */
static int history_alloc_to_tree(struct engine *e, struct alloc *a)
{
	struct hist one = a->whole;
	struct seg *g = NULL;

	assert(!a->tree);
	if (!history__empty(e, &one)) {
		if ((g = history_seg_new(e, a->start, a->last)) == NULL)
			return -ENOMEM;
		g->h = one;
	}
	a->segs.node = NULL;
	a->tree = 1;
	if (g != NULL)
		history_seg_insert(e, &a->segs, g);
	return 0;
}

/* The tree that segment `g` is the root of, in *root: e->outside or an
 * allocation's (NULL when `g` is no root). False for a capture's, which
 * only graph.c knows. */
static bool history_seg_root(struct engine *e, struct seg *g,
			     struct rb_root **root)
{
	struct alloc *below, *above;

	*root = NULL;
	if (rb_parent(&g->node) != NULL)
		return true;
	if (e->outside.node == &g->node) {
		*root = &e->outside;
		return true;
	}
	alloc__neighbors(e, g->start, &below, &above, NULL);
	if (below != NULL && below->tree && below->segs.node == &g->node)
		*root = &below->segs;
	return *root != NULL;
}

/* DESIGN 10: moves the segments of the emptiest slab into the others when
 * the slabs hold one more than the segments need, and that slab goes. */
static void history_segs_compact(struct engine *e)
{
	struct chunk *c = pool__sparse_chunk(&e->seg_pool, e->st.segments);
	void *objs[POOL_CHUNK / sizeof(struct seg)];
	struct rb_root *root;
	size_t n;

	if (c == NULL)
		return;
	n = pool__chunk_objects(&e->seg_pool, c, objs);
	for (size_t i = 0; i < n; i++) {
		if (!history_seg_root(e, objs[i], &root))
			return; /* a capture's root stays; rare */
	}
	for (size_t i = 0; i < n; i++) {
		struct seg *from = objs[i];
		struct seg *to = pool__get_other(&e->seg_pool, c);

		assert(to != NULL);
		(void)history_seg_root(e, from, &root);
		*to = *from;
		rb_move(root, &from->node, &to->node);
		pool__put(e, &e->seg_pool, from);
	}
}

void history__alloc_clear(struct engine *e, struct alloc *a)
{
	bool tree = a->tree;

	if (tree)
		history__segs_clear(e, &a->segs);
	else
		history_hist_clear(e, &a->whole);
	memset(&a->whole, 0, sizeof(a->whole));
	a->tree = 0;
	if (tree)
		history_segs_compact(e);
}

/* `gap`: forget history and usages; exempt what is live. */
void history__forget(struct engine *e)
{
	history__segs_clear(e, &e->outside);
	for (struct alloc *a = alloc__first(e); a; a = alloc__next(e, a)) {
		history__alloc_clear(e, a);
		alloc__usages_free(e, a);
		a->exempt = 1;
	}
}

/*
 * DESIGN 5 at a host sync, the one op that can make many accesses dead at
 * once: every dead last write goes, and a segment left empty with it. A
 * dead write can never race, and while reads follow it they alone are
 * checked; its reads stay, since a read list's length decides when it is
 * pruned and coalesced (the occurrence counts depend on that). The same
 * walk settles the usages found ordered (DESIGN 6).
 */
static void history_drop_dead_write_in(struct engine *e, struct hist *h,
				       const int64_t *floor)
{
	struct access *w = history__write(e, h);

	if (w != NULL && (int64_t)w->seq <= floor[w->sidx]) {
		history__access_put(e, w);
		h->write = 0;
	}
}

static void history_segs_drop_dead_writes(struct engine *e,
					  struct rb_root *root,
					  const int64_t *floor)
{
	struct seg *g = history__seg_of(rb_first(root)), *next;

	for (; g != NULL; g = next) {
		next = history__seg_next(g);
		history_drop_dead_write_in(e, &g->h, floor);
		if (history__empty(e, &g->h))
			history_seg_remove(e, root, g);
	}
}

void history__drop_dead_writes(struct engine *e)
{
	const int64_t *floor;

	/* It walks every allocation and segment: only once the launches
	 * since the last walk outnumber them, so that a job syncing after
	 * every launch pays O(1) per launch for it. */
	if (e->st.launches - e->swept_at < e->st.live_allocs + e->st.segments)
		return;
	e->swept_at = e->st.launches;
	floor = sync__floor(e);
	assert(!e->hist_local);
	history_segs_drop_dead_writes(e, &e->outside, floor);
	for (struct alloc *a = alloc__first(e); a; a = alloc__next(e, a)) {
		if (a->tree)
			history_segs_drop_dead_writes(e, &a->segs, floor);
		else
			history_drop_dead_write_in(e, &a->whole, floor);
		alloc__settle(e, a); /* and the uses found ordered settle */
	}
}

/* ---- regions: where the history of a byte range lives ------------------- */

static bool history_region_whole(const struct region *r)
{
	return r->alloc != NULL && r->start == r->alloc->start &&
	       r->last == r->alloc->last;
}

static int history_region_set_write(struct engine *e, const struct region *r,
			      struct access *acc)
{
	struct alloc *a = r->alloc;

	assert(acc->write);
	if (history_region_whole(r)) {
		/* A write of the whole allocation makes its history one
		 * record again, however it was cut before. */
		if (a->tree)
			history__alloc_clear(e, a);
		return history_hist_set_write(e, &a->whole, acc);
	}
	if (a != NULL && !a->tree && history_alloc_to_tree(e, a) < 0)
		return -ENOMEM;
	return history__segs_set_write(e, history__region_tree(e, r), r->start,
				      r->last, acc);
}

static int history_region_add_read(struct engine *e, const struct region *r,
			     struct access *acc)
{
	struct alloc *a = r->alloc;

	assert(!acc->write);
	if (a != NULL && !a->tree && history_region_whole(r))
		return history_hist_add_read(e, &a->whole, acc);
	if (a != NULL && !a->tree && history_alloc_to_tree(e, a) < 0)
		return -ENOMEM;
	return history__segs_add_read(e, history__region_tree(e, r), r->start,
				     r->last, acc);
}

/* history__record() of bytes that are not one whole-allocation record:
 * region by region. Out of line, so that the usual whole-allocation
 * access does not pay for this walk's frame. */
static __attribute__((noinline)) int
history_record_walk(struct engine *e, uint64_t start, uint64_t last,
		    struct alloc *in, struct access *acc)
{
	struct region_walk w;
	struct region r;
	int err = 0;

	history__walk_init(e, &w, start, last, in);
	while (err == 0 && history__walk_next(&w, &r)) {
		if (acc->write)
			err = history_region_set_write(e, &r, acc);
		else
			err = history_region_add_read(e, &r, acc);
	}
	return err;
}

/*
 * Records `acc` in the history of [start, last]: as the last write of those
 * bytes, or as one more read of them. `in` is the allocation containing
 * start, or NULL when none does. 0, or -ENOMEM part way (DESIGN 7).
 */
int history__record(struct engine *e, uint64_t start, uint64_t last,
		    struct alloc *in, struct access *acc)
{
	struct hist *whole = history__whole_of(in, start, last);

	/* The walk would find that one region: skip it. */
	if (whole == NULL)
		return history_record_walk(e, start, last, in, acc);
	if (!acc->write)
		return history_hist_add_read(e, whole, acc);
	return history_hist_set_write(e, whole, acc);
}

/*
 * `free P` where no allocation starts at P: drop the accesses that start
 * at P. They all lie within max_access_len bytes of P.
 */
void history__drop_starting_at(struct engine *e, uint64_t p)
{
	uint64_t end = p > UINT64_MAX - (e->max_access_len - 1)
			       ? UINT64_MAX
			       : p + (e->max_access_len - 1);
	struct region_walk w;
	struct region r;

	if (e->max_access_len == 0)
		return;
	history__walk_init(e, &w, p, end, alloc__containing(e, p));
	while (history__walk_next(&w, &r)) {
		struct rb_root *tree = history__region_tree(e, &r);
		struct seg *g, *next;

		if (tree == NULL) {
			history_hist_drop_starting_at(e, &r.alloc->whole,
						      r.alloc, p);
			continue;
		}
		for (g = history__seg_first_from(tree, r.start);
		     g != NULL && g->start <= r.last; g = next) {
			next = history__seg_next(g);
			if (history_hist_drop_starting_at(e, &g->h, r.alloc,
							  p))
				history_seg_remove(e, tree, g);
		}
	}
}

/* The history of bytes outside every allocation, then the read list
 * table and the spare lists: allocations (alloc__fini()) and captures
 * (graph__fini()) have cleared theirs before. */
void history__fini(struct engine *e)
{
	history__segs_clear(e, &e->outside);
	if (e->big_refs.slots != NULL)
		u64map_fini(&e->big_refs);
	free(e->readv);
	for (int c = 0; c < READS_SPARE_CLASSES; c++)
		while (e->reads_nspare[c] > 0)
			pool__free(e, history_reads_new(e, READS_SPARE_CAP(c)),
				   history__reads_size(READS_SPARE_CAP(c)));
}

/* The bytes of the spare read lists, counted with the read lists. */
size_t history__spare_bytes(const struct engine *e)
{
	size_t n = 0;

	for (int c = 0; c < READS_SPARE_CLASSES; c++)
		n += e->reads_nspare[c] *
		     history__reads_size(READS_SPARE_CAP(c));
	return n;
}
