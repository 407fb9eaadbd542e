/*
 * u64map.h - a hash map from 64-bit keys to 64-bit values.
 *
 * Stream ids, event ids and trace stack ids are arbitrary 64-bit numbers
 * (CUDA stream ids are pointers), so they are mapped to small dense indices
 * or to records through this open-addressing table with linear probing and
 * backward-shift deletion (no tombstones, so a long run of creates and
 * destroys does not degrade it).
 *
 * The map owns its arrays; u64map_fini() releases them. Values are plain
 * numbers: a map of pointers does not own what they point to.
 */
#ifndef NPUSAN_U64MAP_H
#define NPUSAN_U64MAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct u64map_slot {
	uint64_t key;
	uint64_t val;
};

struct u64map {
	struct u64map_slot *slots;
	uint8_t *used;
	size_t mask;
	size_t count;
};

/* An empty map. 0 or -ENOMEM. */
int u64map_init(struct u64map *m);
void u64map_fini(struct u64map *m);

/* The value of `key`, or NULL when absent; valid until the next change. */
uint64_t *u64map_get(const struct u64map *m, uint64_t key);

/* Sets `key` to `val`, inserting it when absent. 0 or -ENOMEM. */
int u64map_put(struct u64map *m, uint64_t key, uint64_t val);

/* Removes `key`; returns whether it was present. */
bool u64map_del(struct u64map *m, uint64_t key);

/* Removes every key, keeping the arrays. */
void u64map_clear(struct u64map *m);

/* Bytes of memory the map holds. */
size_t u64map_bytes(const struct u64map *m);

/*
 * Iterates over the keys in no set order: start with *pos = 0; each call
 * that returns true gives the next key and its value (either out-pointer
 * may be NULL), false means none is left. The map must not change during
 * the walk. A zeroed map (never initialised, or finished) has no keys.
 */
bool u64map_next(const struct u64map *m, size_t *pos, uint64_t *key,
		 uint64_t *val);

#endif
