/*
 * test_engine.c - the analysis engine, driven by traces.
 *
 * Each test is a small trace and the findings a user must get from it. The
 * scenarios come from the seed design notes (000: torch_npu's NPU
 * Sanitizer, 003: the producer/consumer program), from PyTorch's CUDA
 * Sanitizer tests of its EventHandler, and from the parts of
 * docs/trace-format.md that go beyond both (byte ranges, gaps,
 * backfill, deduplication).
 *
 * This file holds the seed scenarios, the suite and main(); the other
 * TCases' tests live in test_engine_*.c (engine_helpers.h).
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_helpers.h"
#include "symtab.h"
#include "testutil.h"

/* ---- seed 000: the NPU Sanitizer's design ------------------------------ */

/* Section 5.4's worked example, steps 1-6: stream1 waits for the default
 * stream (no race), but the default stream never waits for stream1, so the
 * free needs record_stream. */
START_TEST(engine_seed_six_steps_need_record_stream)
{
	run("alloc ptr=0x1000 size=64 stream=0\n"
	    "launch stream=0 op=init write=0x1000+64\n"
	    "stream_create stream=1\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 1);
	assert_mrs(0, 0x1000, 0, 1, 2);
	ck_assert_str_eq(tu_op(&F, 0, false), "use");
	ck_assert(!F.v[0].access.write);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_FREE);
}
END_TEST

/* Section 5.2, row "usage.wait(creation)": orders the use after the
 * producer (no race) but does not make the memory safe to free. */
START_TEST(engine_usage_waits_creation_fixes_race_not_free)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "launch stream=0 op=init write=0x1000+64\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 1);
}
END_TEST

/* Section 5.2, row "creation.wait(usage)": makes the free safe; the use
 * itself, unordered after the producer's write, is still a race. */
START_TEST(engine_creation_waits_usage_fixes_free_not_race)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "launch stream=0 op=init write=0x1000+64\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "stream_wait stream=0 on=1\n"
	    "free ptr=0x1000\n");
	assert_findings(1, 0);
	assert_race(0, 1, false, 0, true);
}
END_TEST

/* Section 5.2, row "device_synchronize()": fixes both. */
START_TEST(engine_device_sync_fixes_race_and_free)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "launch stream=0 op=init write=0x1000+64\n"
	    "device_sync\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "device_sync\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 0);
}
END_TEST

/* Section 5.2, method A: record_stream tells the allocator. */
START_TEST(engine_record_stream_makes_free_safe)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "launch stream=0 op=init write=0x1000+64\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "record_stream ptr=0x1000 stream=1\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 0);
}
END_TEST

/* record_stream may come before the use; the set of recorded streams is
 * what counts, and an interior pointer names the allocation. */
START_TEST(engine_record_stream_before_use_and_by_interior_pointer)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "record_stream ptr=0x1010 stream=1\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 0);
}
END_TEST

/* record_stream for another stream than the one that used the memory
 * does not help. */
START_TEST(engine_record_stream_of_other_stream_does_not_help)
{
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "record_stream ptr=0x1000 stream=2\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 1);
	assert_mrs(0, 0x1000, 0, 1, 1);
}
END_TEST

/* Section 9.1, value -1: the creation stream has never heard of the usage
 * stream (created later, never waited for). */
START_TEST(engine_usage_stream_unknown_to_creation_is_unsynced)
{
	run("alloc ptr=0x1000 size=64 stream=0\n"
	    "stream_create stream=1\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 1);
}
END_TEST

/* Section 9.1, value 0: a creation stream created after the usage stream
 * inherits {usage: 0} from the host; that is no synchronization, which is
 * why the rule is state[C][U] >= n and not >= 0. */
START_TEST(engine_creation_stream_created_after_usage_stream_is_unsynced)
{
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "alloc ptr=0x1000 size=64 stream=2\n"
	    "launch stream=2 op=init write=0x1000+64\n"
	    "stream_wait stream=1 on=2\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 1);
	assert_mrs(0, 0x1000, 2, 1, 2);
}
END_TEST

/* Section 9.1, value >= 1: a real wait_stream synchronizes. */
START_TEST(engine_creation_waits_after_use_is_synced)
{
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "alloc ptr=0x1000 size=64 stream=2\n"
	    "launch stream=2 op=init write=0x1000+64\n"
	    "stream_wait stream=1 on=2\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "stream_wait stream=2 on=1\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 0);
}
END_TEST

/* Section 9.2: used on stream 1 at seq 5 and seq 8 with the creation
 * stream's wait in between; the later use is not covered. */
START_TEST(engine_same_stream_used_twice_wait_in_between)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "alloc ptr=0x2000 size=64 stream=1\n"
	    "launch stream=0 op=a write=0x1000+64\n"            /* 1 */
	    "launch stream=0 op=b write=0x1000+64\n"            /* 2 */
	    "launch stream=0 op=c write=0x1000+64\n"            /* 3 */
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=d write=0x2000+64\n"            /* 4 */
	    "launch stream=1 op=first read=0x1000+64\n"         /* 5 */
	    "stream_wait stream=0 on=1\n"
	    "launch stream=1 op=e write=0x2000+64\n"            /* 6 */
	    "launch stream=1 op=f write=0x2000+64\n"            /* 7 */
	    "launch stream=1 op=second read=0x1000+64\n"        /* 8 */
	    "free ptr=0x1000\n");
	assert_findings(0, 1);
	assert_mrs(0, 0x1000, 0, 1, 8);
	ck_assert_str_eq(tu_op(&F, 0, false), "second");
}
END_TEST

START_TEST(engine_same_stream_used_twice_wait_after_both)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=first read=0x1000+64\n"
	    "launch stream=1 op=second read=0x1000+64\n"
	    "stream_wait stream=0 on=1\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 0);
}
END_TEST

/* The usage remembers whether its latest launch wrote the allocation. */
START_TEST(engine_missing_record_stream_reports_latest_use_type)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=w write=0x1000+8\n"
	    "launch stream=1 op=r read=0x1008+8\n"
	    "free ptr=0x1000\n"
	    "alloc ptr=0x3000 size=64 stream=0\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=rw read=0x3000+8 write=0x3010+8\n"
	    "free ptr=0x3000\n");
	assert_findings(0, 2);
	ck_assert_str_eq(tu_op(&F, 0, false), "r");
	ck_assert(!F.v[0].access.write);
	ck_assert_str_eq(tu_op(&F, 1, false), "rw");
	ck_assert(F.v[1].access.write);
}
END_TEST

/* A host sync lets the uses it orders go (DESIGN 6), never one it does
 * not order: the free still reports stream 1's read, then stream 2's new
 * use, in the order the streams first used the allocation. */
START_TEST(engine_host_sync_keeps_unordered_uses_in_order)
{
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "launch stream=1 op=u1 read=0x1000+8\n"
	    "launch stream=2 op=u2 read=0x1000+8\n"
	    "stream_sync stream=2\n"
	    "launch stream=2 op=u3 write=0x1010+8\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 2);
	ck_assert_str_eq(tu_op(&F, 0, false), "u1");
	ck_assert(!F.v[0].access.write);
	ck_assert_uint_eq(F.v[0].access.stream, 1);
	ck_assert_str_eq(tu_op(&F, 1, false), "u3");
	ck_assert(F.v[1].access.write);
	ck_assert_uint_eq(F.v[1].access.stream, 2);
}
END_TEST

/* Same-stream use and unknown allocation streams are never checked. */
START_TEST(engine_record_stream_check_needs_known_other_stream)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=1\n"
	    "launch stream=1 op=a write=0x1000+64\n"
	    "free ptr=0x1000\n"
	    "alloc ptr=0x2000 size=64\n"
	    "launch stream=1 op=b write=0x2000+64\n"
	    "free ptr=0x2000\n");
	assert_findings(0, 0);
}
END_TEST

/* flush checks live allocations without freeing; a later free does not
 * report the same allocation and stream again. */
START_TEST(engine_flush_then_free_reports_once)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "flush\n"
	    "launch stream=1 op=again read=0x1000+64\n"
	    "free ptr=0x1000\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=new read=0x1000+64\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 2);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_FLUSH);
	ck_assert_str_eq(tu_op(&F, 0, false), "use");
	/* the second is the new allocation at the same address */
	ck_assert_int_eq(F.v[1].detected_at, DETECTED_AT_FREE);
	ck_assert_str_eq(tu_op(&F, 1, false), "new");
}
END_TEST

/* The first frame of stack `id` in F's symtab, or NULL for none. */
static const char *top_frame(uint32_t id)
{
	const uint32_t *frames;

	if (symtab_stack(F.syms, id, &frames) == 0)
		return NULL;
	return symtab_str(F.syms, frames[0], NULL);
}

/* A missing record_stream found at a free names that free's stack, which
 * is where the fix goes; one a flush found names none. Merged repeats keep
 * the first occurrence's, as the free is not part of the key. */
START_TEST(engine_missing_record_stream_names_the_free)
{
	static const char body[] =
		"stack id=1 frame=\"train.py:40 in cleanup\"\n"
		"stack id=2 frame=\"train.py:41 in cleanup\"\n"
		"stream_create stream=1\n"
		"alloc ptr=0x1000 size=64 stream=0\n"
		"launch stream=1 op=use read=0x1000+64\n"
		"free ptr=0x1000 stack=1\n"
		"alloc ptr=0x1000 size=64 stream=0\n"
		"launch stream=1 op=use read=0x1000+64\n"
		"free ptr=0x1000 stack=2\n"
		"alloc ptr=0x2000 size=64 stream=0\n"
		"launch stream=1 op=use read=0x2000+64\n"
		"flush\n"
		"free ptr=0x2000 stack=1\n"
		"alloc ptr=0x3000 size=64 stream=0\n"
		"launch stream=1 op=other read=0x3000+64\n"
		"free ptr=0x3000\n";

	run(body);
	assert_findings(0, 4);
	ck_assert(F.v[0].has_free);
	ck_assert_str_eq(top_frame(F.v[0].free_stack), "train.py:40 in cleanup");
	ck_assert(F.v[1].has_free);
	ck_assert_str_eq(top_frame(F.v[1].free_stack), "train.py:41 in cleanup");
	ck_assert_int_eq(F.v[2].detected_at, DETECTED_AT_FLUSH);
	ck_assert(!F.v[2].has_free);
	ck_assert_uint_eq(F.v[2].free_stack, 0);
	/* a free without a stack: found at a free, no frames */
	ck_assert(F.v[3].has_free);
	ck_assert_uint_eq(F.v[3].free_stack, 0);
	run_mode(body, true);
	ck_assert_uint_eq(F.n, 2);
	ck_assert_uint_eq(F.v[0].count, 3);
	ck_assert_str_eq(top_frame(F.v[0].free_stack), "train.py:40 in cleanup");
}
END_TEST

static const char *arg_name(uint32_t id)
{
	return id != 0 ? symtab_str(F.syms, id, NULL) : NULL;
}

/* Each access names the argument its element named, both sides of a race
 * and the use a missing record_stream reports; the argument is not part
 * of the key, so the same race through another argument is a repeat. */
START_TEST(engine_accesses_name_their_arguments)
{
	static const char body[] =
		"stream_create stream=1\n"
		"alloc ptr=0x1000 size=64 stream=0\n"
		"launch stream=0 op=mm read=0x2000@mat1 write=0x1000+64@out\n"
		"launch stream=1 op=add read=0x1000+64@self,0x3000@other\n"
		"launch stream=1 op=add read=0x3000@self,0x1000+64@other\n"
		"launch stream=1 op=add read=0x1000+64\n"
		"free ptr=0x1000\n";

	run(body);
	assert_findings(3, 1);
	ck_assert_str_eq(arg_name(F.v[0].access.arg), "self");
	ck_assert_str_eq(arg_name(F.v[0].previous.arg), "out");
	ck_assert_str_eq(arg_name(F.v[1].access.arg), "other");
	ck_assert_ptr_null(arg_name(F.v[2].access.arg));
	ck_assert_str_eq(arg_name(F.v[2].previous.arg), "out");
	/* the latest use of the allocation on stream 1: unnamed */
	ck_assert_int_eq(F.v[3].kind, FINDING_MISSING_RECORD_STREAM);
	ck_assert_ptr_null(arg_name(F.v[3].access.arg));
	run_mode(body, true);
	assert_findings(1, 1);
	ck_assert_uint_eq(F.v[0].count, 3);
	ck_assert_str_eq(arg_name(F.v[0].access.arg), "self");
}
END_TEST

/* A read lets a dead last write go (DESIGN 5), never a live one: every
 * later reader still races it. */
START_TEST(engine_read_keeps_live_write_for_later_readers)
{
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "launch stream=0 op=w write=0x1000+64\n"
	    "launch stream=1 op=r1 read=0x1000+64\n"
	    "launch stream=2 op=r2 read=0x1000+64\n"
	    "device_sync\n"
	    "launch stream=1 op=r3 read=0x1000+64\n"
	    "launch stream=2 op=w2 write=0x1000+64\n");
	assert_findings(3, 0);
	ck_assert_str_eq(tu_op(&F, 0, false), "r1");
	ck_assert_str_eq(tu_op(&F, 1, false), "r2");
	ck_assert_str_eq(tu_op(&F, 1, true), "w");
	/* r3 let the dead w go; w2 races r3 only */
	ck_assert_str_eq(tu_op(&F, 2, false), "w2");
	ck_assert_str_eq(tu_op(&F, 2, true), "r3");
}
END_TEST

/* flush reports in address order, whatever the order of use, and a free
 * between use and flush leaves the others pending. */
START_TEST(engine_flush_reports_in_address_order)
{
	static const uint64_t ptr[] = { 0x4000, 0x1000, 0x2000, 0x3000 };

	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "alloc ptr=0x2000 size=64 stream=0\n"
	    "alloc ptr=0x3000 size=64 stream=0\n"
	    "alloc ptr=0x4000 size=64 stream=0\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=c read=0x3000+64\n"
	    "launch stream=1 op=d read=0x4000+64\n"
	    "launch stream=1 op=a read=0x1000+64\n"
	    "launch stream=1 op=b read=0x2000+64\n"
	    "free ptr=0x4000\n"
	    "flush\n");
	assert_findings(0, 4);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_FREE);
	for (size_t i = 0; i < 4; i++)
		ck_assert_uint_eq(F.v[i].ptr, ptr[i]);
	ck_assert_int_eq(F.v[3].detected_at, DETECTED_AT_FLUSH);
}
END_TEST

/* One finding per usage stream. */
START_TEST(engine_missing_record_stream_per_usage_stream)
{
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "stream_wait stream=1 on=0\n"
	    "stream_wait stream=2 on=0\n"
	    "launch stream=1 op=a read=0x1000+64\n"
	    "launch stream=2 op=b read=0x1000+64\n"
	    "launch stream=1 op=c read=0x1000+64\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 2);
	assert_mrs(0, 0x1000, 0, 1, 3);
	assert_mrs(1, 0x1000, 0, 2, 2);
}
END_TEST

/* ---- seed 003: producer / consumer -------------------------------------- */

#define PRODUCER_CONSUMER_HEAD                                          \
	"stream_create stream=7\n"                                       \
	"alloc ptr=0x1000 size=32 stream=0\n"                            \
	"launch stream=0 op=aten::arange write=0x1000+32\n"              \
	"alloc ptr=0x2000 size=32 stream=0\n"                            \
	"launch stream=0 op=aten::square read=0x1000+32 write=0x2000+32\n" \
	"event_create event=1\n"                                         \
	"event_record event=1 stream=0\n"

#define PRODUCER_CONSUMER_TAIL                                          \
	"event_create event=2\n"                                         \
	"event_record event=2 stream=7\n"                                \
	"free ptr=0x2000\n"                                              \
	"event_sync event=2\n"                                           \
	"alloc ptr=0x4000 size=32 stream=0\n"                            \
	"launch stream=0 op=aten::copy_ read=0x3000+32 write=0x4000+32\n"

START_TEST(engine_producer_consumer_is_clean)
{
	run(PRODUCER_CONSUMER_HEAD
	    "event_wait event=1 stream=7\n"
	    "alloc ptr=0x3000 size=32 stream=7\n"
	    "launch stream=7 op=aten::add read=0x2000+32 write=0x3000+32\n"
	    "record_stream ptr=0x2000 stream=7\n"
	    PRODUCER_CONSUMER_TAIL);
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_producer_consumer_without_wait_races)
{
	run(PRODUCER_CONSUMER_HEAD
	    "alloc ptr=0x3000 size=32 stream=7\n"
	    "launch stream=7 op=aten::add read=0x2000+32 write=0x3000+32\n"
	    "record_stream ptr=0x2000 stream=7\n"
	    PRODUCER_CONSUMER_TAIL);
	assert_findings(1, 0);
	assert_race(0, 7, false, 0, true);
	ck_assert_str_eq(tu_op(&F, 0, false), "aten::add");
	ck_assert_str_eq(tu_op(&F, 0, true), "aten::square");
	ck_assert_uint_eq(F.v[0].ptr, 0x2000);
	ck_assert_uint_eq(F.v[0].alloc.ptr, 0x2000);
}
END_TEST

START_TEST(engine_producer_consumer_without_record_stream_frees_unsafely)
{
	run(PRODUCER_CONSUMER_HEAD
	    "event_wait event=1 stream=7\n"
	    "alloc ptr=0x3000 size=32 stream=7\n"
	    "launch stream=7 op=aten::add read=0x2000+32 write=0x3000+32\n"
	    PRODUCER_CONSUMER_TAIL);
	assert_findings(0, 1);
	assert_mrs(0, 0x2000, 0, 7, 3);
}
END_TEST

static Suite *engine_suite(void)
{
	Suite *s = suite_create("engine");
	TCase *seed = tcase_create("seed");
	TCase *csan = tcase_create("csan");
	TCase *mem = tcase_create("memory");
	TCase *ranges = tcase_create("ranges");
	TCase *api = tcase_create("api");
	TCase *api_long = tcase_create("api_long");

	tcase_add_checked_fixture(seed, NULL, teardown);
	tcase_add_test(seed, engine_seed_six_steps_need_record_stream);
	tcase_add_test(seed, engine_usage_waits_creation_fixes_race_not_free);
	tcase_add_test(seed, engine_creation_waits_usage_fixes_free_not_race);
	tcase_add_test(seed, engine_device_sync_fixes_race_and_free);
	tcase_add_test(seed, engine_record_stream_makes_free_safe);
	tcase_add_test(seed, engine_record_stream_before_use_and_by_interior_pointer);
	tcase_add_test(seed, engine_record_stream_of_other_stream_does_not_help);
	tcase_add_test(seed, engine_usage_stream_unknown_to_creation_is_unsynced);
	tcase_add_test(seed, engine_creation_stream_created_after_usage_stream_is_unsynced);
	tcase_add_test(seed, engine_creation_waits_after_use_is_synced);
	tcase_add_test(seed, engine_same_stream_used_twice_wait_in_between);
	tcase_add_test(seed, engine_same_stream_used_twice_wait_after_both);
	tcase_add_test(seed, engine_missing_record_stream_reports_latest_use_type);
	tcase_add_test(seed, engine_host_sync_keeps_unordered_uses_in_order);
	tcase_add_test(seed, engine_record_stream_check_needs_known_other_stream);
	tcase_add_test(seed, engine_flush_then_free_reports_once);
	tcase_add_test(seed, engine_flush_reports_in_address_order);
	tcase_add_test(seed, engine_read_keeps_live_write_for_later_readers);
	tcase_add_test(seed, engine_missing_record_stream_per_usage_stream);
	tcase_add_test(seed, engine_missing_record_stream_names_the_free);
	tcase_add_test(seed, engine_accesses_name_their_arguments);
	tcase_add_test(seed, engine_producer_consumer_is_clean);
	tcase_add_test(seed, engine_producer_consumer_without_wait_races);
	tcase_add_test(seed, engine_producer_consumer_without_record_stream_frees_unsafely);
	suite_add_tcase(s, seed);

	tcase_add_checked_fixture(csan, NULL, teardown);
	engine_csan_add(csan);
	suite_add_tcase(s, csan);

	tcase_add_checked_fixture(mem, NULL, teardown);
	engine_memory_add(mem);
	suite_add_tcase(s, mem);

	tcase_add_checked_fixture(ranges, NULL, teardown);
	engine_ranges_add(ranges);
	suite_add_tcase(s, ranges);

	engine_api_add(api);
	suite_add_tcase(s, api);

	/* 90% of the suite's time: tagged so that a run that repeats the
	 * suite many times (tools/mutate.py) may leave them out with
	 * CK_EXCLUDE_TAGS=slow. */
	engine_api_long_add(api_long);
	tcase_set_tags(api_long, "slow");
	tcase_set_timeout(api_long, 120);
	suite_add_tcase(s, api_long);
	return s;
}

int main(void)
{
	return tu_main(engine_suite());
}
