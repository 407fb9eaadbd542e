/*
 * ring_helpers.c - test_ring's shared helpers (ring_helpers.h): one ring's
 * producer and consumer in one process, and what the consumer delivers.
 */
#include <stdlib.h>
#include <string.h>

#include "op.h"
#include "ring_helpers.h"
#include "testutil.h"

/* ---- a producer and a consumer on one ring ---------------------------- */

/* A ring at `start`, no consumer yet. */
void rt_create(struct rt *t, uint32_t flags, unsigned timeout_ms,
	       uint64_t start)
{
	ck_assert_int_eq(ring_create(CAP, flags, timeout_ms, &t->p), 0);
	/* One position everywhere: ringread_map() takes its tail from the
	 * header, the producer checks room against its tail cache. */
	ring_store_relaxed(&t->p->hdr->head, start);
	ring_store_relaxed(&t->p->hdr->tail, start);
	ring_store_relaxed(&t->p->tail_cache, start);
	t->c = NULL;
}

void rt_open(struct rt *t, uint32_t flags, unsigned timeout_ms,
	     uint64_t start)
{
	const char *why = NULL;

	rt_create(t, flags, timeout_ms, start);
	ck_assert_int_eq(ringread_map(ring_fd(t->p), &t->c, &why), 0);
	ck_assert_ptr_null(why);
}

void rt_close(struct rt *t)
{
	ringread_unmap(t->c);
	ring_destroy(t->p);
}

uint64_t rt_head(const struct rt *t)
{
	return ring_load_relaxed(&t->p->hdr->head);
}

/* The ring's record header at position `pos`, in the producer's mapping. */
struct ring_rec *rt_rec(const struct rt *t, uint64_t pos)
{
	return (struct ring_rec *)(t->p->data + (pos & t->p->mask));
}

unsigned char pattern(unsigned seed, size_t i)
{
	return (unsigned char)(seed * 131u + i * 7u + 1u);
}

/* Reserves, fills with pattern(seed) and commits; the record's position. */
uint64_t rt_push(struct rt *t, unsigned type, size_t len, unsigned seed)
{
	struct ring_slot s;
	unsigned char *p;

	ck_assert_int_eq(ring_reserve(t->p, type, len, &s), 0);
	p = s.payload;
	for (size_t i = 0; i < len; i++)
		p[i] = pattern(seed, i);
	ring_commit(&s);
	/* Positions are known modulo the capacity only; the head tells the
	 * lap: the record ends at or before it. */
	return rt_head(t) -
	       ((rt_head(t) - (uint64_t)((unsigned char *)s.rec - t->p->data)) &
		t->p->mask);
}

/* ---- collecting what the consumer delivers ---------------------------- */

int got_cb(void *arg, unsigned type, const void *payload, size_t len)
{
	struct got *g = arg;
	struct rec *r;

	g->v = realloc(g->v, (g->n + 1) * sizeof(*g->v));
	ck_assert_ptr_nonnull(g->v);
	r = &g->v[g->n++];
	r->type = type;
	r->len = len;
	r->data = NULL;
	if (type != RINGREAD_LOST) {
		r->data = malloc(len + 1);
		ck_assert_ptr_nonnull(r->data);
		memcpy(r->data, payload, len);
	}
	return 0;
}

void got_free(struct got *g)
{
	for (size_t i = 0; i < g->n; i++)
		free(g->v[i].data);
	free(g->v);
	g->v = NULL;
	g->n = 0;
}

/* Drains until nothing is left; the number of callbacks. */
size_t rt_drain(struct rt *t, unsigned flags, struct got *g)
{
	size_t total = 0;
	int n;

	while ((n = ringread_drain(t->c, 64, flags, got_cb, g)) > 0)
		total += (size_t)n;
	ck_assert_int_eq(n, 0);
	return total;
}

/* Record `i` is `type` with `len` bytes of pattern(seed), then zeroes up
 * to the record's 8-byte end: the consumer hands over the padded length. */
void ck_rec(const struct got *g, size_t i, unsigned type, size_t len,
	    unsigned seed)
{
	const struct rec *r;

	ck_assert_uint_lt(i, g->n);
	r = &g->v[i];
	ck_assert_uint_eq(r->type, type);
	ck_assert_uint_eq(r->len, ring_rec_size(len) - sizeof(struct ring_rec));
	for (size_t k = 0; k < r->len; k++) {
		unsigned char want = k < len ? pattern(seed, k) : 0;

		if (r->data[k] != want)
			ck_abort_msg("record %zu byte %zu: %#x, not %#x", i, k,
				     r->data[k], want);
	}
}

void ck_lost(const struct got *g, size_t i, uint64_t len)
{
	ck_assert_uint_lt(i, g->n);
	ck_assert_uint_eq(g->v[i].type, RINGREAD_LOST);
	ck_assert_uint_eq(g->v[i].len, len);
}

/* Record `i` is a gap operation reporting `lost` records. */
void ck_gap(const struct got *g, size_t i, uint64_t lost)
{
	struct ring_op op;

	ck_assert_uint_lt(i, g->n);
	ck_assert_uint_eq(g->v[i].type, RING_REC_OP);
	ck_assert_uint_eq(g->v[i].len, sizeof(op));
	memcpy(&op, g->v[i].data, sizeof(op));
	ck_assert_uint_eq(op.kind, OP_GAP);
	ck_assert_uint_eq(op.flags, RING_OP_HAS_LOST);
	ck_assert_uint_eq(op.a, lost);
}

bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != 0)
			return false;
	}
	return true;
}
