/*
 * intern.h - the agent's interned operator names, stack frames and stacks.
 *
 * A launch names its operator by a 32-bit id, and a stack is an id too, so
 * a record does not grow with the name or the stack after their first use.
 * Lookups (by content, by id) take no lock: entries are published once with
 * a release store and never move or die until intern_fini(); inserting
 * takes a mutex, on the slow path of a first sight only.
 *
 * Each entry remembers, per ring slot, the generation of the ring it was
 * last defined on (struct intern_head.sent), so the agent sends each
 * definition once per ring, and again to a new ring after fork().
 *
 * Entries belong to this module; callers get const pointers valid until
 * intern_fini().
 */
#ifndef NPUSAN_AGENT_INTERN_H
#define NPUSAN_AGENT_INTERN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "op.h"

#define INTERN_RINGS 2 /* the daemon's ring and the recorder's */
#define INTERN_MAX_IDS (1u << 22)
#define INTERN_MAX_FRAMES OP_MAX_FRAMES

struct intern_head {
	_Atomic uint32_t sent[INTERN_RINGS];
	uint32_t id;
	uint32_t n; /* bytes of a string, frames of a stack */
	uint64_t hash;
};

struct intern_str {
	struct intern_head h;
	char bytes[]; /* h.n bytes and a NUL */
};

struct intern_stack {
	struct intern_head h;
	uint32_t frames[]; /* h.n string ids, innermost first */
};

/* Frees every entry and table. Only when no thread can use them. */
void intern_fini(void);

/* The id (at least 1) of the `len` bytes at s, none included, cut by
 * op_cut_string() (op.h); 0 when out of memory or ids. */
uint32_t intern_string(const char *s, size_t len);

/* The id (at least 1) of the stack of `n` string ids (innermost first); 0
 * for n == 0, an unknown frame id, n above INTERN_MAX_FRAMES, or no memory. */
uint32_t intern_stack(const uint32_t *frames, size_t n);

/* The stack id of `n` return addresses, symbolising them the first time
 * they are seen; 0 as for intern_stack(). */
uint32_t intern_native(const uintptr_t *pcs, size_t n);

/* Ids to entries: chunks of INTERN_CHUNK pointers, each published once
 * (release) and never moved. Inline, since every launch looks up its
 * operator's name. Internal to intern.c but for the inline lookups. */
#define INTERN_CHUNK 1024u

struct intern_ids {
	uint32_t next;
	_Atomic(void *) *_Atomic chunks[INTERN_MAX_IDS / INTERN_CHUNK];
};

extern struct intern_ids intern__string_ids, intern__stack_ids;

static inline void *intern__id_get(struct intern_ids *ids, uint32_t id)
{
	_Atomic(void *) *chunk;

	/* 64-bit indices: a 32-bit one would be widened after each step. */
	uint64_t i = id;

	if (i == 0 || i >= INTERN_MAX_IDS)
		return NULL;
	/* Acquire: pairs with the release stores in intern_id_add(). */
	chunk = atomic_load_explicit(&ids->chunks[i / INTERN_CHUNK],
				     memory_order_acquire);
	if (chunk == NULL)
		return NULL;
	/* Acquire: as above, for the entry's own release store. */
	return atomic_load_explicit(&chunk[i % INTERN_CHUNK],
				    memory_order_acquire);
}

/* The entry of an id, or NULL for 0 or an id never given out. */
static inline const struct intern_str *intern_string_get(uint32_t id)
{
	return intern__id_get(&intern__string_ids, id);
}

static inline const struct intern_stack *intern_stack_get(uint32_t id)
{
	return intern__id_get(&intern__stack_ids, id);
}

/* pthread_atfork() handlers: the insertion mutex is held across fork(), so
 * the child never inherits a table half-way through an insertion. */
void intern_atfork_prepare(void);
void intern_atfork_parent(void);
void intern_atfork_child(void);

#endif
