/*
 * symtab.c - interned strings and stacks.
 *
 * Strings and stacks are both kept as "blobs": byte sequences copied once
 * into an append-only arena and found again through an open-addressing
 * index of ids. Strings get a NUL after their bytes so callers can print
 * them; stacks are arrays of string ids.
 *
 * DESIGN
 *  1. An id is an index into `ents` (entry 0 is unused), so lookups by id
 *     are one array access and ids never change.
 *  2. The arena only grows and its chunks never move, so pointers handed
 *     out stay valid until symtab_free().
 *  3. The index holds ids, 0 meaning empty, and is at most half full, so
 *     probe sequences stay short.
 */
#include "symtab.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "hash.h"

#define ARENA_CHUNK (64 * 1024)

struct chunk {
	struct chunk *next;
	size_t used;
	size_t size;
	_Alignas(8) unsigned char data[];
};

struct blob {
	const unsigned char *p;
	uint32_t len;
	uint32_t hash;
};

struct blobset {
	struct blob *ents; /* ents[0] unused */
	uint32_t count;    /* entries including ents[0] */
	uint32_t cap;
	uint32_t *index; /* ids; 0 = empty */
	uint32_t mask;
};

struct symtab {
	struct chunk *chunks;
	size_t bytes;
	struct blobset strs;
	struct blobset stacks;
};

static void *arena_alloc(struct symtab *t, size_t len)
{
	struct chunk *c = t->chunks;
	size_t need = (len + 7) & ~(size_t)7;

	if (c == NULL || c->size - c->used < need) {
		size_t size = need > ARENA_CHUNK ? need : ARENA_CHUNK;

		c = malloc(sizeof(*c) + size);
		if (c == NULL)
			return NULL;
		c->next = t->chunks;
		c->used = 0;
		c->size = size;
		t->chunks = c;
		t->bytes += sizeof(*c) + size;
	}
	c->used += need;
	return c->data + c->used - need;
}

static int blobset_init(struct symtab *t, struct blobset *b)
{
	b->cap = 64;
	b->count = 1;
	b->mask = 127;
	b->ents = calloc(b->cap, sizeof(*b->ents));
	b->index = calloc(b->mask + 1, sizeof(*b->index));
	if (b->ents == NULL || b->index == NULL)
		return -ENOMEM;
	t->bytes += b->cap * sizeof(*b->ents) + (b->mask + 1) * sizeof(*b->index);
	return 0;
}

static void blobset_fini(struct blobset *b)
{
	free(b->ents);
	free(b->index);
}

static uint32_t *blobset_slot(struct blobset *b, const void *p, size_t len,
			      uint32_t hash)
{
	uint32_t i = hash & b->mask;

	for (;;) {
		uint32_t id = b->index[i];
		const struct blob *e = &b->ents[id];

		if (id == 0 || (e->hash == hash && e->len == len &&
				memcmp(e->p, p, len) == 0))
			return &b->index[i];
		i = (i + 1) & b->mask;
	}
}

static int blobset_grow(struct symtab *t, struct blobset *b)
{
	if (b->count == b->cap) {
		size_t cap = b->cap;

		if (b->cap > UINT32_MAX / 2) /* ids and counts are 32-bit */
			return -E2BIG;
		if (grow_array((void **)&b->ents, &cap, (size_t)b->count + 1,
			       sizeof(*b->ents)) < 0)
			return -ENOMEM;
		t->bytes += (cap - b->cap) * sizeof(*b->ents);
		b->cap = (uint32_t)cap;
	}
	if ((uint64_t)b->count * 2 > b->mask) {
		uint32_t mask = b->mask * 2 + 1;
		uint32_t *index = calloc((size_t)mask + 1, sizeof(*index));

		if (index == NULL)
			return -ENOMEM;
		for (uint32_t id = 1; id < b->count; id++) {
			uint32_t i = b->ents[id].hash & mask;

			while (index[i] != 0)
				i = (i + 1) & mask;
			index[i] = id;
		}
		t->bytes += (size_t)(mask - b->mask) * sizeof(*index);
		free(b->index);
		b->index = index;
		b->mask = mask;
	}
	return 0;
}

/* Interns `len` bytes, plus a NUL when `nul`; 0 or a negative errno. */
static int blobset_intern(struct symtab *t, struct blobset *b, const void *p,
			  size_t len, bool nul, uint32_t *id)
{
	uint32_t hash;
	uint32_t *slot;
	unsigned char *copy;
	int err;

	if (len > UINT32_MAX - 1)
		return -E2BIG;
	hash = (uint32_t)hash_bytes(p, len);
	slot = blobset_slot(b, p, len, hash);
	if (*slot != 0) {
		*id = *slot;
		return 0;
	}
	if (b->count == UINT32_MAX)
		return -E2BIG;
	err = blobset_grow(t, b);
	if (err < 0)
		return err;
	copy = arena_alloc(t, len + (nul ? 1 : 0));
	if (copy == NULL)
		return -ENOMEM;
	memcpy(copy, p, len);
	if (nul)
		copy[len] = '\0';
	/* The index may have been rebuilt by blobset_grow(). */
	slot = blobset_slot(b, p, len, hash);
	b->ents[b->count] = (struct blob){ copy, (uint32_t)len, hash };
	*slot = b->count;
	*id = b->count++;
	return 0;
}

int symtab_new(struct symtab **out)
{
	struct symtab *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return -ENOMEM;
	t->bytes = sizeof(*t);
	if (blobset_init(t, &t->strs) < 0 || blobset_init(t, &t->stacks) < 0) {
		symtab_free(t);
		return -ENOMEM;
	}
	*out = t;
	return 0;
}

void symtab_free(struct symtab *t)
{
	struct chunk *c;

	if (t == NULL)
		return;
	while ((c = t->chunks) != NULL) {
		t->chunks = c->next;
		free(c);
	}
	blobset_fini(&t->strs);
	blobset_fini(&t->stacks);
	free(t);
}

int symtab_intern(struct symtab *t, const char *s, size_t len, uint32_t *id)
{
	return blobset_intern(t, &t->strs, s, len, true, id);
}

const char *symtab_str(const struct symtab *t, uint32_t id, size_t *len)
{
	if (id == 0 || id >= t->strs.count) {
		if (len != NULL)
			*len = 0;
		return NULL;
	}
	if (len != NULL)
		*len = t->strs.ents[id].len;
	return (const char *)t->strs.ents[id].p;
}

int symtab_intern_stack(struct symtab *t, const uint32_t *frames, size_t n,
			uint32_t *id)
{
	if (n == 0) {
		*id = 0;
		return 0;
	}
	if (n > (UINT32_MAX - 1) / sizeof(*frames))
		return -E2BIG;
	for (size_t i = 0; i < n; i++) {
		if (frames[i] == 0 || frames[i] >= t->strs.count)
			return -EINVAL;
	}
	return blobset_intern(t, &t->stacks, frames, n * sizeof(*frames), false,
			      id);
}

size_t symtab_stack(const struct symtab *t, uint32_t id,
		    const uint32_t **frames)
{
	const struct blob *e;

	if (id == 0 || id >= t->stacks.count) {
		*frames = NULL;
		return 0;
	}
	e = &t->stacks.ents[id];
	*frames = (const uint32_t *)(const void *)e->p;
	return e->len / sizeof(uint32_t);
}

size_t symtab_bytes(const struct symtab *t)
{
	return t->bytes;
}
