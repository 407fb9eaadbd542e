/*
 * test_engine_memory.c - test_engine's TCase memory: allocations, frees and
 * backfill, gaps, deduplication, and the access type of the record_stream
 * check.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_helpers.h"
#include "testutil.h"

/* ---- memory: allocations, frees, backfill ------------------------------ */

START_TEST(engine_free_drops_history)
{
	run("alloc ptr=0x1000 size=16\n"
	    "launch stream=1 op=w write=0x1000+16\n"
	    "free ptr=0x1000\n"
	    "alloc ptr=0x1000 size=16\n"
	    "launch stream=2 op=r read=0x1000+16\n");
	assert_findings(0, 0);
}
END_TEST

/* Allocating over a live allocation releases it silently (its free was
 * missed), dropping its history without a record_stream check. */
START_TEST(engine_alloc_over_live_alloc_releases_it_silently)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "launch stream=1 op=w write=0x1000+64\n"
	    "alloc ptr=0x1020 size=64 stream=0\n"
	    "launch stream=2 op=r read=0x1000+8\n"
	    "free ptr=0x1020\n");
	assert_findings(0, 0);
}
END_TEST

/* Memory no allocation covers still has a history; `free P` of it drops
 * the accesses that start at P only. */
START_TEST(engine_unallocated_memory_is_tracked_and_freed_by_start)
{
	run("launch stream=1 op=w write=0x100+16,0x200+16\n"
	    "free ptr=0x100\n"
	    "launch stream=2 op=r read=0x100+16,0x200+16\n");
	assert_findings(1, 0);
	ck_assert_uint_eq(F.v[0].ptr, 0x200);
	ck_assert(!F.v[0].has_alloc);
}
END_TEST

START_TEST(engine_free_outside_allocation_keeps_other_bytes)
{
	run("alloc ptr=0x1000 size=16 stream=0\n"
	    "launch stream=1 op=w write=0x0ff0+48\n"
	    "free ptr=0x1000\n"
	    "launch stream=2 op=r read=0x0ff0+4,0x1000+4,0x1010+4\n");
	assert_findings(2, 0);
	ck_assert_uint_eq(F.v[0].ptr, 0x0ff0);
	ck_assert_uint_eq(F.v[1].ptr, 0x1010);
}
END_TEST

/* Unknown streams and events are created on the spot, without findings. */
START_TEST(engine_backfills_unknown_streams_and_events)
{
	run("event_wait event=5 stream=3\n"
	    "event_sync event=6\n"
	    "stream_sync stream=4\n"
	    "record_stream ptr=0x10 stream=8\n"
	    "free ptr=0x99\n"
	    "launch stream=9 op=k read=0x10\n");
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_race_reports_allocation_of_current_access)
{
	run("stack id=1 frame=\"alloc.py:3 in make\"\n"
	    "alloc ptr=0x1000 size=256 stream=0 stack=1\n"
	    "launch stream=0 op=w write=0x1000+256\n"
	    "launch stream=1 op=r read=0x1040+8\n");
	assert_findings(1, 0);
	ck_assert_uint_eq(F.v[0].ptr, 0x1040);
	ck_assert(F.v[0].has_alloc);
	ck_assert_uint_eq(F.v[0].alloc.ptr, 0x1000);
	ck_assert_uint_eq(F.v[0].alloc.size, 256);
	ck_assert_uint_eq(F.v[0].alloc.stream, 0);
	ck_assert_uint_ne(F.v[0].alloc.stack, 0);
}
END_TEST

/* ---- gaps ---------------------------------------------------------------- */

START_TEST(engine_gap_never_pairs_across_it)
{
	run("launch stream=1 op=before write=0x10\n"
	    "gap lost=12\n"
	    "launch stream=2 op=after read=0x10\n");
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_gap_keeps_finding_errors_after_it)
{
	run("launch stream=1 op=w write=0x10\n"
	    "launch stream=2 op=r read=0x10\n"
	    "gap\n"
	    "launch stream=1 op=w write=0x20\n"
	    "launch stream=2 op=r read=0x20\n");
	assert_findings(2, 0);
	ck_assert_uint_eq(F.v[1].access.seq, 4);
}
END_TEST

START_TEST(engine_gap_exempts_live_allocations_keeps_sync_state)
{
	run("stream_create stream=1\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "launch stream=0 op=w write=0x1000+64\n"
	    "stream_wait stream=1 on=0\n"
	    "launch stream=1 op=use read=0x1000+64\n"
	    "gap lost=0\n"
	    "launch stream=1 op=use2 read=0x1000+64\n"
	    "free ptr=0x1000\n"
	    "alloc ptr=0x2000 size=64 stream=0\n"
	    "launch stream=1 op=use3 read=0x2000+64\n"
	    "free ptr=0x2000\n");
	/* 0x1000 was live across the gap: exempt. 0x2000 is new. The
	 * stream_wait from before the gap still orders stream 1 after
	 * stream 0's seq 1, but use3 reads nothing written: no race. */
	assert_findings(0, 1);
	ck_assert_uint_eq(F.v[0].ptr, 0x2000);
}
END_TEST

/* ---- deduplication ------------------------------------------------------ */

#define TRAINING_STEP                                          \
	"alloc ptr=0x1000 size=64 stream=0 stack=1\n"          \
	"launch stream=0 op=fwd write=0x1000+64 stack=1\n"     \
	"launch stream=1 op=comm read=0x1000+64 stack=2\n"     \
	"free ptr=0x1000\n"

START_TEST(engine_dedup_merges_repeats_and_counts)
{
	const char *trace = "stream_create stream=1\n"
			    "stack id=1 frame=\"train.py:10 in fwd\"\n"
			    "stack id=2 frame=\"train.py:20 in comm\"\n"
			    TRAINING_STEP TRAINING_STEP TRAINING_STEP;

	run_mode(trace, true);
	ck_assert_uint_eq(F.n, 2);
	ck_assert_int_eq(F.v[0].kind, FINDING_DATA_RACE);
	ck_assert_uint_eq(F.v[0].count, 3);
	ck_assert_uint_eq(F.v[0].id, 1);
	ck_assert_int_eq(F.v[1].kind, FINDING_MISSING_RECORD_STREAM);
	ck_assert_uint_eq(F.v[1].count, 3);
	ck_assert_uint_eq(F.v[1].id, 2);

	run_mode(trace, false);
	ck_assert_uint_eq(F.n, 6);
	for (size_t i = 0; i < 6; i++) {
		ck_assert_uint_eq(F.v[i].id, i + 1);
		ck_assert_uint_eq(F.v[i].count, 1);
	}
}
END_TEST

/* The pointer is not part of the key; stacks and operators are. */
START_TEST(engine_dedup_key_ignores_pointer_not_stack)
{
	run_mode("stack id=1 frame=a\n"
		 "stack id=2 frame=b\n"
		 "launch stream=1 op=w write=0x10\n"
		 "launch stream=2 op=r read=0x10\n"
		 "launch stream=1 op=w write=0x20\n"
		 "launch stream=2 op=r read=0x20\n"
		 "launch stream=1 op=w write=0x30\n"
		 "launch stream=2 op=r read=0x30 stack=1\n"
		 "launch stream=1 op=w write=0x40\n"
		 "launch stream=2 op=r read=0x40 stack=2\n"
		 "launch stream=1 op=w write=0x50\n"
		 "launch stream=2 op=r2 read=0x50\n",
		 true);
	ck_assert_uint_eq(F.n, 4);
	ck_assert_uint_eq(F.v[0].count, 2);
	ck_assert_uint_eq(F.v[0].ptr, 0x10); /* the first occurrence */
	ck_assert_uint_eq(F.v[1].count, 1);
	ck_assert_uint_eq(F.v[2].count, 1);
	ck_assert_uint_eq(F.v[3].count, 1);
}
END_TEST

/* Two allocations on different streams, each used on stream 2 and freed
 * without record_stream: the allocation stream is part of the key. */
START_TEST(engine_dedup_key_has_allocation_stream)
{
	run_mode("alloc ptr=0x1000 size=16 stream=0\n"
		 "alloc ptr=0x2000 size=16 stream=1\n"
		 "launch stream=2 op=use read=0x1000\n"
		 "launch stream=2 op=use read=0x2000\n"
		 "free ptr=0x1000\n"
		 "free ptr=0x2000\n",
		 true);
	ck_assert_uint_eq(F.n, 2);
	ck_assert_uint_ne(F.v[0].id, F.v[1].id);
	ck_assert_uint_eq(F.v[1].count, 1);
	ck_assert_uint_eq(F.v[1].alloc.stream, 1);
}
END_TEST

/* ---- the record_stream check's access type ------------------------------ */

/* A write element that starts in another allocation and runs into this
 * one wrote this one: the use on stream 1 is a write (the record_stream
 * rule, "whether that launch wrote any memory of the allocation"). */
START_TEST(engine_record_stream_write_from_other_allocation)
{
	run("alloc ptr=0x1000 size=16 stream=0\n"
	    "alloc ptr=0x1010 size=16 stream=0\n"
	    "launch stream=1 op=k read=0x1018 write=0x1000+20\n"
	    "free ptr=0x1010\n");
	assert_findings(0, 1);
	assert_mrs(0, 0x1010, 0, 1, 1);
	ck_assert(F.v[0].access.write);
}
END_TEST

/* The same through a write element that belongs to no allocation. */
START_TEST(engine_record_stream_write_from_no_allocation)
{
	run("alloc ptr=0x1000 size=16 stream=0\n"
	    "launch stream=1 op=k read=0x1008 write=0xff0+24\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 1);
	assert_mrs(0, 0x1000, 0, 1, 1);
	ck_assert(F.v[0].access.write);
}
END_TEST

/* A write into the allocation from a later launch that has no access of
 * its own belonging to it records no usage; the earlier read stays a read. */
START_TEST(engine_record_stream_write_without_own_access_is_no_use)
{
	run("alloc ptr=0x1000 size=16 stream=0\n"
	    "launch stream=1 op=r read=0x1000\n"
	    "launch stream=1 op=w write=0xff0+32\n"
	    "free ptr=0x1000\n");
	assert_findings(0, 1);
	assert_mrs(0, 0x1000, 0, 1, 1);
	ck_assert(!F.v[0].access.write);
	ck_assert_str_eq(tu_op(&F, 0, false), "r");
}
END_TEST

/* An allocation used from a dozen streams without record_stream: its free
 * reports every one of them, once each, in the order they first used it. */
START_TEST(engine_free_reports_each_of_many_using_streams)
{
	char body[2048] = "alloc ptr=0x1000 size=64 stream=0\n";
	char line[80];

	for (int s = 1; s <= 12; s++) {
		snprintf(line, sizeof(line),
			 "launch stream=%d op=u%d read=0x%x+4\n", s, s,
			 0x1000 + 4 * s);
		strcat(body, line);
	}
	strcat(body, "record_stream ptr=0x1000 stream=5\n"
		     "free ptr=0x1000\n");
	run(body);
	assert_findings(0, 11);
	for (size_t i = 0; i < 11; i++) {
		uint64_t s = i < 4 ? i + 1 : i + 2;

		assert_mrs(i, 0x1000, 0, s, s);
	}
}
END_TEST

void engine_memory_add(TCase *tc)
{
	tcase_add_test(tc, engine_free_drops_history);
	tcase_add_test(tc, engine_alloc_over_live_alloc_releases_it_silently);
	tcase_add_test(tc, engine_unallocated_memory_is_tracked_and_freed_by_start);
	tcase_add_test(tc, engine_free_outside_allocation_keeps_other_bytes);
	tcase_add_test(tc, engine_backfills_unknown_streams_and_events);
	tcase_add_test(tc, engine_race_reports_allocation_of_current_access);
	tcase_add_test(tc, engine_gap_never_pairs_across_it);
	tcase_add_test(tc, engine_gap_keeps_finding_errors_after_it);
	tcase_add_test(tc, engine_gap_exempts_live_allocations_keeps_sync_state);
	tcase_add_test(tc, engine_dedup_merges_repeats_and_counts);
	tcase_add_test(tc, engine_dedup_key_ignores_pointer_not_stack);
	tcase_add_test(tc, engine_dedup_key_has_allocation_stream);
	tcase_add_test(tc, engine_record_stream_write_from_other_allocation);
	tcase_add_test(tc, engine_record_stream_write_from_no_allocation);
	tcase_add_test(tc, engine_record_stream_write_without_own_access_is_no_use);
	tcase_add_test(tc, engine_free_reports_each_of_many_using_streams);
}
