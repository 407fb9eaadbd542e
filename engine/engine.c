/*
 * engine.c - the public face of the engine (engine.h): engine_feed()
 * validates an op and dispatches it, by kind, to the part that handles it;
 * engine_new() and engine_free() set up and tear down every part. The
 * parts and the invariants they keep are described in engine_int.h.
 *
 * Owns the struct engine itself; each part frees what it owns through its
 * *__fini() from engine_free().
 */
#include "engine_int.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static bool engine_range_ok(const struct op_range *r)
{
	return r->len >= 1 && r->ptr <= UINT64_MAX - (r->len - 1);
}

static bool engine_op_valid(const struct op *op)
{
	if ((unsigned)op->kind >= OP_KIND_COUNT)
		return false;
	if (op->kind == OP_LAUNCH) {
		if (op->nreads + op->nwrites > UINT32_MAX)
			return false;
		for (size_t i = 0; i < op->nreads; i++) {
			if (!engine_range_ok(&op->reads[i]))
				return false;
		}
		for (size_t i = 0; i < op->nwrites; i++) {
			if (!engine_range_ok(&op->writes[i]))
				return false;
		}
	}
	if (op->kind == OP_ALLOC && op->size > 1 &&
	    op->ptr > UINT64_MAX - (op->size - 1))
		return false;
	return true;
}

/*
 * The one dispatch over op kinds: each kind goes to the part that owns the
 * state it changes. It has no default, so that a kind added to op.h does
 * not compile (-Wswitch) until it has a case here and a handler in a part.
 */
int engine_feed(struct engine *e, const struct op *op)
{
	int err = 0;

	if (!engine_op_valid(op))
		return -EINVAL;
	if (op->kind < OP_FIRST_V2 && graph__active(e)) {
		err = graph__intercept(e, op);
		if (err != 0) /* captured or refused, or failed */
			goto graph;
	}
	switch (op->kind) {
	case OP_LAUNCH:
		err = launch__on_op(e, op);
		break;
	case OP_ALLOC:
		err = alloc__on_alloc(e, op);
		break;
	case OP_FREE:
		err = alloc__on_free(e, op);
		break;
	case OP_RECORD_STREAM:
		err = alloc__on_record_stream(e, op);
		break;
	case OP_FLUSH:
		alloc__on_flush(e);
		break;
	case OP_GAP:
		history__forget(e);
		graph__forget(e);
		e->st.gaps++;
		break;
	case OP_STREAM_CREATE:
	case OP_EVENT_CREATE:
	case OP_EVENT_DESTROY:
	case OP_EVENT_RECORD:
	case OP_EVENT_WAIT:
	case OP_EVENT_SYNC:
	case OP_STREAM_WAIT:
	case OP_STREAM_SYNC:
	case OP_DEVICE_SYNC:
		err = sync__on_op(e, op);
		break;
	case OP_CAPTURE_BEGIN:
	case OP_CAPTURE_END:
	case OP_GRAPH_REPLAY:
	case OP_GRAPH_DESTROY:
		err = graph__on_op(e, op);
		goto graph;
	case OP_KIND_COUNT: /* refused by engine_op_valid() */
		return -EINVAL;
	}
	goto out;
graph:
	/* A capture or footprint that lost part of itself could report what
	 * never happened: forget as at a gap, as engine.h promises. */
	if (err == -ENOMEM) {
		history__forget(e);
		graph__forget(e);
	}
out:
	if (err > 0)
		err = 0;
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
	e->access_pool.indexed = true;
	e->access_at_pool.size = sizeof(struct access_at);
	e->access_at_pool.indexed = true;
	e->access_at_pool.names = &e->access_pool;
	e->seg_pool.size = sizeof(struct seg);
	e->alloc_pool.size = sizeof(struct alloc);
	e->alloc_pool.indexed = true;
	e->usage_pool.size = alloc__usages_size(1);
	e->live_pool.size = sizeof(struct usage_live);
	e->live_pool.indexed = true;
	pool__note(e, sizeof(*e));
	if (alloc__init(e) < 0 || u64map_init(&e->stream_ids) < 0 ||
	    u64map_init(&e->events) < 0 ||
	    u64map_init(&e->graphs) < 0 || u64map_init(&e->crecs) < 0 ||
	    sync__stream_create(e, 0, &s) < 0) {
		engine_free(e);
		return -ENOMEM;
	}
	e->last_stream_id = 0;
	e->last_sidx = s;
	*out = e;
	return 0;
}

/* The histories first, which drop their references to access records:
 * the captures', the allocations' with them, then the rest, which frees
 * the read list table they shared. */
void engine_free(struct engine *e)
{
	if (e == NULL)
		return;
	graph__fini(e);
	alloc__fini(e);
	history__fini(e);
	sync__fini(e);
	finding__fini(e);
	launch__fini(e);
	pool__fini(&e->access_pool);
	pool__fini(&e->access_at_pool);
	pool__fini(&e->seg_pool);
	pool__fini(&e->alloc_pool);
	pool__fini(&e->usage_pool);
	pool__fini(&e->live_pool);
	free(e);
}

void engine_get_stats(const struct engine *e, struct engine_stats *out)
{
	*out = e->st;
	out->bytes = pool__bytes(e);
}
