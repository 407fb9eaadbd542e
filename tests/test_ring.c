/*
 * test_ring.c - the shared-memory ring with its producer (agent/ring.c) and
 * its consumer (common/ringread.c, common/ringdec.c) in one process.
 *
 * Most tests push, drain and look at the bytes in the ring by hand; the
 * consumer maps the producer's memfd as the daemon would. Positions start
 * where the test wants them (just below 2^64, just below the 2^32 tag wrap,
 * a few bytes before the end of the data area) by storing one position
 * into head, tail and the producer's tail cache before the consumer maps.
 *
 * This file holds the suite and the ring's own tests; the consumer's are
 * in test_ringread.c, the decoder's in test_ringdec.c, the helpers they
 * share in ring_helpers.h.
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
#include "ring_helpers.h"
#include "ringdec.h"
#include "ringread.h"
#include "symtab.h"
#include "testutil.h"

/* The three places a test starts at, each 64 bytes before a boundary:
 * the data area's end, 2^64 (the end too) and 2^35 (tag 2^32). */
static const uint64_t ends[] = {
	3 * CAP,
	0,
	UINT64_C(1) << 35,
};
#define NENDS (int)(sizeof(ends) / sizeof(ends[0]))

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
 * zeroed the previous lap, the slack included), with no pad where records
 * met the end: they ran on into the slack.
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
	ck_assert_uint_eq(n.bytes, need); /* no pads */
	ck_assert_uint_eq(n.lost_bytes, 0);
	ck_assert_uint_eq(n.corrupt, 0);
	ck_assert_uint_eq(ring_dropped(t.p), 0);
	ck_assert(all_zero(t.p->data, CAP + MAXREC));
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

/*
 * One byte more and the record runs on past the end, contiguous, into the
 * slack (layout 2): no pad. The consumer hands it over whole and zeroes
 * its bytes in the slack; the next record starts at the offset of its
 * position, past the bytes the first one took in the slack's stead.
 */
START_TEST(ring_record_crossing_end_runs_into_slack)
{
	uint64_t start = ends[_i] - 64, pos;
	struct ringread_counters n;
	struct got g = { 0 };
	struct rt t;

	rt_open(&t, 0, 0, start);
	pos = rt_push(&t, RING_REC_OP, 57, 1);
	ck_assert_uint_eq(pos, start);
	ck_assert_uint_eq(rt_head(&t), start + 72);
	ck_assert_ptr_eq(rt_rec(&t, pos),
			 (struct ring_rec *)(t.p->data + CAP - 64));
	ck_assert_uint_eq(rt_rec(&t, pos)->word,
			  ring_word(RING_COMMIT, RING_REC_OP, 72));
	/* Its last payload byte is the slack's first; the data area's
	 * first bytes are untouched. */
	ck_assert_uint_eq(t.p->data[CAP], pattern(1, 56));
	ck_assert(all_zero(t.p->data, 8));
	pos = rt_push(&t, RING_REC_LAUNCH, 8, 2);
	ck_assert_uint_eq(pos, start + 72);
	ck_assert_ptr_eq(rt_rec(&t, pos), (struct ring_rec *)(t.p->data + 8));
	ck_assert_uint_eq(rt_rec(&t, pos)->tag, ring_tag(start + 72));
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 2);
	ck_rec(&g, 0, RING_REC_OP, 57, 1);
	ck_rec(&g, 1, RING_REC_LAUNCH, 8, 2);
	ringread_counters(t.c, &n);
	ck_assert_uint_eq(n.records, 2);
	ck_assert_uint_eq(n.bytes, 72 + 16);
	ck_assert_uint_eq(n.lost_bytes, 0);
	ck_assert(all_zero(t.p->data, CAP + MAXREC));
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
	rt_push(&t, RING_REC_LAUNCH, max, 2); /* runs into the slack */
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
	/* The gap leaves 216 bytes at the end: the record runs past it. */
	ck_assert_uint_eq(rt_push(&t, RING_REC_STRING, 250, 77),
			  10 * CAP - 216);
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

/*
 * ring_drop_if_full() drops, counting it, exactly what ring_reserve() would
 * drop: a record without room by the consumer's tail (the cached one may
 * be old), counting the room of the gap record that drops waiting for one
 * need first; never on a ring that blocks.
 */
START_TEST(ring_drop_if_full_drops_what_reserve_would)
{
	struct ring_slot s;
	struct got g = { 0 };
	struct rt t, b;

	rt_open(&t, 0, 0, 5 * CAP);
	for (unsigned i = 0; i < CAP / 256 - 1; i++)
		rt_push(&t, RING_REC_OP, 248, i);
	/* 256 bytes left: 184 of them taken, 72 left. */
	rt_push(&t, RING_REC_OP, 176, 99);
	ck_assert(!ring_drop_if_full(t.p, 72));
	ck_assert(ring_drop_if_full(t.p, 80));
	ck_assert_uint_eq(ring_dropped(t.p), 1);
	ck_assert_uint_eq(t.p->hdr->pending, 1);
	ck_assert_uint_eq(rt_head(&t) - 5 * CAP, CAP - 72);
	/* A drop waits for its gap: 72 bytes hold the 40 of the gap record
	 * and 32 more, not a record of 40. */
	ck_assert(!ring_drop_if_full(t.p, 32));
	ck_assert(ring_drop_if_full(t.p, 40));
	ck_assert_uint_eq(t.p->hdr->pending, 2);
	/* The consumer takes a record: the tail it publishes is the one
	 * checked, not the producers' cached one. */
	ck_assert_int_eq(ringread_drain(t.c, 1, 0, got_cb, &g), 1);
	ck_assert(!ring_drop_if_full(t.p, 80));
	ck_assert_int_eq(ring_reserve(t.p, RING_REC_OP, 72, &s), 0);
	ring_commit(&s);
	ck_assert_uint_eq(ring_dropped(t.p), 2);
	ck_assert_uint_eq(t.p->hdr->pending, 0);
	got_free(&g);
	rt_close(&t);
	/* A blocking ring waits instead: never dropped here. */
	rt_open(&b, RING_F_BLOCK, 0, 0);
	fill_ring(&b);
	ck_assert(!ring_drop_if_full(b.p, 8));
	ck_assert_uint_eq(ring_dropped(b.p), 0);
	rt_close(&b);
}
END_TEST

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
	tcase_add_loop_test(tc, ring_record_crossing_end_runs_into_slack,
			    0, NENDS);
	tcase_add_test(tc, ring_zero_length_records_delivered);
	tcase_add_test(tc, ring_max_record_accepted_one_more_refused);
	tcase_add_test(tc, ring_reserve_huge_length_refused);
	tcase_add_test(tc, ring_full_drops_exact_count_then_gap);
	tcase_add_test(tc, ring_gap_waits_for_room_for_its_record);
	tcase_add_test(tc, ring_drop_if_full_drops_what_reserve_would);
	tcase_add_test(tc, ring_block_without_consumer_drops);
	tcase_add_test(tc, ring_block_stalled_consumer_drops_after_timeout);
	tcase_add_test(tc, ring_block_draining_thread_loses_nothing);
	suite_add_tcase(s, tc);

	test_ringread_add(rd);
	suite_add_tcase(s, rd);

	test_ringdec_add(dc);
	suite_add_tcase(s, dc);
	return s;
}

int main(void)
{
	return tu_main(ring_suite());
}
