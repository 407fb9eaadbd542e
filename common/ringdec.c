/*
 * ringdec.c - checking and translating ring records (proto/ring_layout.h).
 */
#include "ringdec.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "ringop.h"
#include "ringread.h"
#include "text.h"
#include "u64map.h"

/* In a value of `strings`, above the symtab id: the string is empty, so
 * that a launch tells an empty name without a symtab lookup. */
#define RINGDEC_EMPTY (UINT64_C(1) << 32)

/* A map's latest entries by id modulo RINGDEC_CACHE, in front of it:
 * producers number strings and stacks from 1 up, so the ids a process
 * uses hit here, without hashing. Key 0 (no id) is an empty slot. */
#define RINGDEC_CACHE 256

struct ringdec_map {
	struct u64map map;
	uint32_t key[RINGDEC_CACHE];
	uint64_t val[RINGDEC_CACHE];
};

struct ringdec {
	struct symtab *syms;
	struct ringdec_map strings; /* producer string id -> symtab id */
	struct ringdec_map stacks;  /* producer stack id -> symtab stack id */
	struct op_range *ranges;
	size_t ranges_cap;
	uint32_t *args; /* the ranges' arguments, in step with ranges */
	size_t args_cap;
	char *text; /* a string as text_keep() keeps it */
	size_t text_cap;
	uint32_t *frames;
	size_t frames_cap;
	size_t max_bytes; /* of syms; 0: none */
	struct ringdec_counters n;
	char error[128];
};

/* The value of producer id `id` (not 0) in m, or NULL. */
static const uint64_t *ringdec_map_get(struct ringdec_map *m, uint32_t id)
{
	size_t i = id % RINGDEC_CACHE;
	const uint64_t *v;

	if (m->key[i] == id)
		return &m->val[i];
	v = u64map_get(&m->map, id);
	if (v != NULL) {
		m->key[i] = id;
		m->val[i] = *v;
	}
	return v;
}

/* Maps producer id `id` (not 0) to `val`; 0 or -ENOMEM. */
static int ringdec_map_put(struct ringdec_map *m, uint32_t id, uint64_t val)
{
	int err = u64map_put(&m->map, id, val);

	if (err == 0) {
		m->key[id % RINGDEC_CACHE] = id;
		m->val[id % RINGDEC_CACHE] = val;
	}
	return err;
}

int ringdec_new(struct symtab *syms, struct ringdec **out)
{
	struct ringdec *d = calloc(1, sizeof(*d));

	if (d == NULL)
		return -ENOMEM;
	d->syms = syms;
	if (u64map_init(&d->strings.map) < 0 ||
	    u64map_init(&d->stacks.map) < 0) {
		ringdec_free(d);
		return -ENOMEM;
	}
	*out = d;
	return 0;
}

void ringdec_free(struct ringdec *d)
{
	if (d == NULL)
		return;
	u64map_fini(&d->strings.map);
	u64map_fini(&d->stacks.map);
	free(d->ranges);
	free(d->args);
	free(d->text);
	free(d->frames);
	free(d);
}

void ringdec_set_max_bytes(struct ringdec *d, size_t max_bytes)
{
	d->max_bytes = max_bytes;
}

/* Whether `add` more bytes would take the symtab past its bound (counted
 * when so). */
static bool ringdec_over_cap(struct ringdec *d, size_t add)
{
	if (d->max_bytes == 0 || symtab_bytes(d->syms) + add <= d->max_bytes)
		return false;
	d->n.over_cap++;
	return true;
}

/* Interns `len` bytes, or RINGDEC_OVER_CAP past the bound. */
static int ringdec_put(struct ringdec *d, const char *s, size_t len,
		       uint32_t *id)
{
	if (ringdec_over_cap(d, len))
		return symtab_intern(d->syms, RINGDEC_OVER_CAP,
				     sizeof(RINGDEC_OVER_CAP) - 1, id);
	return symtab_intern(d->syms, s, len, id);
}

const char *ringdec_error(const struct ringdec *d)
{
	return d->error;
}

void ringdec_counters(const struct ringdec *d, struct ringdec_counters *c)
{
	*c = d->n;
}

static int ringdec_bad(struct ringdec *d, const char *what, unsigned type,
		       size_t len)
{
	snprintf(d->error, sizeof(d->error), "%s (record type %u, %zu bytes)",
		 what, type, len);
	d->n.malformed++;
	return -EBADMSG;
}

/*
 * Interns `len` bytes from a producer as text_keep() keeps them: what the
 * trace format can carry, as it came (text.h: displays clean it), cut as
 * the agent and the trace reader cut it (op_cut_string()), so that a
 * producer that is not our agent cannot make one string huge, and the
 * daemon sees what `analyze` sees.
 */
static int ringdec_intern(struct ringdec *d, const char *s, size_t len,
			  uint32_t *id)
{
	size_t keep = op_cut_string(s, len);
	int err;

	if (keep < len)
		d->n.truncated++;
	err = grow_array((void **)&d->text, &d->text_cap, keep + 1, 1);
	if (err < 0)
		return err;
	keep = text_keep(s, keep, d->text, keep + 1);
	return ringdec_put(d, d->text, keep, id);
}

/* The symtab id of producer string `id`, or of a placeholder naming it. */
static int ringdec_string(struct ringdec *d, uint32_t id, const char *what,
			  uint32_t *out)
{
	const uint64_t *v = id ? ringdec_map_get(&d->strings, id) : NULL;
	char buf[48];
	int n;

	if (v != NULL) {
		*out = (uint32_t)*v;
		return 0;
	}
	if (id == 0) {
		n = snprintf(buf, sizeof(buf), "<no %s>", what);
	} else {
		d->n.undefined++;
		n = snprintf(buf, sizeof(buf), "<%s %u>", what, id);
	}
	return ringdec_put(d, buf, (size_t)n, out);
}

/* Whether symtab string `id` is empty (as text_keep() kept it). */
static bool ringdec_empty(const struct ringdec *d, uint32_t id)
{
	size_t len;

	return symtab_str(d->syms, id, &len) != NULL && len == 0;
}

static int ringdec_def_string(struct ringdec *d, const void *payload,
			      size_t len)
{
	const struct ring_string *s = payload;
	uint64_t over;
	uint32_t id;
	int err;

	if (len < sizeof(*s) || s->len > len - sizeof(*s) ||
	    len - sizeof(*s) - s->len >= RING_ALIGN || s->id == 0)
		return ringdec_bad(d, "malformed string definition",
				   RING_REC_STRING, len);
	over = d->n.over_cap;
	err = ringdec_intern(d, s->bytes, s->len, &id);
	/* Past the bound nothing is kept, not even the mapping. */
	if (err == 0 && d->n.over_cap != over)
		return 0;
	if (err == 0)
		err = ringdec_map_put(&d->strings, s->id,
				 id | (ringdec_empty(d, id) ? RINGDEC_EMPTY : 0));
	if (err == 0)
		d->n.strings++;
	return err;
}

static int ringdec_def_stack(struct ringdec *d, const void *payload,
			     size_t len)
{
	const struct ring_stack *s = payload;
	uint32_t id;
	int err;

	if (len < sizeof(*s) || s->nframes > (len - sizeof(*s)) / 4 ||
	    len - sizeof(*s) - (size_t)s->nframes * 4 >= RING_ALIGN ||
	    s->id == 0)
		return ringdec_bad(d, "malformed stack definition",
				   RING_REC_STACK, len);
	err = grow_array((void **)&d->frames, &d->frames_cap, s->nframes,
			      sizeof(*d->frames));
	for (uint32_t i = 0; err == 0 && i < s->nframes; i++)
		err = ringdec_string(d, s->frames[i], "frame", &d->frames[i]);
	if (err == 0 && ringdec_over_cap(d, (size_t)s->nframes * 4))
		return 0; /* an undefined stack: the empty one */
	if (err == 0)
		err = symtab_intern_stack(d->syms, d->frames, s->nframes, &id);
	if (err == 0)
		err = ringdec_map_put(&d->stacks, s->id, id);
	if (err == 0)
		d->n.stacks++;
	return err;
}

static uint32_t ringdec_stack(struct ringdec *d, uint32_t id)
{
	const uint64_t *v;

	if (id == 0)
		return 0;
	v = ringdec_map_get(&d->stacks, id);
	if (v == NULL) {
		d->n.undefined++;
		return 0;
	}
	return (uint32_t)*v;
}

/* `len` cut so that [ptr, ptr + len) ends by 2^64. */
static uint64_t ringdec_clamp(uint64_t ptr, uint64_t len)
{
	return ptr != 0 && len > 0 - ptr ? 0 - ptr : len;
}

/* Copies the ranges that hold a byte, cut at 2^64; their count. */
static size_t ringdec_ranges(const struct ring_range *in, size_t n,
			     struct op_range *out)
{
	size_t kept = 0;

	for (size_t i = 0; i < n; i++) {
		if (in[i].len == 0)
			continue;
		out[kept].ptr = in[i].ptr;
		out[kept].len = ringdec_clamp(in[i].ptr, in[i].len);
		kept++;
	}
	return kept;
}

/* The symtab id of a launch's name, producer string `id`. An empty name
 * (npusan_intern("")) is none: a trace's `op` is never empty, and a
 * recording must stay a trace. */
static int ringdec_op_name(struct ringdec *d, uint32_t id, uint32_t *out)
{
	const uint64_t *v = id ? ringdec_map_get(&d->strings, id) : NULL;

	if (v != NULL && !(*v & RINGDEC_EMPTY)) {
		*out = (uint32_t)*v;
		return 0;
	}
	return ringdec_string(d, v != NULL ? 0 : id, "operator", out);
}

/*
 * The args of launch `l` into d->args, kept in step with the ranges
 * ringdec_ranges() kept: a name never defined, or not op_arg_ok(), is
 * none, so that the daemon and a recording see the same names. 1.
 */
static int ringdec_args(struct ringdec *d, const struct ring_launch *l,
			struct op *op)
{
	const uint32_t *in = (const uint32_t *)(l->ranges + l->nreads +
						l->nwrites);
	size_t kept = 0, named[2] = { 0, 0 };

	for (uint64_t i = 0; i < (uint64_t)l->nreads + l->nwrites; i++) {
		const uint64_t *v = NULL;
		const char *name = NULL;
		uint32_t id = 0;
		size_t len = 0;

		if (l->ranges[i].len == 0)
			continue;
		if (in[i] != 0 && (v = ringdec_map_get(&d->strings, in[i])) == NULL)
			d->n.undefined++;
		if (v != NULL)
			name = symtab_str(d->syms, (uint32_t)*v, &len);
		if (op_arg_ok(name, len))
			id = (uint32_t)*v;
		named[i >= l->nreads] += id != 0;
		d->args[kept++] = id;
	}
	op->read_args = named[0] ? d->args : NULL;
	op->write_args = named[1] ? d->args + op->nreads : NULL;
	return 1;
}

static int ringdec_launch(struct ringdec *d, const void *payload, size_t len,
			  struct op *op)
{
	const struct ring_launch *l = payload;
	uint64_t n;
	bool args;
	int err;

	if (len < sizeof(*l) || l->kind != OP_LAUNCH)
		return ringdec_bad(d, "malformed launch", RING_REC_LAUNCH, len);
	n = (uint64_t)l->nreads + l->nwrites;
	args = (l->flags & RING_LAUNCH_HAS_ARGS) != 0;
	if (n > (len - sizeof(*l)) / sizeof(l->ranges[0]) ||
	    len != ring_launch_size(n, args))
		return ringdec_bad(d, "launch ranges do not match its length",
				   RING_REC_LAUNCH, len);
	err = n <= d->ranges_cap ? 0 :
	      grow_array((void **)&d->ranges, &d->ranges_cap, n,
			 sizeof(*d->ranges));
	if (err == 0 && args && n > d->args_cap)
		err = grow_array((void **)&d->args, &d->args_cap, n,
				 sizeof(*d->args));
	if (err == 0)
		err = ringdec_op_name(d, l->name, &op->name);
	if (err < 0)
		return err;
	op->kind = OP_LAUNCH;
	op->stack = ringdec_stack(d, l->stack);
	op->stream = l->stream;
	op->reads = d->ranges;
	op->nreads = ringdec_ranges(l->ranges, l->nreads, d->ranges);
	op->writes = d->ranges + op->nreads;
	op->nwrites = ringdec_ranges(l->ranges + l->nreads, l->nwrites,
				     d->ranges + op->nreads);
	op->read_args = op->write_args = NULL;
	if (args)
		return ringdec_args(d, l, op);
	return 1;
}

/* Spreads a struct ring_op's a, b, c over the fields its kind uses. */
static void ringdec_fields(const struct ring_op *r, struct op *op)
{
	switch (op->kind) {
	case OP_STREAM_CREATE:
	case OP_STREAM_SYNC:
		op->stream = r->a;
		break;
	case OP_EVENT_CREATE:
	case OP_EVENT_DESTROY:
	case OP_EVENT_SYNC:
		op->event = r->a;
		break;
	case OP_EVENT_RECORD:
	case OP_EVENT_WAIT:
		op->event = r->a;
		op->stream = r->b;
		break;
	case OP_STREAM_WAIT:
		op->stream = r->a;
		op->on = r->b;
		break;
	case OP_ALLOC:
		op->ptr = r->a;
		op->size = ringdec_clamp(r->a, r->b);
		op->has_stream = (r->flags & RING_OP_HAS_STREAM) != 0;
		op->stream = op->has_stream ? r->c : 0;
		break;
	case OP_FREE:
		op->ptr = r->a;
		break;
	case OP_RECORD_STREAM:
		op->ptr = r->a;
		op->stream = r->b;
		break;
	case OP_GAP:
		op->has_lost = (r->flags & RING_OP_HAS_LOST) != 0;
		op->lost = op->has_lost ? r->a : 0;
		break;
	case OP_CAPTURE_BEGIN:
	case OP_CAPTURE_END:
		op->stream = r->a;
		op->graph = r->b;
		break;
	case OP_GRAPH_REPLAY:
		op->graph = r->a;
		op->stream = r->b;
		break;
	case OP_GRAPH_DESTROY:
		op->graph = r->a;
		break;
	default:
		break;
	}
}

/* Whether `len` bytes are the length of op record `r`: a ring_op_graph
 * exactly when it is an alloc from a graph's pool, else a ring_op. */
static bool ringdec_op_len_ok(const struct ring_op *r, size_t len)
{
	if (len == sizeof(struct ring_op))
		return !(r->flags & RING_OP_HAS_GRAPH);
	return len == sizeof(struct ring_op_graph) && r->kind == OP_ALLOC &&
	       (r->flags & RING_OP_HAS_GRAPH);
}

static int ringdec_op(struct ringdec *d, const void *payload, size_t len,
		      struct op *op)
{
	const struct ring_op *r = payload;

	if (len < sizeof(*r) || !ringdec_op_len_ok(r, len) ||
	    r->kind >= OP_KIND_COUNT || r->kind == OP_LAUNCH)
		return ringdec_bad(d, "malformed operation", RING_REC_OP, len);
	op->kind = r->kind;
	op->stack = ringdec_stack(d, r->stack);
	ringdec_fields(r, op);
	if (len == sizeof(struct ring_op_graph)) {
		op->has_graph = true;
		op->graph = ((const struct ring_op_graph *)payload)->graph;
	}
	if (op->kind == OP_GAP && op->lost > RINGREAD_MAX_COUNT) {
		/* Still a gap, of an unknown number: the count is nonsense. */
		snprintf(d->error, sizeof(d->error),
			 "a gap claims %" PRIu64 " operations lost", op->lost);
		d->n.malformed++;
		op->has_lost = false;
		op->lost = 0;
	}
	return 1;
}

/*
 * A record that carries an operation, or may (its type is unknown), and
 * could not be made one: that operation is lost, and a gap of one takes
 * its place, so that no finding pairs an access before it with one after
 * it (a dropped sync would otherwise make a race of two ordered accesses).
 */
static void ringdec_lost_op(struct op *op)
{
	memset(op, 0, sizeof(*op));
	op->kind = OP_GAP;
	op->has_lost = true;
	op->lost = 1;
}

int ringdec_record(struct ringdec *d, unsigned type, const void *payload,
		   size_t len, struct op *op)
{
	int ret;

	memset(op, 0, sizeof(*op));
	switch (type) {
	case RINGREAD_LOST:
		op->kind = OP_GAP;
		ret = 1;
		break;
	case RING_REC_STRING:
		return ringdec_def_string(d, payload, len);
	case RING_REC_STACK:
		return ringdec_def_stack(d, payload, len);
	case RING_REC_OP:
		ret = ringdec_op(d, payload, len, op);
		break;
	case RING_REC_LAUNCH:
		ret = ringdec_launch(d, payload, len, op);
		break;
	default:
		ret = ringdec_bad(d, "unknown record type", type, len);
		break;
	}
	if (ret < 0) {
		if (ret != -EBADMSG)
			snprintf(d->error, sizeof(d->error),
				 "%s (record type %u, %zu bytes)",
				 strerror(-ret), type, len);
		ringdec_lost_op(op);
		d->n.lost++;
		ret = 1;
	}
	d->n.ops++;
	return ret;
}
