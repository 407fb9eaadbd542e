/*
 * test_suppress_run.c - suppressions as a user meets them: npusanctl
 * analyze and npusanctl report with --suppressions, the entries
 * --gen-suppressions and `suppress ID` print, and npusand --suppressions
 * storing, listing and counting what it suppressed.
 *
 * examples/demo.trace holds one data race (hccl::all_reduce after
 * aten::mm, under step()) and one missing record_stream (aten::_to_copy
 * in log_loss()).
 */
#include <check.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

#define DEMO NPUSAN_SOURCE_DIR "/examples/demo.trace"

static const char race_supp[] = "# the all-reduce race is known\n"
				"{\n"
				"   name: grads\n"
				"   kind: data_race\n"
				"   frame: ...\n"
				"   frame: train.py:* in step\n"
				"}\n"
				"{\n"
				"   name: never\n"
				"   kind: unjoined_capture\n"
				"}\n";

static const char mrs_supp[] = "{\n"
			       "   name: loss-copy\n"
			       "   kind: missing_record_stream\n"
			       "   module: metrics.py\n"
			       "}\n";

/* `npusanctl ARGS...` (NULL-terminated, at most 10); its status. */
static int ctl(char **out, char **err, const char *const *args)
{
	const char *argv[12] = { tu_bin("npusanctl") };

	for (int i = 0; args[i] != NULL && i < 10; i++)
		argv[i + 1] = args[i];
	return tu_run(argv, NULL, out, err);
}

static void has(const char *text, const char *want)
{
	ck_assert_msg(text != NULL && strstr(text, want) != NULL,
		      "'%s' lacks '%s'", text ? text : "(null)", want);
}

static void lacks(const char *text, const char *bad)
{
	ck_assert_msg(text == NULL || strstr(text, bad) == NULL,
		      "'%s' has '%s'", text, bad);
}

/* ---- npusanctl analyze ---------------------------------------------------- */

START_TEST(analyze_suppressed_finding_is_not_printed_nor_counted)
{
	char *file = tu_write_file("race.supp", race_supp);
	const char *args[] = { "analyze", "--suppressions", file, DEMO, NULL };
	char *out, *err;

	/* the missing record_stream is left: still exit status 1 */
	ck_assert_int_eq(ctl(&out, &err, args), 1);
	lacks(out, "possible data race");
	has(out, "missing record_stream on memory");
	has(err, "npusanctl: 1 finding suppressed\n");
	has(err, "npusanctl:   1 by 'grads' (line 2)\n");
	has(err, "npusanctl:   suppression 'never' (line 8) matched nothing\n");
	free(out);
	free(err);
	free(file);
}
END_TEST

START_TEST(analyze_all_suppressed_exits_clean)
{
	char *text = malloc(sizeof(race_supp) + sizeof(mrs_supp));
	char *file, *out, *err;

	strcpy(text, race_supp);
	strcat(text, mrs_supp);
	file = tu_write_file("all.supp", text);
	{
		const char *args[] = { "analyze", "--json", "--suppressions",
				       file, DEMO, NULL };

		ck_assert_int_eq(ctl(&out, &err, args), 0);
	}
	ck_assert_str_eq(out, "");
	has(err, "npusanctl: 2 findings suppressed\n");
	has(err, "1 by 'loss-copy' (line 12)");
	free(out);
	free(err);
	free(file);
	free(text);
}
END_TEST

START_TEST(analyze_takes_npusan_suppressions_from_the_environment)
{
	char *file = tu_write_file("race.supp", race_supp);
	const char *args[] = { "analyze", DEMO, NULL };
	char *out, *err;

	setenv("NPUSAN_SUPPRESSIONS", file, 1);
	ck_assert_int_eq(ctl(&out, &err, args), 1);
	lacks(out, "possible data race");
	has(err, "1 by 'grads'");
	free(out);
	free(err);
	/* empty: none */
	setenv("NPUSAN_SUPPRESSIONS", "", 1);
	ck_assert_int_eq(ctl(&out, &err, args), 1);
	has(out, "possible data race");
	lacks(err, "suppressed");
	unsetenv("NPUSAN_SUPPRESSIONS");
	free(out);
	free(err);
	free(file);
}
END_TEST

START_TEST(analyze_bad_suppressions_file_names_line)
{
	char *file = tu_write_file("bad.supp", "{\n kind: data_race\n"
					       " stack: x\n}\n");
	const char *args[] = { "analyze", "--suppressions", file, DEMO, NULL };
	const char *none[] = { "analyze", "--suppressions",
			       "/nonexistent/x.supp", DEMO, NULL };
	char *out, *err, want[PATH_MAX + 64];

	ck_assert_int_eq(ctl(&out, &err, args), 2);
	ck_assert_str_eq(out, "");
	snprintf(want, sizeof(want),
		 "npusanctl analyze: %s:3: unknown key 'stack'", file);
	has(err, want);
	free(out);
	free(err);
	ck_assert_int_eq(ctl(&out, &err, none), 2);
	has(err, "/nonexistent/x.supp: No such file or directory");
	free(out);
	free(err);
	free(file);
}
END_TEST

/* What --gen-suppressions prints, pasted into a file, suppresses exactly
 * the findings it was printed for. */
START_TEST(analyze_gen_suppressions_round_trips)
{
	const char *args[] = { "analyze", "--json", "--gen-suppressions", DEMO,
			       NULL };
	char *out, *err, *file;

	ck_assert_int_eq(ctl(&out, &err, args), 1);
	/* standard output stays JSON Lines: the entries go to stderr */
	ck_assert_uint_eq(tu_count_lines(out, "{\"id\""), 2);
	lacks(out, "frame:");
	has(err, "   kind: data_race\n   op: hccl::all_reduce\n"
		 "   frame: dist.py:17 in all_reduce_grads\n");
	file = tu_write_file("gen.supp", err);
	free(out);
	free(err);
	{
		const char *again[] = { "analyze", "--suppressions", file,
					DEMO, NULL };

		ck_assert_int_eq(ctl(&out, &err, again), 0);
	}
	has(err, "npusanctl: 2 findings suppressed\n");
	has(err, "1 by 'data_race-1'");
	has(err, "1 by 'missing_record_stream-2'");
	free(out);
	free(err);
	free(file);
}
END_TEST

/* ---- npusand --suppressions ----------------------------------------------- */

/* Polls `npusanctl list --json --job demo` until the daemon has stored
 * both of demo.trace's findings, suppressed or not; its output. */
static char *wait_stored(void)
{
	const char *args[] = { "list", "--json", "--job", "demo", NULL };
	char *out = NULL;

	for (int i = 0; i < 200; i++) {
		free(out);
		out = NULL;
		ctl(&out, NULL, args);
		if (out != NULL && strstr(out, "\"findings\":2,") != NULL)
			break;
		tu_nap_ms(20);
	}
	return out;
}

/* The daemon stores the suppressed finding, marked: findings leaves it
 * out, list and report count it apart, the metrics count it, and the
 * exit status of report does not see it. */
START_TEST(daemon_stores_and_counts_suppressed_findings)
{
	char *file = tu_write_file("race.supp", race_supp);
	char *dir = tu_tmpdir(), prom[PATH_MAX];
	const char *extra[] = { "--suppressions", file, "--metrics-textfile",
				prom, NULL };
	char *rbin = strdup(tu_bin("agent/npusan-replay"));
	const char *replay[] = { rbin, DEMO, NULL };
	const char *fnd[] = { "findings", "--json", "--job", "demo", NULL };
	const char *rep[] = { "report", "--job", "demo", "--json", NULL };
	char *out, *err;
	struct tu_daemon d;

	snprintf(prom, sizeof(prom), "%s/npusan.prom", dir);
	tu_daemon_init(&d);
	tu_daemon_start(&d, extra);
	ck_assert_int_eq(tu_run(replay, NULL, NULL, NULL), 0);
	out = wait_stored();
	has(out, "\"findings\":2,\"suppressed\":1,");
	free(out);
	ck_assert_int_eq(ctl(&out, &err, fnd), 1);
	ck_assert_uint_eq(tu_count_lines(out, "\"kind\""), 1);
	has(out, "\"missing_record_stream\"");
	has(err, "1 finding suppressed by npusand's suppressions");
	free(out);
	free(err);
	/* report: one finding left, so 1; the race counted apart */
	ck_assert_int_eq(ctl(&out, &err, rep), 1);
	has(out, "\"findings\":1,\"suppressed\":1,");
	has(out, "(1 suppressed)");
	has(err, "1 finding suppressed by npusand's suppressions\n"
		 "npusanctl:   1 by 'grads'\n");
	free(out);
	free(err);
	/* show still shows it, saying so */
	{
		const char *show1[] = { "show", "1", NULL };
		const char *show2[] = { "show", "2", NULL };
		char *o1, *o2;

		ck_assert_int_eq(ctl(&o1, NULL, show1), 0);
		ck_assert_int_eq(ctl(&o2, NULL, show2), 0);
		ck_assert_uint_eq(tu_count_lines(o1, "Suppressed by npusand's "
						     "suppression 'grads'") +
					  tu_count_lines(o2, "Suppressed by"),
				  1);
		has(strstr(o1, "Suppressed") ? o1 : o2, "possible data race");
		free(o1);
		free(o2);
	}

	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	free(d.dir);
	{
		FILE *f = fopen(prom, "r");
		char line[512];
		bool seen = false;

		ck_assert_ptr_nonnull(f);
		while (fgets(line, sizeof(line), f) != NULL)
			seen = seen ||
			       strcmp(line, "npusan_findings_suppressed_total"
					    "{kind=\"data_race\"} 1\n") == 0;
		fclose(f);
		ck_assert(seen);
	}
	free(rbin);
	free(dir);
	free(file);
}
END_TEST

/* `suppress ID` prints an entry that suppresses finding ID, and report
 * with it is clean: suppressed findings never make the status 1. */
START_TEST(daemon_suppress_id_entry_makes_report_clean)
{
	char *rbin = strdup(tu_bin("agent/npusan-replay"));
	const char *replay[] = { rbin, DEMO, NULL };
	char *out, *err, *file, arg[32];
	struct tu_daemon d;
	const char *sup[] = { "suppress", arg, NULL };
	const char *bad[] = { "suppress", "99", NULL };

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	ck_assert_int_eq(tu_run(replay, NULL, NULL, NULL), 0);
	free(wait_stored());
	file = NULL;
	for (int id = 1; id <= 2; id++) {
		char *entry, *all;

		snprintf(arg, sizeof(arg), "%d", id);
		ck_assert_int_eq(ctl(&entry, NULL, sup), 0);
		has(entry, "{\n   name: ");
		if (asprintf(&all, "%s%s", file ? file : "", entry) < 0)
			ck_abort();
		free(file);
		free(entry);
		file = all;
	}
	ck_assert_int_eq(ctl(&out, &err, bad), 2);
	free(out);
	free(err);
	{
		char *path = tu_write_file("ids.supp", file);
		const char *rep[] = { "report", "--job", "demo",
				      "--suppressions", path, NULL };

		ck_assert_int_eq(ctl(&out, &err, rep), 0);
		has(out, "clean (2 suppressed)");
		has(err, "npusanctl: 2 findings suppressed\n");
		free(out);
		free(err);
		free(path);
	}
	ck_assert_int_eq(tu_daemon_stop(&d, SIGTERM), 0);
	free(d.dir);
	free(file);
	free(rbin);
}
END_TEST

START_TEST(daemon_refuses_bad_suppressions_file)
{
	char *file = tu_write_file("bad.supp", "{\n kind: data_race\n"
					       " op: [oops\n}\n");
	struct tu_daemon d;
	char *bin = strdup(tu_bin("daemon/npusand"));
	const char *argv[] = { bin, "--suppressions", file, NULL, NULL };
	char *sock, *err, want[PATH_MAX + 64];
	int st;

	tu_daemon_init(&d);
	if (asprintf(&sock, "--socket=%s", d.sock) < 0)
		ck_abort();
	argv[3] = sock;
	st = tu_run(argv, NULL, NULL, &err);
	ck_assert_int_eq(st, 2);
	snprintf(want, sizeof(want), "--suppressions: %s:3: bad pattern", file);
	has(err, want);
	free(err);
	free(sock);
	free(bin);
	free(d.dir);
	free(file);
}
END_TEST

static Suite *suppress_run_suite(void)
{
	Suite *s = suite_create("suppress_run");
	TCase *cli = tcase_create("cli");
	TCase *daemon = tcase_create("daemon");

	tcase_add_test(cli, analyze_suppressed_finding_is_not_printed_nor_counted);
	tcase_add_test(cli, analyze_all_suppressed_exits_clean);
	tcase_add_test(cli, analyze_takes_npusan_suppressions_from_the_environment);
	tcase_add_test(cli, analyze_bad_suppressions_file_names_line);
	tcase_add_test(cli, analyze_gen_suppressions_round_trips);
	suite_add_tcase(s, cli);
	tcase_add_test(daemon, daemon_stores_and_counts_suppressed_findings);
	tcase_add_test(daemon, daemon_suppress_id_entry_makes_report_clean);
	tcase_add_test(daemon, daemon_refuses_bad_suppressions_file);
	suite_add_tcase(s, daemon);
	return s;
}

int main(void)
{
	return tu_main(suppress_run_suite());
}
