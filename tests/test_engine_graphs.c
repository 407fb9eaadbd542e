/*
 * test_engine_graphs.c - the engine on graph capture and replay (trace
 * format version 2, shared/spec/graphs.md).
 *
 * Each rule of graphs.md has a trace that finds the mistake it describes
 * and a twin that fixes it and must stay clean. Every trace runs through
 * tu_analyze(), which checks the engine's invariants after each op.
 */
#include <check.h>
#include <stdarg.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "symtab.h"
#include "testutil.h"
#include "trace.h"

static struct tu_findings F;

static void teardown(void)
{
	tu_findings_free(&F);
}

static void run_mode(const char *body, bool dedup)
{
	char *text;

	ck_assert_int_gt(asprintf(&text, "npusan-trace 2\n%s", body), 0);
	tu_findings_free(&F);
	tu_analyze(text, dedup, &F);
	free(text);
	ck_assert_msg(F.err >= 0, "analysis failed: %d %s", F.err, F.errmsg);
}

/* Every occurrence. */
static void run(const char *body)
{
	run_mode(body, false);
}

static void assert_counts(size_t races, size_t mrs, size_t stale,
			  size_t unjoined)
{
	ck_assert_msg(tu_count(&F, FINDING_DATA_RACE) == races &&
			      tu_count(&F, FINDING_MISSING_RECORD_STREAM) ==
				      mrs &&
			      tu_count(&F, FINDING_STALE_GRAPH_ADDRESS) ==
				      stale &&
			      tu_count(&F, FINDING_UNJOINED_CAPTURE) ==
				      unjoined,
		      "expected %zu/%zu/%zu/%zu (race/mrs/stale/unjoined), "
		      "got %zu/%zu/%zu/%zu",
		      races, mrs, stale, unjoined,
		      tu_count(&F, FINDING_DATA_RACE),
		      tu_count(&F, FINDING_MISSING_RECORD_STREAM),
		      tu_count(&F, FINDING_STALE_GRAPH_ADDRESS),
		      tu_count(&F, FINDING_UNJOINED_CAPTURE));
}

static void assert_clean(void)
{
	assert_counts(0, 0, 0, 0);
}

static void assert_access(const struct finding_access *a, uint64_t stream,
			  uint64_t seq, bool write, bool has_graph,
			  uint64_t graph)
{
	ck_assert_uint_eq(a->stream, stream);
	ck_assert_uint_eq(a->seq, seq);
	ck_assert_int_eq(a->write, write);
	ck_assert_int_eq(a->has_graph, has_graph);
	if (has_graph)
		ck_assert_uint_eq(a->graph, graph);
}

/* ---- captures ---------------------------------------------------------- */

/* Two branches of one capture write the same memory with no edge: a
 * race found at the capture, both accesses carrying the graph id and
 * their capture-local numbers. */
#define BRANCHES                                        \
	"stream_create stream=1\n"                      \
	"stream_create stream=2\n"                      \
	"capture_begin stream=1 graph=7\n"              \
	"launch stream=1 op=a write=0x1000+16\n"        \
	"event_record event=1 stream=1\n"               \
	"event_wait event=1 stream=2\n"                 \
	"launch stream=2 op=b write=0x2000+16\n"        \
	"launch stream=1 op=c write=0x2000+16\n"
START_TEST(engine_graph_race_between_branches_of_a_capture)
{
	run(BRANCHES "stream_wait stream=1 on=2\n"
		     "capture_end stream=1 graph=7\n");
	assert_counts(1, 0, 0, 0);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_CAPTURE);
	ck_assert_uint_eq(F.v[0].ptr, 0x2000);
	assert_access(&F.v[0].access, 1, 3, true, true, 7);
	assert_access(&F.v[0].previous, 2, 2, true, true, 7);
}
END_TEST

/* The twin: stream 1 waits for stream 2's branch before writing. */
START_TEST(engine_graph_branches_joined_do_not_race)
{
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "capture_begin stream=1 graph=7\n"
	    "launch stream=1 op=a write=0x1000+16\n"
	    "stream_wait stream=2 on=1\n"
	    "launch stream=2 op=b write=0x2000+16\n"
	    "stream_wait stream=1 on=2\n"
	    "launch stream=1 op=c write=0x2000+16\n"
	    "capture_end stream=1 graph=7\n");
	assert_clean();
}
END_TEST

/* The capture's history ignores alloc and free: the graph replays the same
 * addresses, so unordered captured kernels on reused memory still race. */
START_TEST(engine_graph_capture_race_across_free)
{
	run("stream_create stream=2\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "capture_begin stream=0 graph=1\n"
	    "stream_wait stream=2 on=0\n"
	    "launch stream=2 op=a write=0x1000+64\n"
	    "free ptr=0x1000\n"
	    "alloc ptr=0x1000 size=64 stream=0\n"
	    "launch stream=0 op=b read=0x1000+64\n"
	    "stream_wait stream=0 on=2\n"
	    "capture_end stream=0 graph=1\n");
	assert_counts(1, 0, 0, 0);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_CAPTURE);
}
END_TEST

/* Captured work runs nowhere: eager work on another stream does not race
 * it, while the same launch run eagerly does. */
START_TEST(engine_graph_captured_work_changes_no_eager_state)
{
	run("stream_create stream=1\n"
	    "launch stream=0 op=w write=0x1000\n"
	    "launch stream=1 op=r read=0x1000\n");
	assert_counts(1, 0, 0, 0);
	run("stream_create stream=1\n"
	    "capture_begin stream=0 graph=1\n"
	    "launch stream=0 op=w write=0x1000\n"
	    "capture_end stream=0 graph=1\n"
	    "launch stream=1 op=r read=0x1000\n");
	assert_clean();
	/* no sequence number was taken by the captured launch */
	run("stream_create stream=1\n"
	    "capture_begin stream=0 graph=1\n"
	    "launch stream=0 op=w write=0x1000\n"
	    "capture_end stream=0 graph=1\n"
	    "launch stream=0 op=w write=0x1000\n"
	    "launch stream=1 op=r read=0x1000\n");
	assert_counts(1, 0, 0, 0);
	ck_assert_uint_eq(F.v[0].previous.seq, 1);
}
END_TEST

/* A captured event_record leaves recorded[E]: an eager wait after the
 * capture ends still gets the eager record's edge. */
START_TEST(engine_graph_captured_record_keeps_eager_record)
{
	const char *with = "stream_create stream=1\n"
			   "launch stream=0 op=w write=0x1000\n"
			   "event_record event=1 stream=0\n"
			   "capture_begin stream=0 graph=1\n"
			   "event_record event=1 stream=0\n"
			   "capture_end stream=0 graph=1\n"
			   "event_wait event=1 stream=1\n"
			   "launch stream=1 op=r read=0x1000\n";

	run(with);
	assert_clean();
	run("stream_create stream=1\n"
	    "launch stream=0 op=w write=0x1000\n"
	    "capture_begin stream=0 graph=1\n"
	    "event_record event=1 stream=0\n"
	    "capture_end stream=0 graph=1\n"
	    "event_wait event=1 stream=1\n"
	    "launch stream=1 op=r read=0x1000\n");
	assert_counts(1, 0, 0, 0);
}
END_TEST

/* A capturing stream waiting on work outside its capture gets no edge. */
START_TEST(engine_graph_no_edge_from_outside_the_capture)
{
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "capture_begin stream=1 graph=1\n"
	    "launch stream=1 op=a write=0x1000\n"
	    "event_record event=1 stream=1\n"
	    "stream_wait stream=2 on=1\n"
	    "launch stream=2 op=b write=0x1000\n"
	    "event_record event=2 stream=0\n"
	    "event_wait event=2 stream=2\n"
	    "stream_wait stream=1 on=0\n"
	    "capture_end stream=1 graph=1\n");
	/* stream 2 joined (ordered after a), but the origin waited only on
	 * work outside the capture: unjoined */
	assert_counts(0, 0, 0, 1);
}
END_TEST

/* An eager stream that waits on an event last recorded in a capture joins
 * the capture and gets no edge from the event's eager record: after the
 * capture it is still unordered with the eager work before it. */
START_TEST(engine_graph_wait_that_joins_a_capture_takes_no_eager_edge)
{
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "launch stream=0 op=w write=0x1000\n"
	    "event_record event=1 stream=0\n"
	    "capture_begin stream=1 graph=1\n"
	    "event_record event=1 stream=1\n"
	    "event_wait event=1 stream=2\n"
	    "capture_end stream=1 graph=1\n"
	    "launch stream=2 op=r read=0x1000\n");
	assert_counts(1, 0, 0, 0);
	assert_access(&F.v[0].previous, 0, 1, true, false, 0);
}
END_TEST

/* Two captures at once stay apart: their kernels never race each other at
 * capture time, whichever ends first, and each graph replays on its own. */
START_TEST(engine_graph_two_captures_at_once_stay_apart)
{
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "capture_begin stream=1 graph=1\n"
	    "capture_begin stream=2 graph=2\n"
	    "launch stream=1 op=a write=0x1000+16\n"
	    "launch stream=2 op=b write=0x1000+16\n"
	    "capture_end stream=1 graph=1\n"
	    "launch stream=2 op=c read=0x1000+16\n"
	    "capture_end stream=2 graph=2\n");
	assert_clean();
	/* replayed on two streams without an edge, a and b race */
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "capture_begin stream=1 graph=1\n"
	    "capture_begin stream=2 graph=2\n"
	    "launch stream=1 op=a write=0x1000+16\n"
	    "launch stream=2 op=b write=0x1000+16\n"
	    "capture_end stream=1 graph=1\n"
	    "capture_end stream=2 graph=2\n"
	    "graph_replay graph=1 stream=1\n"
	    "graph_replay graph=2 stream=2\n");
	assert_counts(1, 0, 0, 0);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_REPLAY);
}
END_TEST

/* ---- unjoined work ----------------------------------------------------- */

START_TEST(engine_graph_unjoined_branch_at_capture_end)
{
	run(BRANCHES "capture_end stream=1 graph=7\n");
	assert_counts(1, 0, 0, 1);
	ck_assert_int_eq(F.v[1].kind, FINDING_UNJOINED_CAPTURE);
	ck_assert_int_eq(F.v[1].detected_at, DETECTED_AT_CAPTURE_END);
	ck_assert(!F.v[1].has_alloc && !F.v[1].has_previous);
	ck_assert_uint_eq(F.v[1].ptr, 0x2000);
	assert_access(&F.v[1].access, 2, 2, true, true, 7);
	ck_assert_str_eq(tu_op(&F, 1, false), "b");
}
END_TEST

/* Joined back through an event: clean. */
START_TEST(engine_graph_branch_joined_by_event)
{
	run(BRANCHES "event_record event=2 stream=2\n"
		     "event_wait event=2 stream=1\n"
		     "capture_end stream=1 graph=7\n");
	assert_counts(1, 0, 0, 0);
}
END_TEST

/* ptr: the first write element, else the first read that keeps a byte,
 * else 0; a member that captured nothing makes no finding. */
START_TEST(engine_graph_unjoined_points_at_first_write_else_read)
{
	run("capture_begin stream=1 graph=1\n"
	    "stream_wait stream=2 on=1\n"
	    "stream_wait stream=3 on=1\n"
	    "stream_wait stream=4 on=1\n"
	    "stream_wait stream=5 on=1\n"
	    "launch stream=2 op=a read=0x10,0x20 write=0x30\n"
	    "launch stream=3 op=b read=0x40+4,0x50 write=0x40+8\n"
	    "launch stream=4 op=c\n"
	    "capture_end stream=1 graph=1\n");
	assert_counts(0, 0, 0, 3);
	ck_assert_uint_eq(F.v[0].ptr, 0x30);
	ck_assert(F.v[0].access.write);
	ck_assert_uint_eq(F.v[1].ptr, 0x40);
	ck_assert_uint_eq(F.v[2].ptr, 0);
	ck_assert(!F.v[2].access.write);
	run("capture_begin stream=1 graph=1\n"
	    "stream_wait stream=2 on=1\n"
	    "launch stream=2 op=a read=0x40+4,0x50\n"
	    "capture_end stream=1 graph=1\n");
	ck_assert_uint_eq(F.v[0].ptr, 0x40);
	ck_assert(!F.v[0].access.write);
}
END_TEST

/* ---- stale addresses --------------------------------------------------- */

#define CAPTURED_MM                                                     \
	"stream_create stream=1\n"                                      \
	"alloc ptr=0x1000 size=4096 stream=0\n"                         \
	"alloc ptr=0x9000 size=4096 stream=1 graph=1\n"                 \
	"capture_begin stream=1 graph=1\n"                              \
	"launch stream=1 op=aten::mm read=0x1000+4096 write=0x9000+4096\n" \
	"capture_end stream=1 graph=1\n"

/* graphs.md's example: one stale_graph_address for 0x1000, nothing else. */
START_TEST(engine_graph_spec_example_is_one_stale_address)
{
	run(CAPTURED_MM "free ptr=0x1000\n"
			"alloc ptr=0x1000 size=4096 stream=0\n"
			"graph_replay graph=1 stream=0\n");
	assert_counts(0, 0, 1, 0);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_REPLAY);
	ck_assert_uint_eq(F.v[0].ptr, 0x1000);
	ck_assert(F.v[0].has_alloc && !F.v[0].has_previous);
	ck_assert_uint_eq(F.v[0].alloc.ptr, 0x1000);
	ck_assert_uint_eq(F.v[0].alloc.size, 4096);
	ck_assert_uint_eq(F.v[0].alloc.stream, 0);
	assert_access(&F.v[0].access, 0, 1, false, true, 1);
	ck_assert_str_eq(tu_op(&F, 0, false), "aten::mm");
}
END_TEST

START_TEST(engine_graph_live_addresses_are_not_stale)
{
	run(CAPTURED_MM "graph_replay graph=1 stream=0\n"
			"graph_replay graph=1 stream=0\n");
	assert_clean();
	/* a free between replays: the next replay finds it */
	run(CAPTURED_MM "graph_replay graph=1 stream=0\n"
			"alloc ptr=0x20000 size=16\n"
			"free ptr=0x1000\n"
			"graph_replay graph=1 stream=0\n");
	assert_counts(0, 0, 1, 0);
	ck_assert_uint_eq(F.v[0].access.seq, 2);
}
END_TEST

/* Written memory makes a "write"; an alloc that overlaps the captured
 * allocation releases it just as a free does. */
START_TEST(engine_graph_stale_write_after_overlapping_alloc)
{
	run("alloc ptr=0x1000 size=256 stream=0\n"
	    "capture_begin stream=0 graph=2\n"
	    "launch stream=0 op=fill write=0x1010+16\n"
	    "capture_end stream=0 graph=2\n"
	    "alloc ptr=0x1080 size=256 stream=0\n"
	    "graph_replay graph=2 stream=0\n");
	assert_counts(0, 0, 1, 0);
	ck_assert_uint_eq(F.v[0].ptr, 0x1000);
	ck_assert(F.v[0].access.write);
	run("alloc ptr=0x1000 size=256 stream=0\n"
	    "capture_begin stream=0 graph=2\n"
	    "launch stream=0 op=fill write=0x1010+16\n"
	    "capture_end stream=0 graph=2\n"
	    "alloc ptr=0x1100 size=256 stream=0\n"
	    "graph_replay graph=2 stream=0\n");
	assert_clean();
}
END_TEST

/* A launch that reads a freed allocation and writes bytes reaching into it
 * from outside wrote it: the stale finding says "write" exactly when one of
 * its writes shares a byte with the allocation. */
static bool stale_write_for(const char *writes)
{
	char body[512];

	snprintf(body, sizeof(body),
		 "alloc ptr=0x1000 size=256 stream=0\n"
		 "capture_begin stream=0 graph=2\n"
		 "launch stream=0 op=k read=0x1010+16 write=%s\n"
		 "capture_end stream=0 graph=2\n"
		 "free ptr=0x1000\n"
		 "graph_replay graph=2 stream=0\n",
		 writes);
	run(body);
	assert_counts(0, 0, 1, 0);
	return F.v[0].access.write;
}

START_TEST(engine_graph_stale_write_by_a_write_reaching_into_it)
{
	ck_assert(stale_write_for("0x0ff0+17"));
	ck_assert(!stale_write_for("0x0ff0+16"));
	ck_assert(stale_write_for("0x10ff+8"));
	ck_assert(!stale_write_for("0x1100+8"));
}
END_TEST

/* A graph pool's memory is never stale, freed or not. */
START_TEST(engine_graph_pool_memory_is_never_stale)
{
	run(CAPTURED_MM "free ptr=0x9000\n"
			"graph_replay graph=1 stream=1\n");
	assert_clean();
	run(CAPTURED_MM "free ptr=0x1000\n"
			"graph_replay graph=1 stream=1\n");
	assert_counts(0, 0, 1, 0);
}
END_TEST

/* Once per graph and allocation for the graph's life; a new capture of
 * the graph is a new life. */
START_TEST(engine_graph_stale_once_per_graph_and_allocation)
{
	run(CAPTURED_MM "free ptr=0x1000\n"
			"graph_replay graph=1 stream=1\n"
			"graph_replay graph=1 stream=1\n");
	assert_counts(0, 0, 1, 0);
	run(CAPTURED_MM "free ptr=0x1000\n"
			"graph_replay graph=1 stream=1\n"
			"capture_begin stream=1 graph=1\n"
			"launch stream=1 op=aten::mm read=0x1000+8\n"
			"capture_end stream=1 graph=1\n"
			"graph_replay graph=1 stream=1\n");
	assert_counts(0, 0, 1, 0); /* 0x1000 was not live at the capture */
}
END_TEST

/* ---- replays ------------------------------------------------------------ */

/* Eager work reads the graph's output on a stream not ordered after the
 * replay: a race at the eager launch whose previous access is the
 * replay's, graph id kept; waiting on the replay's stream fixes it. */
START_TEST(engine_graph_eager_work_races_a_replay)
{
	run(CAPTURED_MM "stream_create stream=2\n"
			"graph_replay graph=1 stream=1\n"
			"launch stream=2 op=use read=0x9000+4096\n");
	assert_counts(1, 0, 0, 0);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_LAUNCH);
	assert_access(&F.v[0].access, 2, 2, false, false, 0);
	assert_access(&F.v[0].previous, 1, 1, true, true, 1);
	run(CAPTURED_MM "stream_create stream=2\n"
			"graph_replay graph=1 stream=1\n"
			"stream_wait stream=2 on=1\n"
			"launch stream=2 op=use read=0x9000+4096\n");
	assert_clean();
}
END_TEST

/* Inputs restaged for the next replay with no wait: the replay's launch
 * is the racing access, detected at the replay. */
START_TEST(engine_graph_replay_races_eager_work)
{
	run(CAPTURED_MM "stream_create stream=2\n"
			"launch stream=2 op=stage write=0x1000+4096\n"
			"graph_replay graph=1 stream=1\n");
	assert_counts(1, 0, 0, 0);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_REPLAY);
	assert_access(&F.v[0].access, 1, 2, false, true, 1);
	assert_access(&F.v[0].previous, 2, 1, true, false, 0);
	run(CAPTURED_MM "stream_create stream=2\n"
			"launch stream=2 op=stage write=0x1000+4096\n"
			"stream_wait stream=1 on=2\n"
			"graph_replay graph=1 stream=1\n");
	assert_clean();
}
END_TEST

/* Replays of one graph run one after another (done[G]), on any stream;
 * two graphs replayed on two streams do not. */
START_TEST(engine_graph_replays_of_one_graph_are_ordered)
{
	run(CAPTURED_MM "stream_create stream=2\n"
			"graph_replay graph=1 stream=1\n"
			"graph_replay graph=1 stream=2\n");
	assert_clean();
	run(CAPTURED_MM "stream_create stream=2\n"
			"capture_begin stream=1 graph=2\n"
			"launch stream=1 op=aten::mm write=0x9000+4096\n"
			"capture_end stream=1 graph=2\n"
			"graph_replay graph=1 stream=1\n"
			"graph_replay graph=2 stream=2\n");
	assert_counts(1, 0, 0, 0);
	assert_access(&F.v[0].access, 2, 2, true, true, 2);
	assert_access(&F.v[0].previous, 1, 1, true, true, 1);
}
END_TEST

/* A replay's use of memory on a stream other than its allocation stream
 * needs record_stream: the finding at the free keeps the graph id. */
START_TEST(engine_graph_replay_use_needs_record_stream)
{
	run(CAPTURED_MM "graph_replay graph=1 stream=1\n"
			"free ptr=0x1000\n");
	assert_counts(0, 1, 0, 0);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_FREE);
	assert_access(&F.v[0].access, 1, 1, false, true, 1);
	run(CAPTURED_MM "graph_replay graph=1 stream=1\n"
			"record_stream ptr=0x1000 stream=1\n"
			"free ptr=0x1000\n");
	assert_clean();
}
END_TEST

/* Replay into a capture: captured as if issued there, running nothing (no
 * stale check, no eager state), its work part of the capture's races. */
START_TEST(engine_graph_replay_into_a_capture)
{
	run(CAPTURED_MM "free ptr=0x1000\n"
			"stream_create stream=2\n"
			"capture_begin stream=2 graph=3\n"
			"graph_replay graph=1 stream=2\n"
			"capture_end stream=2 graph=3\n"
			"launch stream=0 op=w write=0x9000+4096\n");
	assert_clean();
	run(CAPTURED_MM "stream_create stream=2\n"
			"capture_begin stream=2 graph=3\n"
			"stream_wait stream=3 on=2\n"
			"launch stream=3 op=w write=0x9000+16\n"
			"graph_replay graph=1 stream=2\n"
			"stream_wait stream=2 on=3\n"
			"capture_end stream=2 graph=3\n");
	assert_counts(1, 0, 0, 0);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_CAPTURE);
	assert_access(&F.v[0].access, 2, 2, true, true, 3);
	/* replaying graph 3 replays graph 1's launch: stale once freed */
	run(CAPTURED_MM "stream_create stream=2\n"
			"capture_begin stream=2 graph=3\n"
			"graph_replay graph=1 stream=2\n"
			"capture_end stream=2 graph=3\n"
			"free ptr=0x1000\n"
			"graph_replay graph=3 stream=2\n");
	assert_counts(0, 0, 1, 0);
	ck_assert_uint_eq(F.v[0].access.graph, 3);
}
END_TEST

/* ---- lifetime: re-capture, destroy, no-effect ops, gap -------------------- */

START_TEST(engine_graph_recapture_destroys_the_old_footprint)
{
	run(CAPTURED_MM "capture_begin stream=1 graph=1\n"
			"launch stream=1 op=other write=0x9000+16\n"
			"capture_end stream=1 graph=1\n"
			"free ptr=0x1000\n"
			"graph_replay graph=1 stream=1\n");
	assert_clean();
}
END_TEST

/* Destroying a capturing graph abandons it: no unjoined check, its
 * streams leave it (their work runs eagerly again), replay does nothing. */
START_TEST(engine_graph_destroy_abandons_a_capture)
{
	run(BRANCHES "graph_destroy graph=7\n"
		     "launch stream=1 op=w write=0x5000\n"
		     "launch stream=2 op=w write=0x5000\n"
		     "graph_replay graph=7 stream=1\n");
	assert_counts(2, 0, 0, 0);
	ck_assert_int_eq(F.v[1].detected_at, DETECTED_AT_LAUNCH);
	run(CAPTURED_MM "free ptr=0x1000\n"
			"graph_destroy graph=1\n"
			"graph_replay graph=1 stream=1\n");
	assert_clean();
}
END_TEST

/* capture_begin on a capturing stream or for a capturing graph, and
 * capture_end by a stream that is not the origin, have no effect. */
START_TEST(engine_graph_begin_and_end_that_have_no_effect)
{
	run("stream_create stream=1\n"
	    "capture_begin stream=0 graph=1\n"
	    "capture_begin stream=0 graph=2\n"
	    "capture_begin stream=1 graph=1\n"
	    "launch stream=1 op=eager write=0x10\n"
	    "stream_wait stream=1 on=0\n"
	    "capture_end stream=1 graph=1\n"
	    "capture_end stream=0 graph=2\n"
	    "launch stream=1 op=cap write=0x20\n"
	    "capture_end stream=0 graph=1\n");
	/* stream 1 joined graph 1 and stayed in it: its launch is
	 * unjoined at graph 1's end */
	assert_counts(0, 0, 0, 1);
	ck_assert_uint_eq(F.v[0].ptr, 0x20);
	ck_assert_uint_eq(F.v[0].access.graph, 1);
}
END_TEST

/* Host syncs involving a capture are refused and order nothing; the same
 * syncs outside a capture do. */
START_TEST(engine_graph_host_syncs_refused_during_capture)
{
	static const char *const syncs[] = { "stream_sync stream=2\n",
					     "event_sync event=1\n",
					     "device_sync\n" };

	for (size_t i = 0; i < 3; i++) {
		char *body;

		ck_assert_int_gt(
			asprintf(&body,
				 "stream_create stream=1\n"
				 "launch stream=1 op=w write=0x10\n"
				 "capture_begin stream=2 graph=1\n"
				 "event_record event=1 stream=2\n"
				 "%s"
				 "capture_end stream=2 graph=1\n"
				 "launch stream=0 op=r read=0x10\n",
				 i == 0 ? "stream_sync stream=1\n"
					: syncs[i]),
			0);
		run(body);
		/* stream_sync of a stream not capturing still acts */
		if (i == 0)
			assert_clean();
		else
			assert_counts(1, 0, 0, 0);
		free(body);
	}
	run("stream_create stream=1\n"
	    "launch stream=1 op=w write=0x10\n"
	    "capture_begin stream=1 graph=1\n"
	    "stream_sync stream=1\n"
	    "capture_end stream=1 graph=1\n"
	    "launch stream=0 op=r read=0x10\n");
	assert_counts(1, 0, 0, 0);
}
END_TEST

/* A gap forgets graphs and captures: nothing from before it is found
 * after it; an error made entirely after it still is. */
START_TEST(engine_graph_gap_forgets_graphs)
{
	run(CAPTURED_MM "free ptr=0x1000\n"
			"gap\n"
			"graph_replay graph=1 stream=1\n");
	assert_clean();
	run(CAPTURED_MM "gap\n"
			"alloc ptr=0x1000 size=4096 stream=0\n"
			"capture_begin stream=1 graph=1\n"
			"launch stream=1 op=aten::mm read=0x1000+4096\n"
			"capture_end stream=1 graph=1\n"
			"free ptr=0x1000\n"
			"graph_replay graph=1 stream=1\n");
	assert_counts(0, 0, 1, 0);
	run(BRANCHES "gap\n"
		     "launch stream=2 op=w write=0x5000\n"
		     "capture_end stream=1 graph=7\n");
	assert_counts(1, 0, 0, 0); /* the capture race before the gap only */
}
END_TEST

/* ---- deduplication ----------------------------------------------------- */

static const char *arg_name(uint32_t id)
{
	return id != 0 ? symtab_str(F.syms, id, NULL) : NULL;
}

/* Captured launches keep the arguments their elements named: in a race
 * found at the capture, in a replay's race, where the captured access is
 * run again, and in a stale address, named by the write that touches it. */
START_TEST(engine_graph_accesses_name_their_arguments)
{
	run("stream_create stream=1\n"
	    "stream_create stream=2\n"
	    "alloc ptr=0x1000 size=64 stream=1\n"
	    "capture_begin stream=1 graph=1\n"
	    "event_record event=1 stream=1\n"
	    "event_wait event=1 stream=2\n"
	    "launch stream=1 op=add read=0x1000+64@self write=0x1000+64@out\n"
	    "launch stream=2 op=fill write=0x1000+64@dst\n"
	    "event_record event=2 stream=2\n"
	    "event_wait event=2 stream=1\n"
	    "capture_end stream=1 graph=1\n"
	    "launch stream=2 op=mul read=0x1000+64@other\n"
	    "graph_replay graph=1 stream=1\n"
	    "free ptr=0x1000\n"
	    "alloc ptr=0x1000 size=64 stream=1\n"
	    "graph_replay graph=1 stream=1\n");
	assert_counts(2, 1, 1, 0);
	ck_assert_int_eq(F.v[0].detected_at, DETECTED_AT_CAPTURE);
	ck_assert_str_eq(arg_name(F.v[0].access.arg), "dst");
	ck_assert_str_eq(arg_name(F.v[0].previous.arg), "out");
	ck_assert_int_eq(F.v[1].detected_at, DETECTED_AT_REPLAY);
	ck_assert_str_eq(arg_name(F.v[1].access.arg), "out");
	ck_assert_str_eq(arg_name(F.v[1].previous.arg), "other");
	ck_assert_int_eq(F.v[3].kind, FINDING_STALE_GRAPH_ADDRESS);
	ck_assert_int_eq(F.v[3].access.write, true);
	ck_assert_str_eq(arg_name(F.v[3].access.arg), "out");
}
END_TEST

/* The same mistake in two graphs is two rows; twice in one graph, one. */
START_TEST(engine_graph_dedup_key_has_the_graphs)
{
	struct finding a = { .kind = FINDING_STALE_GRAPH_ADDRESS,
			     .has_alloc = true };
	struct finding b;
	struct finding_key ka, kb;
	char ta[FINDING_KEY_TEXT_MAX], tb[FINDING_KEY_TEXT_MAX];

	a.access = (struct finding_access){ .stream = 1, .op = 2,
					    .has_graph = true, .graph = 1 };
	a.alloc = (struct finding_alloc){ .has_stream = true, .stream = 5,
					  .stack = 3 };
	b = a;
	b.alloc.stream = 6; /* the allocation stream is not in its key */
	finding_key(&a, NULL, &ka);
	finding_key(&b, NULL, &kb);
	ck_assert_mem_eq(&ka, &kb, sizeof(ka));
	b.access.graph = 2;
	finding_key(&b, NULL, &kb);
	ck_assert(memcmp(&ka, &kb, sizeof(ka)) != 0);
	finding_key_text(&ka, ta);
	finding_key_text(&kb, tb);
	ck_assert_str_ne(ta, tb);

	run_mode(CAPTURED_MM "free ptr=0x1000\n"
			     "graph_replay graph=1 stream=1\n"
			     "alloc ptr=0x1000 size=4096 stream=0\n"
			     "capture_begin stream=1 graph=2\n"
			     "launch stream=1 op=aten::mm read=0x1000+4096\n"
			     "capture_end stream=1 graph=2\n"
			     "free ptr=0x1000\n"
			     "graph_replay graph=2 stream=1\n",
		 true);
	assert_counts(0, 0, 2, 0);
}
END_TEST

/* Every trace of tests/conform/graphs keeps the engine consistent after
 * each op (tu_analyze checks), and gives findings. */
START_TEST(engine_graph_conformance_traces_keep_invariants)
{
	const char *dir = NPUSAN_SOURCE_DIR "/tests/conform/graphs";
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t n = 0;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)) != NULL) {
		char *path, *text;
		size_t len = strlen(de->d_name);
		FILE *f;
		long size;

		if (len < 6 || strcmp(de->d_name + len - 6, ".trace") != 0)
			continue;
		ck_assert_int_gt(asprintf(&path, "%s/%s", dir, de->d_name), 0);
		ck_assert_ptr_nonnull(f = fopen(path, "r"));
		fseek(f, 0, SEEK_END);
		size = ftell(f);
		rewind(f);
		text = calloc(1, (size_t)size + 1);
		ck_assert_uint_eq(fread(text, 1, (size_t)size, f), size);
		fclose(f);
		tu_findings_free(&F);
		tu_analyze(text, true, &F);
		ck_assert_msg(F.err >= 0, "%s: %s", path, F.errmsg);
		free(text);
		free(path);
		n++;
	}
	closedir(d);
	ck_assert_uint_ge(n, 20);
}
END_TEST

/* ---- memory ------------------------------------------------------------- */

static void count_kinds_cb(const struct finding *f, bool first, void *arg)
{
	size_t *n = arg;

	(void)first;
	n[f->kind]++;
}

/* Feeds `body` (v2, without header) to an engine of at most `max_bytes`,
 * checking it after each op; counts findings per kind into n. Returns the
 * number of ops that ran out of memory. */
static size_t feed_limited(const char *body, size_t max_bytes, size_t *n,
			   struct engine_stats *st)
{
	struct engine_opts o = { .finding_cb = count_kinds_cb, .arg = n,
				 .max_bytes = max_bytes };
	struct symtab *syms;
	struct trace_reader *r;
	struct engine *e;
	struct op op;
	size_t nomem = 0;
	char *text;
	int rc;

	ck_assert_int_gt(asprintf(&text, "npusan-trace 2\n%s", body), 0);
	ck_assert_int_eq(symtab_new(&syms), 0);
	ck_assert_int_eq(trace_reader_new_mem(text, strlen(text), "t", syms,
					      &r), 0);
	if (engine_new(&o, &e) < 0) {
		nomem = SIZE_MAX;
		goto out;
	}
	while ((rc = trace_read(r, &op)) == 1) {
		const char *why;

		rc = engine_feed(e, &op);
		ck_assert_msg(rc == 0 || rc == -ENOMEM, "rc %d", rc);
		nomem += rc == -ENOMEM;
		why = engine_check(e);
		ck_assert_msg(why == NULL, "line %lu: %s",
			      trace_reader_line(r), why);
	}
	ck_assert_int_eq(rc, 0);
	if (st != NULL)
		engine_get_stats(e, st);
	engine_free(e);
out:
	trace_reader_close(r);
	symtab_free(syms);
	free(text);
	return nomem;
}

#define OOM_TRACE                                                      \
	BRANCHES "event_record event=2 stream=2\n"                      \
		 "event_wait event=2 stream=1\n"                        \
		 "capture_end stream=1 graph=7\n"                       \
		 "alloc ptr=0x2000 size=64 stream=1\n"                  \
		 "capture_begin stream=2 graph=8\n"                     \
		 "stream_wait stream=3 on=2\n"                          \
		 "graph_replay graph=7 stream=2\n"                      \
		 "launch stream=3 op=x write=0x2000+64\n"               \
		 "capture_end stream=2 graph=8\n"                       \
		 "free ptr=0x2000\n"                                    \
		 "graph_replay graph=8 stream=1\n"                      \
		 "graph_replay graph=7 stream=0\n"                      \
		 "launch stream=2 op=y read=0x1000+16\n"

/* Out of memory anywhere in graph work: the engine stays consistent, goes
 * on, and never reports more than it does with memory to spare. */
START_TEST(engine_graph_out_of_memory_never_invents)
{
	size_t full[FINDING_KIND_COUNT] = { 0 }, failures = 0;

	feed_limited(OOM_TRACE, 0, full, NULL);
	ck_assert_uint_gt(full[FINDING_DATA_RACE], 0);
	for (size_t max = 1024; max < 400000; max += max / 64) {
		size_t n[FINDING_KIND_COUNT] = { 0 };
		size_t nomem = feed_limited(OOM_TRACE, max, n, NULL);

		if (nomem == SIZE_MAX)
			continue;
		failures += nomem > 0;
		for (int k = 0; k < FINDING_KIND_COUNT; k++)
			ck_assert_msg(n[k] <= full[k], "max_bytes %zu: kind "
				      "%d: %zu findings, %zu with no limit",
				      max, k, n[k], full[k]);
	}
	ck_assert_uint_gt(failures, 0);
}
END_TEST

/* Appends a printf-style line to *body. */
static void append(char **body, const char *fmt, ...)
{
	char *line, *next;
	va_list ap;

	va_start(ap, fmt);
	ck_assert_int_gt(vasprintf(&line, fmt, ap), 0);
	va_end(ap);
	ck_assert_int_gt(asprintf(&next, "%s%s", *body, line), 0);
	free(line);
	free(*body);
	*body = next;
}

/* A version 1 job with a bit of everything: more streams than a short
 * scan covers, views, reads over many pieces and over bytes of no
 * allocation, events, record_stream, flush, frees of what was allocated and
 * of what was not. */
static char *v1_job(void)
{
	char *body = strdup("");

	for (int s = 1; s <= 10; s++)
		append(&body, "stream_create stream=%d\n", s);
	for (int i = 0; i < 24; i++)
		append(&body, "alloc ptr=0x%x size=192 stream=%d\n",
		       0x10000 + 0x100 * i, i % 3);
	for (int i = 0; i < 24; i++)
		append(&body, "launch stream=%d op=w write=0x%x+16 read=0x%x+8\n",
		       i % 10, 0x10000 + 0x100 * i + 16 * (i % 4),
		       0x10000 + 0x100 * i + 4);
	append(&body, "launch stream=4 op=all read=0x10000+0x1800\n"
		      "launch stream=1 op=out write=0x20+8\n"
		      "event_record event=1 stream=2\n"
		      "event_wait event=1 stream=5\n"
		      "event_sync event=1\n"
		      "stream_wait stream=6 on=7\n"
		      "record_stream ptr=0x10010 stream=1\n"
		      "flush\n"
		      "free ptr=0x20\n");
	for (int i = 0; i < 24; i += 2)
		append(&body, "free ptr=0x%x\n", 0x10000 + 0x100 * i);
	append(&body, "launch stream=9 op=all2 write=0x10000+0x1800\n"
		      "device_sync\n"
		      "launch stream=8 op=r read=0x10100+0x400\n");
	for (int i = 1; i < 24; i += 2)
		append(&body, "free ptr=0x%x\n", 0x10000 + 0x100 * i);
	return body;
}

/* The same for version 1's ops: out of memory at any point of a job keeps
 * the engine consistent and never adds a finding. */
START_TEST(engine_out_of_memory_in_a_v1_job_never_invents)
{
	size_t full[FINDING_KIND_COUNT] = { 0 }, failures = 0;
	struct engine_stats st;
	char *body = v1_job();

	feed_limited(body, 0, full, &st);
	ck_assert_uint_gt(full[FINDING_DATA_RACE], 0);
	ck_assert_uint_gt(full[FINDING_MISSING_RECORD_STREAM], 0);
	for (size_t max = 1024; max < st.peak_bytes; max += max / 8) {
		size_t n[FINDING_KIND_COUNT] = { 0 };
		size_t nomem = feed_limited(body, max, n, NULL);

		if (nomem == SIZE_MAX)
			continue;
		failures += nomem > 0;
		for (int k = 0; k < FINDING_KIND_COUNT; k++)
			ck_assert_msg(n[k] <= full[k], "max_bytes %zu: kind "
				      "%d: %zu findings, %zu with no limit",
				      max, k, n[k], full[k]);
	}
	ck_assert_uint_gt(failures, 0);
	free(body);
}
END_TEST

/* A read racing many writes, where memory runs out as its pairs outgrow
 * their short list: no crash, the engine consistent, no other finding. A
 * pair may come twice where even the list cannot grow (launch.c reports
 * it again rather than miss it). */
START_TEST(engine_out_of_memory_in_a_read_over_many_writes_goes_on)
{
	size_t full[FINDING_KIND_COUNT] = { 0 };
	struct engine_stats st;
	char *body = strdup("launch stream=1 op=big write=0x1000+80\n");

	for (int i = 0; i < 20; i++)
		append(&body, "launch stream=1 op=w%d write=0x%x+2\n", i,
		       0x1000 + 4 * i);
	append(&body, "launch stream=2 op=r read=0x1000+80\n");
	feed_limited(body, 0, full, &st);
	ck_assert_uint_eq(full[FINDING_DATA_RACE], 21);
	/* the pairs' set comes last, near the peak: every limit below it */
	for (size_t max = st.peak_bytes - 2048; max < st.peak_bytes; max += 16) {
		size_t n[FINDING_KIND_COUNT] = { 0 };

		feed_limited(body, max, n, NULL);
		ck_assert_uint_eq(n[FINDING_MISSING_RECORD_STREAM] +
					  n[FINDING_STALE_GRAPH_ADDRESS] +
					  n[FINDING_UNJOINED_CAPTURE],
				  0);
	}
	free(body);
}
END_TEST

/* Without memory to list an allocation as pending, the next flush checks
 * every allocation instead: the use is reported all the same. */
START_TEST(engine_flush_without_memory_for_its_list_still_reports)
{
	const char *body = "alloc ptr=0x1000 size=64 stream=0\n"
			   "launch stream=1 op=u read=0x1000+64\n"
			   "flush\n"
			   "launch stream=1 op=u2 read=0x1000+64\n"
			   "flush\n";
	size_t full[FINDING_KIND_COUNT] = { 0 };
	struct engine_stats st;

	feed_limited(body, 0, full, &st);
	ck_assert_uint_eq(full[FINDING_MISSING_RECORD_STREAM], 1);
	for (size_t max = 1024; max < st.peak_bytes; max += 8) {
		size_t n[FINDING_KIND_COUNT] = { 0 };

		if (feed_limited(body, max, n, NULL) == 0)
			ck_assert_msg(n[FINDING_MISSING_RECORD_STREAM] == 1,
				      "max_bytes %zu: %zu", max,
				      n[FINDING_MISSING_RECORD_STREAM]);
	}
}
END_TEST

/* A graph replayed every step holds its footprint, not its replays: the
 * engine's memory after 400 steps is what it was after 40. */
static size_t replay_steps(int steps)
{
	char *body = strdup(CAPTURED_MM), *next;
	struct engine_stats st;
	size_t n[FINDING_KIND_COUNT] = { 0 };

	for (int i = 0; i < steps; i++) {
		ck_assert_int_gt(asprintf(&next, "%slaunch stream=1 op=stage "
					  "write=0x1000+4096\n"
					  "graph_replay graph=1 stream=1\n"
					  "stream_sync stream=1\n",
					  body),
				 0);
		free(body);
		body = next;
	}
	feed_limited(body, 0, n, &st);
	free(body);
	ck_assert_uint_eq(n[FINDING_DATA_RACE] + n[FINDING_STALE_GRAPH_ADDRESS],
			  0);
	return st.bytes;
}

START_TEST(engine_graph_memory_follows_footprint_not_replays)
{
	size_t a = replay_steps(40), b = replay_steps(400);

	ck_assert_msg(b <= a, "%zu bytes after 40 replays, %zu after 400", a,
		      b);
}
END_TEST

static Suite *graph_suite(void)
{
	Suite *s = suite_create("engine_graphs");
	TCase *cap = tcase_create("capture"), *rep = tcase_create("replay"),
	      *life = tcase_create("lifetime");

	tcase_add_checked_fixture(cap, NULL, teardown);
	tcase_add_test(cap, engine_graph_race_between_branches_of_a_capture);
	tcase_add_test(cap, engine_graph_branches_joined_do_not_race);
	tcase_add_test(cap, engine_graph_capture_race_across_free);
	tcase_add_test(cap, engine_graph_captured_work_changes_no_eager_state);
	tcase_add_test(cap, engine_graph_captured_record_keeps_eager_record);
	tcase_add_test(cap, engine_graph_no_edge_from_outside_the_capture);
	tcase_add_test(cap, engine_graph_wait_that_joins_a_capture_takes_no_eager_edge);
	tcase_add_test(cap, engine_graph_two_captures_at_once_stay_apart);
	tcase_add_test(cap, engine_graph_unjoined_branch_at_capture_end);
	tcase_add_test(cap, engine_graph_branch_joined_by_event);
	tcase_add_test(cap, engine_graph_unjoined_points_at_first_write_else_read);
	suite_add_tcase(s, cap);

	tcase_add_checked_fixture(rep, NULL, teardown);
	tcase_add_test(rep, engine_graph_spec_example_is_one_stale_address);
	tcase_add_test(rep, engine_graph_live_addresses_are_not_stale);
	tcase_add_test(rep, engine_graph_stale_write_after_overlapping_alloc);
	tcase_add_test(rep, engine_graph_stale_write_by_a_write_reaching_into_it);
	tcase_add_test(rep, engine_graph_pool_memory_is_never_stale);
	tcase_add_test(rep, engine_graph_stale_once_per_graph_and_allocation);
	tcase_add_test(rep, engine_graph_eager_work_races_a_replay);
	tcase_add_test(rep, engine_graph_replay_races_eager_work);
	tcase_add_test(rep, engine_graph_replays_of_one_graph_are_ordered);
	tcase_add_test(rep, engine_graph_replay_use_needs_record_stream);
	tcase_add_test(rep, engine_graph_replay_into_a_capture);
	suite_add_tcase(s, rep);

	tcase_add_checked_fixture(life, NULL, teardown);
	tcase_add_test(life, engine_graph_recapture_destroys_the_old_footprint);
	tcase_add_test(life, engine_graph_destroy_abandons_a_capture);
	tcase_add_test(life, engine_graph_begin_and_end_that_have_no_effect);
	tcase_add_test(life, engine_graph_host_syncs_refused_during_capture);
	tcase_add_test(life, engine_graph_gap_forgets_graphs);
	tcase_add_test(life, engine_graph_dedup_key_has_the_graphs);
	tcase_add_test(life, engine_graph_accesses_name_their_arguments);
	tcase_add_test(life, engine_graph_conformance_traces_keep_invariants);
	tcase_add_test(life, engine_graph_out_of_memory_never_invents);
	tcase_add_test(life, engine_out_of_memory_in_a_v1_job_never_invents);
	tcase_add_test(life, engine_out_of_memory_in_a_read_over_many_writes_goes_on);
	tcase_add_test(life, engine_flush_without_memory_for_its_list_still_reports);
	tcase_add_test(life, engine_graph_memory_follows_footprint_not_replays);
	/* the sweeps of memory limits run a job hundreds of times */
	tcase_set_timeout(life, 60);
	suite_add_tcase(s, life);
	return s;
}

int main(void)
{
	return tu_main(graph_suite());
}
