/*
 * hash.h - the hash functions npusan's tables share.
 *
 * Tables here key on pointers, stream ids and interned strings, none of
 * which an attacker chooses to collide on purpose except through a trace or
 * ring record; the tables therefore bound their probe lengths by load
 * factor, not by a keyed hash.
 */
#ifndef NPUSAN_HASH_H
#define NPUSAN_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* splitmix64's finaliser: every input bit affects every output bit. */
static inline uint64_t hash_u64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/*
 * 32 bits of hash at half hash_u64()'s cost, for keys whose bits spread
 * over both halves (addresses, or two small ids side by side): the halves
 * folded together and multiplied by an odd constant, of which the high
 * half is kept, since every key bit reaches it.
 */
static inline uint32_t hash_fold_u64(uint64_t x)
{
	return (uint32_t)(((x ^ (x >> 32)) * 0x9e3779b97f4a7c15ULL) >> 32);
}

/* Eight bytes at a time, mixed once per word and once at the end. */
static inline uint64_t hash_bytes(const void *p, size_t len)
{
	const unsigned char *s = p;
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ len;
	uint64_t w;

	while (len >= 8) {
		memcpy(&w, s, 8);
		h = (h ^ hash_u64(w)) * 0x9fb21c651e98df25ULL;
		s += 8;
		len -= 8;
	}
	w = 0;
	memcpy(&w, s, len);
	h ^= hash_u64(w ^ ((uint64_t)len << 56));
	return hash_u64(h);
}

#endif
