/*
 * test_daemon.c - the product end to end, as a user runs it: npusand on a
 * socket in a temporary directory, npusan-replay processes pushing known
 * traces through the real agent, and npusanctl asking what was found.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

/* Debug lines in the daemon's log, for a failure to explain itself. */
static const char *const DAEMON_ARGS[] = { "--log-level", "debug", NULL };

/* `npusanctl ARGS...` (NULL-terminated); its stdout in *out. */
static int ctl(char **out, const char *a0, const char *a1, const char *a2)
{
	char *bin = strdup(tu_bin("npusanctl"));
	const char *argv[] = { bin, a0, a1, a2, NULL };
	int st = tu_run(argv, NULL, out, NULL);

	free(bin);
	return st;
}

/* demo.trace with its rank replaced, as a file of its own. */
static char *demo_for_rank(unsigned rank)
{
	char path[PATH_MAX], name[32], *text, *p, *file;
	FILE *f;
	long n;

	snprintf(path, sizeof(path), "%s/examples/demo.trace",
		 NPUSAN_SOURCE_DIR);
	f = fopen(path, "rb");
	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	text = calloc(1, (size_t)n + 16);
	ck_assert_int_eq(fread(text, 1, (size_t)n, f), n);
	fclose(f);
	p = strstr(text, "rank=0");
	ck_assert_ptr_nonnull(p);
	p[5] = (char)('0' + rank);
	snprintf(name, sizeof(name), "rank%u.trace", rank);
	file = tu_write_file(name, text);
	free(text);
	return file;
}

/* A rank that makes no mistake. */
static const char clean_trace[] =
	"npusan-trace 1\n"
	"process pid=1 job=demo rank=3\n"
	"alloc ptr=0x1000 size=64 stream=0\n"
	"stream_create stream=1\n"
	"launch stream=0 op=fill write=0x1000+64\n"
	"stream_wait stream=1 on=0\n"
	"launch stream=1 op=use read=0x1000+64\n"
	"device_sync\n"
	"free ptr=0x1000\n";

/* The fields in which a trace's analysis and a live one differ. */
static const char *const varying[] = { "id", "pid", "first_seen",
				       "last_seen", NULL };

/* Polls `npusanctl findings --json` until it holds `want` findings. */
static char *wait_findings(unsigned want)
{
	char *out = NULL;

	for (int i = 0; i < 500; i++) {
		free(out);
		out = NULL;
		ctl(&out, "findings", "--json", NULL);
		if (out != NULL && tu_count_lines(out, "\"kind\"") >= want)
			break;
		tu_nap_ms(20);
	}
	return out;
}

/* Four ranks at once through the real agent into one daemon: each rank's
 * findings are exactly those `analyze` finds in its trace. */
START_TEST(daemon_finds_what_analyze_finds_in_each_rank)
{
	char *traces[4], *out, *list, *rep, *bin, *expect;
	const char *argv[6];
	struct tu_daemon d;
	char want[64];

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	for (unsigned r = 0; r < 3; r++)
		traces[r] = demo_for_rank(r);
	traces[3] = tu_write_file("clean.trace", clean_trace);
	rep = strdup(tu_bin("agent/npusan-replay"));
	argv[0] = rep;
	for (int i = 0; i < 4; i++)
		argv[i + 1] = traces[i];
	argv[5] = NULL;
	ck_assert_int_eq(tu_run(argv, NULL, NULL, NULL), 0);
	out = wait_findings(6);
	ck_assert_uint_eq(tu_count_lines(out, "\"kind\""), 6);
	for (unsigned r = 0; r < 3; r++) {
		snprintf(want, sizeof(want), "\"rank\":%u}", r);
		ck_assert_uint_eq(tu_count_lines(out, want), 2);
	}
	ck_assert_uint_eq(tu_count_lines(out, "\"data_race\""), 3);
	ck_assert_uint_eq(tu_count_lines(out, "\"missing_record_stream\""), 3);
	ck_assert_uint_eq(tu_count_lines(out, "\"first_seen\""), 6);
	/* Each rank's findings are exactly what analyze finds in its trace,
	 * ids, pids and times aside. */
	bin = strdup(tu_bin("npusanctl"));
	for (unsigned r = 0; r < 3; r++) {
		const char *av[] = { bin, "analyze", "--json", traces[r],
				     NULL };
		char *got, *exp;

		ck_assert_int_eq(tu_run(av, NULL, &expect, NULL), 1);
		snprintf(want, sizeof(want), "\"rank\":%u}", r);
		got = tu_json_lines(out, want, varying);
		exp = tu_json_lines(expect, want, varying);
		ck_assert_str_eq(got, exp);
		ck_assert_ptr_nonnull(strstr(got, "hccl::all_reduce"));
		free(got);
		free(exp);
		free(expect);
	}
	/* Every process is listed, and exits. */
	list = NULL;
	for (int i = 0; i < 500; i++) {
		free(list);
		list = NULL;
		ctl(&list, "list", "--json", NULL);
		if (list && tu_count_lines(list, "\"exited\"") == 4)
			break;
		tu_nap_ms(20);
	}
	ck_assert_msg(tu_count_lines(list, "\"exited\"") == 4, "%s", list);
	/* demo.trace holds 29 operations, the clean one 7; none was lost. */
	ck_assert_msg(tu_count_lines(list, "\"events\":29,") == 3, "%s", list);
	ck_assert_msg(tu_count_lines(list, "\"events\":7,") == 1, "%s", list);
	ck_assert_uint_eq(tu_count_lines(list, "\"lost\":0,"), 4);
	ck_assert_int_eq(WEXITSTATUS(tu_daemon_stop(&d, SIGTERM)), 0);
	free(list);
	free(out);
	free(bin);
	free(rep);
	for (int i = 0; i < 4; i++)
		free(traces[i]);
	free(d.dir);
}
END_TEST

/* A daemon SIGKILLed after findings were stored keeps every one of them. */
START_TEST(daemon_killed_keeps_committed_findings)
{
	const char *argv[3];
	char *trace = demo_for_rank(1), *rep, *out, *after;
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	rep = strdup(tu_bin("agent/npusan-replay"));
	argv[0] = rep;
	argv[1] = trace;
	argv[2] = NULL;
	ck_assert_int_eq(tu_run(argv, NULL, NULL, NULL), 0);
	out = wait_findings(2);
	ck_assert_uint_eq(tu_count_lines(out, "\"kind\""), 2);
	ck_assert(WIFSIGNALED(tu_daemon_stop(&d, SIGKILL)));
	tu_daemon_start(&d, DAEMON_ARGS);
	ck_assert_int_eq(ctl(&after, "findings", "--json", NULL), 1);
	ck_assert_uint_eq(tu_count_lines(after, "\"kind\""), 2);
	tu_daemon_stop(&d, SIGTERM);
	free(after);
	free(out);
	free(rep);
	free(trace);
	free(d.dir);
}
END_TEST

/* Where the memory was freed and the operators' arguments: a missing
 * record_stream found at a free (stack 2), and a race whose accesses name
 * their arguments. */
static const char free_args_trace[] =
	"npusan-trace 1\n"
	"process pid=1 job=freeargs rank=0\n"
	"stack id=1 frame=\"train.py:14 in step\"\n"
	"stack id=2 frame=\"train.py:40 in cleanup\" frame=\"train.py:50 in main\"\n"
	"alloc ptr=0x1000 size=4096 stream=0 stack=1\n"
	"launch stream=0 op=aten::randn write=0x1000+64@out stack=1\n"
	"stream_create stream=7\n"
	"launch stream=7 op=aten::add.Tensor read=0x1000@self,0x3000 "
	"write=0x2000@out\n"
	"free ptr=0x1000 stack=2\n";

/* The text of the file at `path` (caller frees). */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *text = calloc(1, 65536);
	size_t n;

	ck_assert_ptr_nonnull(f);
	ck_assert_ptr_nonnull(text);
	n = fread(text, 1, 65535, f);
	ck_assert_uint_lt(n, 65535);
	fclose(f);
	return text;
}

/* Polls `npusanctl show ID` until it answers 0. */
static char *wait_show(const char *id)
{
	char *out = NULL;

	for (int i = 0; i < 500; i++) {
		free(out);
		out = NULL;
		if (ctl(&out, "show", id, NULL) == 0)
			break;
		tu_nap_ms(20);
	}
	return out;
}

/* The free's stack and the arguments go through the agent, the ring, the
 * store and the wire: `show` names them as analyze does, and the JSON is
 * analyze's. */
START_TEST(daemon_names_where_memory_was_freed_and_arguments)
{
	char *trace = tu_write_file("freeargs.trace", free_args_trace);
	char *rep = strdup(tu_bin("agent/npusan-replay"));
	char *bin = strdup(tu_bin("npusanctl"));
	const char *argv[] = { rep, trace, NULL };
	const char *av[] = { bin, "analyze", "--json", trace, NULL };
	char *out, *shown, *expect, *got, *exp;
	char rec[PATH_MAX], *recorded;
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	/* The agent's own recording keeps them too. */
	snprintf(rec, sizeof(rec), "%s/rec.trace", d.dir);
	setenv("NPUSAN_RECORD", rec, 1);
	ck_assert_int_eq(tu_run(argv, NULL, NULL, NULL), 0);
	unsetenv("NPUSAN_RECORD");
	recorded = slurp(rec);
	ck_assert_msg(strstr(recorded, " read=0x1000@self,0x3000 "
				       "write=0x2000@out\n") != NULL,
		      "%s", recorded);
	ck_assert_ptr_nonnull(strstr(recorded, " write=0x1000+64@out "));
	ck_assert_ptr_nonnull(strstr(recorded, "free ptr=0x1000 stack="));
	free(recorded);
	out = wait_findings(2);
	ck_assert_uint_eq(tu_count_lines(out, "\"kind\""), 2);
	shown = wait_show("2");
	ck_assert_ptr_nonnull(shown);
	ck_assert_msg(strstr(shown, "Memory was freed here:\n"
				    "  train.py:40 in cleanup\n"
				    "  train.py:50 in main\n") != NULL,
		      "%s", shown);
	free(shown);
	shown = wait_show("1");
	ck_assert_ptr_nonnull(shown);
	ck_assert_msg(strstr(shown, "aten::add.Tensor\nreading from argument "
				    "self of aten::add.Tensor, at 0x1000\n") !=
			      NULL,
		      "%s", shown);
	ck_assert_ptr_nonnull(strstr(shown, "aten::randn\nwriting to argument "
					    "out of aten::randn\n"));
	ck_assert_int_eq(tu_run(av, NULL, &expect, NULL), 1);
	got = tu_json_lines(out, "\"job\":\"freeargs\"", varying);
	exp = tu_json_lines(expect, "\"job\":\"freeargs\"", varying);
	ck_assert_str_eq(got, exp);
	ck_assert_ptr_nonnull(strstr(got, "\"free\":{\"stack\":"
					  "[\"train.py:40 in cleanup\","));
	ck_assert_ptr_nonnull(strstr(got, "\"op\":\"aten::add.Tensor\","
					  "\"arg\":\"self\""));
	ck_assert_int_eq(WEXITSTATUS(tu_daemon_stop(&d, SIGTERM)), 0);
	free(got);
	free(exp);
	free(expect);
	free(shown);
	free(out);
	free(bin);
	free(rep);
	free(trace);
	free(d.dir);
}
END_TEST

/* Polls `npusanctl list --json` until `n` processes have exited. */
static char *wait_exited(unsigned n)
{
	char *list = NULL;

	for (int i = 0; i < 500; i++) {
		free(list);
		list = NULL;
		ctl(&list, "list", "--json", NULL);
		if (list != NULL && tu_count_lines(list, "\"exited\"") >= n)
			break;
		tu_nap_ms(20);
	}
	return list;
}

/* The replays start together once every trace is read ahead (--started
 * marks it): a trace that cannot be opened holds the others up no more
 * than one with a bad line, which is replayed up to that line, as it was
 * before traces were read ahead; a --started file that cannot be made is
 * said, and fails the replay, which still runs. */
START_TEST(daemon_replays_start_together_whatever_a_trace_holds)
{
	char *clean = tu_write_file("clean.trace", clean_trace);
	char *bad = tu_write_file("bad.trace", "npusan-trace 1\n"
				  "process pid=1 job=demo rank=4\n"
				  "stream_create stream=1\n"
				  "stream_create stream=2\n"
				  "launch stream=1 op=x write=nonsense\n"
				  "device_sync\n");
	char *dir = tu_tmpdir(), started[PATH_MAX], missing[PATH_MAX];
	char *rep = strdup(tu_bin("agent/npusan-replay")), *err, *list;
	const char *argv[] = { rep, "--started", started, clean, bad, missing,
			       NULL };
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	snprintf(started, sizeof(started), "%s/started", dir);
	snprintf(missing, sizeof(missing), "%s/missing.trace", dir);
	ck_assert_int_eq(tu_run(argv, NULL, NULL, &err), 1);
	ck_assert_msg(strstr(err, "missing.trace") != NULL &&
			      strstr(err, "bad.trace:5") != NULL, "%s", err);
	free(err);
	ck_assert_int_eq(access(started, F_OK), 0);
	list = wait_exited(2);
	ck_assert_msg(tu_count_lines(list, "\"events\":7,") == 1 &&
			      tu_count_lines(list, "\"events\":2,") == 1 &&
			      tu_count_lines(list, "\"lost\":0,") == 2,
		      "%s", list);
	free(list);
	/* --started in a directory that does not exist. */
	snprintf(started, sizeof(started), "%s/no/started", dir);
	argv[4] = NULL;
	ck_assert_int_eq(tu_run(argv, NULL, NULL, &err), 1);
	ck_assert_msg(strstr(err, "--started") != NULL &&
			      strstr(err, started) != NULL, "%s", err);
	free(err);
	list = wait_exited(3);
	ck_assert_msg(tu_count_lines(list, "\"events\":7,") == 2, "%s", list);
	free(list);
	ck_assert_int_eq(WEXITSTATUS(tu_daemon_stop(&d, SIGTERM)), 0);
	free(rep);
	free(clean);
	free(bad);
	free(dir);
	free(d.dir);
}
END_TEST

START_TEST(daemon_absent_is_said)
{
	char *dir = tu_tmpdir(), sock[PATH_MAX], *bin, *err;
	const char *argv[4];

	snprintf(sock, sizeof(sock), "%s/none.sock", dir);
	setenv("NPUSAN_SOCKET", sock, 1);
	bin = strdup(tu_bin("npusanctl"));
	argv[0] = bin;
	argv[1] = "list";
	argv[2] = NULL;
	ck_assert_int_eq(tu_run(argv, NULL, NULL, &err), 3);
	ck_assert_ptr_nonnull(strstr(err, sock));
	ck_assert_ptr_nonnull(strstr(err, "npusand"));
	free(err);
	free(bin);
	free(dir);
}
END_TEST

static Suite *daemon_suite(void)
{
	Suite *s = suite_create("daemon");
	TCase *tc = tcase_create("daemon");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, daemon_finds_what_analyze_finds_in_each_rank);
	tcase_add_test(tc, daemon_killed_keeps_committed_findings);
	tcase_add_test(tc, daemon_names_where_memory_was_freed_and_arguments);
	tcase_add_test(tc, daemon_replays_start_together_whatever_a_trace_holds);
	tcase_add_test(tc, daemon_absent_is_said);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(daemon_suite());
}
