/*
 * sync.c - the sync state (trace-format.md's "sync state"): one vector clock
 * per stream, one per recorded event and one for the host, and the ops that
 * merge them (event record/wait/sync, stream wait/sync, device sync). Also
 * the floor of DESIGN 5, the clock below which no read can race any more.
 *
 * Owns e->streams with their clocks, e->host, e->floor and the events
 * (e->events maps an id to a struct event this file allocates); all are
 * freed by sync__fini().
 */
#include "engine_int.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- streams, events and clocks ---------------------------------------- */

void sync__merge(int64_t *dst, const int64_t *src, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		if (src[i] > dst[i])
			dst[i] = src[i];
	}
}

/* DESIGN 5. Raising a clock only marks the floor stale: recomputing it
 * costs O(streams^2), and only a growing read list needs it. */
static void sync_clocks_raised(struct engine *e)
{
	e->floor_stale = true;
}

const int64_t *sync__floor(struct engine *e)
{
	if (!e->floor_stale)
		return e->floor;
	e->floor_stale = false;
	for (uint32_t t = 0; t < e->nstreams; t++) {
		int64_t m = e->host[t];

		for (uint32_t s = 0; s < e->nstreams; s++) {
			if (e->streams[s].state[t] < m)
				m = e->streams[s].state[t];
		}
		e->floor[t] = m;
	}
	return e->floor;
}

/* Allocates every new clock array before replacing any, so that a failure
 * leaves the engine exactly as it was. */
static int sync_grow_clocks(struct engine *e)
{
	uint32_t n = e->nstreams, ncap = e->scap ? e->scap * 2 : 8;
	size_t size, arrays = n + 2; /* every stream's, host, floor */
	struct stream *streams;
	int64_t **fresh;

	assert(e->nstreams == e->scap);
	if (ncap > ENGINE_MAX_STREAMS)
		ncap = ENGINE_MAX_STREAMS;
	size = ncap * sizeof(int64_t);
	fresh = calloc(arrays, sizeof(*fresh));
	if (fresh == NULL)
		return -ENOMEM;
	streams = pool__realloc(e, NULL, 0, ncap * sizeof(*streams));
	for (size_t i = 0; streams != NULL && i < arrays; i++) {
		if ((fresh[i] = pool__realloc(e, NULL, 0, size)) == NULL)
			break;
	}
	if (streams == NULL || fresh[arrays - 1] == NULL) {
		for (size_t i = 0; i < arrays; i++)
			pool__free(e, fresh[i], size);
		pool__free(e, streams, ncap * sizeof(*streams));
		free(fresh);
		return -ENOMEM;
	}
	for (size_t i = 0; i < arrays; i++) {
		int64_t **old = i < n ? &e->streams[i].state
				: i == n ? &e->host : &e->floor;

		for (uint32_t t = 0; t < ncap; t++)
			fresh[i][t] = t < e->scap ? (*old)[t] : -1;
		pool__free(e, *old, e->scap * sizeof(int64_t));
		*old = fresh[i];
	}
	if (n > 0)
		memcpy(streams, e->streams, n * sizeof(*streams));
	pool__free(e, e->streams, e->scap * sizeof(*streams));
	e->streams = streams;
	e->scap = ncap;
	free(fresh);
	return 0;
}

/* `stream_create S`: host[S] = 0; state[S] = copy(host). */
int sync__stream_create(struct engine *e, uint64_t id, uint16_t *out)
{
	uint32_t s = e->nstreams;
	int64_t *state;
	int err;

	assert(e->nstreams <= e->scap);
	if (s == ENGINE_MAX_STREAMS)
		return -E2BIG;
	if (s == e->scap && (err = sync_grow_clocks(e)) < 0)
		return err;
	state = pool__realloc(e, NULL, 0, e->scap * sizeof(int64_t));
	if (state == NULL)
		return -ENOMEM;
	if ((err = u64map_put(&e->stream_ids, id, s)) < 0) {
		pool__free(e, state, e->scap * sizeof(int64_t));
		return err;
	}
	e->host[s] = 0;
	memcpy(state, e->host, e->scap * sizeof(int64_t));
	e->streams[s] = (struct stream){ .id = id, .state = state };
	e->nstreams++;
	e->st.streams = e->nstreams;
	sync_clocks_raised(e);
	*out = (uint16_t)s;
	return 0;
}

/* The number of stream `id`, or -1 when it is new. A job uses a handful
 * of streams, and scanning those beats hashing. */
int sync__stream_find(const struct engine *e, uint64_t id)
{
	const uint64_t *v;

	if (e->nstreams <= 8) {
		for (uint32_t i = 0; i < e->nstreams; i++) {
			if (e->streams[i].id == id)
				return (int)i;
		}
		return -1;
	}
	v = u64map_get(&e->stream_ids, id);
	return v != NULL ? (int)*v : -1;
}

/* sync__stream_get() past its one-entry cache: finds the stream, or
 * creates it ("backfill"). 0; -E2BIG or -ENOMEM with *out unwritten. */
int sync__stream_get_slow(struct engine *e, uint64_t id, uint16_t *out)
{
	int s, err;

	if ((s = sync__stream_find(e, id)) >= 0)
		*out = (uint16_t)s;
	else if ((err = sync__stream_create(e, id, out)) < 0)
		return err;
	e->last_stream_id = id;
	e->last_sidx = *out;
	return 0;
}

static bool sync_stream_known(const struct engine *e, uint64_t id)
{
	return sync__stream_find(e, id) >= 0;
}

/* Fails with -E2BIG before anything changes when `n` new streams would not
 * fit. sync__stream_get() refuses one new stream by itself; an op that
 * names two asks here first, so that it cannot create the first and then
 * fail. */
int sync__streams_fit(const struct engine *e, const uint64_t *ids, int n)
{
	uint32_t need = 0;

	for (int i = 0; i < n; i++) {
		bool seen = sync_stream_known(e, ids[i]);

		for (int j = 0; j < i && !seen; j++)
			seen = ids[j] == ids[i];
		need += !seen;
	}
	return e->nstreams + need > ENGINE_MAX_STREAMS ? -E2BIG : 0;
}

static struct event *sync_event_find(const struct engine *e, uint64_t id)
{
	const uint64_t *v = u64map_get(&e->events, id);

	return v != NULL ? (struct event *)(uintptr_t)*v : NULL;
}

/* The bytes of an event recording a clock of `n` streams. */
static size_t sync_event_size(uint32_t n)
{
	return sizeof(struct event) + n * sizeof(int64_t);
}

static void sync_event_drop(struct engine *e, uint64_t id)
{
	struct event *ev = sync_event_find(e, id);

	if (ev == NULL)
		return;
	u64map_del(&e->events, id);
	pool__free(e, ev, sync_event_size(ev->n));
}

/* `event_record E S`: recorded[E] = copy(state[S]). An event is one block,
 * sized again only when the streams grew since it last recorded. */
static int sync_event_record(struct engine *e, uint64_t id, uint16_t s)
{
	uint64_t *slot = u64map_get(&e->events, id);
	struct event *ev = slot ? (struct event *)(uintptr_t)*slot : NULL;
	uint32_t n = e->nstreams;

	assert(s < n);
	if (ev == NULL || ev->n != n) {
		struct event *grown =
			pool__realloc(e, ev, ev ? sync_event_size(ev->n) : 0,
				      sync_event_size(n));

		if (grown == NULL)
			return -ENOMEM;
		if (slot != NULL) {
			*slot = (uintptr_t)grown;
		} else if (u64map_put(&e->events, id, (uintptr_t)grown) < 0) {
			pool__free(e, grown, sync_event_size(n));
			return -ENOMEM;
		}
		ev = grown;
		ev->n = n;
	}
	memcpy(ev->rec, e->streams[s].state, n * sizeof(int64_t));
	return 0;
}

static void sync_all_streams_merge(struct engine *e, const int64_t *src,
				   uint32_t n)
{
	assert(n <= e->scap);
	for (uint32_t s = 0; s < e->nstreams; s++)
		sync__merge(e->streams[s].state, src, n);
	sync__merge(e->host, src, n);
	sync_clocks_raised(e);
	history__drop_dead_writes(e);
}

/* ---- sync operations --------------------------------------------------- */

int sync__on_op(struct engine *e, const struct op *op)
{
	uint64_t ids[2] = { op->stream, op->on };
	struct event *ev;
	uint16_t s, b;
	int err;

	switch (op->kind) {
	case OP_STREAM_CREATE:
		return sync__stream_get(e, op->stream, &s);
	case OP_EVENT_CREATE:
	case OP_EVENT_DESTROY:
		/* recorded[E] = empty; an absent event is an empty one */
		sync_event_drop(e, op->event);
		return 0;
	case OP_EVENT_RECORD:
		if ((err = sync__stream_get(e, op->stream, &s)) < 0)
			return err;
		return sync_event_record(e, op->event, s);
	case OP_EVENT_WAIT:
		if ((err = sync__stream_get(e, op->stream, &s)) < 0)
			return err;
		if ((ev = sync_event_find(e, op->event)) != NULL) {
			sync__merge(e->streams[s].state, ev->rec, ev->n);
			sync_clocks_raised(e);
		}
		return 0;
	case OP_EVENT_SYNC:
		if ((ev = sync_event_find(e, op->event)) != NULL)
			sync_all_streams_merge(e, ev->rec, ev->n);
		return 0;
	case OP_STREAM_WAIT:
		if ((err = sync__streams_fit(e, ids, 2)) < 0 ||
		    (err = sync__stream_get(e, op->stream, &s)) < 0 ||
		    (err = sync__stream_get(e, op->on, &b)) < 0)
			return err;
		sync__merge(e->streams[s].state, e->streams[b].state,
			   e->nstreams);
		sync_clocks_raised(e);
		return 0;
	case OP_STREAM_SYNC:
		if ((err = sync__stream_get(e, op->stream, &s)) < 0)
			return err;
		sync_all_streams_merge(e, e->streams[s].state, e->nstreams);
		return 0;
	case OP_DEVICE_SYNC:
		for (uint32_t t = 0; t < e->nstreams; t++)
			e->host[t] = e->streams[t].state[t];
		sync_all_streams_merge(e, e->host, e->nstreams);
		return 0;
	default:
		return -EINVAL;
	}
}

/* Frees the events, then every clock. */
void sync__fini(struct engine *e)
{
	size_t pos = 0;
	uint64_t val;

	while (u64map_next(&e->events, &pos, NULL, &val)) {
		free((struct event *)(uintptr_t)val);
	}
	for (uint32_t s = 0; s < e->nstreams; s++)
		free(e->streams[s].state);
	free(e->streams);
	free(e->host);
	free(e->floor);
	u64map_fini(&e->stream_ids);
	u64map_fini(&e->events);
}
