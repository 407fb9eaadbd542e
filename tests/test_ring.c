/*
 * test_ring.c - the shared-memory ring with its producer (agent/ring.c) and
 * its consumer (common/ringread.c, common/ringdec.c) in one process.
 *
 * Most tests push, drain and look at the bytes in the ring by hand; the
 * consumer maps the producer's memfd as the daemon would. Positions start
 * where the test wants them (just below 2^64, just below the 2^32 tag wrap,
 * a few bytes before the end of the data area) by storing one position
 * into head, tail and the producer's tail cache before the consumer maps.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "op.h"
#include "ring.h"
#include "ringdec.h"
#include "ringread.h"
#include "symtab.h"
#include "testutil.h"

#define CAP RING_MIN_CAPACITY
#define MAXREC (CAP / 8) /* ring_create()'s max_record for CAP */

/* The three places a test starts at, each 64 bytes before a boundary:
 * the data area's end, 2^64 (the end too) and 2^35 (tag 2^32). */
static const uint64_t ends[] = {
	3 * CAP,
	0,
	UINT64_C(1) << 35,
};
#define NENDS (int)(sizeof(ends) / sizeof(ends[0]))

/* ---- a producer and a consumer on one ring ---------------------------- */

struct rt {
	struct ring *p;
	struct ringread *c;
};

/* A ring at `start`, no consumer yet. */
static void rt_create(struct rt *t, uint32_t flags, unsigned timeout_ms,
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

static void rt_open(struct rt *t, uint32_t flags, unsigned timeout_ms,
		    uint64_t start)
{
	const char *why = NULL;

	rt_create(t, flags, timeout_ms, start);
	ck_assert_int_eq(ringread_map(ring_fd(t->p), &t->c, &why), 0);
	ck_assert_ptr_null(why);
}

static void rt_close(struct rt *t)
{
	ringread_unmap(t->c);
	ring_destroy(t->p);
}

static uint64_t rt_head(const struct rt *t)
{
	return ring_load_relaxed(&t->p->hdr->head);
}

/* The ring's record header at position `pos`, in the producer's mapping. */
static struct ring_rec *rt_rec(const struct rt *t, uint64_t pos)
{
	return (struct ring_rec *)(t->p->data + (pos & t->p->mask));
}

static unsigned char pattern(unsigned seed, size_t i)
{
	return (unsigned char)(seed * 131u + i * 7u + 1u);
}

/* Reserves, fills with pattern(seed) and commits; the record's position. */
static uint64_t rt_push(struct rt *t, unsigned type, size_t len, unsigned seed)
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

struct rec {
	unsigned type;
	size_t len;
	unsigned char *data; /* NULL for RINGREAD_LOST */
};

struct got {
	struct rec *v;
	size_t n;
};

static int got_cb(void *arg, unsigned type, const void *payload, size_t len)
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

static void got_free(struct got *g)
{
	for (size_t i = 0; i < g->n; i++)
		free(g->v[i].data);
	free(g->v);
	g->v = NULL;
	g->n = 0;
}

/* Drains until nothing is left; the number of callbacks. */
static size_t rt_drain(struct rt *t, unsigned flags, struct got *g)
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
static void ck_rec(const struct got *g, size_t i, unsigned type, size_t len,
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

static void ck_lost(const struct got *g, size_t i, uint64_t len)
{
	ck_assert_uint_lt(i, g->n);
	ck_assert_uint_eq(g->v[i].type, RINGREAD_LOST);
	ck_assert_uint_eq(g->v[i].len, len);
}

/* Record `i` is a gap operation reporting `lost` records. */
static void ck_gap(const struct got *g, size_t i, uint64_t lost)
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

static bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != 0)
			return false;
	}
	return true;
}

/* ---- ring: the producer with the consumer ----------------------------- */

START_TEST(ring_create_rejects_bad_arguments)
{
	struct ring *r = (struct ring *)&r;

	ck_assert_int_eq(ring_create(CAP / 2, 0, 0, &r), -EINVAL);
	ck_assert_int_eq(ring_create(CAP + 8, 0, 0, &r), -EINVAL);
	ck_assert_int_eq(ring_create(RING_MAX_CAPACITY * 2, 0, 0, &r), -EINVAL);
	ck_assert_int_eq(ring_create(CAP, 2, 0, &r), -EINVAL);
	ck_assert_ptr_eq(r, (struct ring *)&r);
	ck_assert_int_eq(ring_create(CAP, RING_F_BLOCK, 0, &r), 0);
	ck_assert_uint_eq(r->max_record, MAXREC);
	ck_assert_uint_eq(r->hdr->capacity, CAP);
	ck_assert_uint_eq(r->hdr->flags, RING_F_BLOCK);
	ring_destroy(r);
	ring_destroy(NULL);
}
END_TEST

/*
 * Four laps of records of every length 0-299 from `start`, drained in
 * batches: each comes back whole, in order, its padding zero (the consumer
 * zeroed the previous lap), with pads where records met the end.
 */
static void laps_from(uint64_t start)
{
	uint64_t need = 0, head;
	struct ringread_counters n;
	struct got g = { 0 };
	unsigned i = 0, first = 0;
	struct rt t;

	rt_open(&t, 0, 0, start);
	while (need < 4 * CAP) {
		for (unsigned k = 0; k < 50; k++, i++) {
			rt_push(&t, 2 + i % 4, (i * 37) % 300, i);
			need += ring_rec_size((i * 37) % 300);
		}
		ck_assert_uint_eq(rt_drain(&t, 0, &g), i - first);
		for (unsigned k = first; k < i; k++)
			ck_rec(&g, k - first, 2 + k % 4, (k * 37) % 300, k);
		got_free(&g);
		first = i;
	}
	head = rt_head(&t);
	ringread_counters(t.c, &n);
	ck_assert_uint_eq(n.records, i);
	ck_assert_uint_eq(n.tail, head);
	ck_assert_uint_eq(n.bytes, head - start);
	ck_assert_uint_gt(n.bytes, need); /* some pads */
	ck_assert_uint_eq(n.lost_bytes, 0);
	ck_assert_uint_eq(n.corrupt, 0);
	ck_assert_uint_eq(ring_dropped(t.p), 0);
	ck_assert(all_zero(t.p->data, CAP));
	rt_close(&t);
}

START_TEST(ring_indices_wrap_at_2_64)
{
	uint64_t start = 0 - CAP / 2 - 24;

	laps_from(start);
}
END_TEST

START_TEST(ring_tag_wraps_at_2_32)
{
	uint64_t start = (UINT64_C(1) << 35) - CAP / 2 - 24;

	laps_from(start);
}
END_TEST

/* A record ending exactly at the end of the data area takes no pad; the
 * next one starts at offset 0 with the tag of its position. */
START_TEST(ring_record_exactly_filling_end_has_no_pad)
{
	uint64_t start = ends[_i] - 64, pos;
	struct got g = { 0 };
	struct rt t;

	rt_open(&t, 0, 0, start);
	ck_assert_uint_eq(start & t.p->mask, CAP - 64);
	pos = rt_push(&t, RING_REC_OP, 56, 1);
	ck_assert_uint_eq(pos, start);
	ck_assert_uint_eq(rt_head(&t), start + 64);
	ck_assert_uint_eq(rt_rec(&t, start)->word,
			  ring_word(RING_COMMIT, RING_REC_OP, 64));
	ck_assert_uint_eq(rt_rec(&t, start)->tag, ring_tag(start));
	pos = rt_push(&t, RING_REC_LAUNCH, 8, 2);
	ck_assert_uint_eq(pos, start + 64);
	ck_assert_uint_eq(rt_rec(&t, pos)->tag, ring_tag(start + 64));
	ck_assert_ptr_eq(rt_rec(&t, pos), (struct ring_rec *)t.p->data);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 2);
	ck_rec(&g, 0, RING_REC_OP, 56, 1);
	ck_rec(&g, 1, RING_REC_LAUNCH, 8, 2);
	got_free(&g);
	rt_close(&t);
}
END_TEST

/* One byte more and the record goes to offset 0 behind a pad, reserved in
 * the same step; the consumer skips the pad without a callback. */
START_TEST(ring_record_crossing_end_gets_pad)
{
	uint64_t start = ends[_i] - 64, pos;
	struct ringread_counters n;
	struct got g = { 0 };
	struct rt t;

	rt_open(&t, 0, 0, start);
	pos = rt_push(&t, RING_REC_OP, 57, 1);
	ck_assert_uint_eq(pos, start + 64);
	ck_assert_uint_eq(rt_head(&t), start + 64 + 72);
	ck_assert_uint_eq(rt_rec(&t, start)->word,
			  ring_word(RING_COMMIT, RING_REC_PAD, 64));
	ck_assert_uint_eq(rt_rec(&t, start)->tag, ring_tag(start));
	ck_assert_ptr_eq(rt_rec(&t, pos), (struct ring_rec *)t.p->data);
	ck_assert_uint_eq(rt_rec(&t, pos)->tag, ring_tag(start + 64));
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 1);
	ck_rec(&g, 0, RING_REC_OP, 57, 1);
	ringread_counters(t.c, &n);
	ck_assert_uint_eq(n.records, 1);
	ck_assert_uint_eq(n.bytes, 64 + 72);
	ck_assert_uint_eq(n.lost_bytes, 0);
	got_free(&g);
	rt_close(&t);
}
END_TEST

/* Header-only records, one of them the last 8 bytes of the data area. */
START_TEST(ring_zero_length_records_delivered)
{
	uint64_t start = 6 * CAP - 32;
	struct got g = { 0 };
	struct rt t;

	rt_open(&t, 0, 0, start);
	rt_push(&t, RING_REC_STRING, 0, 0);
	rt_push(&t, RING_REC_OP, 3, 1);
	ck_assert_uint_eq(rt_push(&t, RING_REC_STACK, 0, 0), 6 * CAP - 8);
	ck_assert_uint_eq(rt_push(&t, RING_REC_LAUNCH, 0, 0), 6 * CAP);
	ck_assert_uint_eq(rt_head(&t), 6 * CAP + 8);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 4);
	ck_rec(&g, 0, RING_REC_STRING, 0, 0);
	ck_rec(&g, 1, RING_REC_OP, 3, 1);
	ck_rec(&g, 2, RING_REC_STACK, 0, 0);
	ck_rec(&g, 3, RING_REC_LAUNCH, 0, 0);
	got_free(&g);
	rt_close(&t);
}
END_TEST

/* r->max_record bytes in all is the limit; a byte more is refused, counted
 * and reported by a gap before the next record. */
START_TEST(ring_max_record_accepted_one_more_refused)
{
	size_t max = MAXREC - sizeof(struct ring_rec);
	struct ring_slot s = { 0 };
	struct got g = { 0 };
	struct rt t;

	rt_open(&t, 0, 0, 7 * CAP - MAXREC - 800);
	ck_assert_uint_eq(t.p->max_record, MAXREC);
	rt_push(&t, RING_REC_LAUNCH, max, 1);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_LAUNCH, max + 1, &s),
			 -EMSGSIZE);
	ck_assert_ptr_null(s.rec);
	ck_assert_uint_eq(ring_dropped(t.p), 1);
	ck_assert_uint_eq(t.p->hdr->pending, 1);
	rt_push(&t, RING_REC_LAUNCH, max, 2); /* crosses the end: a pad */
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 3);
	ck_rec(&g, 0, RING_REC_LAUNCH, max, 1);
	ck_gap(&g, 1, 1);
	ck_rec(&g, 2, RING_REC_LAUNCH, max, 2);
	ck_assert_uint_eq(t.p->hdr->pending, 0);
	got_free(&g);
	rt_close(&t);
}
END_TEST

/* Regression: ring_rec_size() of a length near SIZE_MAX wrapped to a tiny
 * record that ring_reserve() accepted, its payload pointing at the ring. */
START_TEST(ring_reserve_huge_length_refused)
{
	struct ring_slot s = { 0 };
	struct rt t;

	rt_open(&t, 0, 0, 0);
	for (size_t d = 1; d <= 16; d++)
		ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, SIZE_MAX - d,
					      &s), -EMSGSIZE);
	ck_assert_ptr_null(s.rec);
	ck_assert_uint_eq(ring_dropped(t.p), 16);
	ck_assert_uint_eq(rt_head(&t), 0);
	rt_close(&t);
}
END_TEST

/*
 * A full ring drops exactly what does not fit; the next record that fits is
 * preceded by one gap reporting them all. A gap that does not fit itself
 * keeps the count, plus the record that wanted it.
 */
START_TEST(ring_full_drops_exact_count_then_gap)
{
	struct ring_slot s;
	struct got g = { 0 };
	struct rt t;

	rt_open(&t, 0, 0, 9 * CAP - 256);
	for (unsigned i = 0; i < CAP / 256; i++)
		rt_push(&t, RING_REC_OP, 248, i);
	ck_assert_uint_eq(rt_head(&t), 10 * CAP - 256);
	for (unsigned i = 0; i < 10; i++)
		ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, 0, &s),
				 -ENOBUFS);
	ck_assert_uint_eq(ring_dropped(t.p), 10);
	ck_assert_uint_eq(t.p->hdr->pending, 10);
	/* Still full: the gap finds no room; nothing is lost from the count. */
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, 0, &s), -ENOBUFS);
	ck_assert_uint_eq(ring_dropped(t.p), 11);
	ck_assert_uint_eq(t.p->hdr->pending, 11);
	ck_assert_int_eq(ringread_drain(t.c, 3, 0, got_cb, &g), 3);
	/* The gap leaves 216 bytes at the end: the record goes behind a pad. */
	ck_assert_uint_eq(rt_push(&t, RING_REC_STRING, 250, 77), 10 * CAP);
	ck_assert_uint_eq(t.p->hdr->pending, 0);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), CAP / 256 - 3 + 2);
	for (unsigned i = 0; i < CAP / 256; i++)
		ck_rec(&g, i, RING_REC_OP, 248, i);
	ck_gap(&g, CAP / 256, 11);
	ck_rec(&g, CAP / 256 + 1, RING_REC_STRING, 250, 77);
	ck_assert_uint_eq(ring_dropped(t.p), 11);
	got_free(&g);
	rt_close(&t);
}
END_TEST

/*
 * Room for a gap record (40 bytes) but not for the 64-byte record behind
 * it: no gap goes in alone, so one stretch of drops is one gap, placed
 * before the record that found room.
 */
START_TEST(ring_gap_waits_for_room_for_its_record)
{
	struct ring_slot s;
	struct got g = { 0 };
	struct rt t;

	rt_open(&t, 0, 0, 5 * CAP);
	for (unsigned i = 0; i < CAP / 256 - 1; i++)
		rt_push(&t, RING_REC_OP, 248, i);
	/* 256 bytes left: 216 of them taken, 40 left. */
	rt_push(&t, RING_REC_OP, 208, 99);
	ck_assert_uint_eq(rt_head(&t) - 5 * CAP, CAP - 40);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, 56, &s), -ENOBUFS);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, 56, &s), -ENOBUFS);
	ck_assert_uint_eq(rt_head(&t) - 5 * CAP, CAP - 40);
	ck_assert_uint_eq(t.p->hdr->pending, 2);
	ck_assert_int_eq(ringread_drain(t.c, 1, 0, got_cb, &g), 1);
	rt_push(&t, RING_REC_OP, 56, 7);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), CAP / 256 + 1);
	ck_gap(&g, CAP / 256, 2);
	ck_rec(&g, CAP / 256 + 1, RING_REC_OP, 56, 7);
	got_free(&g);
	rt_close(&t);
}
END_TEST

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void fill_ring(struct rt *t)
{
	for (unsigned i = 0; i < CAP / 256; i++)
		rt_push(t, RING_REC_OP, 248, i);
}

/* No consumer ever mapped the ring: a blocking ring drops at once instead
 * of waiting out its (long) timeout, or forever. */
START_TEST(ring_block_without_consumer_drops)
{
	struct ring_slot s;
	uint64_t t0;
	struct rt t;

	rt_create(&t, RING_F_BLOCK, 30000, 0);
	fill_ring(&t);
	t0 = now_ms();
	for (unsigned i = 0; i < 3; i++)
		ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, 8, &s),
				 -ENOBUFS);
	ck_assert_uint_lt(now_ms() - t0, 1000);
	ck_assert_uint_eq(ring_dropped(t.p), 3);
	ring_destroy(t.p);
}
END_TEST

/* A consumer that mapped the ring and does not drain: the first producer
 * waits for the timeout, later ones drop at once; the next drain revives
 * waiting. */
START_TEST(ring_block_stalled_consumer_drops_after_timeout)
{
	struct ring_slot s;
	struct got g = { 0 };
	uint64_t t0, waited;
	struct rt t;

	rt_open(&t, RING_F_BLOCK, 500, 0);
	fill_ring(&t);
	t0 = now_ms();
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, 8, &s), -ENOBUFS);
	waited = now_ms() - t0;
	ck_assert_uint_ge(waited, 500);
	ck_assert_uint_lt(waited, 10000);
	t0 = now_ms();
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, 8, &s), -ENOBUFS);
	ck_assert_uint_lt(now_ms() - t0, 250);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), CAP / 256);
	rt_push(&t, RING_REC_OP, 8, 9);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 2);
	ck_gap(&g, CAP / 256, 2);
	ck_rec(&g, CAP / 256 + 1, RING_REC_OP, 8, 9);
	got_free(&g);
	rt_close(&t);
}
END_TEST

/* ---- blocking producers against a consumer thread --------------------- */

#define BT_THREADS 3
#define BT_RECORDS 20000

struct bt {
	struct rt t;
	_Atomic unsigned done; /* producers finished */
	uint64_t next[BT_THREADS];
	uint64_t records;
	_Atomic int bad;
};

struct bt_arg {
	struct bt *b;
	uint32_t id;
};

static size_t bt_len(uint32_t id, uint64_t seq)
{
	return 16 + (size_t)((seq * 2654435761u + id * 97u) % 240);
}

static void *bt_produce(void *arg)
{
	struct bt_arg *a = arg;
	struct ring_slot s;

	for (uint64_t seq = 0; seq < BT_RECORDS; seq++) {
		size_t len = bt_len(a->id, seq);
		unsigned char *p;

		if (ring_reserve(a->b->t.p, RING_REC_OP, len, &s) != 0) {
			a->b->bad = 1;
			break;
		}
		p = s.payload;
		memcpy(p, &a->id, 4);
		memcpy(p + 8, &seq, 8);
		for (size_t i = 16; i < len; i++)
			p[i] = pattern((unsigned)seq, i);
		ring_commit(&s);
	}
	atomic_fetch_add(&a->b->done, 1);
	return NULL;
}

static int bt_cb(void *arg, unsigned type, const void *payload, size_t len)
{
	const unsigned char *p = payload;
	struct bt *b = arg;
	uint32_t id;
	uint64_t seq;

	if (type != RING_REC_OP || len < 16)
		return -EPROTO;
	memcpy(&id, p, 4);
	memcpy(&seq, p + 8, 8);
	if (id >= BT_THREADS || seq != b->next[id] ||
	    len != ring_rec_size(bt_len(id, seq)) - 8)
		return -EPROTO;
	for (size_t i = 16; i < bt_len(id, seq); i++) {
		if (p[i] != pattern((unsigned)seq, i))
			return -EPROTO;
	}
	b->next[id]++;
	b->records++;
	return 0;
}

/* Drains a few records at a time with pauses, so that producers find the
 * ring full over and over. */
static void *bt_consume(void *arg)
{
	struct timespec ts = { 0, 20000 };
	struct bt *b = arg;
	int n;

	for (;;) {
		unsigned done = atomic_load(&b->done);

		n = ringread_drain(b->t.c, 16, 0, bt_cb, b);
		if (n < 0) {
			b->bad = n;
			break;
		}
		if (n == 0 && done == BT_THREADS)
			break;
		nanosleep(&ts, NULL);
	}
	return NULL;
}

START_TEST(ring_block_draining_thread_loses_nothing)
{
	struct bt_arg args[BT_THREADS];
	pthread_t prod[BT_THREADS], cons;
	struct bt *b = calloc(1, sizeof(*b));

	ck_assert_ptr_nonnull(b);
	rt_open(&b->t, RING_F_BLOCK, 5000, 0 - CAP * 3);
	ck_assert_int_eq(pthread_create(&cons, NULL, bt_consume, b), 0);
	for (uint32_t i = 0; i < BT_THREADS; i++) {
		args[i] = (struct bt_arg){ b, i };
		ck_assert_int_eq(pthread_create(&prod[i], NULL, bt_produce,
						&args[i]), 0);
	}
	for (int i = 0; i < BT_THREADS; i++)
		ck_assert_int_eq(pthread_join(prod[i], NULL), 0);
	ck_assert_int_eq(pthread_join(cons, NULL), 0);
	ck_assert_int_eq(b->bad, 0);
	ck_assert_uint_eq(ring_dropped(b->t.p), 0);
	ck_assert_uint_eq(b->records, (uint64_t)BT_THREADS * BT_RECORDS);
	/* Many laps through a small ring: it was full many times. */
	ck_assert_uint_gt(rt_head(&b->t) + CAP * 3, 20 * CAP);
	rt_close(&b->t);
	free(b);
}
END_TEST

/* ---- ringread: the consumer against what a producer left ------------- */

/*
 * Four records of 48 bytes around the end of the data area (A, B, C at
 * its last 144 bytes, D at offset 0), one of them given a header no
 * correct producer writes. The consumer reports every byte from the bad
 * header to the head as lost, zeroes them, and goes on with the next
 * record pushed.
 */
struct corruption {
	int victim; /* 0-3: A-D */
	uint32_t word;
	int tag_delta;
};

/* A header word: state bits, type, length in 8-byte units. */
#define W(state, type, units)                                  \
	((uint32_t)(state) | (uint32_t)(type) << RING_TYPE_SHIFT | \
	 (uint32_t)(units))

static const struct corruption corruptions[] = {
	/* a tag one off */
	{ 1, 0, 1 },
	/* the tag a header of the previous lap had */
	{ 1, 0, -(int)(CAP / 8) },
	/* length 0 */
	{ 1, W(RING_COMMIT, RING_REC_OP, 0), 0 },
	/* longer than max_record */
	{ 1, W(RING_COMMIT, RING_REC_OP, MAXREC / 8 + 1), 0 },
	/* the whole length field */
	{ 1, W(RING_COMMIT, RING_REC_OP, RING_LEN_MASK), 0 },
	/* crossing the end of the data area (but not the head) */
	{ 2, W(RING_COMMIT, RING_REC_OP, 12), 0 },
	/* COMMIT with a length past the head */
	{ 3, W(RING_COMMIT, RING_REC_OP, 8), 0 },
	/* BUSY and COMMIT at once */
	{ 1, W(RING_COMMIT | RING_BUSY, RING_REC_OP, 6), 0 },
	/* neither BUSY nor COMMIT, yet not zero */
	{ 1, W(0, RING_REC_OP, 6), 0 },
	/* BUSY with a wrong tag, from a live producer */
	{ 1, W(RING_BUSY, RING_REC_OP, 6), 1 },
	/* a pad longer than what is left of the data area */
	{ 1, W(RING_COMMIT, RING_REC_PAD, 13), 0 },
};

#define NCORRUPTIONS (int)(sizeof(corruptions) / sizeof(corruptions[0]))

START_TEST(ringread_corrupt_header_skipped_as_lost)
{
	const struct corruption *c = &corruptions[_i];
	uint64_t start = 11 * CAP - 144, pos[4], head;
	struct ringread_counters n;
	struct ring_rec *rec;
	struct got g = { 0 };
	struct rt t;

	rt_open(&t, 0, 0, start);
	for (int i = 0; i < 4; i++)
		pos[i] = rt_push(&t, RING_REC_OP, 40, (unsigned)i);
	ck_assert_uint_eq(pos[3], 11 * CAP);
	head = rt_head(&t);
	rec = rt_rec(&t, pos[c->victim]);
	if (c->word != 0)
		rec->word = c->word;
	rec->tag = (uint32_t)((int64_t)rec->tag + c->tag_delta);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), (size_t)c->victim + 1);
	for (int i = 0; i < c->victim; i++)
		ck_rec(&g, (size_t)i, RING_REC_OP, 40, (unsigned)i);
	ck_lost(&g, (size_t)c->victim, head - pos[c->victim]);
	ringread_counters(t.c, &n);
	ck_assert_uint_eq(n.corrupt, 1);
	ck_assert_uint_eq(n.lost_bytes, head - pos[c->victim]);
	ck_assert_uint_eq(n.tail, head);
	ck_assert(all_zero(t.p->data, CAP));
	got_free(&g);
	/* Back in step: the next record is read as usual. */
	rt_push(&t, RING_REC_STRING, 20, 5);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 1);
	ck_rec(&g, 0, RING_REC_STRING, 20, 5);
	got_free(&g);
	rt_close(&t);
}
END_TEST

/* A head more than a capacity ahead of the tail is not believed: nothing
 * is read until it makes sense again. */
START_TEST(ringread_absurd_head_reads_nothing)
{
	struct got g = { 0 };
	uint64_t head;
	struct rt t;

	rt_open(&t, 0, 0, 0 - 16);
	rt_push(&t, RING_REC_OP, 8, 1);
	head = rt_head(&t);
	ring_store_relaxed(&t.p->hdr->head, head + CAP);
	ck_assert_int_eq(ringread_drain(t.c, 64, 0, got_cb, &g), 0);
	ck_assert_int_eq(ringread_drain(t.c, 64, RINGREAD_DEAD, got_cb, &g), 0);
	ring_store_relaxed(&t.p->hdr->head, head - 16);
	ck_assert_int_eq(ringread_drain(t.c, 64, RINGREAD_DEAD, got_cb, &g), 0);
	ck_assert_uint_eq(g.n, 0);
	ring_store_relaxed(&t.p->hdr->head, head);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 1);
	ck_rec(&g, 0, RING_REC_OP, 8, 1);
	got_free(&g);
	rt_close(&t);
}
END_TEST

/* Once the producer is gone, what others reserve after is not read: the
 * last drains of a process end at the head it left. */
START_TEST(ringread_stop_at_head_reads_no_later_record)
{
	struct got g = { 0 };
	struct rt t;

	rt_open(&t, 0, 0, 0 - 48);
	rt_push(&t, RING_REC_OP, 8, 1);
	rt_push(&t, RING_REC_OP, 8, 2);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 2); /* and found the head */
	got_free(&g);
	rt_push(&t, RING_REC_OP, 8, 3);
	ringread_stop_at_head(t.c);
	rt_push(&t, RING_REC_OP, 8, 4);
	ck_assert_int_eq(ringread_drain(t.c, 64, RINGREAD_DEAD, got_cb, &g), 1);
	ck_rec(&g, 0, RING_REC_OP, 8, 3);
	ck_assert_int_eq(ringread_drain(t.c, 64, RINGREAD_DEAD, got_cb, &g), 0);
	got_free(&g);
	rt_close(&t);
}
END_TEST

/* Bytes of memory the memfd `fd` holds (a sparse one holds few). */
static uint64_t memfd_bytes(int fd)
{
	struct stat st;

	ck_assert_int_eq(fstat(fd, &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

/*
 * Regression: a corrupt header with the head claimed a whole ring ahead
 * made the skip zero the whole ring, bringing in every page of a sparse
 * one (two 256 MiB rings cost the daemon 512 MiB). The skip is punched:
 * the ring holds no more memory after it than before.
 */
START_TEST(ringread_skip_touches_no_more_than_it_reads)
{
	const uint64_t cap = UINT64_C(64) << 20;
	struct ringread_counters n;
	const char *why = NULL;
	struct got g = { 0 };
	uint64_t before;
	struct rt t;

	ck_assert_int_eq(ring_create(cap, 0, 0, &t.p), 0);
	ck_assert_int_eq(ringread_map(ring_fd(t.p), &t.c, &why), 0);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, 8, &(struct ring_slot){ 0 }),
			 0);
	rt_rec(&t, 0)->tag = 1; /* corrupt, never committed */
	ring_store_relaxed(&t.p->hdr->head, cap);
	before = memfd_bytes(ring_fd(t.p));
	ck_assert_uint_lt(before, UINT64_C(1) << 20);
	ck_assert_int_eq(ringread_drain(t.c, 64, 0, got_cb, &g), 1);
	ck_lost(&g, 0, cap);
	ringread_counters(t.c, &n);
	ck_assert_uint_eq(n.tail, cap);
	ck_assert_uint_le(memfd_bytes(ring_fd(t.p)), before);
	ck_assert_uint_eq(rt_rec(&t, 0)->word, 0); /* reads as zero */
	got_free(&g);
	rt_close(&t);
}
END_TEST

/*
 * Regression: a head that a (hostile) producer moved back during a drain
 * was taken as the bound although the consumer had read past it: head -
 * pos wrapped, the skip of the "unfinished" record there went backwards,
 * and the tail was published in the middle of a record already delivered.
 */
struct backwards {
	struct rt *t;
	uint64_t head;
	int calls;
};

static int backwards_cb(void *arg, unsigned type, const void *payload,
			size_t len)
{
	struct backwards *b = arg;

	(void)type;
	(void)payload;
	(void)len;
	if (b->calls++ == 0)
		ring_store_relaxed(&b->t->p->hdr->head, b->head - 8);
	return 0;
}

START_TEST(ringread_head_moved_back_not_followed)
{
	struct ringread_counters n;
	struct backwards b;
	struct rt t;

	rt_open(&t, 0, 0, 0);
	rt_push(&t, RING_REC_OP, 8, 1);
	rt_push(&t, RING_REC_OP, 8, 2);
	b = (struct backwards){ &t, rt_head(&t), 0 };
	ck_assert_int_eq(ringread_drain(t.c, 64, RINGREAD_DEAD, backwards_cb,
					&b), 2);
	ck_assert_int_eq(ringread_drain(t.c, 64, RINGREAD_DEAD, backwards_cb,
					&b), 0);
	ringread_counters(t.c, &n);
	ck_assert_uint_eq(n.records, 2);
	ck_assert_uint_eq(n.tail, 32);
	ck_assert_uint_eq(n.lost_bytes, 0);
	rt_close(&t);
}
END_TEST

/*
 * Regression: a head that is not a multiple of 8 was believed, so a skip
 * to it left the consumer at a misaligned position 3 bytes before the end
 * of the data area, where the next header read ran past the mapping.
 */
START_TEST(ringread_unaligned_head_not_followed)
{
	uint64_t start = 20 * CAP - 64;
	struct ringread_counters n;
	struct got g = { 0 };
	struct rt t;

	rt_open(&t, 0, 0, start);
	rt_push(&t, RING_REC_OP, 8, 1);
	rt_rec(&t, start)->tag ^= 1;
	ring_store_relaxed(&t.p->hdr->head, start + 61);
	ck_assert_int_eq(ringread_drain(t.c, 64, RINGREAD_DEAD, got_cb, &g), 0);
	ring_store_relaxed(&t.p->hdr->head, start + 61 + 16);
	ck_assert_int_eq(ringread_drain(t.c, 64, RINGREAD_DEAD, got_cb, &g), 0);
	ring_store_relaxed(&t.p->hdr->head, start + 16);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 1);
	ck_lost(&g, 0, 16);
	ringread_counters(t.c, &n);
	ck_assert_uint_eq(n.tail, start + 16);
	got_free(&g);
	rt_close(&t);
}
END_TEST

/* An unaligned tail in the header is refused at once, for the same
 * reason. */
START_TEST(ringread_map_refuses_unaligned_tail)
{
	struct ringread *c = NULL;
	const char *why = NULL;
	struct ring *r;

	ck_assert_int_eq(ring_create(CAP, 0, 0, &r), 0);
	ring_store_relaxed(&r->hdr->tail, CAP - 3);
	ring_store_relaxed(&r->hdr->head, CAP - 3 + 16);
	ck_assert_int_eq(ringread_map(ring_fd(r), &c, &why), -EINVAL);
	ck_assert_ptr_null(c);
	ck_assert_ptr_nonnull(strstr(why, "tail"));
	ring_destroy(r);
}
END_TEST

/* The callback gets a copy: the producer rewriting the record in the ring
 * while the callback runs changes nothing it sees. */
struct rewrite {
	unsigned char *ring_payload;
	int calls;
	int same;
};

static int rewrite_cb(void *arg, unsigned type, const void *payload,
		      size_t len)
{
	const unsigned char *p = payload;
	struct rewrite *w = arg;

	w->calls++;
	if (type != RING_REC_LAUNCH || len != 64)
		return -EPROTO;
	memset(w->ring_payload, 0xee, len);
	w->same = 1;
	for (size_t i = 0; i < len; i++)
		w->same &= p[i] == pattern(3, i);
	return 0;
}

START_TEST(ringread_payload_is_a_private_copy)
{
	struct rewrite w = { 0 };
	struct ring_slot s;
	struct rt t;

	rt_open(&t, 0, 0, 0);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_LAUNCH, 64, &s), 0);
	for (size_t i = 0; i < 64; i++)
		((unsigned char *)s.payload)[i] = pattern(3, i);
	ring_commit(&s);
	w.ring_payload = s.payload;
	ck_assert_int_eq(ringread_drain(t.c, 64, 0, rewrite_cb, &w), 1);
	ck_assert_int_eq(w.calls, 1);
	ck_assert_int_eq(w.same, 1);
	rt_close(&t);
}
END_TEST

/*
 * A producer that died with a record reserved: a live drain waits at it;
 * a dead one reports it lost by its length and reads on. A reservation
 * whose header was never written is lost up to the head.
 */
START_TEST(ringread_dead_producer_unfinished_skipped)
{
	struct ringread_counters n;
	struct ring_slot s;
	struct got g = { 0 };
	uint64_t head;
	struct rt t;

	rt_open(&t, 0, 0, 0 - 40);
	rt_push(&t, RING_REC_OP, 10, 1);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_LAUNCH, 30, &s), 0);
	memset(s.payload, 0x55, 12);
	rt_push(&t, RING_REC_OP, 10, 2);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 1);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 0);
	ck_assert_uint_eq(rt_drain(&t, RINGREAD_DEAD, &g), 2);
	ck_rec(&g, 0, RING_REC_OP, 10, 1);
	ck_lost(&g, 1, ring_rec_size(30));
	ck_rec(&g, 2, RING_REC_OP, 10, 2);
	got_free(&g);
	/* Reserved, header not written: lost to the head. */
	head = rt_head(&t);
	ring_store_relaxed(&t.p->hdr->head, head + 64);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 0);
	ck_assert_uint_eq(rt_drain(&t, RINGREAD_DEAD, &g), 1);
	ck_lost(&g, 0, 64);
	ringread_counters(t.c, &n);
	ck_assert_uint_eq(n.records, 2);
	ck_assert_uint_eq(n.lost_bytes, ring_rec_size(30) + 64);
	ck_assert_uint_eq(n.corrupt, 0);
	ck_assert_uint_eq(n.tail, head + 64);
	ck_assert(all_zero(t.p->data, CAP));
	got_free(&g);
	/* Drops no gap reported yet are the consumer's to take. */
	ck_assert_int_eq(ring_reserve(t.p, 1, MAXREC, &s), -EMSGSIZE);
	ck_assert_int_eq(ring_reserve(t.p, 1, MAXREC, &s), -EMSGSIZE);
	ck_assert_uint_eq(ringread_take_pending(t.c), 2);
	ck_assert_uint_eq(ringread_take_pending(t.c), 0);
	ringread_counters(t.c, &n);
	ck_assert_uint_eq(n.dropped, 2);
	rt_close(&t);
}
END_TEST

/* A callback's error stops the drain; its record counts as consumed. */
static int stop_cb(void *arg, unsigned type, const void *payload, size_t len)
{
	int *calls = arg;

	(void)type;
	(void)payload;
	(void)len;
	return ++*calls == 2 ? -ECANCELED : 0;
}

START_TEST(ringread_callback_error_stops_drain)
{
	struct got g = { 0 };
	int calls = 0;
	struct rt t;

	rt_open(&t, 0, 0, 0);
	for (unsigned i = 0; i < 4; i++)
		rt_push(&t, RING_REC_OP, 8, i);
	ck_assert_int_eq(ringread_drain(t.c, 64, 0, stop_cb, &calls),
			 -ECANCELED);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 2);
	ck_rec(&g, 0, RING_REC_OP, 8, 2);
	got_free(&g);
	rt_close(&t);
}
END_TEST

/* ---- ringread_map() refusals ------------------------------------------ */

struct bad_file {
	const char *why; /* a part of *why; NULL: accepted */
	off_t size;      /* 0: header + capacity */
	bool unsealed;
	uint64_t magic;
	uint32_t version;
	uint32_t header_size;
	uint64_t capacity;
	uint32_t max_record;
};

static const struct bad_file bad_files[] = {
	{ NULL, 0, false, 0, 0, 0, 0, 0 },
	{ "sealed", 0, true, 0, 0, 0, 0, 0 },
	{ "shorter", 100, false, 0, 0, 0, 0, 0 },
	{ "magic", 0, false, RING_MAGIC + 1, 0, 0, 0, 0 },
	{ "version", 0, false, 0, RING_VERSION + 1, 0, 0, 0 },
	{ "header size", 0, false, 0, 0, 8192, 0, 0 },
	{ "capacity", 0, false, 0, 0, 0, CAP + 4096, 0 },
	{ "capacity", 0, false, 0, 0, 0, CAP / 2, 0 },
	{ "capacity", 0, false, 0, 0, 0, RING_MAX_CAPACITY * 2, 0 },
	{ "size", RING_HEADER_SIZE + 2 * CAP, false, 0, 0, 0, 0, 0 },
	{ "size", RING_HEADER_SIZE + CAP - 4096, false, 0, 0, 0, 0, 0 },
	{ "record limit", 0, false, 0, 0, 0, 0, 8 },
	{ "record limit", 0, false, 0, 0, 0, 0, CAP / 2 + 8 },
	{ "record limit", 0, false, 0, 0, 0, 0, 1028 },
};

START_TEST(ringread_map_refuses_bad_files)
{
	const struct bad_file *b = &bad_files[_i];
	struct ring_header h = { 0 };
	struct ringread *r = (struct ringread *)&h;
	off_t size = b->size ? b->size : (off_t)(RING_HEADER_SIZE + CAP);
	size_t hlen = size < (off_t)sizeof(h) ? (size_t)size : sizeof(h);
	const char *why = "unset";
	int fd;

	h.magic = b->magic ? b->magic : RING_MAGIC;
	h.version = b->version ? b->version : RING_VERSION;
	h.header_size = b->header_size ? b->header_size : RING_HEADER_SIZE;
	h.capacity = b->capacity ? b->capacity : CAP;
	h.max_record = b->max_record ? b->max_record : MAXREC;
	fd = memfd_create("bad-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, size), 0);
	ck_assert_int_eq(pwrite(fd, &h, hlen, 0), (ssize_t)hlen);
	if (!b->unsealed)
		ck_assert_int_eq(fcntl(fd, F_ADD_SEALS,
				       F_SEAL_SHRINK | F_SEAL_GROW), 0);
	if (b->why == NULL) {
		ck_assert_int_eq(ringread_map(fd, &r, &why), 0);
		ck_assert_ptr_null(why);
		ck_assert_int_eq(ringread_drain(r, 8, RINGREAD_DEAD, got_cb,
						NULL), 0);
		ringread_unmap(r);
	} else {
		ck_assert_int_eq(ringread_map(fd, &r, &why), -EINVAL);
		ck_assert_ptr_eq(r, (struct ringread *)&h);
		ck_assert_ptr_nonnull(why);
		ck_assert_msg(strstr(why, b->why) != NULL, "why: %s", why);
	}
	close(fd);
}
END_TEST

START_TEST(ringread_map_refuses_pipe)
{
	struct ringread *r = NULL;
	const char *why = NULL;
	int p[2];

	ck_assert_int_eq(pipe(p), 0);
	ck_assert_int_eq(ringread_map(p[0], &r, &why), -EINVAL);
	ck_assert_ptr_null(r);
	ck_assert_ptr_nonnull(why);
	ck_assert_int_lt(ringread_map(-1, &r, NULL), 0);
	close(p[0]);
	close(p[1]);
}
END_TEST

/* ---- ringdec: records to operations ----------------------------------- */

struct dec {
	struct symtab *syms;
	struct ringdec *d;
	struct op op;
};

static void dec_open(struct dec *x)
{
	ck_assert_int_eq(symtab_new(&x->syms), 0);
	ck_assert_int_eq(ringdec_new(x->syms, &x->d), 0);
}

static void dec_close(struct dec *x)
{
	ringdec_free(x->d);
	symtab_free(x->syms);
}

static int dec(struct dec *x, unsigned type, const void *p, size_t len)
{
	return ringdec_record(x->d, type, p, len, &x->op);
}

/* A record that carries an operation but cannot be decoded is that
 * operation lost: a gap of one. */
static void dec_lost(struct dec *x, unsigned type, const void *p, size_t len)
{
	ck_assert_int_eq(ringdec_record(x->d, type, p, len, &x->op), 1);
	ck_assert_int_eq(x->op.kind, OP_GAP);
	ck_assert(x->op.has_lost);
	ck_assert_uint_eq(x->op.lost, 1);
	ck_assert_str_ne(ringdec_error(x->d), "");
}

static const char *dec_str(const struct dec *x, uint32_t id)
{
	const char *s = symtab_str(x->syms, id, NULL);

	return s ? s : "(none)";
}

/* A buffer as the consumer hands them over: 8-byte aligned. */
union buf {
	uint64_t align;
	unsigned char b[512];
	struct ring_string s;
	struct ring_stack st;
	struct ring_op op;
	struct ring_launch l;
};

static size_t put_string(union buf *u, uint32_t id, const char *s)
{
	memset(u, 0, sizeof(*u));
	u->s.id = id;
	u->s.len = (uint32_t)strlen(s);
	memcpy(u->s.bytes, s, u->s.len);
	return ring_rec_size(sizeof(u->s) + u->s.len) - 8;
}

static size_t put_launch(union buf *u, uint32_t name, uint32_t nreads,
			 uint32_t nwrites)
{
	memset(u, 0, sizeof(*u));
	u->l.kind = OP_LAUNCH;
	u->l.stream = 7;
	u->l.name = name;
	u->l.nreads = nreads;
	u->l.nwrites = nwrites;
	for (uint32_t i = 0; i < nreads + nwrites; i++) {
		u->l.ranges[i].ptr = 0x1000 * (i + 1);
		u->l.ranges[i].len = 0x100;
	}
	return sizeof(u->l) + (nreads + nwrites) * sizeof(u->l.ranges[0]);
}

START_TEST(ringdec_launch_ranges_must_match_length)
{
	struct ringdec_counters n;
	union buf u;
	size_t len;
	struct dec x;

	dec_open(&x);
	len = put_launch(&u, 0, 2, 1);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_uint_eq(x.op.nreads, 2);
	ck_assert_uint_eq(x.op.nwrites, 1);
	ck_assert_str_eq(ringdec_error(x.d), "");
	dec_lost(&x, RING_REC_LAUNCH, &u, len - 16);
	dec_lost(&x, RING_REC_LAUNCH, &u, len + 16);
	ck_assert_ptr_nonnull(strstr(ringdec_error(x.d), "ranges"));
	u.l.nreads = UINT32_MAX; /* n * 16 must not wrap into a match */
	u.l.nwrites = 1;
	dec_lost(&x, RING_REC_LAUNCH, &u, len);
	dec_lost(&x, RING_REC_LAUNCH, &u, 24);
	put_launch(&u, 0, 0, 0);
	u.l.kind = OP_ALLOC;
	dec_lost(&x, RING_REC_LAUNCH, &u, 32);
	ringdec_counters(x.d, &n);
	ck_assert_uint_eq(n.malformed, 5);
	ck_assert_uint_eq(n.lost, 5);
	ck_assert_uint_eq(n.ops, 6);
	dec_close(&x);
}
END_TEST

START_TEST(ringdec_unknown_kind_rejected)
{
	union buf u = { 0 };
	struct dec x;

	dec_open(&x);
	u.op.kind = OP_FREE;
	u.op.a = 0x42;
	ck_assert_int_eq(dec(&x, RING_REC_OP, &u, sizeof(u.op)), 1);
	ck_assert_int_eq(x.op.kind, OP_FREE);
	ck_assert_uint_eq(x.op.ptr, 0x42);
	u.op.kind = OP_KIND_COUNT;
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op));
	u.op.kind = 0xff;
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op));
	u.op.kind = OP_LAUNCH; /* launches have their own record */
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op));
	u.op.kind = OP_FREE;
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op) + 8);
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op) - 8);
	dec_lost(&x, RING_REC_PAD, &u, 0);
	dec_lost(&x, 63, &u, sizeof(u.op));
	ck_assert_ptr_nonnull(strstr(ringdec_error(x.d), "type 63"));
	dec_close(&x);
}
END_TEST

START_TEST(ringdec_string_past_payload_rejected)
{
	struct ringdec_counters n;
	union buf u;
	size_t len;
	struct dec x;

	dec_open(&x);
	len = put_string(&u, 3, "aten::mm"); /* 16 bytes, no slack */
	u.s.len = 9;
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, len), -EBADMSG);
	u.s.len = UINT32_MAX;
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, len), -EBADMSG);
	u.s.len = 0; /* 8 bytes of slack: more than padding */
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, len), -EBADMSG);
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, 4), -EBADMSG);
	len = put_string(&u, 0, "x"); /* id 0 is "none" */
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, len), -EBADMSG);
	/* Nothing was defined: id 3 is still a placeholder. */
	len = put_launch(&u, 3, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), "<operator 3>");
	/* A stack whose frames run past its payload. */
	memset(&u, 0, sizeof(u));
	u.st.id = 1;
	u.st.nframes = 3;
	ck_assert_int_eq(dec(&x, RING_REC_STACK, &u, 16), -EBADMSG);
	u.st.nframes = UINT32_MAX;
	ck_assert_int_eq(dec(&x, RING_REC_STACK, &u, 16), -EBADMSG);
	ringdec_counters(x.d, &n);
	ck_assert_uint_eq(n.malformed, 7);
	ck_assert_uint_eq(n.strings, 0);
	ck_assert_uint_eq(n.stacks, 0);
	dec_close(&x);
}
END_TEST

/* A string definition of `n` bytes of `fill` in a fresh aligned buffer;
 * its payload length in *len (caller frees). */
static struct ring_string *big_string(uint32_t id, size_t n, char fill,
				      size_t *len)
{
	size_t size = ring_rec_size(sizeof(struct ring_string) + n);
	struct ring_string *s = calloc(1, size);

	ck_assert_ptr_nonnull(s);
	s->id = id;
	s->len = (uint32_t)n;
	memset(s->bytes, fill, n);
	*len = size - 8;
	return s;
}

/* Issue 12: 100 distinct 4 MiB operator names took 409 MiB. A string is
 * cut at OP_MAX_STRING bytes, as the agent and the trace reader cut it. */
START_TEST(ringdec_long_string_cut_as_the_agent_cuts)
{
	size_t len, n;
	struct ring_string *big = big_string(5, (size_t)4 << 20, 'a', &len);
	struct ringdec_counters c;
	const char *name;
	union buf u;
	struct dec x;

	dec_open(&x);
	ck_assert_int_eq(dec(&x, RING_REC_STRING, big, len), 0);
	len = put_launch(&u, 5, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	name = symtab_str(x.syms, x.op.name, &n);
	ck_assert_uint_eq(n, OP_MAX_STRING);
	ck_assert_uint_eq(strspn(name, "a"), OP_MAX_STRING);
	ck_assert_uint_lt(symtab_bytes(x.syms), 1 << 20); /* not 4 MiB */
	ringdec_counters(x.d, &c);
	ck_assert_uint_eq(c.truncated, 1);
	/* One exactly at the bound is whole. */
	free(big);
	big = big_string(6, OP_MAX_STRING, 'b', &len);
	ck_assert_int_eq(dec(&x, RING_REC_STRING, big, len), 0);
	len = put_launch(&u, 6, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	symtab_str(x.syms, x.op.name, &n);
	ck_assert_uint_eq(n, OP_MAX_STRING);
	ringdec_counters(x.d, &c);
	ck_assert_uint_eq(c.truncated, 1);
	free(big);
	dec_close(&x);
}
END_TEST

/* A process's strings count against its cap: past it they are one
 * placeholder, and nothing more is held. */
START_TEST(ringdec_strings_bounded_by_max_bytes)
{
	const size_t cap = 256 << 10;
	struct ringdec_counters c;
	size_t len;
	union buf u;
	struct dec x;

	dec_open(&x);
	ringdec_set_max_bytes(x.d, cap);
	for (uint32_t id = 1; id <= 2000; id++) {
		struct ring_string *s = big_string(id, 1000, 'a', &len);

		memcpy(s->bytes, &id, sizeof(id)); /* distinct */
		s->bytes[0] |= 0x40;
		s->bytes[1] |= 0x40;
		s->bytes[2] |= 0x40;
		s->bytes[3] |= 0x40;
		ck_assert_int_eq(dec(&x, RING_REC_STRING, s, len), 0);
		free(s);
	}
	/* Room for its tables to grow once more, no more. */
	ck_assert_uint_le(symtab_bytes(x.syms), 2 * cap);
	ringdec_counters(x.d, &c);
	ck_assert_uint_gt(c.over_cap, 0);
	ck_assert_uint_lt(c.strings, 2000);
	len = put_launch(&u, 2000, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), RINGDEC_OVER_CAP);
	len = put_launch(&u, 1, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_uint_eq(strlen(dec_str(&x, x.op.name)), 1000);
	dec_close(&x);
}
END_TEST

/*
 * Through a real ring: a string and a stack defined by records, then a
 * launch naming them decodes to their text; ids never defined decode to a
 * placeholder, id 0 to "none"; a lost stretch and a gap become gaps.
 */
/* Names are kept as a trace carries them (text.h): tab, newline, DEL and
 * C1 stay; an empty frame is a frame; an empty operator is none, as a
 * trace's `op` is never empty. */
START_TEST(ringdec_keeps_text_as_traces_carry_it)
{
	static const char name[] = "a\tb\nc\x7f\xc2\x85\x1b";
	union buf u;
	struct dec x;
	size_t len;

	dec_open(&x);
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, put_string(&u, 1, name)),
			 0);
	ck_assert_int_eq(dec(&x, RING_REC_STRING, &u, put_string(&u, 2, "")),
			 0);
	len = put_launch(&u, 1, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), "a\tb\nc\x7f\xc2\x85?");
	len = put_launch(&u, 2, 0, 0);
	ck_assert_int_eq(dec(&x, RING_REC_LAUNCH, &u, len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), "<no operator>");
	dec_close(&x);
}
END_TEST

START_TEST(ringdec_names_ids_through_the_ring)
{
	static const char name[] = "aten::add\x01\xff";
	struct ringdec_counters n;
	const uint32_t *frames;
	struct ring_slot s;
	struct got g = { 0 };
	union buf u;
	struct dec x;
	struct rt t;
	size_t len;

	dec_open(&x);
	rt_open(&t, 0, 0, 0 - 64);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_STRING,
				      sizeof(u.s) + strlen(name), &s), 0);
	put_string(&u, 7, name);
	memcpy(s.payload, &u, sizeof(u.s) + strlen(name));
	ring_commit(&s);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_STACK, 16, &s), 0);
	memset(&u, 0, sizeof(u));
	u.st.id = 4;
	u.st.nframes = 2;
	u.st.frames[0] = 7;
	u.st.frames[1] = 8;
	memcpy(s.payload, &u, 16);
	ring_commit(&s);
	len = put_launch(&u, 7, 1, 1);
	u.l.stack = 4;
	u.l.ranges[0].len = 0;                   /* empty: dropped */
	u.l.ranges[1].ptr = UINT64_MAX - 0xf;    /* cut at 2^64 */
	u.l.ranges[1].len = 0x100;
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_LAUNCH, len, &s), 0);
	memcpy(s.payload, &u, len);
	ring_commit(&s);
	put_launch(&u, 9, 0, 0);
	u.l.stack = 5;
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_LAUNCH, 32, &s), 0);
	memcpy(s.payload, &u, 32);
	ring_commit(&s);
	put_launch(&u, 0, 0, 0);
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_LAUNCH, 32, &s), 0);
	memcpy(s.payload, &u, 32);
	ring_commit(&s);
	ck_assert_int_eq(ring_reserve(t.p, 1, MAXREC, &s), -EMSGSIZE);
	rt_push(&t, RING_REC_OP, 0, 0); /* after a gap; malformed itself */
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, 8, &s), 0);
	ck_assert_uint_eq(rt_drain(&t, RINGREAD_DEAD, &g), 8);

	ck_assert_int_eq(dec(&x, g.v[0].type, g.v[0].data, g.v[0].len), 0);
	ck_assert_int_eq(dec(&x, g.v[1].type, g.v[1].data, g.v[1].len), 0);
	ck_assert_int_eq(dec(&x, g.v[2].type, g.v[2].data, g.v[2].len), 1);
	ck_assert_int_eq(x.op.kind, OP_LAUNCH);
	ck_assert_str_eq(dec_str(&x, x.op.name), "aten::add??");
	ck_assert_uint_eq(x.op.stream, 7);
	ck_assert_uint_eq(x.op.nreads, 0);
	ck_assert_uint_eq(x.op.nwrites, 1);
	ck_assert_uint_eq(x.op.writes[0].ptr, UINT64_MAX - 0xf);
	ck_assert_uint_eq(x.op.writes[0].len, 0x10);
	ck_assert_uint_eq(symtab_stack(x.syms, x.op.stack, &frames), 2);
	ck_assert_str_eq(dec_str(&x, frames[0]), "aten::add??");
	ck_assert_str_eq(dec_str(&x, frames[1]), "<frame 8>");
	ck_assert_int_eq(dec(&x, g.v[3].type, g.v[3].data, g.v[3].len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), "<operator 9>");
	ck_assert_uint_eq(x.op.stack, 0);
	ck_assert_int_eq(dec(&x, g.v[4].type, g.v[4].data, g.v[4].len), 1);
	ck_assert_str_eq(dec_str(&x, x.op.name), "<no operator>");
	ck_assert_int_eq(dec(&x, g.v[5].type, g.v[5].data, g.v[5].len), 1);
	ck_assert_int_eq(x.op.kind, OP_GAP);
	ck_assert(x.op.has_lost);
	ck_assert_uint_eq(x.op.lost, 1);
	dec_lost(&x, g.v[6].type, g.v[6].data, g.v[6].len);
	ck_assert_uint_eq(g.v[7].type, RINGREAD_LOST);
	ck_assert_int_eq(dec(&x, g.v[7].type, g.v[7].data, g.v[7].len), 1);
	ck_assert_int_eq(x.op.kind, OP_GAP);
	ck_assert(!x.op.has_lost);
	ringdec_counters(x.d, &n);
	ck_assert_uint_eq(n.strings, 1);
	ck_assert_uint_eq(n.stacks, 1);
	ck_assert_uint_eq(n.ops, 6);
	ck_assert_uint_eq(n.malformed, 1);
	ck_assert_uint_eq(n.lost, 1);
	ck_assert_uint_eq(n.undefined, 3); /* frame 8, operator 9, stack 5 */
	got_free(&g);
	rt_close(&t);
	dec_close(&x);
}
END_TEST

/* Pushes `len` bytes of `rec` as one RING_REC_OP. */
static void push_op(struct rt *t, const void *rec, size_t len)
{
	struct ring_slot s;

	ck_assert_int_eq(ring_reserve(t->p, RING_REC_OP, len, &s), 0);
	memcpy(s.payload, rec, len);
	ring_commit(&s);
}

/* The four graph kinds and a graph-pool alloc, from the producer through
 * the consumer and the decoder; a v1 alloc beside them is unchanged. */
START_TEST(ringdec_graph_records_through_the_ring)
{
	const struct ring_op ops[] = {
		{ .kind = RING_OP_CAPTURE_BEGIN, .a = 1, .b = 7 },
		{ .kind = RING_OP_CAPTURE_END, .a = 1, .b = 7 },
		{ .kind = RING_OP_GRAPH_REPLAY, .a = 7, .b = 2 },
		{ .kind = RING_OP_GRAPH_DESTROY, .a = UINT64_MAX },
		{ .kind = RING_OP_ALLOC, .a = 0x9000, .b = 4096, .c = 3,
		  .flags = RING_OP_HAS_STREAM },
	};
	const struct ring_op_graph pool = {
		.op = { .kind = RING_OP_ALLOC, .a = 0x9000, .b = 64,
			.flags = RING_OP_HAS_GRAPH },
		.graph = UINT64_MAX - 1,
	};
	struct ringdec_counters n;
	struct got g = { 0 };
	struct dec x;
	struct rt t;

	dec_open(&x);
	rt_open(&t, 0, 0, 0 - 64);
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		push_op(&t, &ops[i], ring_op_size(&ops[i]));
	ck_assert_uint_eq(ring_op_size(&pool.op), 40);
	push_op(&t, &pool, ring_op_size(&pool.op));
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 6);
	/* Every one is an operation record the consumer accounts for. */
	ck_assert_uint_eq(ring_load_relaxed(&t.p->hdr->consumed), 6);
	ck_assert_uint_eq(g.v[4].len, 32); /* layout v1's alloc */
	ck_assert_uint_eq(g.v[5].len, 40);

	ck_assert_int_eq(dec(&x, g.v[0].type, g.v[0].data, g.v[0].len), 1);
	ck_assert_int_eq(x.op.kind, OP_CAPTURE_BEGIN);
	ck_assert_uint_eq(x.op.stream, 1);
	ck_assert_uint_eq(x.op.graph, 7);
	ck_assert_int_eq(dec(&x, g.v[1].type, g.v[1].data, g.v[1].len), 1);
	ck_assert_int_eq(x.op.kind, OP_CAPTURE_END);
	ck_assert_uint_eq(x.op.stream, 1);
	ck_assert_uint_eq(x.op.graph, 7);
	ck_assert_int_eq(dec(&x, g.v[2].type, g.v[2].data, g.v[2].len), 1);
	ck_assert_int_eq(x.op.kind, OP_GRAPH_REPLAY);
	ck_assert_uint_eq(x.op.graph, 7);
	ck_assert_uint_eq(x.op.stream, 2);
	ck_assert_int_eq(dec(&x, g.v[3].type, g.v[3].data, g.v[3].len), 1);
	ck_assert_int_eq(x.op.kind, OP_GRAPH_DESTROY);
	ck_assert_uint_eq(x.op.graph, UINT64_MAX);
	ck_assert_uint_eq(x.op.stream, 0);
	ck_assert_int_eq(dec(&x, g.v[4].type, g.v[4].data, g.v[4].len), 1);
	ck_assert_int_eq(x.op.kind, OP_ALLOC);
	ck_assert(x.op.has_stream);
	ck_assert(!x.op.has_graph);
	ck_assert_uint_eq(x.op.graph, 0);
	ck_assert_int_eq(dec(&x, g.v[5].type, g.v[5].data, g.v[5].len), 1);
	ck_assert_int_eq(x.op.kind, OP_ALLOC);
	ck_assert_uint_eq(x.op.ptr, 0x9000);
	ck_assert_uint_eq(x.op.size, 64);
	ck_assert(!x.op.has_stream);
	ck_assert(x.op.has_graph);
	ck_assert_uint_eq(x.op.graph, UINT64_MAX - 1);
	ringdec_counters(x.d, &n);
	ck_assert_uint_eq(n.ops, 6);
	ck_assert_uint_eq(n.malformed, 0);
	got_free(&g);
	rt_close(&t);
	dec_close(&x);
}
END_TEST

/* A graph record of the wrong shape is one operation lost, named and
 * counted, never an op made up from its bytes. */
START_TEST(ringdec_corrupt_graph_record_is_one_op_lost)
{
	struct ringdec_counters n;
	struct ring_op_graph r;
	union buf u;
	struct dec x;

	dec_open(&x);
	memset(&r, 0, sizeof(r));
	r.op.kind = RING_OP_ALLOC;
	r.op.a = 0x9000;
	r.op.b = 16;
	r.graph = 5;
	/* 40 bytes without the flag: not a v1 op, not a graph alloc. */
	dec_lost(&x, RING_REC_OP, &r, sizeof(r));
	ck_assert_str_eq(ringdec_error(x.d),
			 "malformed operation (record type 4, 40 bytes)");
	/* The flag on 32 bytes: the graph would be read past the record. */
	r.op.flags = RING_OP_HAS_GRAPH;
	dec_lost(&x, RING_REC_OP, &r, sizeof(r.op));
	ck_assert_str_eq(ringdec_error(x.d),
			 "malformed operation (record type 4, 32 bytes)");
	/* Only an alloc comes from a pool. */
	r.op.kind = RING_OP_GRAPH_DESTROY;
	dec_lost(&x, RING_REC_OP, &r, sizeof(r));
	r.op.kind = RING_OP_FREE;
	dec_lost(&x, RING_REC_OP, &r, sizeof(r));
	/* Longer or shorter than either shape. */
	memset(&u, 0, sizeof(u));
	memcpy(&u, &r, sizeof(r));
	u.op.kind = RING_OP_ALLOC;
	dec_lost(&x, RING_REC_OP, &u, sizeof(r) + 8);
	dec_lost(&x, RING_REC_OP, &u, sizeof(r) - 4);
	dec_lost(&x, RING_REC_OP, &u, 4);
	/* A kind past the newest. */
	u.op.kind = RING_OP_KIND_COUNT;
	u.op.flags = 0;
	dec_lost(&x, RING_REC_OP, &u, sizeof(u.op));
	/* A good one still decodes after them. */
	r.op.kind = RING_OP_ALLOC;
	ck_assert_int_eq(dec(&x, RING_REC_OP, &r, sizeof(r)), 1);
	ck_assert_int_eq(x.op.kind, OP_ALLOC);
	ck_assert(x.op.has_graph);
	ck_assert_uint_eq(x.op.graph, 5);
	ringdec_counters(x.d, &n);
	ck_assert_uint_eq(n.malformed, 8);
	ck_assert_uint_eq(n.lost, 8);
	ck_assert_uint_eq(n.ops, 9);
	dec_close(&x);
}
END_TEST

static Suite *ring_suite(void)
{
	Suite *s = suite_create("ring");
	TCase *tc = tcase_create("ring");
	TCase *rd = tcase_create("ringread");
	TCase *dc = tcase_create("ringdec");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, ring_create_rejects_bad_arguments);
	tcase_add_test(tc, ring_indices_wrap_at_2_64);
	tcase_add_test(tc, ring_tag_wraps_at_2_32);
	tcase_add_loop_test(tc, ring_record_exactly_filling_end_has_no_pad, 0,
			    NENDS);
	tcase_add_loop_test(tc, ring_record_crossing_end_gets_pad, 0, NENDS);
	tcase_add_test(tc, ring_zero_length_records_delivered);
	tcase_add_test(tc, ring_max_record_accepted_one_more_refused);
	tcase_add_test(tc, ring_reserve_huge_length_refused);
	tcase_add_test(tc, ring_full_drops_exact_count_then_gap);
	tcase_add_test(tc, ring_gap_waits_for_room_for_its_record);
	tcase_add_test(tc, ring_block_without_consumer_drops);
	tcase_add_test(tc, ring_block_stalled_consumer_drops_after_timeout);
	tcase_add_test(tc, ring_block_draining_thread_loses_nothing);
	suite_add_tcase(s, tc);

	tcase_set_timeout(rd, 60);
	tcase_add_test(rd, ringread_skip_touches_no_more_than_it_reads);
	tcase_add_test(rd, ringread_stop_at_head_reads_no_later_record);
	tcase_add_loop_test(rd, ringread_corrupt_header_skipped_as_lost, 0,
			    NCORRUPTIONS);
	tcase_add_test(rd, ringread_absurd_head_reads_nothing);
	tcase_add_test(rd, ringread_head_moved_back_not_followed);
	tcase_add_test(rd, ringread_unaligned_head_not_followed);
	tcase_add_test(rd, ringread_map_refuses_unaligned_tail);
	tcase_add_test(rd, ringread_payload_is_a_private_copy);
	tcase_add_test(rd, ringread_dead_producer_unfinished_skipped);
	tcase_add_test(rd, ringread_callback_error_stops_drain);
	tcase_add_loop_test(rd, ringread_map_refuses_bad_files, 0,
			    (int)(sizeof(bad_files) / sizeof(bad_files[0])));
	tcase_add_test(rd, ringread_map_refuses_pipe);
	suite_add_tcase(s, rd);

	tcase_add_test(dc, ringdec_launch_ranges_must_match_length);
	tcase_add_test(dc, ringdec_unknown_kind_rejected);
	tcase_add_test(dc, ringdec_string_past_payload_rejected);
	tcase_add_test(dc, ringdec_keeps_text_as_traces_carry_it);
	tcase_add_test(dc, ringdec_names_ids_through_the_ring);
	tcase_add_test(dc, ringdec_long_string_cut_as_the_agent_cuts);
	tcase_add_test(dc, ringdec_strings_bounded_by_max_bytes);
	tcase_add_test(dc, ringdec_graph_records_through_the_ring);
	tcase_add_test(dc, ringdec_corrupt_graph_record_is_one_op_lost);
	suite_add_tcase(s, dc);
	return s;
}

int main(void)
{
	return tu_main(ring_suite());
}
