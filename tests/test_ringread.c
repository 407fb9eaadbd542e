/*
 * test_ringread.c - test_ring's consumer (common/ringread.c) against what
 * a producer left: corrupt headers, absurd or moved-back heads, a dead
 * producer's unfinished record, and the files ringread_map() refuses.
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
	/* running into the slack (as layout 2 allows) and past the head */
	{ 2, W(RING_COMMIT, RING_REC_OP, 13), 0 },
	/* COMMIT with a length past the head */
	{ 3, W(RING_COMMIT, RING_REC_OP, 8), 0 },
	/* BUSY and COMMIT at once */
	{ 1, W(RING_COMMIT | RING_BUSY, RING_REC_OP, 6), 0 },
	/* neither BUSY nor COMMIT, yet not zero */
	{ 1, W(0, RING_REC_OP, 6), 0 },
	/* BUSY with a wrong tag, from a live producer */
	{ 1, W(RING_BUSY, RING_REC_OP, 6), 1 },
	/* a pad, which layout 2 never writes, even one that fits */
	{ 1, W(RING_COMMIT, RING_REC_PAD, 6), 0 },
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
	ck_assert(all_zero(t.p->data, CAP + MAXREC));
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

/* The agent's recorder borrows its own process's mapping: it reads what
 * was pushed there, refuses memory that is not a ring, and leaves the
 * mapping to its owner. */
START_TEST(ringread_borrow_reads_the_owners_mapping)
{
	_Alignas(struct ring_header) unsigned char junk[RING_HEADER_SIZE] = {
		0
	};
	const char *why = NULL;
	struct got g = { 0 };
	struct rt t;

	t.c = NULL;
	ck_assert_int_eq(ringread_borrow(junk, sizeof(junk), &t.c, &why),
			 -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "magic"));
	ck_assert_int_eq(ringread_borrow(junk, 8, &t.c, &why), -EINVAL);
	ck_assert_ptr_nonnull(strstr(why, "shorter"));
	ck_assert_ptr_null(t.c);
	rt_create(&t, 0, 0, 0);
	ck_assert_int_eq(ringread_borrow(t.p->hdr, t.p->map_len, &t.c, &why),
			 0);
	rt_push(&t, RING_REC_OP, 40, 7);
	ck_assert_uint_eq(rt_drain(&t, 0, &g), 1);
	ck_rec(&g, 0, RING_REC_OP, 40, 7);
	ringread_unmap(t.c);
	t.c = NULL;
	/* Still mapped: the producer pushes on into it. */
	rt_push(&t, RING_REC_OP, 40, 8);
	got_free(&g);
	rt_close(&t);
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
	ck_assert(all_zero(t.p->data, CAP + MAXREC));
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
	off_t size;      /* 0: ring_map_size() of capacity and max_record */
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
	{ "version is newer", 0, false, 0, RING_VERSION + 1, 0, 0, 0 },
	/* Layout 1, a ring without slack, from an agent of an older release:
	 * refused for what it is, whatever its size. */
	{ "version is older", 0, false, 0, 1, 0, 0, 0 },
	{ "version is older", RING_HEADER_SIZE + CAP, false, 0, 1, 0, 0, 0 },
	{ "header size", 0, false, 0, 0, 8192, 0, 0 },
	{ "capacity", 0, false, 0, 0, 0, CAP + 4096, 0 },
	{ "capacity", 0, false, 0, 0, 0, CAP / 2, 0 },
	{ "capacity", 0, false, 0, 0, 0, RING_MAX_CAPACITY * 2, 0 },
	{ "size", RING_HEADER_SIZE + 2 * CAP, false, 0, 0, 0, 0, 0 },
	{ "size", RING_HEADER_SIZE + CAP - 4096, false, 0, 0, 0, 0, 0 },
	/* a layout 1 size: no slack */
	{ "size", RING_HEADER_SIZE + CAP, false, 0, 0, 0, 0, 0 },
	{ "record limit", 0, false, 0, 0, 0, 0, 8 },
	{ "record limit", 0, false, 0, 0, 0, 0, CAP / 2 + 8 },
	{ "record limit", 0, false, 0, 0, 0, 0, 1028 },
};

START_TEST(ringread_map_refuses_bad_files)
{
	const struct bad_file *b = &bad_files[_i];
	struct ring_header h = { 0 };
	struct ringread *r = (struct ringread *)&h;
	off_t size = b->size ? b->size : (off_t)ring_map_size(CAP, MAXREC);
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

void test_ringread_add(TCase *rd)
{
	tcase_set_timeout(rd, 60);
	tcase_add_test(rd, ringread_skip_touches_no_more_than_it_reads);
	tcase_add_test(rd, ringread_stop_at_head_reads_no_later_record);
	tcase_add_loop_test(rd, ringread_corrupt_header_skipped_as_lost, 0,
			    NCORRUPTIONS);
	tcase_add_test(rd, ringread_absurd_head_reads_nothing);
	tcase_add_test(rd, ringread_head_moved_back_not_followed);
	tcase_add_test(rd, ringread_unaligned_head_not_followed);
	tcase_add_test(rd, ringread_map_refuses_unaligned_tail);
	tcase_add_test(rd, ringread_borrow_reads_the_owners_mapping);
	tcase_add_test(rd, ringread_payload_is_a_private_copy);
	tcase_add_test(rd, ringread_dead_producer_unfinished_skipped);
	tcase_add_test(rd, ringread_callback_error_stops_drain);
	tcase_add_loop_test(rd, ringread_map_refuses_bad_files, 0,
			    (int)(sizeof(bad_files) / sizeof(bad_files[0])));
	tcase_add_test(rd, ringread_map_refuses_pipe);
}
