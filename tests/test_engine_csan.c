/*
 * test_engine_csan.c - the behaviours PyTorch's CUDA Sanitizer tests of its
 * EventHandler, and the ordering rules around them (test_engine's TCase
 * csan).
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "engine_helpers.h"
#include "testutil.h"

/* ---- PyTorch's CUDA Sanitizer EventHandler behaviours ------------------- */

START_TEST(engine_csan_empty_launch_is_fine)
{
	run("launch stream=1000 op=k\n");
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_csan_reads_on_two_streams_are_fine)
{
	run("launch stream=1001 op=k read=1\n"
	    "launch stream=1002 op=k read=1\n");
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_csan_write_after_read_on_other_stream_races)
{
	run("launch stream=1001 op=r read=1\n"
	    "launch stream=1002 op=w write=1\n");
	assert_findings(1, 0);
	assert_race(0, 1002, true, 1001, false);
	ck_assert_uint_eq(F.v[0].access.seq, 2);
	ck_assert_uint_eq(F.v[0].previous.seq, 1);
	ck_assert(!F.v[0].has_alloc);
}
END_TEST

START_TEST(engine_csan_event_orders_write_after_read)
{
	run("launch stream=1001 op=r read=1\n"
	    "event_record event=2000 stream=1001\n"
	    "event_wait event=2000 stream=1002\n"
	    "launch stream=1002 op=w write=1\n");
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_csan_every_read_checks_last_write)
{
	run("launch stream=1001 op=w write=1\n"
	    "event_record event=2000 stream=1001\n"
	    "event_wait event=2000 stream=1002\n"
	    "launch stream=1002 op=r read=1\n"
	    "launch stream=1003 op=r read=1\n");
	assert_findings(1, 0);
	assert_race(0, 1003, false, 1001, true);
}
END_TEST

START_TEST(engine_csan_branch_sync_reads_ok_write_races)
{
	run("launch stream=1001 op=w write=1\n"
	    "event_record event=2000 stream=1001\n"
	    "event_wait event=2000 stream=1002\n"
	    "event_wait event=2000 stream=1003\n"
	    "launch stream=1002 op=r read=1\n"
	    "launch stream=1003 op=r read=1\n"
	    "launch stream=1002 op=w write=1\n");
	assert_findings(1, 0);
	assert_race(0, 1002, true, 1003, false);
}
END_TEST

START_TEST(engine_csan_chain_of_events_orders)
{
	char body[4096];
	size_t off = 0;

	off += (size_t)snprintf(body + off, sizeof(body) - off,
				"launch stream=1000 op=r read=1\n");
	for (int i = 0; i < 10; i++)
		off += (size_t)snprintf(body + off, sizeof(body) - off,
					"event_record event=%d stream=%d\n"
					"event_wait event=%d stream=%d\n",
					2000 + i, 1000 + i, 2000 + i,
					1001 + i);
	snprintf(body + off, sizeof(body) - off,
		 "launch stream=1010 op=w write=1\n");
	run(body);
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_csan_expired_record_does_not_cover_later_work)
{
	run("launch stream=1001 op=r read=1\n"
	    "event_record event=2000 stream=1001\n"
	    "launch stream=1001 op=r2 read=1\n"
	    "event_wait event=2000 stream=1002\n"
	    "launch stream=1002 op=w write=1\n");
	assert_findings(1, 0);
	ck_assert_str_eq(tu_op(&F, 0, true), "r2");
}
END_TEST

START_TEST(engine_csan_deleted_or_recreated_event_is_empty)
{
	static const char *const between[] = {
		"event_destroy event=2000\nevent_create event=2000\n",
		"event_destroy event=2000\n",
		"event_create event=2000\n",
	};

	for (size_t i = 0; i < 3; i++) {
		char body[512];

		snprintf(body, sizeof(body),
			 "launch stream=1001 op=r read=1\n"
			 "event_record event=2000 stream=1001\n"
			 "%s"
			 "event_wait event=2000 stream=1002\n"
			 "launch stream=1002 op=w write=1\n",
			 between[i]);
		run(body);
		assert_findings(1, 0);
	}
}
END_TEST

static void all_reads_checked(int waited)
{
	char body[8192];
	size_t off = 0;

	for (int i = 1; i <= 10; i++)
		off += (size_t)snprintf(body + off, sizeof(body) - off,
					"launch stream=%d op=r read=1\n"
					"event_record event=%d stream=%d\n",
					1000 + i, 2000 + i, 1000 + i);
	for (int i = 1; i <= waited; i++)
		off += (size_t)snprintf(body + off, sizeof(body) - off,
					"event_wait event=%d stream=1000\n",
					2000 + i);
	snprintf(body + off, sizeof(body) - off,
		 "launch stream=1000 op=w write=1\n");
	run(body);
}

START_TEST(engine_csan_write_checks_every_read_failing)
{
	all_reads_checked(9);
	assert_findings(1, 0);
	assert_race(0, 1000, true, 1010, false);
}
END_TEST

START_TEST(engine_csan_write_checks_every_read_passing)
{
	all_reads_checked(10);
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_csan_multiple_errors_one_per_tensor)
{
	run("launch stream=1000 op=w write=0,1,2,3,4,5,6,7,8,9\n"
	    "launch stream=1001 op=w write=0,1,2,3,4,5,6,7,8,9\n");
	assert_findings(10, 0);
	for (size_t i = 0; i < 10; i++)
		ck_assert_uint_eq(F.v[i].ptr, i);
}
END_TEST

START_TEST(engine_csan_state_merging_is_pointwise_max)
{
	run("launch stream=1001 op=w write=1\n"
	    "launch stream=1002 op=w write=2\n"
	    "event_record event=2001 stream=1001\n"
	    "event_record event=2002 stream=1002\n"
	    "launch stream=1001 op=w write=1\n"
	    "launch stream=1002 op=w write=2\n"
	    "event_wait event=2001 stream=1002\n"
	    "event_wait event=2002 stream=1001\n"
	    "event_record event=2003 stream=1002\n"
	    "event_wait event=2003 stream=1001\n"
	    "launch stream=1001 op=w write=1,2\n");
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_csan_record_overrides_previous_record)
{
	run("launch stream=1001 op=r read=1\n"
	    "launch stream=1002 op=r read=2\n"
	    "event_record event=2001 stream=1001\n"
	    "event_record event=2001 stream=1002\n"
	    "event_wait event=2001 stream=1003\n"
	    "launch stream=1003 op=w write=1\n");
	assert_findings(1, 0);
}
END_TEST

/* An event recorded again after new streams appeared holds the new,
 * longer clock: the wait orders what the second record's stream did and
 * nothing the first record's stream did after the first record. */
START_TEST(engine_csan_rerecord_with_more_streams)
{
	run("launch stream=1001 op=w write=1\n"
	    "event_record event=2001 stream=1001\n"
	    "launch stream=1002 op=w write=2\n"
	    "launch stream=1003 op=w write=3\n"
	    "event_record event=2001 stream=1002\n"
	    "event_wait event=2001 stream=1003\n"
	    "launch stream=1003 op=r read=2\n"
	    "launch stream=1003 op=r read=1\n");
	assert_findings(1, 0);
	assert_race(0, 1003, false, 1001, true);
}
END_TEST

START_TEST(engine_csan_event_waited_by_many_streams)
{
	run("launch stream=1001 op=w write=1\n"
	    "event_record event=2001 stream=1001\n"
	    "event_wait event=2001 stream=1002\n"
	    "event_wait event=2001 stream=1003\n"
	    "launch stream=1002 op=r read=1\n"
	    "launch stream=1003 op=r read=1\n");
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_same_stream_never_races)
{
	run("launch stream=5 op=w write=1\n"
	    "launch stream=5 op=r read=1\n"
	    "launch stream=5 op=w write=1\n");
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_write_after_write_races)
{
	run("launch stream=1 op=a write=0x10\n"
	    "launch stream=2 op=b write=0x10\n");
	assert_findings(1, 0);
	assert_race(0, 2, true, 1, true);
}
END_TEST

/* A write is checked against the reads since the last write, not against
 * the last write, when there are reads: here the read already raced with
 * the write, and the second write, ordered after the read only, adds
 * nothing. */
START_TEST(engine_write_checks_reads_instead_of_last_write)
{
	run("launch stream=1 op=w write=0x10\n"
	    "launch stream=2 op=r read=0x10\n"
	    "stream_wait stream=3 on=2\n"
	    "launch stream=3 op=w2 write=0x10\n");
	assert_findings(1, 0);
	assert_race(0, 2, false, 1, true);
}
END_TEST

START_TEST(engine_stream_sync_orders_everyone)
{
	run("launch stream=1 op=w write=0x10\n"
	    "stream_sync stream=1\n"
	    "launch stream=2 op=r read=0x10\n"
	    "stream_create stream=3\n"
	    "launch stream=3 op=r read=0x10\n");
	assert_findings(0, 0);
}
END_TEST

START_TEST(engine_event_sync_orders_up_to_the_record)
{
	run("launch stream=1 op=w write=0x10\n"
	    "event_record event=9 stream=1\n"
	    "launch stream=1 op=w2 write=0x20\n"
	    "event_sync event=9\n"
	    "launch stream=2 op=r read=0x10\n"
	    "launch stream=2 op=r2 read=0x20\n");
	assert_findings(1, 0);
	ck_assert_str_eq(tu_op(&F, 0, true), "w2");
}
END_TEST

/* A stream created after a host sync inherits what the host knows. */
START_TEST(engine_new_stream_inherits_host_state)
{
	run("launch stream=1 op=w write=0x10\n"
	    "device_sync\n"
	    "stream_create stream=2\n"
	    "launch stream=2 op=r read=0x10\n");
	assert_findings(0, 0);
}
END_TEST

/* A host sync orders work submitted before it, not after it. */
START_TEST(engine_device_sync_does_not_cover_later_work)
{
	run("device_sync\n"
	    "launch stream=1 op=w write=0x10\n"
	    "launch stream=2 op=r read=0x10\n");
	assert_findings(1, 0);
}
END_TEST

/* stream_wait covers work submitted to B so far, not later work. */
START_TEST(engine_stream_wait_covers_only_earlier_work)
{
	run("launch stream=1 op=w write=0x10\n"
	    "stream_wait stream=2 on=1\n"
	    "launch stream=1 op=w2 write=0x10\n"
	    "launch stream=2 op=r read=0x10\n");
	assert_findings(1, 0);
	ck_assert_str_eq(tu_op(&F, 0, true), "w2");
}
END_TEST

/* A second stream_create of a live stream changes nothing. */
START_TEST(engine_duplicate_stream_create_is_ignored)
{
	run("launch stream=1 op=w write=0x10\n"
	    "stream_wait stream=2 on=1\n"
	    "stream_create stream=2\n"
	    "launch stream=2 op=r read=0x10\n");
	assert_findings(0, 0);
}
END_TEST

void engine_csan_add(TCase *tc)
{
	tcase_add_test(tc, engine_csan_empty_launch_is_fine);
	tcase_add_test(tc, engine_csan_reads_on_two_streams_are_fine);
	tcase_add_test(tc, engine_csan_write_after_read_on_other_stream_races);
	tcase_add_test(tc, engine_csan_event_orders_write_after_read);
	tcase_add_test(tc, engine_csan_every_read_checks_last_write);
	tcase_add_test(tc, engine_csan_branch_sync_reads_ok_write_races);
	tcase_add_test(tc, engine_csan_chain_of_events_orders);
	tcase_add_test(tc, engine_csan_expired_record_does_not_cover_later_work);
	tcase_add_test(tc, engine_csan_deleted_or_recreated_event_is_empty);
	tcase_add_test(tc, engine_csan_write_checks_every_read_failing);
	tcase_add_test(tc, engine_csan_write_checks_every_read_passing);
	tcase_add_test(tc, engine_csan_multiple_errors_one_per_tensor);
	tcase_add_test(tc, engine_csan_state_merging_is_pointwise_max);
	tcase_add_test(tc, engine_csan_record_overrides_previous_record);
	tcase_add_test(tc, engine_csan_rerecord_with_more_streams);
	tcase_add_test(tc, engine_csan_event_waited_by_many_streams);
	tcase_add_test(tc, engine_same_stream_never_races);
	tcase_add_test(tc, engine_write_after_write_races);
	tcase_add_test(tc, engine_write_checks_reads_instead_of_last_write);
	tcase_add_test(tc, engine_stream_sync_orders_everyone);
	tcase_add_test(tc, engine_event_sync_orders_up_to_the_record);
	tcase_add_test(tc, engine_new_stream_inherits_host_state);
	tcase_add_test(tc, engine_device_sync_does_not_cover_later_work);
	tcase_add_test(tc, engine_stream_wait_covers_only_earlier_work);
	tcase_add_test(tc, engine_duplicate_stream_create_is_ignored);
}
