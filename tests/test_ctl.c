/*
 * test_ctl.c - `npusanctl list`, `findings`, `show` and `stats` as a user
 * types them, against a fake npusand: a thread on a Unix socket in a
 * temporary directory that reads one Query and answers with canned
 * FromDaemon frames (split as a test says), garbage, silence or an Error.
 * The output is checked exactly: table alignment, the JSON of
 * docs/findings.md (the same bytes `analyze --json` prints, plus
 * first_seen and last_seen), the text report of `analyze`.
 *
 * This file holds npusanctl without a daemon, its usage and --help, the
 * suite and main(); the other tests live in test_ctl_*.c by command
 * (ctl_helpers.h).
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ctl_helpers.h"
#include "npusan.pb-c.h"
#include "testutil.h"

/* ---- no daemon, usage, --help -------------------------------------------- */

static void assert_no_daemon_message(const char *err, const char *path)
{
	ck_assert_ptr_nonnull(strstr(err, "no daemon is listening on"));
	ck_assert_ptr_nonnull(strstr(err, path));
	ck_assert_ptr_nonnull(strstr(err, "npusand &"));
	ck_assert_ptr_nonnull(strstr(err, "systemctl start npusand"));
	/* one line */
	ck_assert_ptr_eq(strchr(err, '\n'), err + strlen(err) - 1);
}

START_TEST(ctl_no_daemon_says_how_to_start_one_and_exits_3)
{
	static const char *const cmds[][3] = {
		{ "list", NULL }, { "findings", NULL }, { "show", "1" },
		{ "stats", NULL }, { "findings", "--follow" },
	};
	char *dir = tu_tmpdir(), *path, *out, *err;

	ck_assert_int_gt(asprintf(&path, "%s/none.sock", dir), 0);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		ck_assert_int_eq(ctl(&out, &err, cmds[i][0], "--socket", path,
				     cmds[i][1], NULL),
				 3);
		ck_assert_str_eq(out, "");
		assert_no_daemon_message(err, path);
		free(out);
		free(err);
	}
	/* NPUSAN_SOCKET is where it looks without --socket. */
	setenv("NPUSAN_SOCKET", path, 1);
	ck_assert_int_eq(ctl(&out, &err, "stats", NULL), 3);
	assert_no_daemon_message(err, path);
	free(out);
	free(err);
	free(path);
	free(dir);
}
END_TEST

START_TEST(ctl_socket_without_listener_is_no_daemon)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char *dir = tu_tmpdir(), *out, *err;
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	/* bound, never listening: connect(2) says ECONNREFUSED */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/dead.sock", dir);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	setenv("NPUSAN_SOCKET", sa.sun_path, 1);
	ck_assert_int_eq(ctl(&out, &err, "list", NULL), 3);
	assert_no_daemon_message(err, sa.sun_path);
	close(fd);
	free(out);
	free(err);
	free(dir);
}
END_TEST

/* The global options may come before the command too, in both forms. */
START_TEST(ctl_global_options_before_the_command)
{
	struct fq *q = fq_new();
	char *opt, *out, *err;

	unsetenv("NPUSAN_SOCKET");
	fq_findings(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "--socket", q->path, "--timeout",
				"5", "findings", NULL),
			 0);
	ck_assert_str_eq(out, "No findings.\n");
	free(out);
	fq_free(q);

	q = fq_new();
	unsetenv("NPUSAN_SOCKET");
	ck_assert_int_gt(asprintf(&opt, "--socket=%s", q->path), 0);
	fq_findings(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, opt, "findings", "--json", NULL),
			 0);
	ck_assert_str_eq(out, "");
	free(out);
	free(opt);
	fq_free(q);

	ck_assert_int_eq(ctl(NULL, &err, "--socket", "/nonexistent", NULL), 2);
	ck_assert_ptr_nonnull(strstr(err, "a command must follow"));
	free(err);
}
END_TEST

START_TEST(ctl_live_daemon_is_not_reported_missing)
{
	/* The negative control of the two tests above. */
	struct fq *q = fq_new();
	struct cf a;
	struct cf *v[] = { &a };
	char *out, *err;

	cf_spec(&a, true);
	fq_findings(q, v, 1, true);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "findings", "--json", NULL), 1);
	ck_assert_str_eq(err, "");
	ck_assert_str_eq(out, SPEC_RACE_JSON SEEN_JSON);
	ck_assert_uint_eq(q->nconn, 1);
	ck_assert(q->peer_closed);
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_every_command_has_help_and_refuses_unknown_options)
{
	static const char *const cmds[] = { "list", "findings", "show",
					    "stats", "report" };
	struct fq *q = fq_new();
	char *out, *err, usage[64];

	fq_start(q);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		ck_assert_int_eq(ctl(&out, &err, cmds[i], "--help", NULL), 0);
		snprintf(usage, sizeof(usage), "Usage: npusanctl %s", cmds[i]);
		ck_assert_ptr_eq(strstr(out, usage), out);
		ck_assert_ptr_nonnull(strstr(out, "--socket PATH"));
		ck_assert_ptr_nonnull(strstr(out, "Exit status"));
		ck_assert_ptr_nonnull(strstr(out, "3 no daemon"));
		ck_assert_str_eq(err, "");
		free(out);
		free(err);
		ck_assert_int_eq(ctl(&out, &err, cmds[i], "-h", NULL), 0);
		ck_assert_ptr_eq(strstr(out, usage), out);
		free(out);
		free(err);

		ck_assert_int_eq(ctl(&out, &err, cmds[i], "--bogus", NULL), 2);
		ck_assert_str_eq(out, "");
		ck_assert_ptr_nonnull(strstr(err, "unknown option '--bogus'"));
		free(out);
		free(err);
		ck_assert_int_eq(ctl(&out, &err, cmds[i], "-x", NULL), 2);
		ck_assert_ptr_nonnull(strstr(err, "unknown option '-x'"));
		free(out);
		free(err);
		ck_assert_int_eq(ctl(&out, &err, cmds[i], "--timeout", "0",
				     NULL),
				 2);
		free(out);
		free(err);
	}
	ck_assert_int_eq(ctl(&out, NULL, "--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "findings"));
	ck_assert_ptr_nonnull(strstr(out, "3 no daemon"));
	free(out);
	fq_stop(q);
	/* Neither help nor a usage error talked to the daemon. */
	ck_assert_uint_eq(q->nconn, 0);
	fq_free(q);
}
END_TEST

START_TEST(ctl_bad_values_are_usage_errors)
{
	static const char *const bad[][3] = {
		{ "findings", "--since", "yesterday" },
		{ "findings", "--since", "10" },
		{ "findings", "--since", "2024-02-30T00:00:00Z" },
		{ "findings", "--since", "2024-05-01T25:00:00Z" },
		{ "findings", "--kind", "race" },
		{ "findings", "--pid", "0" },
		{ "findings", "--pid", "-1" },
		{ "findings", "--rank", "4294967296" },
		{ "findings", "--limit", "x" },
		{ "list", "--pid", "abc" },
		{ "show", "0", NULL },
		{ "show", "abc", NULL },
		{ "show", "1", "2" },
		{ "stats", "extra", NULL },
		{ "list", "--timeout", "-1" },
	};
	struct fq *q = fq_new();
	char *err;

	fq_start(q);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		ck_assert_msg(ctl(NULL, &err, bad[i][0], bad[i][1], bad[i][2],
				  NULL) == 2,
			      "%s %s %s", bad[i][0], bad[i][1], bad[i][2]);
		ck_assert_str_ne(err, "");
		free(err);
	}
	ck_assert_int_eq(ctl(NULL, &err, "show", NULL), 2);
	free(err);
	fq_stop(q);
	ck_assert_uint_eq(q->nconn, 0);
	fq_free(q);
}
END_TEST

/* --job and --pid are parsed once (cli/target.c): every command that takes
 * --pid refuses a bad one in the same words. */
START_TEST(ctl_pid_and_job_refused_alike)
{
	static const char *const cmds[] = { "list", "findings" };
	char *err, want[160];

	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		ck_assert_int_eq(ctl(NULL, &err, cmds[i], "--pid", "4294967296",
				     NULL),
				 2);
		snprintf(want, sizeof(want),
			 "npusanctl %s: --pid needs a process id, not "
			 "'4294967296'\nTry 'npusanctl %s --help'.\n",
			 cmds[i], cmds[i]);
		ck_assert_str_eq(err, want);
		free(err);
	}
	ck_assert_int_eq(ctl(NULL, &err, "run", "--job", "", "--", "true",
			     NULL),
			 2);
	ck_assert_str_eq(err, "npusanctl run: --job needs a name\n");
	free(err);
}
END_TEST

static Suite *ctl_suite(void)
{
	Suite *s = suite_create("ctl");
	TCase *tc = tcase_create("query");

	tcase_add_test(tc, ctl_no_daemon_says_how_to_start_one_and_exits_3);
	tcase_add_test(tc, ctl_socket_without_listener_is_no_daemon);
	tcase_add_test(tc, ctl_global_options_before_the_command);
	tcase_add_test(tc, ctl_live_daemon_is_not_reported_missing);
	tcase_add_test(tc, ctl_every_command_has_help_and_refuses_unknown_options);
	tcase_add_test(tc, ctl_bad_values_are_usage_errors);
	tcase_add_test(tc, ctl_pid_and_job_refused_alike);
	ctl_findings_add(tc);
	ctl_errors_add(tc);
	ctl_show_add(tc);
	ctl_list_add(tc);
	ctl_limits_add(tc);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(ctl_suite());
}
