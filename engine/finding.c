/*
 * finding.c - what the engine reports: the names of finding kinds, the
 * sites (an operator, a stack and an argument, interned so that an access
 * names them in 32 bits), the deduplication key of findings.md and the
 * dedup table that merges occurrences, and finding__emit(), the one way
 * out to the caller's callback.
 *
 * Owns e->sites, e->site_graphs and e->site_graph_names, e->site_tab and
 * e->dedup, freed by finding__fini(). A finding handed to the callback lives on the caller's
 * stack. Each table starts small and doubles: a process has a few hundred
 * sites and a few findings, and every byte held counts per allocation.
 */
#include "engine_int.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <stdio.h>

#include "hash.h"

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

/* ---- sites ------------------------------------------------------------- */

static bool finding_site_has_graph(const struct engine *e,
				   const struct site *s, uint64_t *graph)
{
	if (s->graph == 0)
		return false;
	assert(s->graph <= e->nsite_graphs);
	*graph = e->site_graphs[s->graph - 1];
	return true;
}

/* The graphs' names count from 1, so a site's hash depends on its graph's
 * name instead of its id: the same for the same site. Most sites are a
 * bare pair of small ids, (operator, stack), side by side in the key
 * that hash_fold_u64() spreads; an argument or a graph is mixed in first. */
static uint32_t finding_site_hash(const struct site *s)
{
	uint64_t key = (uint64_t)s->op << 32 | s->stack;

	if (s->arg != 0)
		key ^= hash_u64((uint64_t)s->arg << 1 | 1);
	if (s->graph != 0)
		key ^= hash_u64(s->graph);
	return hash_fold_u64(key);
}

static bool finding_site_eq(const struct site *a, const struct site *b)
{
	return a->op == b->op && a->stack == b->stack && a->arg == b->arg &&
	       a->graph == b->graph;
}

/* Doubles the table of sites, keeping it at most three quarters full. */
static int finding_site_tab_grow(struct engine *e)
{
	size_t n = e->site_tab ? e->site_mask + 1 : 0, nn = n ? 2 * n : 64;
	uint32_t *t = pool__realloc(e, NULL, 0, nn * sizeof(*t));

	if (t == NULL)
		return -ENOMEM;
	memset(t, 0, nn * sizeof(*t));
	for (size_t i = 0; i < n; i++) {
		size_t j;

		if (e->site_tab[i] == 0)
			continue;
		j = finding_site_hash(&e->sites[e->site_tab[i] - 1]) & (nn - 1);
		while (t[j] != 0)
			j = (j + 1) & (nn - 1);
		t[j] = e->site_tab[i];
	}
	pool__free(e, e->site_tab, n * sizeof(*t));
	e->site_tab = t;
	e->site_mask = nn - 1;
	return 0;
}

/* Names `graph` for struct site, from 1: its name when a site has it,
 * else the one it will have (one past the last), in *out, and whether it
 * is new. */
static bool finding_graph_name(const struct engine *e, uint64_t graph,
			       uint32_t *out)
{
	const uint64_t *v = e->site_graph_names.slots != NULL
				    ? u64map_get(&e->site_graph_names, graph)
				    : NULL;

	*out = v != NULL ? (uint32_t)*v : (uint32_t)e->nsite_graphs + 1;
	return v == NULL;
}

/* Names the graph of new site `s`, whose name finding_graph_name() gave:
 * 0, or -ENOMEM with nothing changed. */
static int finding_graph_add(struct engine *e, const struct site *s,
			     uint64_t graph)
{
	int err;

	assert(s->graph == e->nsite_graphs + 1);
	if ((err = pool__grow_array(e, (void **)&e->site_graphs,
				    &e->site_graphs_cap, e->nsite_graphs + 1,
				    sizeof(*e->site_graphs))) < 0)
		return err;
	if ((e->site_graph_names.slots == NULL &&
	     u64map_init(&e->site_graph_names) < 0) ||
	    u64map_put(&e->site_graph_names, graph, s->graph) < 0)
		return -ENOMEM;
	pool__note(e, 0); /* the map may have grown */
	e->site_graphs[e->nsite_graphs++] = graph;
	return 0;
}

/* The id of site `want`, interned on first use; `graph` is the id of
 * want->graph when that is new (finding_graph_name()). 0; -E2BIG or
 * -ENOMEM with *out unwritten. */
static int finding_site_intern(struct engine *e, const struct site *want,
			       uint64_t graph, uint32_t *out)
{
	size_t i;
	int err;

	if ((e->nsites + 1) * 4 > (e->site_tab ? e->site_mask + 1 : 0) * 3 &&
	    (err = finding_site_tab_grow(e)) < 0)
		return err;
	i = finding_site_hash(want) & e->site_mask;
	for (; e->site_tab[i] != 0; i = (i + 1) & e->site_mask) {
		if (finding_site_eq(&e->sites[e->site_tab[i] - 1], want)) {
			*out = e->site_tab[i] - 1;
			return 0;
		}
	}
	if (e->nsites >= ENGINE_MAX_SITES)
		return -E2BIG;
	if ((err = pool__grow_array(e, (void **)&e->sites, &e->sites_cap,
				    e->nsites + 1, sizeof(*e->sites))) < 0)
		return err;
	if (want->graph > e->nsite_graphs &&
	    (err = finding_graph_add(e, want, graph)) < 0)
		return err;
	e->sites[e->nsites] = *want;
	e->site_tab[i] = (uint32_t)e->nsites + 1;
	*out = (uint32_t)e->nsites++;
	return 0;
}

/* The site of the pair (op, stack), with no argument and no graph, when
 * interned: finding_site_intern()'s probe, which finding_site_hash()
 * starts at hash_fold_u64() of the pair for such a site, without building a
 * struct site. Most launches name an interned pair. */
static bool finding_site_find_plain(const struct engine *e, uint32_t op,
				    uint32_t stack, uint32_t *out)
{
	size_t i;

	if (e->site_tab == NULL)
		return false;
	i = hash_fold_u64((uint64_t)op << 32 | stack) & e->site_mask;
	for (; e->site_tab[i] != 0; i = (i + 1) & e->site_mask) {
		const struct site *s = &e->sites[e->site_tab[i] - 1];

		if (s->op == op && s->stack == stack && s->arg == 0 &&
		    s->graph == 0) {
			*out = e->site_tab[i] - 1;
			return true;
		}
	}
	return false;
}

/* The one-entry cache of finding__site_get(): (op, stack) is `site`. */
static void finding_site_remember(struct engine *e, uint32_t op,
				  uint32_t stack, uint32_t site)
{
	e->last_site_key = (uint64_t)op << 32 | stack;
	e->last_site = site;
}

/* finding__site_get() of a pair not interned yet. Out of line: a pair
 * is new once, and the lookup before it then needs no frame. */
static __attribute__((noinline)) int64_t
finding_site_get_new(struct engine *e, uint32_t op, uint32_t stack)
{
	struct site want = { .op = op, .stack = stack };
	uint32_t site;
	int err;

	if ((err = finding_site_intern(e, &want, 0, &site)) < 0)
		return err;
	finding_site_remember(e, op, stack, site);
	return site;
}

/* finding__site_get() past its one-entry cache: looks the pair up, and
 * interns it on first use. Its id; -E2BIG or -ENOMEM. */
int64_t finding__site_get_slow(struct engine *e, uint32_t op, uint32_t stack)
{
	uint32_t site;

	if (!finding_site_find_plain(e, op, stack, &site))
		return finding_site_get_new(e, op, stack);
	finding_site_remember(e, op, stack, site);
	return site;
}

/* The id of the site (operator, stack, graph), interned on first use: the
 * site of an access a capture recorded or a replay made. 0; -E2BIG or
 * -ENOMEM with *out unwritten. */
int finding__site_get_graph(struct engine *e, uint32_t op, uint32_t stack,
			    uint64_t graph, uint32_t *out)
{
	struct site want = { .op = op, .stack = stack };

	(void)finding_graph_name(e, graph, &want.graph);
	return finding_site_intern(e, &want, graph, out);
}

/* The id of site `site` with argument `arg` instead of its own, interned
 * on first use: the site of one named access of a launch. 0; -E2BIG or
 * -ENOMEM with *out unwritten. */
int finding__site_with_arg(struct engine *e, uint32_t site, uint32_t arg,
			   uint32_t *out)
{
	struct site want;

	assert(site < e->nsites);
	want = e->sites[site];
	if (want.arg == arg) {
		*out = site;
		return 0;
	}
	want.arg = arg;
	return finding_site_intern(e, &want, 0, out);
}

/* Whether site `site` has a graph, which is then in *graph. */
bool finding__site_graph(const struct engine *e, uint32_t site,
			 uint64_t *graph)
{
	assert(site < e->nsites);
	return finding_site_has_graph(e, &e->sites[site], graph);
}

/* The bytes of the map naming graphs, which only graphs make. */
size_t finding__bytes(const struct engine *e)
{
	return e->site_graph_names.slots != NULL
		       ? u64map_bytes(&e->site_graph_names)
		       : 0;
}

/* ---- findings ----------------------------------------------------------- */

static uint64_t finding_dkey_hash(const struct finding_key *k)
{
	return hash_bytes(k, sizeof(*k));
}

/* The dedup row of `k`, inserted with count 0 when new; NULL when the table
 * cannot grow, in which case the occurrence is reported undeduplicated. */
static struct dent *finding_dedup_row(struct engine *e,
				      const struct finding_key *k)
{
	size_t i;

	if ((e->dedup_count + 1) * 2 > e->dedup_mask + 1) {
		size_t nmask = e->dedup_mask ? e->dedup_mask * 2 + 1 : 7;
		struct dent *t =
			pool__realloc(e, NULL, 0, (nmask + 1) * sizeof(*t));

		if (t == NULL)
			return NULL;
		memset(t, 0, (nmask + 1) * sizeof(*t));
		for (size_t j = 0; e->dedup && j <= e->dedup_mask; j++) {
			if (!e->dedup[j].used)
				continue;
			i = finding_dkey_hash(&e->dedup[j].key) & nmask;
			while (t[i].used)
				i = (i + 1) & nmask;
			t[i] = e->dedup[j];
		}
		if (e->dedup != NULL)
			pool__free(e, e->dedup,
				   (e->dedup_mask + 1) * sizeof(*t));
		e->dedup = t;
		e->dedup_mask = nmask;
	}
	i = finding_dkey_hash(k) & e->dedup_mask;
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
	k->has_g1 = f->access.has_graph;
	k->g1 = f->access.has_graph ? f->access.graph : 0;
	k->has_previous = f->has_previous;
	if (f->has_previous) {
		k->s2 = f->previous.stream;
		k->has_s2 = 1;
		k->op2 = t->prev_op;
		k->st2 = t->prev_stack;
		k->w2 = f->previous.write;
		k->has_g2 = f->previous.has_graph;
		k->g2 = f->previous.has_graph ? f->previous.graph : 0;
	} else if (f->has_alloc && f->kind == FINDING_STALE_GRAPH_ADDRESS) {
		k->st2 = t->alloc_stack; /* graphs.md: no allocation stream */
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
	/* Graphs only when there are, so that version 1 keys keep theirs. */
	if (k->has_g1 || k->has_g2)
		n += snprintf(buf + n, FINDING_KEY_TEXT_MAX - (size_t)n,
			      " g%c%" PRIu64 " g%c%" PRIu64,
			      k->has_g1 ? '=' : '-', k->g1,
			      k->has_g2 ? '=' : '-', k->g2);
	return n;
}

void finding__emit(struct engine *e, struct finding *f)
{
	struct dent *row = NULL;
	struct finding_key k;
	bool first = true;

	assert((unsigned)f->kind < FINDING_KIND_COUNT);
	e->st.occurrences++;
	if (e->o.dedup) {
		finding_key(f, NULL, &k);
		row = finding_dedup_row(e, &k);
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

void finding__fill_alloc(const struct engine *e, const struct alloc *a,
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

/* An access's operator, stack and graph, from its site. */
void finding__fill_site(const struct engine *e, uint32_t site,
			struct finding_access *out)
{
	const struct site *s = &e->sites[site];

	assert(site < e->nsites);
	out->op = s->op;
	out->stack = s->stack;
	out->arg = s->arg;
	out->graph = 0;
	out->has_graph = finding_site_has_graph(e, s, &out->graph);
}

void finding__fill_access(const struct engine *e, const struct access *a,
			  struct finding_access *out)
{
	assert(a->sidx < e->nstreams && a->site < e->nsites);
	out->stream = e->streams[a->sidx].id;
	out->seq = a->seq;
	out->write = a->write;
	finding__fill_site(e, a->site, out);
}

void finding__fini(struct engine *e)
{
	free(e->site_tab);
	free(e->dedup);
	free(e->sites);
	free(e->site_graphs);
	if (e->site_graph_names.slots != NULL)
		u64map_fini(&e->site_graph_names);
}
