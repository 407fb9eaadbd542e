/*
 * test_engine_ranges.c - test_engine's byte ranges: overlaps, pieces,
 * elements listed twice, the top of the address space.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_helpers.h"
#include "testutil.h"

/* ---- byte ranges --------------------------------------------------------- */

START_TEST(engine_disjoint_ranges_do_not_race)
{
	run("launch stream=1 op=w write=0x1000+16\n"
	    "launch stream=2 op=w write=0x1010+16\n"
	    "launch stream=2 op=r read=0x0ff0+16\n");
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_overlapping_ranges_race_once_per_pair)
{
	run("launch stream=1 op=a write=0x1000+48\n"
	    "launch stream=1 op=b write=0x1010+16\n"
	    "launch stream=2 op=r read=0x1008+32\n");
	/* the read shares bytes with a in two places and with b in one:
	 * two pairs, two findings */
	assert_findings(2, 0);
	ck_assert_str_eq(tu_op(&F, 0, true), "a");
	ck_assert_str_eq(tu_op(&F, 1, true), "b");
	ck_assert_uint_eq(F.v[0].ptr, 0x1008);
}
END_TEST

START_TEST(engine_distinct_previous_accesses_are_distinct_findings)
{
	run("launch stream=1 op=a write=0x1000+16\n"
	    "launch stream=1 op=b write=0x1010+16\n"
	    "launch stream=2 op=r read=0x1000+32\n");
	assert_findings(2, 0);
	ck_assert_str_eq(tu_op(&F, 0, true), "a");
	ck_assert_str_eq(tu_op(&F, 1, true), "b");
}
END_TEST

START_TEST(engine_bare_pointer_is_one_byte)
{
	run("launch stream=1 op=w write=0x1000\n"
	    "launch stream=2 op=r read=0x1001\n"
	    "launch stream=2 op=r read=0x0fff+1\n");
	assert_findings(0, 0);
	run("launch stream=1 op=w write=0x1000\n"
	    "launch stream=2 op=r read=0x0fff+2\n");
	assert_findings(1, 0);
}
END_TEST

START_TEST(engine_partial_overwrite_keeps_rest_of_history)
{
	run("launch stream=1 op=a write=0x1000+32\n"
	    "stream_wait stream=2 on=1\n"
	    "launch stream=2 op=b write=0x1008+8\n"
	    "launch stream=3 op=r read=0x1000+4\n"
	    "launch stream=3 op=r2 read=0x100a+2\n");
	assert_findings(2, 0);
	ck_assert_str_eq(tu_op(&F, 0, true), "a");
	ck_assert_str_eq(tu_op(&F, 1, true), "b");
}
END_TEST

/* Within a launch, a byte some write covers is written, not read. */
START_TEST(engine_read_bytes_covered_by_own_write_are_not_reads)
{
	run("launch stream=1 op=a write=0x1000+16\n"
	    "launch stream=2 op=inplace read=0x1000+16 write=0x1000+16\n");
	assert_findings(1, 0);
	assert_race(0, 2, true, 1, true);
	/* a read that keeps some bytes stays an access with its own start */
	run("launch stream=1 op=a write=0x1000+16\n"
	    "launch stream=2 op=k read=0x1000+16 write=0x1000+8\n");
	assert_findings(2, 0);
	assert_race(0, 2, false, 1, true);
	ck_assert_uint_eq(F.v[0].ptr, 0x1000);
	assert_race(1, 2, true, 1, true);
}
END_TEST

/* A launch's accesses are checked against the history from before it. */
START_TEST(engine_launch_never_conflicts_with_itself)
{
	run("launch stream=1 op=r read=0x1000+8\n"
	    "launch stream=2 op=k write=0x1000+8,0x1002+2\n");
	/* both writes see the earlier read, even though the first write
	 * would have cleared it for the second */
	assert_findings(2, 0);
	run("launch stream=1 op=k read=0x10 write=0x10+4,0x12+4\n");
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_element_listed_twice_is_one_access)
{
	run("launch stream=1 op=w write=0x10\n"
	    "launch stream=2 op=r read=0x10,0x10+1,0x10\n");
	assert_findings(1, 0);
}
END_TEST

/* Of two overlapping writes in one launch, the later-listed one is the
 * last write of the bytes they share. */
START_TEST(engine_later_listed_write_is_last_write)
{
	run("launch stream=1 op=k write=0x10+8,0x14+8\n"
	    "free ptr=0x14\n"
	    "launch stream=2 op=r read=0x16\n"
	    "launch stream=2 op=r2 read=0x10\n");
	/* free of the unallocated 0x14 dropped the second write entirely;
	 * 0x16 was last written by it, so no history is left there */
	assert_findings(1, 0);
	ck_assert_uint_eq(F.v[0].ptr, 0x10);
}
END_TEST

/* `free P` where no allocation starts drops the accesses that start at P,
 * also a view's inside a live allocation, and keeps the others there. */
START_TEST(engine_free_of_view_pointer_drops_its_accesses)
{
	run("alloc ptr=0x1000 size=64\n"
	    "launch stream=1 op=w write=0x1000+64\n"
	    "launch stream=1 op=v write=0x1010+8\n"
	    "free ptr=0x1010\n"
	    "launch stream=2 op=r read=0x1010+8\n"
	    "launch stream=2 op=r2 read=0x1020+8\n");
	/* v's write went with the free of 0x1010; w's bytes around it
	 * remain, and r2 races w there */
	assert_findings(1, 0);
	ck_assert_str_eq(tu_op(&F, 0, true), "w");
	ck_assert_str_eq(tu_op(&F, 0, false), "r2");
}
END_TEST

/* An access that starts an allocation and runs into the next one outlives
 * the first: a later `free` of its start, where no allocation starts any
 * more, drops what is left of it. */
START_TEST(engine_free_drops_access_run_past_its_freed_allocation)
{
	run("alloc ptr=0x1000 size=16\n"
	    "alloc ptr=0x1010 size=16\n"
	    "launch stream=1 op=w write=0x1000+32\n"
	    "free ptr=0x1000\n"
	    "free ptr=0x1000\n"
	    "launch stream=2 op=r read=0x1010+16\n");
	assert_findings(0, 0);
	run("alloc ptr=0x1000 size=16\n"
	    "alloc ptr=0x1010 size=16\n"
	    "launch stream=1 op=w write=0x1000+32\n"
	    "free ptr=0x1000\n"
	    "launch stream=2 op=r read=0x1010+16\n");
	assert_findings(1, 0);
}
END_TEST

START_TEST(engine_ranges_at_top_of_address_space)
{
	run("alloc ptr=0xfffffffffffff000 size=4096 stream=0\n"
	    "launch stream=1 op=w write=0xfffffffffffff000+4096\n"
	    "launch stream=2 op=r read=0xffffffffffffffff\n"
	    "launch stream=2 op=r2 read=0+4096\n"
	    "free ptr=0xfffffffffffff000\n");
	/* streams 1 and 2 both used it without record_stream */
	assert_findings(1, 2);
}
END_TEST

START_TEST(engine_read_pieces_between_writes)
{
	run("launch stream=1 op=w write=0x100+64\n"
	    "launch stream=2 op=k read=0x100+64 write=0x110+8,0x130+8\n"
	    "launch stream=1 op=w2 write=0x118+8\n");
	/* k: its read race with w (pieces 0x100.., 0x118.., 0x138..) and
	 * its two writes race with w; w2 writes bytes k read: a race */
	assert_findings(4, 0);
	assert_race(3, 1, true, 2, false);
}
END_TEST

/* A read whose head its own launch writes keeps the rest as a read, also
 * where the rest lies in the next allocation: a later unordered write there
 * races it. */
START_TEST(engine_read_rest_past_own_write_races_in_next_allocation)
{
	run("alloc ptr=0x1000 size=64\n"
	    "alloc ptr=0x1040 size=64\n"
	    "launch stream=1 op=k read=0x1000+128 write=0x1000+64\n"
	    "launch stream=2 op=w write=0x1060+8\n");
	assert_findings(1, 0);
	assert_race(0, 2, true, 1, false);
	ck_assert_str_eq(tu_op(&F, 0, true), "k");
	ck_assert_uint_eq(F.v[0].ptr, 0x1060);
}
END_TEST

/* A read that spans many earlier writes reports each once, however many
 * pieces each shares with it; the next access's pairs start afresh. */
START_TEST(engine_read_over_many_writes_reports_each_pair_once)
{
	char body[2048] = "launch stream=1 op=big write=0x1000+80\n";
	char line[80];

	/* twenty writes over parts of big: big stays the last write of the
	 * bytes between them, twenty pieces apart */
	for (int i = 0; i < 20; i++) {
		snprintf(line, sizeof(line),
			 "launch stream=1 op=w%d write=0x%x+2\n", i,
			 0x1000 + 4 * i);
		strcat(body, line);
	}
	strcat(body, "launch stream=2 op=r read=0x1000+80\n"
		     "launch stream=3 op=r2 read=0x1000+80\n");
	run(body);
	assert_findings(42, 0);
	for (size_t i = 0; i < 42; i++)
		assert_race(i, i < 21 ? 2 : 3, false, 1, true);
	ck_assert_str_eq(tu_op(&F, 0, true), "w0");
	ck_assert_str_eq(tu_op(&F, 1, true), "big");
	ck_assert_str_eq(tu_op(&F, 20, true), "w19");
	ck_assert_str_eq(tu_op(&F, 22, true), "big");
}
END_TEST

/* Reads from one site repeat at every step of a loop. Below
 * READS_COALESCE live reads of a byte every one of them stays, so a write
 * unordered with them races each (DESIGN 5 merges repeats only past it). */
START_TEST(engine_repeated_reads_of_one_site_each_race_a_write)
{
	char body[512] = "";

	/* Six: the read list is pruned when it fills at four. */
	for (int i = 0; i < 6; i++)
		strcat(body, "launch stream=1 op=r read=0x10\n");
	strcat(body, "launch stream=2 op=w write=0x10\n");
	run(body);
	assert_findings(6, 0);
	for (size_t i = 0; i < 6; i++)
		assert_race(i, 2, true, 1, false);
}
END_TEST

void engine_ranges_add(TCase *tc)
{
	tcase_add_test(tc, engine_disjoint_ranges_do_not_race);
	tcase_add_test(tc, engine_overlapping_ranges_race_once_per_pair);
	tcase_add_test(tc, engine_distinct_previous_accesses_are_distinct_findings);
	tcase_add_test(tc, engine_bare_pointer_is_one_byte);
	tcase_add_test(tc, engine_partial_overwrite_keeps_rest_of_history);
	tcase_add_test(tc, engine_read_bytes_covered_by_own_write_are_not_reads);
	tcase_add_test(tc, engine_launch_never_conflicts_with_itself);
	tcase_add_test(tc, engine_element_listed_twice_is_one_access);
	tcase_add_test(tc, engine_later_listed_write_is_last_write);
	tcase_add_test(tc, engine_free_of_view_pointer_drops_its_accesses);
	tcase_add_test(tc, engine_free_drops_access_run_past_its_freed_allocation);
	tcase_add_test(tc, engine_ranges_at_top_of_address_space);
	tcase_add_test(tc, engine_read_pieces_between_writes);
	tcase_add_test(tc, engine_repeated_reads_of_one_site_each_race_a_write);
	tcase_add_test(tc, engine_read_rest_past_own_write_races_in_next_allocation);
	tcase_add_test(tc, engine_read_over_many_writes_reports_each_pair_once);
}
