/*
 * ring_helpers.h - what test_ring's files share: a producer and a consumer
 * on one ring started at a chosen position, pushing patterned records, and
 * collecting and checking what the consumer delivers. Built into test_ring
 * alone (ring_helpers.c).
 *
 * test_ringread.c and test_ringdec.c add their tests to their TCases
 * through test_ringread_add() and test_ringdec_add().
 */
#ifndef NPUSAN_TESTS_RING_HELPERS_H
#define NPUSAN_TESTS_RING_HELPERS_H

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring.h"
#include "ringread.h"

#define CAP RING_MIN_CAPACITY
#define MAXREC (CAP / 8) /* ring_create()'s max_record for CAP */

struct rt {
	struct ring *p;
	struct ringread *c;
};

/* A ring at `start`, no consumer yet. */
void rt_create(struct rt *t, uint32_t flags, unsigned timeout_ms,
	       uint64_t start);

/* A ring at `start` with its consumer mapped. */
void rt_open(struct rt *t, uint32_t flags, unsigned timeout_ms,
	     uint64_t start);

void rt_close(struct rt *t);

uint64_t rt_head(const struct rt *t);

/* The ring's record header at position `pos`, in the producer's mapping. */
struct ring_rec *rt_rec(const struct rt *t, uint64_t pos);

/* Byte `i` of the records pushed with `seed`. */
unsigned char pattern(unsigned seed, size_t i);

/* Reserves, fills with pattern(seed) and commits; the record's position. */
uint64_t rt_push(struct rt *t, unsigned type, size_t len, unsigned seed);

struct rec {
	unsigned type;
	size_t len;
	unsigned char *data; /* NULL for RINGREAD_LOST */
};

struct got {
	struct rec *v;
	size_t n;
};

/* A ringread_drain() callback that appends a copy of each record to the
 * struct got at `arg`. */
int got_cb(void *arg, unsigned type, const void *payload, size_t len);

void got_free(struct got *g);

/* Drains until nothing is left; the number of callbacks. */
size_t rt_drain(struct rt *t, unsigned flags, struct got *g);

/* Record `i` is `type` with `len` bytes of pattern(seed), then zeroes up
 * to the record's 8-byte end: the consumer hands over the padded length. */
void ck_rec(const struct got *g, size_t i, unsigned type, size_t len,
	    unsigned seed);

/* Record `i` is RINGREAD_LOST for `len` bytes. */
void ck_lost(const struct got *g, size_t i, uint64_t len);

/* Record `i` is a gap operation reporting `lost` records. */
void ck_gap(const struct got *g, size_t i, uint64_t lost);

bool all_zero(const unsigned char *p, size_t n);

/* The tests of test_ringread.c and test_ringdec.c, added to their TCase. */
void test_ringread_add(TCase *rd);
void test_ringdec_add(TCase *dc);

#endif
