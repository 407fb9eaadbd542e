/*
 * u64map.c - open addressing with linear probing and backward-shift
 * deletion; the table is kept at most half full.
 */
#include "u64map.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

#define U64MAP_MIN_SLOTS 16

static int u64map_alloc(struct u64map *m, size_t nslots)
{
	m->slots = malloc(nslots * sizeof(*m->slots));
	m->used = calloc(nslots, 1);
	if (m->slots == NULL || m->used == NULL) {
		free(m->slots);
		free(m->used);
		return -ENOMEM;
	}
	m->mask = nslots - 1;
	m->count = 0;
	return 0;
}

int u64map_init(struct u64map *m)
{
	return u64map_alloc(m, U64MAP_MIN_SLOTS);
}

void u64map_fini(struct u64map *m)
{
	free(m->slots);
	free(m->used);
	memset(m, 0, sizeof(*m));
}

/* The slot holding `key`, or the empty slot where it would go. */
static size_t u64map_find(const struct u64map *m, uint64_t key)
{
	size_t i = hash_u64(key) & m->mask;

	while (m->used[i] && m->slots[i].key != key)
		i = (i + 1) & m->mask;
	return i;
}

uint64_t *u64map_get(const struct u64map *m, uint64_t key)
{
	size_t i = u64map_find(m, key);

	return m->used[i] ? &m->slots[i].val : NULL;
}

static int u64map_grow(struct u64map *m)
{
	struct u64map old = *m;
	int err = u64map_alloc(m, (old.mask + 1) * 2);

	if (err < 0) {
		*m = old;
		return err;
	}
	for (size_t i = 0; i <= old.mask; i++) {
		if (old.used[i]) {
			size_t j = u64map_find(m, old.slots[i].key);

			m->slots[j] = old.slots[i];
			m->used[j] = 1;
			m->count++;
		}
	}
	free(old.slots);
	free(old.used);
	return 0;
}

int u64map_put(struct u64map *m, uint64_t key, uint64_t val)
{
	size_t i = u64map_find(m, key);

	if (!m->used[i]) {
		if ((m->count + 1) * 2 > m->mask + 1) {
			int err = u64map_grow(m);

			if (err < 0)
				return err;
			i = u64map_find(m, key);
		}
		m->used[i] = 1;
		m->slots[i].key = key;
		m->count++;
	}
	m->slots[i].val = val;
	return 0;
}

bool u64map_del(struct u64map *m, uint64_t key)
{
	size_t i = u64map_find(m, key), j = i;

	if (!m->used[i])
		return false;
	/* Shift later members of the probe run back so that every key stays
	 * reachable from its home slot without a tombstone. */
	for (;;) {
		size_t home;

		j = (j + 1) & m->mask;
		if (!m->used[j])
			break;
		home = hash_u64(m->slots[j].key) & m->mask;
		/* j's key may move to i only if its home is not in (i, j]. */
		if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
			m->slots[i] = m->slots[j];
			i = j;
		}
	}
	m->used[i] = 0;
	m->count--;
	return true;
}

void u64map_clear(struct u64map *m)
{
	memset(m->used, 0, m->mask + 1);
	m->count = 0;
}

bool u64map_next(const struct u64map *m, size_t *pos, uint64_t *key,
		 uint64_t *val)
{
	for (size_t i = *pos; m->used != NULL && i <= m->mask; i++) {
		if (m->used[i]) {
			if (key != NULL)
				*key = m->slots[i].key;
			if (val != NULL)
				*val = m->slots[i].val;
			*pos = i + 1;
			return true;
		}
	}
	return false;
}

size_t u64map_bytes(const struct u64map *m)
{
	return (m->mask + 1) * (sizeof(*m->slots) + 1);
}
