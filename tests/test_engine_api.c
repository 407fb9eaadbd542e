/*
 * test_engine_api.c - the engine's API (test_engine's TCase api): malformed
 * ops, the stream limit, gaps where ops are skipped, out of memory, and
 * memory bounded over a long run.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_int.h" /* engine_check() against broken state */
#include "engine_helpers.h"
#include "testutil.h"

/* ---- the engine API ----------------------------------------------------- */

static void count_cb(const struct finding *f, bool first, void *arg)
{
	(void)f;
	(void)first;
	(*(size_t *)arg)++;
}

START_TEST(engine_rejects_malformed_ops)
{
	struct engine_opts o = { .finding_cb = count_cb };
	struct op_range bad[] = { { 0x10, 0 }, { UINT64_MAX, 2 } };
	struct op op = { .kind = OP_LAUNCH, .reads = bad, .nreads = 1 };
	struct engine *e;
	size_t n = 0;

	o.arg = &n;
	ck_assert_int_eq(engine_new(&(struct engine_opts){ 0 }, &e), -EINVAL);
	ck_assert_int_eq(engine_new(&o, &e), 0);
	ck_assert_int_eq(engine_feed(e, &op), -EINVAL);
	op.reads = &bad[1];
	ck_assert_int_eq(engine_feed(e, &op), -EINVAL);
	op = (struct op){ .kind = OP_ALLOC, .ptr = UINT64_MAX, .size = 2 };
	ck_assert_int_eq(engine_feed(e, &op), -EINVAL);
	op = (struct op){ .kind = OP_KIND_COUNT };
	ck_assert_int_eq(engine_feed(e, &op), -EINVAL);
	engine_free(e);
	engine_free(NULL);
}
END_TEST

START_TEST(engine_stream_limit_is_an_error_not_a_crash)
{
	struct engine_opts o = { .finding_cb = count_cb };
	struct engine_stats st;
	struct engine *e;
	size_t n = 0;
	struct op op = { .kind = OP_STREAM_CREATE };

	o.arg = &n;
	ck_assert_int_eq(engine_new(&o, &e), 0);
	for (uint64_t s = 1; s < ENGINE_MAX_STREAMS; s++) {
		op.stream = s * 7919;
		ck_assert_int_eq(engine_feed(e, &op), 0);
	}
	op.stream = 1;
	ck_assert_int_eq(engine_feed(e, &op), -E2BIG);
	op = (struct op){ .kind = OP_STREAM_WAIT, .stream = 7919, .on = 2 };
	ck_assert_int_eq(engine_feed(e, &op), -E2BIG);
	op = (struct op){ .kind = OP_DEVICE_SYNC };
	ck_assert_int_eq(engine_feed(e, &op), 0);
	/* every op that would name one more stream fails the same way and
	 * leaves nothing behind */
	op = (struct op){ .kind = OP_ALLOC, .ptr = 0x1000, .size = 16,
			  .stream = 2, .has_stream = true };
	ck_assert_int_eq(engine_feed(e, &op), -E2BIG);
	op = (struct op){ .kind = OP_RECORD_STREAM, .ptr = 0x1000,
			  .stream = 2 };
	ck_assert_int_eq(engine_feed(e, &op), -E2BIG);
	op = (struct op){ .kind = OP_STREAM_SYNC, .stream = 2 };
	ck_assert_int_eq(engine_feed(e, &op), -E2BIG);
	engine_get_stats(e, &st);
	ck_assert_uint_eq(st.streams, ENGINE_MAX_STREAMS);
	ck_assert_uint_eq(st.live_allocs, 0);
	engine_free(e);
}
END_TEST

/* Accesses every stream has synchronized past can race nothing any more:
 * the next read of their bytes lets them go, and the engine keeps only the
 * accesses that still can (DESIGN 5). */
START_TEST(engine_accesses_every_stream_synced_past_are_let_go)
{
	struct engine_opts o = { .finding_cb = count_cb };
	struct op_range x = { 0x1000, 4 };
	struct op op = { .kind = OP_LAUNCH, .reads = &x, .nreads = 1 };
	struct engine_stats st;
	struct engine *e;
	size_t n = 0;

	o.arg = &n;
	ck_assert_int_eq(engine_new(&o, &e), 0);
	for (int round = 0; round < 2; round++) {
		for (uint64_t s = 1; s <= 4; s++) {
			op.stream = s;
			ck_assert_int_eq(engine_feed(e, &op), 0);
		}
		ck_assert_int_eq(engine_feed(e, &(struct op){
						    .kind = OP_DEVICE_SYNC }),
				 0);
	}
	engine_get_stats(e, &st);
	ck_assert_uint_eq(st.accesses, 4);
	/* so does a last write, once every stream synchronized past it */
	op = (struct op){ .kind = OP_LAUNCH, .stream = 1, .writes = &x,
			  .nwrites = 1 };
	ck_assert_int_eq(engine_feed(e, &op), 0);
	ck_assert_int_eq(engine_feed(e, &(struct op){ .kind = OP_DEVICE_SYNC }),
			 0);
	op = (struct op){ .kind = OP_LAUNCH, .stream = 2, .reads = &x,
			  .nreads = 1 };
	ck_assert_int_eq(engine_feed(e, &op), 0);
	engine_get_stats(e, &st);
	ck_assert_uint_eq(st.accesses, 1);
	ck_assert_uint_eq(n, 0);
	engine_free(e);
}
END_TEST

/* engine_check(), which every test and the fuzzer run after each op, names
 * the first invariant a bookkeeping slip breaks. Each slip is made by hand
 * in the engine's state and undone before the next. */
#define SLIP(field, delta, why)                                        \
	do {                                                           \
		(field) += (delta);                                    \
		ck_assert_str_eq(engine_check(e), (why));              \
		(field) -= (delta);                                    \
		ck_assert_ptr_null(engine_check(e));                   \
	} while (0)

START_TEST(engine_check_names_the_broken_invariant)
{
	struct engine_opts o = { .finding_cb = count_cb };
	struct op_range w = { 0x1000, 16 }, r = { 0x2000, 8 };
	struct op alloc = { .kind = OP_ALLOC, .ptr = 0x1000, .size = 64,
			    .stream = 0, .has_stream = true };
	struct op on1 = { .kind = OP_LAUNCH, .stream = 1, .writes = &w,
			  .nwrites = 1 };
	struct op out = { .kind = OP_LAUNCH, .stream = 2, .reads = &r,
			  .nreads = 1 };
	struct engine *e;
	struct alloc *a;
	size_t n = 0;

	o.arg = &n;
	ck_assert_int_eq(engine_new(&o, &e), 0);
	ck_assert_int_eq(engine_feed(e, &alloc), 0);
	ck_assert_int_eq(engine_feed(e, &on1), 0);
	ck_assert_int_eq(engine_feed(e, &out), 0);
	ck_assert_ptr_null(engine_check(e));
	a = alloc__at(e, 0x1000);
	ck_assert_ptr_nonnull(a);
	SLIP(e->streams[0].state[0], (int64_t)e->seq + 1,
	     "a stream is ahead of the last launch");
	SLIP(e->st.live_allocs, 1,
	     "live_allocs differs from the allocation tree");
	SLIP(e->npending, 1, "the pending list holds what is not pending");
	SLIP(e->st.segments, 1, "the segments count differs from the trees");
	SLIP(e->st.accesses, 1, "the accesses count differs from the "
				"accesses the histories hold");
	SLIP(a->usages->u[0].sidx, 5,
	     "a usage names a stream that does not exist");
	SLIP(a->sidx, 1, "a usage is recorded that the record_stream rule "
			 "never records");
	SLIP(history__acc(e, history__seg_of(rb_first(&e->outside))->h.rd)
		     ->refs,
	     1,
	     "an access's reference count differs from the histories that "
	     "hold it");
	engine_free(e);
}
END_TEST

/* Skipped past the limit: one gap for a run of skipped ops, a new one
 * after an op analysed in between, and no race across the gap. */
START_TEST(engine_feed_or_skip_puts_a_gap_where_it_skips)
{
	struct engine_opts o = { .finding_cb = count_cb };
	struct engine_stats st;
	struct engine *e;
	size_t n = 0;
	bool skipping = false;
	struct op op = { .kind = OP_STREAM_CREATE };
	struct op_range w = { 0x1000, 8 }, r = { 0x1000, 8 };

	o.arg = &n;
	ck_assert_int_eq(engine_new(&o, &e), 0);
	for (uint64_t s = 1; s < ENGINE_MAX_STREAMS; s++) {
		op.stream = s;
		ck_assert_int_eq(engine_feed_or_skip(e, &op, &skipping), 0);
	}
	op = (struct op){ .kind = OP_LAUNCH, .stream = 0, .writes = &w,
			  .nwrites = 1 };
	ck_assert_int_eq(engine_feed_or_skip(e, &op, &skipping), 0);
	op = (struct op){ .kind = OP_STREAM_CREATE, .stream = 5000 };
	ck_assert_int_eq(engine_feed_or_skip(e, &op, &skipping),
			 ENGINE_SKIPPED_GAP);
	op.stream = 5001;
	ck_assert_int_eq(engine_feed_or_skip(e, &op, &skipping),
			 ENGINE_SKIPPED);
	/* The write before the gap and this read make no race. */
	op = (struct op){ .kind = OP_LAUNCH, .stream = 1, .reads = &r,
			  .nreads = 1 };
	ck_assert_int_eq(engine_feed_or_skip(e, &op, &skipping), 0);
	ck_assert_uint_eq(n, 0);
	op = (struct op){ .kind = OP_STREAM_CREATE, .stream = 5002 };
	ck_assert_int_eq(engine_feed_or_skip(e, &op, &skipping),
			 ENGINE_SKIPPED_GAP);
	engine_get_stats(e, &st);
	ck_assert_uint_eq(st.gaps, 2);
	engine_free(e);
}
END_TEST

/* Out of memory part way through a launch forgets history instead of
 * inventing findings, and the engine keeps working. */
START_TEST(engine_out_of_memory_forgets_and_goes_on)
{
	struct engine_opts o = { .finding_cb = count_cb, .max_bytes = 400000 };
	struct op_range w;
	struct op op = { .kind = OP_LAUNCH, .writes = &w, .nwrites = 1 };
	struct engine *e;
	size_t n = 0, nomem = 0;

	o.arg = &n;
	ck_assert_int_eq(engine_new(&o, &e), 0);
	for (uint64_t i = 0; i < 100000; i++) {
		int rc;

		w = (struct op_range){ i * 64, 8 };
		op.stream = 0;
		rc = engine_feed(e, &op);
		ck_assert(rc == 0 || rc == -ENOMEM);
		nomem += rc == -ENOMEM;
	}
	ck_assert_uint_gt(nomem, 0);
	ck_assert_uint_eq(n, 0);
	/* still analysing after the failures */
	w = (struct op_range){ 0x10, 1 };
	op.stream = 1;
	ck_assert_int_eq(engine_feed(e, &op), 0);
	op.stream = 2;
	ck_assert_int_eq(engine_feed(e, &op), 0);
	ck_assert_uint_eq(n, 1);
	engine_free(e);
}
END_TEST

/*
 * A long run with a bounded working set does not grow: the same training
 * loop (allocations reused, reads of weights that are never written, an
 * optimizer step that syncs) has held no more memory after 2000 steps than
 * after 200. Returns the engine's peak memory.
 */
static size_t run_steps(int steps, bool sync)
{
	struct engine_opts o = { .finding_cb = count_cb };
	struct engine_stats st;
	struct engine *e;
	size_t n = 0;

	o.arg = &n;
	ck_assert_int_eq(engine_new(&o, &e), 0);
	for (int step = 0; step < steps; step++) {
		for (uint64_t t = 0; t < 64; t++) {
			struct op_range act = { 0x100000 + t * 0x1000, 0x1000 };
			struct op_range weight = { 0x900000 + t * 0x1000, 0x1000 };
			struct op_range rd[2] = { weight, act };
			struct op a = { .kind = OP_ALLOC, .ptr = act.ptr,
					.size = act.len, .has_stream = true };
			struct op l = { .kind = OP_LAUNCH, .stream = t % 2,
					.name = 1 + (uint32_t)t,
					.reads = rd, .nreads = 1,
					.writes = &act, .nwrites = 1 };
			struct op r = { .kind = OP_LAUNCH, .stream = t % 2,
					.name = 2, .reads = rd, .nreads = 2 };
			struct op f = { .kind = OP_FREE, .ptr = act.ptr };

			ck_assert_int_eq(engine_feed(e, &a), 0);
			ck_assert_int_eq(engine_feed(e, &l), 0);
			ck_assert_int_eq(engine_feed(e, &r), 0);
			ck_assert_int_eq(engine_feed(e, &f), 0);
		}
		if (sync) {
			struct op d = { .kind = OP_DEVICE_SYNC };

			ck_assert_int_eq(engine_feed(e, &d), 0);
		}
	}
	engine_get_stats(e, &st);
	engine_free(e);
	return st.peak_bytes;
}

/* engine_get_memory(), engine_bench's breakdown: its parts are the bytes
 * engine_get_stats() counts, none of them used beyond its slabs, and
 * freeing every allocation leaves none of their records in use. */
START_TEST(engine_memory_breakdown_adds_up)
{
	struct engine_opts o = { .finding_cb = count_cb };
	struct engine_memory m;
	struct engine_stats st;
	struct engine *e;
	size_t n = 0;

	o.arg = &n;
	ck_assert_int_eq(engine_new(&o, &e), 0);
	for (uint64_t i = 0; i < 300; i++) {
		struct op_range half = { 0x100000 + i * 64, 32 };
		struct op feed[] = {
			{ .kind = OP_ALLOC, .ptr = 0x100000 + i * 64,
			  .size = 64, .stream = 1 },
			{ .kind = OP_LAUNCH, .stream = 1, .writes = &half,
			  .nwrites = 1 },
			{ .kind = OP_LAUNCH, .stream = 1 + i % 3, .reads = &half,
			  .nreads = 1 },
		};

		for (size_t k = 0; k < sizeof(feed) / sizeof(feed[0]); k++)
			ck_assert_int_eq(engine_feed(e, &feed[k]), 0);
	}
	engine_get_memory(e, &m);
	engine_get_stats(e, &st);
	ck_assert(m.alloc_used > 0 && m.alloc_used <= m.alloc_slabs);
	ck_assert(m.access_used > 0 && m.access_used <= m.access_slabs);
	ck_assert(m.seg_used > 0 && m.seg_used <= m.seg_slabs);
	ck_assert(m.usage_used <= m.usage_slabs);
	ck_assert(m.alloc_hash > 0);
	ck_assert_uint_eq(m.alloc_slabs + m.access_slabs + m.seg_slabs +
				  m.usage_slabs + m.read_lists +
				  m.usage_arrays + m.alloc_hash + m.other,
			  st.bytes);
	ck_assert_uint_lt(m.other, st.bytes);
	for (uint64_t i = 0; i < 300; i++) {
		struct op f = { .kind = OP_FREE, .ptr = 0x100000 + i * 64 };

		ck_assert_int_eq(engine_feed(e, &f), 0);
	}
	engine_get_memory(e, &m);
	ck_assert_uint_eq(m.alloc_used, 0);
	engine_free(e);
}
END_TEST

static void feed_checked(struct engine *e, const struct op *op)
{
	ck_assert_int_eq(engine_feed(e, op), 0);
	ck_assert_ptr_null(engine_check(e));
}

/* Allocations cut into two segments each, and segments of memory no
 * allocation covers, all on stream 1. */
static void feed_cut_allocations(struct engine *e, uint64_t nallocs,
				 uint64_t noutside)
{
	for (uint64_t i = 0; i < nallocs; i++) {
		struct op_range lo = { 0x100000 + i * 64, 32 };
		struct op_range hi = { 0x100000 + i * 64 + 32, 32 };
		struct op alloc = { .kind = OP_ALLOC, .ptr = lo.ptr,
				    .size = 64 };
		struct op w1 = { .kind = OP_LAUNCH, .stream = 1,
				 .writes = &lo, .nwrites = 1 };
		struct op w2 = { .kind = OP_LAUNCH, .stream = 1,
				 .writes = &hi, .nwrites = 1 };

		feed_checked(e, &alloc);
		feed_checked(e, &w1);
		feed_checked(e, &w2);
	}
	for (uint64_t i = 0; i < noutside; i++) {
		struct op_range out = { 0x900000 + i * 64, 8 };
		struct op w = { .kind = OP_LAUNCH, .stream = 1, .writes = &out,
				.nwrites = 1 };

		feed_checked(e, &w);
	}
}

/* DESIGN 10: after most allocations go, leaving their survivors scattered
 * over the segment slabs, the segments move into fewer slabs, and every
 * history they hold still races as before. */
START_TEST(engine_segments_move_into_fewer_slabs)
{
	struct engine_opts o = { .finding_cb = count_cb };
	struct engine_memory m;
	struct engine_stats st;
	struct engine *e;
	size_t n = 0;

	o.arg = &n;
	ck_assert_int_eq(engine_new(&o, &e), 0);
	feed_cut_allocations(e, 800, 40);
	for (uint64_t i = 0; i < 800; i++) {
		struct op f = { .kind = OP_FREE, .ptr = 0x100000 + i * 64 };

		if (i % 8 != 0)
			feed_checked(e, &f);
	}
	engine_get_memory(e, &m);
	engine_get_stats(e, &st);
	ck_assert_uint_eq(st.segments, 100 * 2 + 40);
	/* less than a slab more than the segments need: a spare slab's
	 * worth of room is compacted away (pool__sparse_chunk()) */
	ck_assert_uint_lt(m.seg_slabs - m.seg_used, POOL_CHUNK);
	for (uint64_t i = 0; i < 800; i += 8) {
		struct op_range r = { 0x100000 + i * 64 + 16, 32 };
		struct op read = { .kind = OP_LAUNCH, .stream = 2, .reads = &r,
				   .nreads = 1 };

		feed_checked(e, &read);
	}
	for (uint64_t i = 0; i < 40; i++) {
		struct op_range r = { 0x900000 + i * 64, 1 };
		struct op read = { .kind = OP_LAUNCH, .stream = 2, .reads = &r,
				   .nreads = 1 };

		feed_checked(e, &read);
	}
	/* each read races the two writes of its allocation, or the one of
	 * its outside bytes */
	ck_assert_uint_eq(n, 100 * 2 + 40);
	engine_free(e);
}
END_TEST

/* feed_checked() at every 16th of a run of `i`s: engine_check() walks
 * every record, so checking a long run at each op is quadratic. */
static void feed_sampled(struct engine *e, const struct op *op, uint64_t i)
{
	ck_assert_int_eq(engine_feed(e, op), 0);
	if (i % 16 == 0)
		ck_assert_ptr_null(engine_check(e));
}

/* DESIGN 11: a record held by more histories than a byte counts (a write
 * over many allocations, a read over many segments, the segments then
 * split) carries the rest apart, and every history lets it go as before:
 * engine_check() compares each record's count with the histories that
 * hold it, and each history still races. */
#define MANY (2 * ACCESS_REFS_CARRY + 30)

START_TEST(engine_access_held_by_many_histories)
{
	struct engine_opts o = { .finding_cb = count_cb };
	struct op_range all = { 0x100000, MANY * 64 };
	struct op_range out = { 0x900000, MANY * 64 };
	struct op w_all = { .kind = OP_LAUNCH, .stream = 1, .writes = &all,
			    .nwrites = 1 };
	struct op r_out = { .kind = OP_LAUNCH, .stream = 1, .reads = &out,
			    .nreads = 1 };
	struct engine_stats st;
	struct engine *e;
	size_t n = 0;

	o.arg = &n;
	ck_assert_int_eq(engine_new(&o, &e), 0);
	for (uint64_t i = 0; i < MANY; i++) {
		struct op a = { .kind = OP_ALLOC, .ptr = all.ptr + i * 64,
				.size = 64 };

		feed_sampled(e, &a, i);
	}
	feed_checked(e, &w_all); /* one record in MANY allocations */
	for (uint64_t i = 0; i < MANY / 2; i++) {
		struct op_range r = { out.ptr + i * 128, 8 };
		struct op w = { .kind = OP_LAUNCH, .stream = 1, .writes = &r,
				.nwrites = 1 };

		feed_sampled(e, &w, i);
	}
	feed_checked(e, &r_out); /* one read in MANY segments */
	for (uint64_t i = 0; i < MANY / 2; i++) {
		/* a write within each written segment splits it in three,
		 * the pieces at its ends keeping the read */
		struct op_range r = { out.ptr + i * 128 + 2, 2 };
		struct op w = { .kind = OP_LAUNCH, .stream = 1, .writes = &r,
				.nwrites = 1 };

		feed_sampled(e, &w, i);
	}
	ck_assert_ptr_null(engine_check(e));
	for (uint64_t i = 0; i < MANY; i += 2) {
		struct op_range r = { all.ptr + i * 64, 64 };
		struct op_range r2 = { out.ptr + i * 64 + 8, 8 };
		struct op rd = { .kind = OP_LAUNCH, .stream = 2, .reads = &r,
				 .nreads = 1 };
		struct op wr = { .kind = OP_LAUNCH, .stream = 2,
				 .writes = &r2, .nwrites = 1 };

		feed_sampled(e, &rd, i); /* races the write of them all */
		feed_sampled(e, &wr, i); /* races the read of them all */
	}
	ck_assert_ptr_null(engine_check(e));
	ck_assert_uint_eq(n, MANY);
	for (uint64_t i = 0; i < MANY; i++) {
		struct op f = { .kind = OP_FREE, .ptr = all.ptr + i * 64 };

		feed_sampled(e, &f, i);
	}
	ck_assert_ptr_null(engine_check(e));
	engine_get_stats(e, &st);
	ck_assert_uint_eq(st.live_allocs, 0);
	engine_free(e);
}
END_TEST

START_TEST(engine_memory_bounded_in_long_run)
{
	ck_assert_uint_eq(run_steps(200, true), run_steps(2000, true));
	/* without any sync, repeats of one site are merged past a bound */
	ck_assert_uint_eq(run_steps(200, false), run_steps(2000, false));
}
END_TEST

void engine_api_add(TCase *tc)
{
	tcase_add_test(tc, engine_rejects_malformed_ops);
	tcase_add_test(tc, engine_stream_limit_is_an_error_not_a_crash);
	tcase_add_test(tc, engine_feed_or_skip_puts_a_gap_where_it_skips);
	tcase_add_test(tc, engine_accesses_every_stream_synced_past_are_let_go);
	tcase_add_test(tc, engine_check_names_the_broken_invariant);
}

void engine_api_long_add(TCase *tc)
{
	tcase_add_test(tc, engine_out_of_memory_forgets_and_goes_on);
	tcase_add_test(tc, engine_memory_bounded_in_long_run);
	tcase_add_test(tc, engine_memory_breakdown_adds_up);
	tcase_add_test(tc, engine_segments_move_into_fewer_slabs);
	tcase_add_test(tc, engine_access_held_by_many_histories);
}
