/*
 * graph.c - graph capture and replay (graphs.md, trace format version 2,
 * DESIGN 8): which streams are in an active capture, the capture-local
 * clocks and per-byte history that find races inside a capture, the check
 * for unjoined work at capture_end, the footprint a capture leaves in its
 * graph, and replays: stale addresses, then each captured launch run as a
 * version 1 launch on the replaying stream.
 *
 * Owns every struct graph (e->graphs) with its footprint, every struct
 * capture (e->captures) with its clocks and history, and every struct
 * crec (e->crecs); graph__forget() and graph__fini() free them all. The
 * access records of a capture's history are freed through history.c.
 */
#include "engine_int.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* One launch of a footprint: its ranges are g->ranges[first...], its
 * writes first, then its reads, each an access after version 1's
 * trimming. */
struct fp_launch {
	uint32_t site; /* operator, stack and this graph */
	uint16_t sidx; /* the stream it was captured on */
	uint32_t first;
	uint32_t nw, nr;
};

/* An allocation a captured access belonged to, as it was then. */
struct fp_alloc {
	uint64_t start, last, serial;
	uint32_t stack;
	uint16_t sidx;
	uint8_t size0, pool;
	uint8_t reported; /* stale_graph_address made for it */
};

struct graph {
	uint64_t id;
	struct capture *cap; /* while capturing, else NULL: captured */
	struct fp_launch *launches;
	size_t nl, lcap;
	struct op_range *ranges;
	uint32_t *rallocs; /* per range: index + 1 into allocs, 0: none */
	uint32_t *rargs;   /* per range: its argument's name, 0: none */
	size_t nr, rcap, ralloc_cap, rarg_cap;
	struct fp_alloc *allocs;
	size_t na, acap;
	struct u64map alloc_idx; /* while capturing: serial -> index */
	int64_t *done;		 /* done[G], after the first replay */
	uint32_t ndone;
	/* e->unlinks + 1 when a replay last checked every allocation: while
	 * no allocation has gone since, none can be newly stale. */
	uint64_t checked;
};

/* A member of a capture, in the order it joined (the origin first). */
struct cmember {
	uint16_t sidx;
	bool write;   /* its last captured launch has a write */
	uint32_t site;
	uint64_t n;   /* its last captured launch; 0: none */
	uint64_t ptr; /* where unjoined_capture points for it */
};

struct capture {
	struct capture *next;
	struct graph *g;
	uint64_t serial;
	uint32_t nmem, mcap;
	struct cmember *mem;
	int64_t *clk; /* cstate: clk[i * mcap + j], members i and j */
	uint64_t n;   /* capture-local launches so far */
	struct rb_root hist;
};

/* crec[E]: a captured record of event E, by the capture `serial`. */
struct crec {
	uint64_t serial;
	uint32_t n;
	int64_t v[];
};

/* ---- graphs and captures ---------------------------------------------- */

static struct graph *graph_find(const struct engine *e, uint64_t id)
{
	const uint64_t *v = u64map_get(&e->graphs, id);

	return v != NULL ? (struct graph *)(uintptr_t)*v : NULL;
}

static int64_t *graph_row(const struct capture *c, uint32_t m)
{
	return &c->clk[(size_t)m * c->mcap];
}

/* Every member leaves, and the capture's history and clocks go. */
static void graph_capture_free(struct engine *e, struct capture *c)
{
	struct capture **p = &e->captures;

	while (*p != c)
		p = &(*p)->next;
	*p = c->next;
	for (uint32_t m = 0; m < c->nmem; m++) {
		assert(e->streams[c->mem[m].sidx].cap == c);
		e->streams[c->mem[m].sidx].cap = NULL;
	}
	e->hist_local = true;
	history__segs_clear(e, &c->hist);
	e->hist_local = false;
	pool__free(e, c->mem, c->mcap * sizeof(*c->mem));
	pool__free(e, c->clk, (size_t)c->mcap * c->mcap * sizeof(*c->clk));
	c->g->cap = NULL;
	pool__free(e, c, sizeof(*c));
}

static void graph_free(struct engine *e, struct graph *g)
{
	if (g->cap != NULL)
		graph_capture_free(e, g->cap); /* abandoned: no check */
	pool__free(e, g->launches, g->lcap * sizeof(*g->launches));
	pool__free(e, g->ranges, g->rcap * sizeof(*g->ranges));
	pool__free(e, g->rallocs, g->ralloc_cap * sizeof(*g->rallocs));
	pool__free(e, g->rargs, g->rarg_cap * sizeof(*g->rargs));
	pool__free(e, g->allocs, g->acap * sizeof(*g->allocs));
	pool__free(e, g->done, g->ndone * sizeof(*g->done));
	u64map_fini(&g->alloc_idx);
	pool__free(e, g, sizeof(*g));
}

/* `graph_destroy G`, and what capture_begin does to a captured G. */
static void graph_drop(struct engine *e, uint64_t id)
{
	struct graph *g = graph_find(e, id);

	if (g == NULL)
		return;
	u64map_del(&e->graphs, id);
	graph_free(e, g);
}

/* Grows the clock matrix and member list to hold `need` members. */
static int graph_members_grow(struct engine *e, struct capture *c,
			      uint32_t need)
{
	uint32_t ncap = c->mcap ? c->mcap : 4;
	struct cmember *mem;
	int64_t *clk;

	while (ncap < need)
		ncap *= 2;
	if (ncap == c->mcap)
		return 0;
	clk = pool__realloc(e, NULL, 0, (size_t)ncap * ncap * sizeof(*clk));
	if (clk == NULL)
		return -ENOMEM;
	mem = pool__realloc(e, c->mem, c->mcap * sizeof(*mem),
			    ncap * sizeof(*mem));
	if (mem == NULL) {
		pool__free(e, clk, (size_t)ncap * ncap * sizeof(*clk));
		return -ENOMEM;
	}
	for (size_t i = 0; i < (size_t)ncap * ncap; i++)
		clk[i] = -1;
	for (uint32_t i = 0; i < c->nmem; i++)
		memcpy(&clk[(size_t)i * ncap], graph_row(c, i),
		       c->nmem * sizeof(*clk));
	pool__free(e, c->clk, (size_t)c->mcap * c->mcap * sizeof(*clk));
	c->mem = mem;
	c->clk = clk;
	c->mcap = ncap;
	return 0;
}

/*
 * Stream `s` joins `c`: cstate[s] = `clock` (its first n entries, over
 * members) merged with {s: 0}. 0 or -ENOMEM with nothing changed. A
 * clock inside c's own matrix moves when it grows: make room first.
 */
static int graph_join(struct engine *e, struct capture *c, uint16_t s,
		      const int64_t *clock, uint32_t n)
{
	uint32_t m = c->nmem;
	int64_t *row;
	int err;

	assert(e->streams[s].cap == NULL && n <= c->nmem);
	if ((err = graph_members_grow(e, c, m + 1)) < 0)
		return err;
	row = graph_row(c, m);
	for (uint32_t j = 0; j < n; j++)
		row[j] = clock[j];
	row[m] = 0;
	c->mem[m] = (struct cmember){ .sidx = s };
	c->nmem++;
	e->streams[s].cap = c;
	e->streams[s].member = m;
	return 0;
}

/* `capture_begin S G`: a new capture whose only member is S. */
static int graph_capture_begin(struct engine *e, uint16_t s, uint64_t id)
{
	struct graph *old = graph_find(e, id), *g;
	struct capture *c;

	if (e->streams[s].cap != NULL || (old != NULL && old->cap != NULL))
		return 0; /* no effect */
	g = pool__realloc(e, NULL, 0, sizeof(*g));
	c = pool__realloc(e, NULL, 0, sizeof(*c));
	if (g == NULL || c == NULL)
		goto err;
	*g = (struct graph){ .id = id, .cap = c };
	*c = (struct capture){ .g = g, .serial = ++e->next_serial };
	if (u64map_init(&g->alloc_idx) < 0)
		goto err;
	if (graph_members_grow(e, c, 1) < 0)
		goto err_map;
	if (old != NULL)
		graph_drop(e, id); /* re-capture destroys it first */
	if (u64map_put(&e->graphs, id, (uintptr_t)g) < 0)
		goto err_mem;
	c->next = e->captures;
	e->captures = c;
	return graph_join(e, c, s, NULL, 0); /* room made above */
err_mem:
	pool__free(e, c->mem, c->mcap * sizeof(*c->mem));
	pool__free(e, c->clk, (size_t)c->mcap * c->mcap * sizeof(*c->clk));
err_map:
	u64map_fini(&g->alloc_idx);
err:
	pool__free(e, g, g != NULL ? sizeof(*g) : 0);
	pool__free(e, c, c != NULL ? sizeof(*c) : 0);
	return -ENOMEM;
}

/* ---- captured events -------------------------------------------------- */

static struct crec *graph_crec_find(const struct engine *e, uint64_t ev)
{
	const uint64_t *v = u64map_get(&e->crecs, ev);

	return v != NULL ? (struct crec *)(uintptr_t)*v : NULL;
}

static void graph_crec_drop(struct engine *e, uint64_t ev)
{
	struct crec *r = graph_crec_find(e, ev);

	if (r == NULL)
		return;
	u64map_del(&e->crecs, ev);
	pool__free(e, r, sizeof(*r) + r->n * sizeof(r->v[0]));
}

/* The active capture that made E's latest record, with the record; NULL
 * when none did (a record of an ended capture is dropped here). */
static struct capture *graph_maker(struct engine *e, uint64_t ev,
				   struct crec **out)
{
	struct crec *r = graph_crec_find(e, ev);

	if (r == NULL)
		return NULL;
	for (struct capture *c = e->captures; c != NULL; c = c->next) {
		if (c->serial == r->serial) {
			*out = r;
			return c;
		}
	}
	graph_crec_drop(e, ev);
	return NULL;
}

/* A captured `event_record E S`: crec[E] = copy(cstate[S]). */
static int graph_crec_set(struct engine *e, uint64_t ev, struct capture *c,
			  uint32_t m)
{
	struct crec *r = pool__realloc(e, NULL, 0,
				       sizeof(*r) + c->nmem * sizeof(r->v[0]));

	if (r == NULL)
		return -ENOMEM;
	r->serial = c->serial;
	r->n = c->nmem;
	memcpy(r->v, graph_row(c, m), c->nmem * sizeof(r->v[0]));
	graph_crec_drop(e, ev);
	if (u64map_put(&e->crecs, ev, (uintptr_t)r) < 0) {
		pool__free(e, r, sizeof(*r) + r->n * sizeof(r->v[0]));
		return -ENOMEM;
	}
	return 0;
}

/* ---- captured launches ------------------------------------------------ */

static bool graph_ordered(const struct engine *e, const struct capture *c,
			  uint32_t m, const struct access *p)
{
	uint32_t pm = e->streams[p->sidx].member;

	assert(e->streams[p->sidx].cap == c && pm < c->nmem);
	return (int64_t)p->seq <= graph_row(c, m)[pm];
}

static void graph_report_race(struct engine *e, const struct elem *el,
			      const struct access *prev,
			      const struct finding_access *cur)
{
	struct finding f = { .kind = FINDING_DATA_RACE,
			     .detected_at = DETECTED_AT_CAPTURE };

	if (launch__pair_seen(e, prev))
		return;
	f.ptr = el->start;
	finding__fill_alloc(e, el->alloc, &f);
	f.access = *cur;
	f.has_previous = true;
	finding__fill_access(e, prev, &f.previous);
	finding__emit(e, &f);
}

/* Version 1's check of one element against the capture's history, with
 * cstate for state: a read against the last write of each byte it kept,
 * a write against the reads since, or the last write when none. */
static void graph_check_elem(struct engine *e, const struct capture *c,
			     uint32_t m, const struct elem *el,
			     const struct finding_access *cur)
{
	uint32_t np = cur->write ? 1 : el->npieces;

	launch__seen_reset(e);
	for (uint32_t i = 0; i < np; i++) {
		uint64_t a = el->start, b = el->last;
		struct seg *g;

		if (!cur->write) {
			struct span p = launch__piece(e, el, i);

			a = p.start;
			b = p.last;
		}
		g = history__seg_first_from(&c->hist, a);

		for (; g != NULL && g->start <= b; g = history__seg_next(g)) {
			const uint32_t *rd = history__reads(e, &g->h);
			struct access *w = history__write(e, &g->h);
			uint32_t nreads = history__nreads(e, &g->h);

			for (uint32_t j = 0; cur->write && j < nreads; j++) {
				struct access *r = history__acc(e, rd[j]);

				if (!graph_ordered(e, c, m, r))
					graph_report_race(e, el, r, cur);
			}
			if ((!cur->write || nreads == 0) && w != NULL &&
			    !graph_ordered(e, c, m, w))
				graph_report_race(e, el, w, cur);
		}
	}
}

/* Records the launch's accesses, at their elements' sites, in the
 * capture's history. 0 or -ENOMEM part way, after which the caller forgets
 * that history. */
static int graph_hist_update(struct engine *e, struct capture *c,
			     uint16_t s, const struct op *op)
{
	size_t nw = op->nwrites, n = nw + op->nreads;
	int err = 0;

	for (size_t i = 0; i < n && err == 0; i++) {
		struct elem *el = &e->elems[i];
		struct access *acc;

		if (el->dup || (i >= nw && el->npieces == 0))
			continue;
		acc = history__access_new(e, el, s, el->site, c->n, i < nw);
		if (acc == NULL)
			return -ENOMEM;
		if (i < nw)
			err = history__segs_set_write(e, &c->hist, el->start,
						      el->last, acc);
		for (uint32_t j = 0; i >= nw && j < el->npieces && !err; j++) {
			struct span p = launch__piece(e, el, j);

			err = history__segs_add_read(e, &c->hist, p.start,
						     p.last, acc);
		}
		history__access_put(e, acc);
	}
	return err;
}

/* Room in g's footprint for one more launch of `n` ranges. */
static int graph_fp_reserve(struct engine *e, struct graph *g, size_t n)
{
	if (g->nr + n > UINT32_MAX)
		return -E2BIG;
	if (pool__grow_array(e, (void **)&g->launches, &g->lcap, g->nl + 1,
			     sizeof(*g->launches)) < 0 ||
	    pool__grow_array(e, (void **)&g->ranges, &g->rcap, g->nr + n,
			     sizeof(*g->ranges)) < 0 ||
	    pool__grow_array(e, (void **)&g->rallocs, &g->ralloc_cap,
			     g->nr + n, sizeof(*g->rallocs)) < 0 ||
	    pool__grow_array(e, (void **)&g->rargs, &g->rarg_cap, g->nr + n,
			     sizeof(*g->rargs)) < 0 ||
	    pool__grow_array(e, (void **)&g->allocs, &g->acap, g->na + n,
			     sizeof(*g->allocs)) < 0)
		return -ENOMEM;
	return 0;
}

/* The index + 1 of allocation `a` among g's captured allocations, added
 * when new (room reserved); 0 for none. */
static int graph_fp_alloc(struct graph *g, const struct alloc *a,
			  uint32_t *out)
{
	const uint64_t *v;

	*out = 0;
	if (a == NULL)
		return 0;
	if ((v = u64map_get(&g->alloc_idx, a->serial)) != NULL) {
		*out = (uint32_t)*v + 1;
		return 0;
	}
	if (u64map_put(&g->alloc_idx, a->serial, g->na) < 0)
		return -ENOMEM;
	g->allocs[g->na] = (struct fp_alloc){
		.start = a->start, .last = a->last, .serial = a->serial,
		.stack = a->stack, .sidx = a->sidx, .size0 = a->size0,
		.pool = a->graph_pool };
	*out = (uint32_t)++g->na;
	return 0;
}

/* Appends the launch laid out in e->elems to g's footprint: its accesses
 * as ranges, writes then reads, each with its allocation and argument. */
static int graph_fp_append(struct engine *e, struct graph *g, uint16_t s,
			   uint32_t site, const struct op *op)
{
	size_t nw = op->nwrites, n = nw + op->nreads;
	struct fp_launch *l;
	int err;

	if ((err = graph_fp_reserve(e, g, n)) < 0)
		return err;
	l = &g->launches[g->nl];
	*l = (struct fp_launch){ .site = site, .sidx = s,
				 .first = (uint32_t)g->nr };
	for (size_t i = 0; i < n; i++) {
		const struct elem *el = &e->elems[i];
		uint32_t ai;

		if (el->dup || (i >= nw && el->npieces == 0))
			continue;
		if ((err = graph_fp_alloc(g, el->alloc, &ai)) < 0) {
			g->nr = l->first; /* not appended after all */
			return err;
		}
		g->ranges[g->nr] = i < nw ? op->writes[i] : op->reads[i - nw];
		g->rargs[g->nr] = launch__arg(op, i);
		g->rallocs[g->nr++] = ai;
		if (i < nw)
			l->nw++;
		else
			l->nr++;
	}
	g->nl++;
	return 0;
}

/* What unjoined_capture reports of member m's last launch. */
static void graph_note_last(struct engine *e, struct cmember *mem,
			    uint64_t n, uint32_t site, const struct op *op)
{
	size_t nw = op->nwrites;

	*mem = (struct cmember){ .sidx = mem->sidx, .n = n, .site = site };
	for (size_t i = 0; i < nw + op->nreads; i++) {
		const struct elem *el = &e->elems[i];

		if (el->dup || (i >= nw && el->npieces == 0))
			continue;
		mem->write = i < nw;
		mem->ptr = el->start;
		return; /* writes come first: the first write, else read */
	}
}

/*
 * A launch `op` on member stream s, captured into c: the next
 * capture-local number, checked and recorded in the capture's history,
 * appended to the footprint. Changes no version 1 state.
 */
static int graph_capture_launch(struct engine *e, struct capture *c,
				uint16_t s, const struct op *op)
{
	size_t nw = op->nwrites, n = nw + op->nreads;
	uint32_t m = e->streams[s].member, site;
	struct finding_access cur;
	int err;

	assert(e->streams[s].cap == c);
	if ((err = finding__site_get_graph(e, op->name, op->stack, c->g->id,
					   &site)) < 0 ||
	    (err = launch__prepare(e, op)) < 0 ||
	    (err = launch__sites(e, op, site)) < 0 ||
	    (err = graph_fp_append(e, c->g, s, site, op)) < 0)
		return err;
	graph_row(c, m)[m] = (int64_t)++c->n;
	cur = (struct finding_access){ .stream = e->streams[s].id,
				       .seq = c->n };
	for (size_t i = nw; i < n; i++) { /* reads first, as launch.c */
		finding__fill_site(e, e->elems[i].site, &cur);
		if (!e->elems[i].dup && e->elems[i].npieces > 0)
			graph_check_elem(e, c, m, &e->elems[i], &cur);
	}
	cur.write = true;
	for (size_t i = 0; i < nw; i++) {
		finding__fill_site(e, e->elems[i].site, &cur);
		if (!e->elems[i].dup)
			graph_check_elem(e, c, m, &e->elems[i], &cur);
	}
	graph_note_last(e, &c->mem[m], c->n, site, op);
	e->hist_local = true;
	err = graph_hist_update(e, c, s, op);
	if (err < 0) /* DESIGN 7: lose the capture's races, invent none */
		history__segs_clear(e, &c->hist);
	e->hist_local = false;
	return err;
}

/* ---- capture_end ------------------------------------------------------ */

static void graph_report_unjoined(struct engine *e,
				  const struct cmember *mem)
{
	struct finding f = { .kind = FINDING_UNJOINED_CAPTURE,
			     .detected_at = DETECTED_AT_CAPTURE_END };

	f.ptr = mem->ptr;
	f.access.stream = e->streams[mem->sidx].id;
	f.access.seq = mem->n;
	f.access.write = mem->write;
	finding__fill_site(e, mem->site, &f.access);
	finding__emit(e, &f);
}

/* `capture_end S G` by the origin: every member but the origin whose last
 * captured launch the origin is not ordered after is unjoined; then the
 * members leave and G is captured. */
static void graph_capture_end(struct engine *e, uint16_t s, uint64_t id)
{
	struct graph *g = graph_find(e, id);
	struct capture *c = g != NULL ? g->cap : NULL;

	if (c == NULL || c->mem[0].sidx != s)
		return; /* not the origin of an active capture of G */
	for (uint32_t m = 1; m < c->nmem; m++) {
		const struct cmember *mem = &c->mem[m];

		if (mem->n > 0 && (int64_t)mem->n > graph_row(c, 0)[m])
			graph_report_unjoined(e, mem);
	}
	graph_capture_free(e, c);
	u64map_fini(&g->alloc_idx);
	memset(&g->alloc_idx, 0, sizeof(g->alloc_idx));
}

/* ---- replay ------------------------------------------------------------ */

/* The op of footprint launch `l` as issued on stream `stream`. */
static struct op graph_fp_op(const struct engine *e, const struct graph *g,
			     const struct fp_launch *l, uint64_t stream)
{
	const struct site *st = &e->sites[l->site];

	return (struct op){ .kind = OP_LAUNCH, .stream = stream,
			    .name = st->op, .stack = st->stack,
			    .writes = &g->ranges[l->first], .nwrites = l->nw,
			    .reads = &g->ranges[l->first + l->nw],
			    .nreads = l->nr,
			    .write_args = &g->rargs[l->first],
			    .read_args = &g->rargs[l->first + l->nw] };
}

static bool graph_fp_alloc_live(const struct engine *e,
				const struct fp_alloc *a)
{
	const struct alloc *now = alloc__at(e, a->start);

	return now != NULL && now->serial == a->serial;
}

/* stale_graph_address for allocation `a`, found through range `i` of
 * launch `l`: a write when any of the launch's writes touches it, named
 * by the argument of that write, else of range `i`. */
static void graph_report_stale(struct engine *e, const struct graph *g,
			       const struct fp_launch *l, uint32_t i,
			       const struct fp_alloc *a, uint16_t r)
{
	struct finding f = { .kind = FINDING_STALE_GRAPH_ADDRESS,
			     .detected_at = DETECTED_AT_REPLAY };
	uint32_t arg = g->rargs[i];

	f.ptr = a->start;
	f.has_alloc = true;
	f.alloc = (struct finding_alloc){
		.ptr = a->start, .size = a->size0 ? 0 : a->last - a->start + 1,
		.has_stream = a->sidx != STREAM_NONE, .stack = a->stack };
	if (f.alloc.has_stream)
		f.alloc.stream = e->streams[a->sidx].id;
	f.access.stream = e->streams[r].id;
	f.access.seq = e->seq + 1; /* the number the launch then takes */
	for (uint32_t j = l->first; j < l->first + l->nw; j++) {
		const struct op_range *w = &g->ranges[j];

		if (w->ptr <= a->last && a->start <= w->ptr + (w->len - 1)) {
			f.access.write = true;
			arg = g->rargs[j];
			break;
		}
	}
	finding__fill_site(e, l->site, &f.access);
	f.access.arg = arg;
	finding__emit(e, &f);
}

/* Graphs.md's replay, 2a: the launch's accesses, reads then writes, whose
 * captured allocation is gone and was not from a graph pool; once per
 * graph and allocation. */
static void graph_check_stale(struct engine *e, struct graph *g,
			      const struct fp_launch *l, uint16_t r)
{
	uint32_t n = l->nw + l->nr;

	for (uint32_t k = 0; k < n; k++) {
		uint32_t i = l->first + (k < l->nr ? l->nw + k : k - l->nr);
		struct fp_alloc *a;

		if (g->rallocs[i] == 0)
			continue;
		a = &g->allocs[g->rallocs[i] - 1];
		if (a->pool || a->reported || graph_fp_alloc_live(e, a))
			continue;
		a->reported = 1;
		graph_report_stale(e, g, l, i, a, r);
	}
}

/* `graph_replay G R` with R not capturing. */
static int graph_replay_eager(struct engine *e, struct graph *g, uint16_t r)
{
	size_t size = e->nstreams * sizeof(int64_t);
	int64_t *done = g->done;
	bool check;
	int err = 0;

	if (g->ndone != e->nstreams) {
		done = pool__realloc(e, g->done, g->ndone * sizeof(int64_t),
				     size);
		if (done == NULL)
			return -ENOMEM;
		for (uint32_t t = g->ndone; t < e->nstreams; t++)
			done[t] = -1;
		g->done = done;
		g->ndone = e->nstreams;
	}
	/* Before the first replay done[G] is all -1: merging it is nothing. */
	sync__merge(e->streams[r].state, g->done, g->ndone);
	e->floor_stale = true;
	e->launch_at = DETECTED_AT_REPLAY;
	check = g->checked != e->unlinks + 1;
	for (size_t i = 0; i < g->nl && err == 0; i++) {
		const struct fp_launch *l = &g->launches[i];
		struct op op = graph_fp_op(e, g, l, e->streams[r].id);

		if (check)
			graph_check_stale(e, g, l, r);
		err = launch__run(e, &op, l->site);
	}
	e->launch_at = DETECTED_AT_LAUNCH;
	/* a launch frees nothing: what was checked still holds */
	g->checked = err == 0 ? e->unlinks + 1 : 0;
	assert(g->ndone == e->nstreams); /* a replay creates no stream */
	memcpy(g->done, e->streams[r].state, size);
	return err;
}

/* `graph_replay G R` with R capturing: G's launches captured into R's
 * capture as if issued on R; runs nothing. */
static int graph_replay_captured(struct engine *e, struct graph *g,
				 uint16_t r)
{
	struct capture *c = e->streams[r].cap;
	int err = 0;

	assert(c != NULL && c->g != g);
	for (size_t i = 0; i < g->nl && err == 0; i++) {
		struct op op = graph_fp_op(e, g, &g->launches[i],
					   e->streams[r].id);

		err = graph_capture_launch(e, c, r, &op);
	}
	return err;
}

/* ---- operations --------------------------------------------------------- */

/* Streams `ids` (n of them) looked up, created when new, after checking
 * that all fit. */
static int graph_streams(struct engine *e, const uint64_t *ids, int n,
			 uint16_t *out)
{
	int err = sync__streams_fit(e, ids, n);

	for (int i = 0; i < n && err == 0; i++)
		err = sync__stream_get(e, ids[i], &out[i]);
	return err;
}

/* capture_begin, capture_end, graph_replay and graph_destroy. */
int graph__on_op(struct engine *e, const struct op *op)
{
	struct graph *g;
	uint16_t s;
	int err;

	if (op->kind == OP_GRAPH_DESTROY) {
		graph_drop(e, op->graph); /* abandons a capture unchecked */
		return 0;
	}
	if ((err = graph_streams(e, &op->stream, 1, &s)) < 0)
		return err;
	switch (op->kind) {
	case OP_CAPTURE_BEGIN:
		return graph_capture_begin(e, s, op->graph);
	case OP_CAPTURE_END:
		graph_capture_end(e, s, op->graph);
		return 0;
	case OP_GRAPH_REPLAY:
		g = graph_find(e, op->graph);
		if (g == NULL || g->cap != NULL)
			return 0; /* unknown, or not captured yet */
		if (e->streams[s].cap != NULL)
			return graph_replay_captured(e, g, s);
		return graph_replay_eager(e, g, s);
	default:
		return -EINVAL;
	}
}

/* A stream's active capture, or NULL (also for a stream never named). */
static struct capture *graph_cap_of(const struct engine *e, uint64_t id,
				    uint16_t *s)
{
	int i = sync__stream_find(e, id);

	if (i < 0)
		return NULL;
	*s = (uint16_t)i;
	return e->streams[i].cap;
}

/* `event_wait E T` where a capture is involved. 1 when handled here. */
static int graph_event_wait(struct engine *e, const struct op *op)
{
	struct capture *c, *mk;
	struct crec *r = NULL;
	uint16_t t;
	int err;

	c = graph_cap_of(e, op->stream, &t);
	mk = graph_maker(e, op->event, &r);
	if (c != NULL) {
		/* captured: an edge only from work captured in c */
		if (mk == c)
			sync__merge(graph_row(c, e->streams[t].member), r->v,
				    r->n);
		return 1;
	}
	if (mk == NULL)
		return 0;
	if ((err = graph_streams(e, &op->stream, 1, &t)) < 0)
		return err;
	err = graph_join(e, mk, t, r->v, r->n);
	return err < 0 ? err : 1;
}

/* `stream_wait A on=B` where a capture is involved. 1 when handled. */
static int graph_stream_wait(struct engine *e, const struct op *op)
{
	uint64_t ids[2] = { op->stream, op->on };
	struct capture *ca, *cb;
	uint16_t s[2] = { 0, 0 };
	int err;

	ca = graph_cap_of(e, op->stream, &s[0]);
	cb = graph_cap_of(e, op->on, &s[1]);
	if (ca == NULL && cb == NULL)
		return 0;
	if ((err = graph_streams(e, ids, 2, s)) < 0)
		return err;
	if (ca != NULL) {
		if (cb == ca)
			sync__merge(graph_row(ca, e->streams[s[0]].member),
				    graph_row(ca, e->streams[s[1]].member),
				    ca->nmem);
		return 1;
	}
	/* Room first: growing moves the row that is the joining clock. */
	if ((err = graph_members_grow(e, cb, cb->nmem + 1)) < 0)
		return err;
	err = graph_join(e, cb, s[0], graph_row(cb, e->streams[s[1]].member),
			 cb->nmem);
	return err < 0 ? err : 1;
}

/*
 * Graph semantics of a version 1 op while graph__active(): captured work,
 * joins, refused host syncs, and events losing their captured record.
 * 1 when the op is handled here (version 1 must not act on it), 0 when
 * version 1 handles it, or a negative errno.
 */
int graph__intercept(struct engine *e, const struct op *op)
{
	struct capture *c;
	struct crec *r;
	uint16_t s;
	int err;

	switch (op->kind) {
	case OP_LAUNCH:
		if ((c = graph_cap_of(e, op->stream, &s)) == NULL)
			return 0;
		err = graph_capture_launch(e, c, s, op);
		return err < 0 ? err : 1;
	case OP_EVENT_RECORD:
		if ((c = graph_cap_of(e, op->stream, &s)) == NULL) {
			graph_crec_drop(e, op->event); /* an eager record */
			return 0;
		}
		err = graph_crec_set(e, op->event, c, e->streams[s].member);
		return err < 0 ? err : 1;
	case OP_EVENT_CREATE:
	case OP_EVENT_DESTROY:
		graph_crec_drop(e, op->event);
		return 0;
	case OP_EVENT_WAIT:
		return graph_event_wait(e, op);
	case OP_STREAM_WAIT:
		return graph_stream_wait(e, op);
	case OP_EVENT_SYNC: /* refused when an active capture made E */
		return graph_maker(e, op->event, &r) != NULL;
	case OP_STREAM_SYNC:
		return graph_cap_of(e, op->stream, &s) != NULL;
	case OP_DEVICE_SYNC:
		return e->captures != NULL;
	default:
		return 0;
	}
}

/* `gap`: every graph, active capture and captured event record goes. */
void graph__forget(struct engine *e)
{
	size_t pos = 0;
	uint64_t val;

	while (u64map_next(&e->graphs, &pos, NULL, &val))
		graph_free(e, (struct graph *)(uintptr_t)val);
	if (e->graphs.count > 0)
		u64map_clear(&e->graphs);
	pos = 0;
	while (u64map_next(&e->crecs, &pos, NULL, &val)) {
		struct crec *r = (struct crec *)(uintptr_t)val;

		pool__free(e, r, sizeof(*r) + r->n * sizeof(r->v[0]));
	}
	if (e->crecs.count > 0)
		u64map_clear(&e->crecs);
	assert(e->captures == NULL);
}

void graph__fini(struct engine *e)
{
	graph__forget(e);
	u64map_fini(&e->graphs);
	u64map_fini(&e->crecs);
}

/* ---- engine_check() ---------------------------------------------------- */

static const char *graph_check_capture(const struct engine *e,
				       const struct capture *c)
{
	if (c->g == NULL || c->g->cap != c ||
	    graph_find(e, c->g->id) != c->g)
		return "an active capture's graph does not name it";
	if (c->nmem == 0 || c->nmem > c->mcap)
		return "a capture has no member, or more than it has room for";
	for (uint32_t m = 0; m < c->nmem; m++) {
		const struct cmember *mem = &c->mem[m];

		if (mem->sidx >= e->nstreams ||
		    e->streams[mem->sidx].cap != c ||
		    e->streams[mem->sidx].member != m)
			return "a capture's member is not in it";
		if (graph_row(c, m)[m] != (int64_t)mem->n ||
		    mem->n > c->n)
			return "a member's own clock entry is not its last "
			       "captured launch";
	}
	return NULL;
}

static const char *graph_check_graph(const struct engine *e,
				     const struct graph *g)
{
	size_t ranges = 0;

	for (size_t i = 0; i < g->nl; i++) {
		const struct fp_launch *l = &g->launches[i];
		uint64_t graph;

		if (l->site >= e->nsites ||
		    !finding__site_graph(e, l->site, &graph) ||
		    graph != g->id || l->sidx >= e->nstreams)
			return "a footprint launch names another graph or "
			       "a stream that does not exist";
		if (l->first != ranges)
			return "footprint launches do not tile their ranges";
		ranges += l->nw + l->nr;
	}
	if (ranges != g->nr)
		return "a footprint holds ranges no launch owns";
	for (size_t i = 0; i < g->nr; i++) {
		if (g->rallocs[i] > g->na || g->ranges[i].len == 0)
			return "a footprint range is empty or names an "
			       "allocation it does not hold";
	}
	if (g->done != NULL && g->ndone > e->nstreams)
		return "done[G] has more streams than exist";
	return NULL;
}

/*
 * DESIGN 8 walked in full; each capture's history goes to `segs_cb` (with
 * the highest capture-local number in it) for check.c's walk of segments
 * and references. NULL when all holds, else what does not.
 */
const char *graph__check(const struct engine *e,
			 void (*segs_cb)(void *arg, const struct rb_root *root,
					 uint64_t max_seq),
			 void *arg)
{
	const char *why = NULL;
	size_t pos = 0, ncap = 0;
	uint64_t val;

	for (const struct capture *c = e->captures; c && !why; c = c->next) {
		why = graph_check_capture(e, c);
		segs_cb(arg, &c->hist, c->n);
		ncap++;
	}
	for (uint32_t s = 0; s < e->nstreams && !why; s++) {
		const struct capture *c = e->streams[s].cap, *a = e->captures;

		while (c != NULL && a != NULL && a != c)
			a = a->next;
		if (c != NULL && a == NULL)
			why = "a stream is in a capture that is not active";
	}
	while (!why && u64map_next(&e->graphs, &pos, NULL, &val)) {
		const struct graph *g = (const struct graph *)(uintptr_t)val;

		why = graph_check_graph(e, g);
		ncap -= g->cap != NULL;
	}
	if (!why && ncap != 0)
		why = "an active capture's graph is not known";
	return why;
}
