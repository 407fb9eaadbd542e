/*
 * intern.c - lock-free lookup, locked insertion.
 *
 * DESIGN
 *
 * 1. A table is an open-addressing array of slots, each a hash and an
 *    entry pointer, at most half full. A reader loads the current array
 *    (acquire) and probes until it meets its key or an empty slot; the
 *    entry pointer of a slot is stored last (release), so a reader that sees
 *    it sees the entry and the hash.
 * 2. Inserting holds `intern_lock`: look up again, allocate the entry, give
 *    it the next id, publish it in the id index, then in the table. Growing
 *    copies the slots into a twice larger array and publishes it; the old
 *    array stays allocated (readers may still be in it) until intern_fini().
 * 3. Ids index a two-level array of fixed chunks, so an id lookup is two
 *    loads and never sees a moving array.
 */
#include "intern.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"
#include "stack.h"


struct intern_slot {
	_Atomic uint64_t hash;
	_Atomic(void *) entry;
};

struct intern_array {
	size_t mask;
	size_t count;
	struct intern_array *retired; /* older arrays, freed at fini */
	struct intern_slot slots[];
};

/* A table of entries whose key starts at `key_off` and is `n * unit` bytes. */
struct intern_table {
	_Atomic(struct intern_array *) cur;
	size_t key_off;
	size_t unit;
};

/* pcs -> stack id, for native stacks */
struct intern_native {
	struct intern_head h; /* h.id is the stack id, h.n the pc count */
	uintptr_t pcs[];
};

static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static struct intern_table strings = { .key_off = offsetof(struct intern_str, bytes), .unit = 1 };
static struct intern_table stacks = { .key_off = offsetof(struct intern_stack, frames), .unit = 4 };
static struct intern_table natives = { .key_off = offsetof(struct intern_native, pcs), .unit = sizeof(uintptr_t) };
struct intern_ids intern__string_ids, intern__stack_ids;

/* Under intern_lock: gives `e` the next id. 0 or -ENOMEM/-E2BIG. */
static int intern_id_add(struct intern_ids *ids, struct intern_head *e)
{
	uint32_t id = ids->next ? ids->next : 1;
	_Atomic(void *) *chunk;

	if (id >= INTERN_MAX_IDS)
		return -E2BIG;
	chunk = atomic_load_explicit(&ids->chunks[id / INTERN_CHUNK],
				     memory_order_relaxed);
	if (chunk == NULL) {
		chunk = calloc(INTERN_CHUNK, sizeof(*chunk));
		if (chunk == NULL)
			return -ENOMEM;
		/* Release: pairs with the acquire load in intern__id_get(). */
		atomic_store_explicit(&ids->chunks[id / INTERN_CHUNK], chunk,
				      memory_order_release);
	}
	e->id = id;
	/* Release: the entry is complete before its id resolves to it. */
	atomic_store_explicit(&chunk[id % INTERN_CHUNK], e,
			      memory_order_release);
	ids->next = id + 1;
	return 0;
}

static bool intern_match(const struct intern_table *t,
			 const struct intern_head *e, uint64_t hash,
			 const void *key, size_t n)
{
	return e->hash == hash && e->n == n &&
	       memcmp((const char *)e + t->key_off, key, n * t->unit) == 0;
}

/* The entry with this key, or NULL. Lock-free. */
static struct intern_head *intern_find(struct intern_table *t, uint64_t hash,
				       const void *key, size_t n)
{
	/* Acquire: pairs with the release store in intern_grow(). */
	struct intern_array *a = atomic_load_explicit(&t->cur,
						      memory_order_acquire);
	struct intern_head *e;
	size_t i;

	if (a == NULL)
		return NULL;
	for (i = hash & a->mask;; i = (i + 1) & a->mask) {
		/* Acquire: pairs with the release store in intern_put(). */
		e = atomic_load_explicit(&a->slots[i].entry,
					 memory_order_acquire);
		if (e == NULL || intern_match(t, e, hash, key, n))
			return e;
	}
}

/* Under intern_lock: stores e in array a, which has room. */
static void intern_put(struct intern_array *a, struct intern_head *e)
{
	size_t i = e->hash & a->mask;

	while (atomic_load_explicit(&a->slots[i].entry, memory_order_relaxed))
		i = (i + 1) & a->mask;
	atomic_store_explicit(&a->slots[i].hash, e->hash,
			      memory_order_relaxed);
	/* Release: pairs with the acquire load in intern_find(). */
	atomic_store_explicit(&a->slots[i].entry, e, memory_order_release);
	a->count++;
}

/* Under intern_lock: makes room for one more entry. 0 or -ENOMEM. */
static int intern_grow(struct intern_table *t)
{
	struct intern_array *old = atomic_load_explicit(&t->cur,
							memory_order_relaxed);
	size_t slots = old ? (old->mask + 1) * 2 : 64;
	struct intern_array *a;
	void *e;

	if (old != NULL && (old->count + 1) * 2 <= old->mask + 1)
		return 0;
	a = calloc(1, sizeof(*a) + slots * sizeof(a->slots[0]));
	if (a == NULL)
		return -ENOMEM;
	a->mask = slots - 1;
	a->retired = old;
	for (size_t i = 0; old != NULL && i <= old->mask; i++) {
		e = atomic_load_explicit(&old->slots[i].entry,
					 memory_order_relaxed);
		if (e != NULL)
			intern_put(a, e);
	}
	/* Release: pairs with the acquire load in intern_find(). */
	atomic_store_explicit(&t->cur, a, memory_order_release);
	return 0;
}

/*
 * The id of the key, inserting a copy of it when new. `extra` bytes follow
 * the key in the new entry (a string's NUL). 0 on failure.
 */
static uint32_t intern_add(struct intern_table *t, struct intern_ids *ids,
			   const void *key, size_t n, size_t extra)
{
	uint64_t hash = hash_bytes(key, n * t->unit);
	struct intern_head *e = intern_find(t, hash, key, n);
	uint32_t id = 0;

	if (e != NULL)
		return e->id;
	pthread_mutex_lock(&intern_lock);
	e = intern_find(t, hash, key, n);
	if (e != NULL) {
		id = e->id;
		goto out;
	}
	if (intern_grow(t) < 0)
		goto out;
	e = calloc(1, t->key_off + n * t->unit + extra);
	if (e == NULL)
		goto out;
	e->hash = hash;
	e->n = (uint32_t)n;
	memcpy((char *)e + t->key_off, key, n * t->unit);
	if (ids != NULL && intern_id_add(ids, e) < 0) {
		free(e);
		goto out;
	}
	intern_put(atomic_load_explicit(&t->cur, memory_order_relaxed), e);
	id = e->id;
out:
	pthread_mutex_unlock(&intern_lock);
	return id;
}

uint32_t intern_string(const char *s, size_t len)
{
	return intern_add(&strings, &intern__string_ids, s, op_cut_string(s, len), 1);
}

uint32_t intern_stack(const uint32_t *frames, size_t n)
{
	if (n == 0 || n > INTERN_MAX_FRAMES)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (intern_string_get(frames[i]) == NULL)
			return 0;
	}
	return intern_add(&stacks, &intern__stack_ids, frames, n, 0);
}

/* Symbolises `n` return addresses into a stack of frame strings. */
static uint32_t intern_symbolize(const uintptr_t *pcs, size_t n)
{
	uint32_t frames[INTERN_MAX_FRAMES];
	char buf[STACK_SYMBOL_LEN];
	int len;

	for (size_t i = 0; i < n; i++) {
		/* A name too long for buf is kept cut short. */
		len = stack_symbolize(pcs[i], buf, sizeof(buf));
		if (len == -ENOSPC)
			len = (int)strlen(buf);
		frames[i] = len > 0 ? intern_string(buf, (size_t)len) : 0;
		if (frames[i] == 0)
			return 0;
	}
	return intern_stack(frames, n);
}

uint32_t intern_native(const uintptr_t *pcs, size_t n)
{
	uint64_t hash;
	struct intern_head *e;
	uint32_t id;

	if (n == 0 || n > INTERN_MAX_FRAMES)
		return 0;
	hash = hash_bytes(pcs, n * sizeof(*pcs));
	e = intern_find(&natives, hash, pcs, n);
	if (e != NULL)
		return e->id;
	id = intern_symbolize(pcs, n);
	if (id == 0)
		return 0;
	pthread_mutex_lock(&intern_lock);
	e = intern_find(&natives, hash, pcs, n);
	if (e == NULL && intern_grow(&natives) == 0 &&
	    (e = calloc(1, sizeof(struct intern_native) + n * sizeof(*pcs)))) {
		e->hash = hash;
		e->n = (uint32_t)n;
		e->id = id;
		memcpy(((struct intern_native *)e)->pcs, pcs, n * sizeof(*pcs));
		intern_put(atomic_load_explicit(&natives.cur,
						memory_order_relaxed), e);
	}
	pthread_mutex_unlock(&intern_lock);
	return id;
}

static void intern_table_fini(struct intern_table *t)
{
	struct intern_array *a = atomic_load_explicit(&t->cur,
						      memory_order_relaxed);
	struct intern_array *older;
	void *e;

	for (size_t i = 0; a != NULL && i <= a->mask; i++) {
		e = atomic_load_explicit(&a->slots[i].entry,
					 memory_order_relaxed);
		free(e);
	}
	while (a != NULL) {
		older = a->retired;
		free(a);
		a = older;
	}
	atomic_store_explicit(&t->cur, NULL, memory_order_relaxed);
}

static void intern_ids_fini(struct intern_ids *ids)
{
	for (size_t i = 0; i < INTERN_MAX_IDS / INTERN_CHUNK; i++) {
		free(atomic_load_explicit(&ids->chunks[i],
					  memory_order_relaxed));
		atomic_store_explicit(&ids->chunks[i], NULL,
				      memory_order_relaxed);
	}
	ids->next = 0;
}

void intern_fini(void)
{
	intern_table_fini(&strings);
	intern_table_fini(&stacks);
	intern_table_fini(&natives);
	intern_ids_fini(&intern__string_ids);
	intern_ids_fini(&intern__stack_ids);
}

void intern_atfork_prepare(void)
{
	pthread_mutex_lock(&intern_lock);
}

void intern_atfork_parent(void)
{
	pthread_mutex_unlock(&intern_lock);
}

void intern_atfork_child(void)
{
	pthread_mutex_unlock(&intern_lock);
}
