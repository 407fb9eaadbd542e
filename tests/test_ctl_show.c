/*
 * test_ctl_show.c - `npusanctl show`: the text report of `analyze` with
 * first and last seen, repeats and JSON, graph findings, and colour only on
 * a terminal.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl_helpers.h"
#include "npusan.pb-c.h"
#include "testutil.h"

/* ---- show ---------------------------------------------------------------- */

START_TEST(ctl_show_prints_analyze_report_with_seen)
{
	struct fq *q = fq_new();
	struct cf a;
	char *trace = tu_write_file("spec.trace", spec_trace), *live, *offline;
	char *want, *second_line, *end;

	cf_spec(&a, true);
	a.f.has_last_ms = false;
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &live, NULL, "show", "1", NULL), 0);
	ck_assert_int_eq(fq_query(q)->show->id, 1);
	ck_assert_int_eq(ctl(&offline, NULL, "analyze", trace, NULL), 1);
	/* analyze's first report, with the daemon's line after the header */
	end = strstr(offline, "\n\n");
	ck_assert_ptr_nonnull(end);
	end[2] = '\0';
	second_line = strchr(strchr(offline, '\n') + 1, '\n') + 1;
	ck_assert_int_gt(asprintf(&want, "%.*sSeen once, at " T0 ".\n%s",
				  (int)(second_line - offline), offline,
				  second_line),
			 0);
	ck_assert_str_eq(live, want);
	ck_assert_ptr_nonnull(strstr(live, "  train.py:30 in main\n"));
	ck_assert_ptr_null(strchr(live, '\033'));
	free(want);
	free(live);
	free(offline);
	free(trace);
	fq_free(q);
}
END_TEST

START_TEST(ctl_show_repeats_and_json)
{
	struct fq *q = fq_new();
	struct cf a;
	char *out;

	cf_spec(&a, false);
	a.f.count = 5;
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "2", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "npusan detected a missing "
					  "record_stream on memory at 0x1000 in "
					  "process 4242, job demo, rank 0\n"
					  "Seen 5 times from " T0 " to " T1
					  "; the first occurrence is shown.\n"
					  "Allocated on stream 0, used on "
					  "stream 7, then freed"));
	free(out);
	fq_free(q);

	q = fq_new();
	a.f.count = 1;
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "--json", "2", NULL), 0);
	ck_assert_str_eq(out, SPEC_MRS_JSON SEEN_JSON);
	free(out);
	fq_free(q);

	/* a ShowReply without its finding is malformed */
	q = fq_new();
	fq_show(q, NULL);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "2", NULL), 3);
	ck_assert_str_eq(out, "");
	free(out);
	fq_free(q);
}
END_TEST

/* A graph finding (trace format v2), shaped as graphs.md's Findings table
 * has it: a stale_graph_address found at a replay of graph 1, or an
 * unjoined_capture found at the end of graph 4's capture. */
static void cf_graph(struct cf *c, bool stale)
{
	cf_spec(c, false);
	c->f.id = stale ? 3 : 4;
	c->f.free = NULL; /* no free found them */
	if (stale) {
		c->f.kind = (char *)"stale_graph_address";
		c->f.detected_at = (char *)"replay";
		cf_access(&c->access, 0, 9, false, "aten::mm", spec_stack, 2);
		c->access.graph = 1;
	} else {
		c->f.kind = (char *)"unjoined_capture";
		c->f.detected_at = (char *)"capture_end";
		c->f.ptr = 0x2000;
		c->f.alloc = NULL;
		cf_access(&c->access, 2, 3, true, "aten::add_", spec_stack, 2);
		c->access.graph = 4;
	}
	c->access.has_graph = true;
}

START_TEST(ctl_show_stale_graph_address_text_and_json)
{
	struct fq *q = fq_new();
	struct cf a;
	char *out;

	cf_graph(&a, true);
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "3", NULL), 0);
	ck_assert_str_eq(
		out,
		"============================\n"
		"npusan detected a stale graph address on memory at 0x1000 in process 4242, job demo, rank 0\n"
		"Seen once, at 2024-05-01T10:00:00.000Z.\n"
		"A replay of graph 1 on stream 0 (seq 9) ran a captured kernel on memory whose\n"
		"allocation was freed (or reallocated) after the capture: the replay reads\n"
		"memory that is no longer the graph's, and may now belong to another tensor.\n"
		"Captured kernel:\n"
		"aten::mm\n"
		"reading from the captured allocation\n"
		"With stack trace (at its capture):\n"
		"  train.py:14 in step\n"
		"  train.py:30 in main\n"
		"The captured allocation (gone since) was allocated at 0x1000 (4096 bytes on stream 0) with stack trace:\n"
		"  train.py:14 in step\n"
		"  train.py:30 in main\n"
		"Fix it in one of three ways:\n"
		"  - keep the tensor alive (hold a reference to it) for as long as graph 1 can be\n"
		"    replayed,\n"
		"  - copy new data into the captured buffer (captured.copy_(new)) instead of\n"
		"    binding a new tensor in its place, or\n"
		"  - allocate it from the graph's memory pool, so that the graph keeps the\n"
		"    memory.\n"
		"\n");
	free(out);
	fq_free(q);

	q = fq_new();
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "--json", "3", NULL),
			 0);
	ck_assert_str_eq(
		out,
		"{\"id\":3,\"kind\":\"stale_graph_address\",\"process\":{"
		"\"pid\":4242,\"job\":\"demo\",\"rank\":0},\"ptr\":\"0x1000\","
		"\"alloc\":{\"ptr\":\"0x1000\",\"size\":4096,\"stream\":0,"
		"\"stack\":[\"train.py:14 in step\",\"train.py:30 in main\"]},"
		"\"access\":{\"stream\":0,\"seq\":9,\"type\":\"read\",\"op\":"
		"\"aten::mm\",\"arg\":null,\"stack\":[\"train.py:14 in step\","
		"\"train.py:30 in main\"],\"graph\":1},\"previous\":null,"
		"\"free\":null,\"detected_at\":\"replay\",\"count\":1" SEEN_JSON);
	free(out);
	fq_free(q);
}
END_TEST

START_TEST(ctl_show_unjoined_capture_text_and_json)
{
	struct fq *q = fq_new();
	struct cf a;
	char *out;

	cf_graph(&a, false);
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "4", NULL), 0);
	ck_assert_str_eq(
		out,
		"============================\n"
		"npusan detected an unjoined graph capture on memory at 0x2000 in process 4242, job demo, rank 0\n"
		"Seen once, at 2024-05-01T10:00:00.000Z.\n"
		"The capture of graph 4 ended while stream 2, which joined it, had captured work\n"
		"the capture's origin stream was never made to wait for: the runtime fails the\n"
		"capture (CUDA: unjoined work; ACL: ACL_ERROR_RT_STREAM_UNJOINED).\n"
		"Last captured launch by stream 2 (seq 3 in the capture of graph 4) during kernel:\n"
		"aten::add_\n"
		"writing to 0x2000\n"
		"With stack trace:\n"
		"  train.py:14 in step\n"
		"  train.py:30 in main\n"
		"Fix it by making the origin stream wait for stream 2 after that kernel and\n"
		"before the capture ends: origin.wait_stream(stream 2), or record an event on\n"
		"stream 2 and wait_event it on the origin stream.\n"
		"\n");
	free(out);
	fq_free(q);

	q = fq_new();
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "--json", "4", NULL),
			 0);
	ck_assert_str_eq(
		out,
		"{\"id\":4,\"kind\":\"unjoined_capture\",\"process\":{"
		"\"pid\":4242,\"job\":\"demo\",\"rank\":0},\"ptr\":\"0x2000\","
		"\"alloc\":null,\"access\":{\"stream\":2,\"seq\":3,"
		"\"type\":\"write\",\"op\":\"aten::add_\",\"arg\":null,\"stack\":["
		"\"train.py:14 in step\",\"train.py:30 in main\"],\"graph\":4},"
		"\"previous\":null,\"free\":null,\"detected_at\":\"capture_end\",\"count\":1"
		SEEN_JSON);
	free(out);
	fq_free(q);
}
END_TEST

/* A race at a replay names the graph of each access that has one; a race
 * inside a capture says its numbers are the capture's. */
START_TEST(ctl_show_races_with_graphs_name_them)
{
	struct fq *q = fq_new();
	struct cf a;
	char *out;

	cf_spec(&a, true);
	a.f.detected_at = (char *)"replay";
	a.access.has_graph = true;
	a.access.graph = 1;
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "1", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "Access by stream 7 (seq 2, replay "
					  "of graph 1) during kernel:\n"));
	ck_assert_ptr_nonnull(strstr(out, "Previous access by stream 0 (seq "
					  "1) during kernel:\n"));
	free(out);
	fq_free(q);

	q = fq_new();
	a.f.detected_at = (char *)"capture";
	a.access.graph = a.previous.graph = 3;
	a.previous.has_graph = true;
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "1", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "Access by stream 7 (seq 2 in the "
					  "capture of graph 3) during "
					  "kernel:\n"));
	ck_assert_ptr_nonnull(strstr(out, "Previous access by stream 0 (seq "
					  "1 in the capture of graph 3) "
					  "during kernel:\n"));
	free(out);
	fq_free(q);
}
END_TEST

START_TEST(ctl_colour_only_on_a_terminal_and_not_with_no_color)
{
	struct fq *q = fq_new();
	struct cf a;
	struct cf *v[] = { &a };
	const char *argv[] = { tu_bin("npusanctl"), "findings", NULL };
	const char *show[] = { tu_bin("npusanctl"), "show", "1", NULL };
	char *out;

	cf_spec(&a, true);
	fq_findings(q, v, 1, true);
	unsetenv("NO_COLOR");
	fq_start(q);
	ck_assert_int_eq(ctl_tty(&out, argv), 1);
	fq_stop(q);
	ck_assert_ptr_nonnull(strstr(out, "\033[1;31mdata_race\033[0m"));
	free(out);
	fq_free(q);

	/* the negative control: the same terminal, NO_COLOR set */
	q = fq_new();
	fq_findings(q, v, 1, true);
	setenv("NO_COLOR", "1", 1);
	fq_start(q);
	ck_assert_int_eq(ctl_tty(&out, argv), 1);
	fq_stop(q);
	ck_assert_ptr_nonnull(strstr(out, "data_race"));
	ck_assert_ptr_null(strchr(out, '\033'));
	free(out);
	fq_free(q);

	/* show paints the report as analyze does */
	q = fq_new();
	fq_show(q, &a);
	unsetenv("NO_COLOR");
	fq_start(q);
	ck_assert_int_eq(ctl_tty(&out, show), 0);
	fq_stop(q);
	ck_assert_ptr_nonnull(strstr(out, "\033[1;31mnpusan detected"));
	ck_assert_ptr_nonnull(strstr(out, "\033[1maten::randn\033[0m"));
	free(out);
	fq_free(q);
}
END_TEST

void ctl_show_add(TCase *tc)
{
	tcase_add_test(tc, ctl_show_prints_analyze_report_with_seen);
	tcase_add_test(tc, ctl_show_repeats_and_json);
	tcase_add_test(tc, ctl_show_stale_graph_address_text_and_json);
	tcase_add_test(tc, ctl_show_unjoined_capture_text_and_json);
	tcase_add_test(tc, ctl_show_races_with_graphs_name_them);
	tcase_add_test(tc, ctl_colour_only_on_a_terminal_and_not_with_no_color);
}
