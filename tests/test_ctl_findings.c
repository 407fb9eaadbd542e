/*
 * test_ctl_findings.c - `npusanctl findings` against the fake daemon: its
 * JSON exactly as docs/findings.md and `analyze --json` have it, answers in
 * several frames or cut short, the table, every filter, --since, and
 * --follow until SIGINT.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ctl_helpers.h"
#include "npusan.pb-c.h"
#include "testutil.h"

/* ---- findings ------------------------------------------------------------ */

START_TEST(ctl_findings_json_is_findings_md_exactly)
{
	struct fq *q = fq_new();
	struct cf a, b;
	struct cf *v[] = { &a, &b };
	char *out, *err;

	cf_spec(&a, true);
	cf_spec(&b, false);
	fq_findings(q, v, 2, true);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "findings", "--json", NULL), 1);
	ck_assert_str_eq(out, SPEC_RACE_JSON SEEN_JSON SPEC_MRS_JSON SEEN_JSON);
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_json_matches_analyze_byte_for_byte)
{
	/* One formatter: the daemon's finding prints as analyze's does. */
	struct fq *q = fq_new();
	struct cf a, b;
	struct cf *v[] = { &a, &b };
	char *trace = tu_write_file("spec.trace", spec_trace), *live, *offline;
	char *p;

	cf_spec(&a, true);
	cf_spec(&b, false);
	fq_findings(q, v, 2, true);
	ck_assert_int_eq(ctl_fq(q, &live, NULL, "findings", "--json", NULL), 1);
	ck_assert_int_eq(ctl(&offline, NULL, "analyze", "--json", trace, NULL),
			 1);
	/* take out first_seen and last_seen, which only the daemon has */
	while ((p = strstr(live, ",\"first_seen\"")) != NULL)
		memmove(p, p + strlen(SEEN_JSON) - 2,
			strlen(p + strlen(SEEN_JSON) - 2) + 1);
	ck_assert_str_eq(live, offline);
	free(live);
	free(offline);
	free(trace);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_json_null_alloc_previous_and_big_pointers)
{
	struct fq *q = fq_new();
	struct cf a;
	struct cf *v[] = { &a };
	char *stack[] = { (char *)"tab\there \"q\"", (char *)"\xff bad" };
	char *out;

	cf_spec(&a, false);
	a.f.id = 9007199254740993; /* 2^53 + 1 */
	a.f.ptr = UINT64_C(0xffffffffffff0000);
	a.f.alloc = NULL;
	a.f.has_rank = false;
	a.f.job = NULL;
	a.f.has_first_ms = false;
	a.f.count = 12;
	a.access.stack = stack;
	a.access.n_stack = 2;
	a.access.write = true;
	a.access.stream = UINT64_C(18446744073709551615);
	fq_findings(q, v, 1, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "findings", "--json", NULL), 1);
	ck_assert_str_eq(
		out,
		"{\"id\":9007199254740993,\"kind\":\"missing_record_stream\","
		"\"process\":{\"pid\":4242,\"job\":null,\"rank\":null},"
		"\"ptr\":\"0xffffffffffff0000\",\"alloc\":null,\"access\":{"
		"\"stream\":18446744073709551615,\"seq\":2,\"type\":\"write\","
		"\"op\":\"aten::add.Tensor\",\"arg\":null,\"stack\":[\"tab\\there "
		"\\\"q\\\"\",\"\\ufffd bad\"],\"graph\":null},\"previous\":null,"
		"\"free\":{\"stack\":[]},\"detected_at\":\"free\",\"count\":12,\"first_seen\":null,"
		"\"last_seen\":\"" T1 "\"}\n");
	free(out);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_answer_in_several_frames)
{
	struct fq *q = fq_new();
	struct cf a, b;
	struct cf *v1[] = { &a }, *v2[] = { &b };
	char *out, *err;

	cf_spec(&a, true);
	cf_spec(&b, false);
	fq_findings(q, v1, 1, false);
	fq_sleep(q, 50);
	fq_findings(q, NULL, 0, false);
	fq_findings(q, v2, 1, true);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "findings", "--json", NULL), 1);
	ck_assert_str_eq(out, SPEC_RACE_JSON SEEN_JSON SPEC_MRS_JSON SEEN_JSON);
	ck_assert_str_eq(err, "");
	ck_assert(q->peer_closed);
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_answer_cut_short_is_an_error)
{
	/*
	 * The negative control of the test above: without `done` the answer
	 * is not complete, and a daemon that hangs up then is an error.
	 */
	struct fq *q = fq_new();
	struct cf a;
	struct cf *v[] = { &a };
	char *out, *err;

	cf_spec(&a, true);
	fq_findings(q, v, 1, false);
	fq_close(q);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "findings", "--json", NULL), 3);
	/* JSON lines go out as they come */
	ck_assert_str_eq(out, SPEC_RACE_JSON SEEN_JSON);
	ck_assert_ptr_nonnull(strstr(err, "closed the connection before it "
					  "finished answering"));
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_table_is_aligned)
{
	struct fq *q = fq_new();
	struct cf a, b, c;
	struct cf *v1[] = { &a }, *v2[] = { &b, &c };
	int64_t now = (int64_t)time(NULL) * 1000;
	char *out, *err;

	cf_spec(&a, true);
	cf_spec(&b, false);
	cf_spec(&c, true);
	a.f.last_ms = now - 150 * 1000;	      /* 2m */
	b.f.last_ms = now - 5 * 3600 * 1000 - 60000; /* 5h */
	c.f.id = 1234;
	c.f.job = (char *)"pretrain-llama";
	c.f.rank = 17;
	c.f.pid = 99;
	c.f.count = 4096;
	c.f.has_last_ms = false;
	c.previous.op = (char *)"nccl:all_reduce";
	c.previous.stream = 12;
	fq_findings(q, v1, 1, false);
	fq_findings(q, v2, 2, true);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "findings", NULL), 1);
	ck_assert_str_eq(
		out,
		"  ID  KIND                   JOB             RANK   PID  OPS"
		"                               STREAMS  COUNT  LAST SEEN\n"
		"   1  data_race              demo               0  4242  "
		"aten::add.Tensor/aten::randn      7/0          1  2m ago\n"
		"   2  missing_record_stream  demo               0  4242  "
		"aten::add.Tensor                  7/0          1  5h ago\n"
		"1234  data_race              pretrain-llama    17    99  "
		"aten::add.Tensor/nccl:all_reduce  7/12      4096  -\n");
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_none_exits_0)
{
	struct fq *q = fq_new();
	char *out;

	fq_findings(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "findings", NULL), 0);
	ck_assert_str_eq(out, "No findings.\n");
	free(out);
	fq_free(q);
	q = fq_new();
	fq_findings(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "findings", "--json", NULL), 0);
	ck_assert_str_eq(out, "");
	free(out);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_sends_every_filter)
{
	struct fq *q = fq_new();
	const Npusan__FindingsRequest *r;

	/* A job's or a process's: first its processes, for those that
	 * exited but are not stored yet (none here). */
	fq_list(q, NULL, 0, true);
	fq_next(q);
	fq_findings(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, NULL, NULL, "findings", "--job", "demo",
				"--pid", "4242", "--rank", "3", "--kind",
				"missing_record_stream", "--since",
				"2024-05-01T12:00:00.5+02:00", "--limit", "7", NULL),
			 0);
	ck_assert_int_eq(fq_query(q)->q_case, NPUSAN__QUERY__Q_FINDINGS);
	r = fq_query(q)->findings;
	ck_assert_str_eq(r->job, "demo");
	ck_assert(r->has_pid && r->pid == 4242);
	ck_assert(r->has_rank && r->rank == 3);
	ck_assert_str_eq(r->kind, "missing_record_stream");
	ck_assert(r->has_since_ms);
	ck_assert_int_eq(r->since_ms, T0_MS + 500);
	/* --limit is applied here, after the filters (next test). */
	ck_assert(!r->has_limit);
	ck_assert(!r->follow);
	fq_free(q);

	/* Every kind of findings.md is one --kind takes, the graph ones too. */
	for (int k = 0; k < 4; k++) {
		static const char *const kinds[] = {
			"data_race", "missing_record_stream",
			"stale_graph_address", "unjoined_capture"
		};
		const char *name = kinds[k];

		q = fq_new();
		fq_findings(q, NULL, 0, true);
		ck_assert_int_eq(ctl_fq(q, NULL, NULL, "findings", "--kind",
					name, NULL), 0);
		ck_assert_str_eq(fq_query(q)->findings->kind, name);
		fq_free(q);
	}

	/* No filter given: none sent. */
	q = fq_new();
	fq_findings(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, NULL, NULL, "findings", NULL), 0);
	r = fq_query(q)->findings;
	ck_assert(r->job == NULL && !r->has_pid && !r->has_rank &&
		  r->kind == NULL && !r->has_since_ms && !r->has_limit);
	fq_free(q);
}
END_TEST

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s != '\0'; s++)
		n += *s == '\n';
	return n;
}

/* Finding `id` of the example race, its access by operator `op`,
 * suppressed by the daemon's entry `supp` (NULL: not). */
static void cf_op(struct cf *c, int64_t id, const char *op, const char *supp)
{
	cf_spec(c, true);
	c->f.id = id;
	c->access.op = (char *)op;
	c->f.suppressed = (char *)supp;
}

START_TEST(ctl_findings_limit_counts_after_the_filters)
{
	/*
	 * The newest findings are all left out, by --op or by the daemon's
	 * suppressions: --limit must still print the newest that are kept,
	 * and exit 1 on them, not "No findings." and 0.
	 */
	struct cf a, b, c, d;
	struct cf *v[] = { &a, &b, &c, &d };
	struct fq *q = fq_new();
	char *out;

	cf_op(&a, 1, "aten::mm", NULL);
	cf_op(&b, 2, "aten::add.Tensor", NULL);
	cf_op(&c, 3, "aten::add.Tensor", NULL);
	cf_op(&d, 4, "aten::mm", "known");
	fq_findings(q, v, 2, false);
	fq_findings(q, v + 2, 2, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "findings", "--json", "--limit",
				"1", "--op", "aten::add*", NULL),
			 1);
	ck_assert_ptr_nonnull(strstr(out, "\"id\":3,"));
	ck_assert_ptr_null(strstr(out, "\"id\":2,"));
	free(out);
	fq_free(q);

	q = fq_new();
	fq_findings(q, v, 4, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "findings", "--limit", "1",
				"--exclude-op", "aten::add*", NULL),
			 1);
	/* the table: a header and finding 1, the newest kept */
	ck_assert_ptr_nonnull(strstr(out, "aten::mm"));
	ck_assert_ptr_null(strstr(out, "aten::add"));
	ck_assert_int_eq(count_lines(out), 2);
	free(out);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_since_takes_durations_and_timestamps)
{
	static const struct {
		const char *arg;
		int64_t back_ms; /* from now; -1: T0_MS exactly */
	} cases[] = {
		{ "90m", 90 * 60000 },	     { "1h30m", 90 * 60000 },
		{ "2d", 2 * 86400000LL },    { "45s", 45000 },
		{ "1w", 604800000LL },	     { "250ms", 250 },
		{ "2024-05-01T10:00:00Z", -1 }, { "2024-05-01 10:00Z", -1 },
		{ "2024-05-01T10:00:00", -1 }, { "2024-05-01T06:00:00-04:00", -1 },
		{ "2024-05-01T10:00:00.000z", -1 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fq *q = fq_new();
		int64_t before = (int64_t)time(NULL) * 1000, got;

		fq_findings(q, NULL, 0, true);
		ck_assert_int_eq(ctl_fq(q, NULL, NULL, "findings", "--since",
					cases[i].arg, NULL),
				 0);
		got = fq_query(q)->findings->since_ms;
		if (cases[i].back_ms < 0) {
			ck_assert_int_eq(got, T0_MS);
		} else {
			int64_t want = before - cases[i].back_ms;

			ck_assert_msg(got >= want && got <= want + 10000,
				      "%s: %" PRId64 " vs %" PRId64,
				      cases[i].arg, got, want);
		}
		fq_free(q);
	}
}
END_TEST

/*
 * --follow asks again every second for what was seen lately, printing a
 * finding that is new or whose count grew, and nothing twice; SIGINT ends
 * it with 0.
 */
START_TEST(ctl_findings_follow_prints_new_and_updated_until_sigint)
{
	struct fq *q = fq_new();
	struct cf a, b, b3;
	struct cf *v1[] = { &a }, *v2[] = { &a, &b }, *v3[] = { &a, &b3 };
	const char *argv[] = { tu_bin("npusanctl"), "findings", "--json",
			       "--follow", "--timeout", "0.5", NULL };
	char *out = NULL;
	size_t len = 0;
	int64_t before = (int64_t)time(NULL) * 1000;
	int p[2];
	pid_t pid;

	cf_spec(&a, true);
	cf_spec(&b, false);
	cf_spec(&b3, false);
	b3.f.count = 3;
	fq_findings(q, v1, 1, true);
	fq_next(q);
	fq_findings(q, v2, 2, true); /* a again, and b: new */
	fq_next(q);
	fq_findings(q, v3, 2, true); /* b's count grew */
	fq_next(q);
	fq_start(q);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid = ctl_spawn(argv, p[1]);
	close(p[1]);
	read_until(p[0], &out, &len, "\"count\":3");
	ck_assert_int_eq(kill(pid, SIGINT), 0);
	read_until(p[0], &out, &len, NULL);
	close(p[0]);
	ck_assert_int_eq(wait_status(pid), 0);
	ck_assert_str_eq(out, SPEC_RACE_JSON SEEN_JSON SPEC_MRS_HEAD
			 ",\"count\":1" SEEN_JSON SPEC_MRS_HEAD
			 ",\"count\":3" SEEN_JSON);
	fq_stop(q);
	/* A later ask: no push wanted, only what was seen lately. */
	ck_assert(!fq_query(q)->findings->follow);
	ck_assert(fq_query(q)->findings->has_since_ms);
	ck_assert_int_ge(fq_query(q)->findings->since_ms, before - 11000);
	ck_assert_uint_ge(q->nconn, 3);
	free(out);
	fq_free(q);
}
END_TEST

/*
 * A finding the filters leave out is counted once, however often its
 * count grows while following: the summary on standard error says 1.
 */
START_TEST(ctl_findings_follow_counts_a_left_out_finding_once)
{
	struct fq *q = fq_new();
	struct cf a1, a2, a3, b;
	struct cf *v1[] = { &a1 }, *v2[] = { &a2 }, *v3[] = { &a3, &b };
	const char *argv[] = { tu_bin("npusanctl"), "findings", "--json",
			       "--follow", "--timeout", "0.5", NULL };
	char *out = NULL, said[1024] = "";
	FILE *err = tmpfile();
	int p[2], saved = dup(STDERR_FILENO);
	size_t len = 0;
	pid_t pid;

	cf_op(&a1, 1, "aten::mm", "known");
	cf_op(&a2, 1, "aten::mm", "known");
	cf_op(&a3, 1, "aten::mm", "known");
	a2.f.count = 2;
	a3.f.count = 3;
	cf_op(&b, 2, "aten::add.Tensor", NULL);
	fq_findings(q, v1, 1, true);
	fq_next(q);
	fq_findings(q, v2, 1, true);
	fq_next(q);
	fq_findings(q, v3, 2, true);
	fq_next(q);
	fq_start(q);
	ck_assert(err != NULL && saved >= 0);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	/* npusanctl's standard error into `err`, ours back after. */
	ck_assert_int_ge(dup2(fileno(err), STDERR_FILENO), 0);
	pid = ctl_spawn(argv, p[1]);
	ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
	close(saved);
	close(p[1]);
	read_until(p[0], &out, &len, "\"id\":2,");
	ck_assert_int_eq(kill(pid, SIGINT), 0);
	read_until(p[0], &out, &len, NULL);
	close(p[0]);
	ck_assert_int_eq(wait_status(pid), 0);
	rewind(err);
	said[fread(said, 1, sizeof(said) - 1, err)] = '\0';
	fclose(err);
	ck_assert_msg(strstr(said, "npusanctl: 1 finding suppressed by "
				   "npusand's suppressions\n") != NULL &&
			      strstr(said, "  1 by 'known'") != NULL,
		      "%s", said);
	ck_assert_ptr_null(strstr(out, "\"id\":1,"));
	fq_stop(q);
	free(out);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_follow_table_prints_rows_as_they_come)
{
	struct fq *q = fq_new();
	struct cf a;
	struct cf *v[] = { &a };
	const char *argv[] = { tu_bin("npusanctl"), "findings", "--follow",
			       NULL };
	char *out = NULL;
	size_t len = 0;
	int p[2];
	pid_t pid;

	cf_spec(&a, true);
	a.f.has_last_ms = false;
	fq_findings(q, NULL, 0, true);
	fq_wait_go(q);
	fq_next(q);
	fq_findings(q, v, 1, true);
	fq_next(q);
	fq_start(q);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid = ctl_spawn(argv, p[1]);
	close(p[1]);
	/* the header at once, though nothing matched yet */
	read_until(p[0], &out, &len, "LAST SEEN\n");
	ck_assert_ptr_null(strstr(out, "data_race"));
	fq_go(q);
	read_until(p[0], &out, &len, "aten::randn");
	ck_assert_int_eq(kill(pid, SIGTERM), 0);
	read_until(p[0], &out, &len, NULL);
	close(p[0]);
	ck_assert_int_eq(wait_status(pid), 0);
	ck_assert_str_eq(out, "ID  KIND  JOB  RANK  PID  OPS  STREAMS  COUNT  "
			      "LAST SEEN\n"
			      " 1  data_race  demo     0  4242  "
			      "aten::add.Tensor/aten::randn  7/0          1  "
			      "-\n");
	fq_stop(q);
	free(out);
	fq_free(q);
}
END_TEST

void ctl_findings_add(TCase *tc)
{
	tcase_add_test(tc, ctl_findings_json_is_findings_md_exactly);
	tcase_add_test(tc, ctl_findings_json_matches_analyze_byte_for_byte);
	tcase_add_test(tc, ctl_findings_json_null_alloc_previous_and_big_pointers);
	tcase_add_test(tc, ctl_findings_answer_in_several_frames);
	tcase_add_test(tc, ctl_findings_answer_cut_short_is_an_error);
	tcase_add_test(tc, ctl_findings_table_is_aligned);
	tcase_add_test(tc, ctl_findings_none_exits_0);
	tcase_add_test(tc, ctl_findings_sends_every_filter);
	tcase_add_test(tc, ctl_findings_limit_counts_after_the_filters);
	tcase_add_test(tc, ctl_findings_since_takes_durations_and_timestamps);
	tcase_add_test(tc, ctl_findings_follow_prints_new_and_updated_until_sigint);
	tcase_add_test(tc, ctl_findings_follow_table_prints_rows_as_they_come);
	tcase_add_test(tc, ctl_findings_follow_counts_a_left_out_finding_once);
}
