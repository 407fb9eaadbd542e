/*
 * test_engine.c - the analysis engine, driven by traces.
 *
 * Each test is a small trace and the findings a user must get from it. The
 * scenarios come from the seed design notes (000: torch_npu's NPU
 * Sanitizer, 003: the producer/consumer program), from PyTorch's CUDA
 * Sanitizer tests of its EventHandler, and from the parts of
 * docs/trace-format.md that go beyond both (byte ranges, gaps,
 * backfill, deduplication).
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "testutil.h"

static struct tu_findings F;

static void teardown(void)
{
	tu_findings_free(&F);
}

/* Analyses `body` (a trace without its header line). */
static void run_mode(const char *body, bool dedup)
{
	char *text;

	ck_assert_int_gt(asprintf(&text, "npusan-trace 1\n%s", body), 0);
	tu_findings_free(&F);
	tu_analyze(text, dedup, &F);
	free(text);
	ck_assert_msg(F.err >= 0, "analysis failed: %d %s", F.err, F.errmsg);
}

static void run(const char *body)
{
	run_mode(body, false);
}

static void assert_findings(size_t races, size_t mrs)
{
	ck_assert_msg(tu_count(&F, FINDING_DATA_RACE) == races &&
			      tu_count(&F, FINDING_MISSING_RECORD_STREAM) == mrs,
		      "expected %zu races and %zu missing record_stream, got "
		      "%zu and %zu",
		      races, mrs, tu_count(&F, FINDING_DATA_RACE),
		      tu_count(&F, FINDING_MISSING_RECORD_STREAM));
}

static void assert_race(size_t i, uint64_t stream, bool write,
			uint64_t prev_stream, bool prev_write)
{
	const struct finding *f;

	ck_assert_uint_lt(i, F.n);
	f = &F.v[i];
	ck_assert_int_eq(f->kind, FINDING_DATA_RACE);
	ck_assert(f->has_previous);
	ck_assert_uint_eq(f->access.stream, stream);
	ck_assert_int_eq(f->access.write, write);
	ck_assert_uint_eq(f->previous.stream, prev_stream);
	ck_assert_int_eq(f->previous.write, prev_write);
	ck_assert_int_eq(f->detected_at, DETECTED_AT_LAUNCH);
}

static void assert_mrs(size_t i, uint64_t ptr, uint64_t alloc_stream,
		       uint64_t use_stream, uint64_t seq)
{
	const struct finding *f;

	ck_assert_uint_lt(i, F.n);
	f = &F.v[i];
	ck_assert_int_eq(f->kind, FINDING_MISSING_RECORD_STREAM);
	ck_assert(!f->has_previous);
	ck_assert(f->has_alloc);
	ck_assert_uint_eq(f->ptr, ptr);
	ck_assert_uint_eq(f->alloc.ptr, ptr);
	ck_assert(f->alloc.has_stream);
	ck_assert_uint_eq(f->alloc.stream, alloc_stream);
	ck_assert_uint_eq(f->access.stream, use_stream);
	ck_assert_uint_eq(f->access.seq, seq);
}

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
	engine_get_stats(e, &st);
	ck_assert_uint_eq(st.streams, ENGINE_MAX_STREAMS);
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

START_TEST(engine_memory_bounded_in_long_run)
{
	ck_assert_uint_eq(run_steps(200, true), run_steps(2000, true));
	/* without any sync, repeats of one site are merged past a bound */
	ck_assert_uint_eq(run_steps(200, false), run_steps(2000, false));
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
	tcase_add_test(seed, engine_record_stream_check_needs_known_other_stream);
	tcase_add_test(seed, engine_flush_then_free_reports_once);
	tcase_add_test(seed, engine_flush_reports_in_address_order);
	tcase_add_test(seed, engine_read_keeps_live_write_for_later_readers);
	tcase_add_test(seed, engine_missing_record_stream_per_usage_stream);
	tcase_add_test(seed, engine_producer_consumer_is_clean);
	tcase_add_test(seed, engine_producer_consumer_without_wait_races);
	tcase_add_test(seed, engine_producer_consumer_without_record_stream_frees_unsafely);
	suite_add_tcase(s, seed);

	tcase_add_checked_fixture(csan, NULL, teardown);
	tcase_add_test(csan, engine_csan_empty_launch_is_fine);
	tcase_add_test(csan, engine_csan_reads_on_two_streams_are_fine);
	tcase_add_test(csan, engine_csan_write_after_read_on_other_stream_races);
	tcase_add_test(csan, engine_csan_event_orders_write_after_read);
	tcase_add_test(csan, engine_csan_every_read_checks_last_write);
	tcase_add_test(csan, engine_csan_branch_sync_reads_ok_write_races);
	tcase_add_test(csan, engine_csan_chain_of_events_orders);
	tcase_add_test(csan, engine_csan_expired_record_does_not_cover_later_work);
	tcase_add_test(csan, engine_csan_deleted_or_recreated_event_is_empty);
	tcase_add_test(csan, engine_csan_write_checks_every_read_failing);
	tcase_add_test(csan, engine_csan_write_checks_every_read_passing);
	tcase_add_test(csan, engine_csan_multiple_errors_one_per_tensor);
	tcase_add_test(csan, engine_csan_state_merging_is_pointwise_max);
	tcase_add_test(csan, engine_csan_record_overrides_previous_record);
	tcase_add_test(csan, engine_csan_event_waited_by_many_streams);
	tcase_add_test(csan, engine_same_stream_never_races);
	tcase_add_test(csan, engine_write_after_write_races);
	tcase_add_test(csan, engine_write_checks_reads_instead_of_last_write);
	tcase_add_test(csan, engine_stream_sync_orders_everyone);
	tcase_add_test(csan, engine_event_sync_orders_up_to_the_record);
	tcase_add_test(csan, engine_new_stream_inherits_host_state);
	tcase_add_test(csan, engine_device_sync_does_not_cover_later_work);
	tcase_add_test(csan, engine_stream_wait_covers_only_earlier_work);
	tcase_add_test(csan, engine_duplicate_stream_create_is_ignored);
	suite_add_tcase(s, csan);

	tcase_add_checked_fixture(mem, NULL, teardown);
	tcase_add_test(mem, engine_free_drops_history);
	tcase_add_test(mem, engine_alloc_over_live_alloc_releases_it_silently);
	tcase_add_test(mem, engine_unallocated_memory_is_tracked_and_freed_by_start);
	tcase_add_test(mem, engine_free_outside_allocation_keeps_other_bytes);
	tcase_add_test(mem, engine_backfills_unknown_streams_and_events);
	tcase_add_test(mem, engine_race_reports_allocation_of_current_access);
	tcase_add_test(mem, engine_gap_never_pairs_across_it);
	tcase_add_test(mem, engine_gap_keeps_finding_errors_after_it);
	tcase_add_test(mem, engine_gap_exempts_live_allocations_keeps_sync_state);
	tcase_add_test(mem, engine_dedup_merges_repeats_and_counts);
	tcase_add_test(mem, engine_dedup_key_ignores_pointer_not_stack);
	tcase_add_test(mem, engine_dedup_key_has_allocation_stream);
	tcase_add_test(mem, engine_record_stream_write_from_other_allocation);
	tcase_add_test(mem, engine_record_stream_write_from_no_allocation);
	tcase_add_test(mem, engine_record_stream_write_without_own_access_is_no_use);
	suite_add_tcase(s, mem);

	tcase_add_checked_fixture(ranges, NULL, teardown);
	tcase_add_test(ranges, engine_disjoint_ranges_do_not_race);
	tcase_add_test(ranges, engine_overlapping_ranges_race_once_per_pair);
	tcase_add_test(ranges, engine_distinct_previous_accesses_are_distinct_findings);
	tcase_add_test(ranges, engine_bare_pointer_is_one_byte);
	tcase_add_test(ranges, engine_partial_overwrite_keeps_rest_of_history);
	tcase_add_test(ranges, engine_read_bytes_covered_by_own_write_are_not_reads);
	tcase_add_test(ranges, engine_launch_never_conflicts_with_itself);
	tcase_add_test(ranges, engine_element_listed_twice_is_one_access);
	tcase_add_test(ranges, engine_later_listed_write_is_last_write);
	tcase_add_test(ranges, engine_ranges_at_top_of_address_space);
	tcase_add_test(ranges, engine_read_pieces_between_writes);
	suite_add_tcase(s, ranges);

	tcase_add_test(api, engine_rejects_malformed_ops);
	tcase_add_test(api, engine_stream_limit_is_an_error_not_a_crash);
	tcase_add_test(api, engine_feed_or_skip_puts_a_gap_where_it_skips);
	tcase_add_test(api, engine_out_of_memory_forgets_and_goes_on);
	tcase_add_test(api, engine_memory_bounded_in_long_run);
	tcase_set_timeout(api, 120);
	suite_add_tcase(s, api);
	return s;
}

int main(void)
{
	return tu_main(engine_suite());
}
