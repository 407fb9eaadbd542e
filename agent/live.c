/*
 * live.c - the process's live streams, events and allocations (live.h).
 *
 * DESIGN
 * 1. Streams and events are sets (u64map, value unused), each under one
 *    mutex: they change rarely. Allocations are spread over LIVE_STRIPES
 *    stripes by a hash of their start; a stripe maps a start to an index
 *    into its dense array of entries, and a free moves the last entry into
 *    the hole, so the array never has holes to skip or reuse.
 * 2. A table is created on its first use, under its lock, so that a
 *    process that never attaches pays nothing at start-up.
 * 3. The push function an update is given runs under the same lock as the
 *    update, and live_snapshot() walks each table under its lock: the two
 *    can never interleave for one entry (live.h).
 */
#include "live.h"

#include <pthread.h>
#include <stdlib.h>

#include "grow.h"
#include "hash.h"
#include "u64map.h"

#define LIVE_STRIPE_BITS 6
#define LIVE_STRIPES (1u << LIVE_STRIPE_BITS)

struct live_set {
	pthread_mutex_t lock;
	struct u64map ids;
};

struct live_stripe {
	pthread_mutex_t lock;
	struct u64map index; /* start -> index into ents */
	struct live_alloc *ents;
	size_t n, cap;
};

static struct live_set live_streams = { PTHREAD_MUTEX_INITIALIZER, { 0 } };
static struct live_set live_events = { PTHREAD_MUTEX_INITIALIZER, { 0 } };
static struct live_stripe live_stripes[LIVE_STRIPES];
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

static void live_init_locks(void)
{
	for (unsigned i = 0; i < LIVE_STRIPES; i++)
		pthread_mutex_init(&live_stripes[i].lock, NULL);
}

static struct live_stripe *live_stripe_of(uint64_t ptr)
{
	pthread_once(&live_once, live_init_locks);
	return &live_stripes[hash_u64(ptr) >> (64 - LIVE_STRIPE_BITS)];
}

/* Whether `m` exists, creating it (DESIGN 2). */
static bool live_map_ready(struct u64map *m)
{
	return m->slots != NULL || u64map_init(m) == 0;
}

static void live_set_put(struct live_set *s, uint64_t id, bool add,
			 live_push_fn push, void *arg)
{
	pthread_mutex_lock(&s->lock);
	if (add) {
		if (live_map_ready(&s->ids))
			(void)u64map_put(&s->ids, id, 0);
	} else if (s->ids.slots != NULL) {
		u64map_del(&s->ids, id);
	}
	push(arg);
	pthread_mutex_unlock(&s->lock);
}

void live_stream_create(uint64_t stream, live_push_fn push, void *arg)
{
	live_set_put(&live_streams, stream, true, push, arg);
}

void live_event_create(uint64_t event, live_push_fn push, void *arg)
{
	live_set_put(&live_events, event, true, push, arg);
}

void live_event_destroy(uint64_t event, live_push_fn push, void *arg)
{
	live_set_put(&live_events, event, false, push, arg);
}

/* Adds or replaces `a` in `st`; false when out of memory. */
static bool live_stripe_put(struct live_stripe *st, const struct live_alloc *a)
{
	uint64_t *at;
	if (!live_map_ready(&st->index))
		return false;
	at = u64map_get(&st->index, a->ptr);
	if (at != NULL) {
		st->ents[*at] = *a;
		return true;
	}
	if (grow_array((void **)&st->ents, &st->cap, st->n + 1,
		       sizeof(*st->ents)) < 0)
		return false;
	if (u64map_put(&st->index, a->ptr, st->n) < 0)
		return false;
	st->ents[st->n++] = *a;
	return true;
}

static void live_stripe_del(struct live_stripe *st, uint64_t ptr)
{
	uint64_t *at = st->index.slots ? u64map_get(&st->index, ptr) : NULL;
	size_t i;

	if (at == NULL)
		return;
	i = (size_t)*at;
	u64map_del(&st->index, ptr);
	if (i != --st->n) {
		st->ents[i] = st->ents[st->n];
		*u64map_get(&st->index, st->ents[i].ptr) = i;
	}
}

void live_alloc(const struct live_alloc *a, live_push_fn push, void *arg)
{
	struct live_stripe *st = live_stripe_of(a->ptr);

	pthread_mutex_lock(&st->lock);
	(void)live_stripe_put(st, a);
	push(arg);
	pthread_mutex_unlock(&st->lock);
}

void live_free(uint64_t ptr, live_push_fn push, void *arg)
{
	struct live_stripe *st = live_stripe_of(ptr);

	pthread_mutex_lock(&st->lock);
	live_stripe_del(st, ptr);
	push(arg);
	pthread_mutex_unlock(&st->lock);
}

static void live_set_walk(struct live_set *s,
			  void (*cb)(uint64_t id, void *arg), void *arg)
{
	size_t pos = 0;
	uint64_t id;

	pthread_mutex_lock(&s->lock);
	while (u64map_next(&s->ids, &pos, &id, NULL))
		cb(id, arg);
	pthread_mutex_unlock(&s->lock);
}

void live_snapshot(const struct live_snapshot_cbs *cbs)
{
	pthread_once(&live_once, live_init_locks);
	live_set_walk(&live_streams, cbs->stream, cbs->arg);
	live_set_walk(&live_events, cbs->event, cbs->arg);
	for (unsigned i = 0; i < LIVE_STRIPES; i++) {
		struct live_stripe *st = &live_stripes[i];

		pthread_mutex_lock(&st->lock);
		for (size_t j = 0; j < st->n; j++)
			cbs->alloc(&st->ents[j], cbs->arg);
		pthread_mutex_unlock(&st->lock);
	}
}

void live_atfork_prepare(void)
{
	pthread_once(&live_once, live_init_locks);
	pthread_mutex_lock(&live_streams.lock);
	pthread_mutex_lock(&live_events.lock);
	for (unsigned i = 0; i < LIVE_STRIPES; i++)
		pthread_mutex_lock(&live_stripes[i].lock);
}

void live_atfork_parent(void)
{
	for (unsigned i = LIVE_STRIPES; i-- > 0;)
		pthread_mutex_unlock(&live_stripes[i].lock);
	pthread_mutex_unlock(&live_events.lock);
	pthread_mutex_unlock(&live_streams.lock);
}

void live_atfork_child(void)
{
	if (live_streams.ids.slots != NULL)
		u64map_clear(&live_streams.ids);
	if (live_events.ids.slots != NULL)
		u64map_clear(&live_events.ids);
	for (unsigned i = 0; i < LIVE_STRIPES; i++) {
		if (live_stripes[i].index.slots != NULL)
			u64map_clear(&live_stripes[i].index);
		live_stripes[i].n = 0;
	}
	live_atfork_parent();
}

void live_fini(void)
{
	u64map_fini(&live_streams.ids);
	u64map_fini(&live_events.ids);
	for (unsigned i = 0; i < LIVE_STRIPES; i++) {
		u64map_fini(&live_stripes[i].index);
		free(live_stripes[i].ents);
		live_stripes[i].ents = NULL;
		live_stripes[i].n = live_stripes[i].cap = 0;
	}
}
