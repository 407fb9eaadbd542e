/*
 * test_session_run.c - test_session's `npusanctl run` flows: its exit
 * statuses on jobs that fail, find something, are clean, blind or
 * incomplete; reused job names; a running daemon used; SIGTERM forwarded.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "session_helpers.h"
#include "testutil.h"

/* ---- npusanctl run ------------------------------------------------------- */

/* Traces without a job: under run, the job is run's. */
static const char race_trace[] =
	"npusan-trace 1\n"
	"process pid=1 rank=0\n"
	"stack id=1 frame=\"job.py:7 in step\"\n"
	"alloc ptr=0x1000 size=64 stream=0\n"
	"stream_create stream=1\n"
	"launch stream=0 op=produce write=0x1000+64 stack=1\n"
	"launch stream=1 op=consume read=0x1000+64 stack=1\n"
	"device_sync\n"
	"free ptr=0x1000\n";

static const char clean_trace[] =
	"npusan-trace 1\n"
	"process pid=1 rank=0\n"
	"alloc ptr=0x1000 size=64 stream=0\n"
	"stream_create stream=1\n"
	"launch stream=0 op=produce write=0x1000+64\n"
	"stream_wait stream=1 on=0\n"
	"launch stream=1 op=consume read=0x1000+64\n"
	"device_sync\n"
	"free ptr=0x1000\n";

/* run's private daemon is gone once run is (none was there before). */
static void no_daemon_left(const struct tu_daemon *d)
{
	ck_assert_msg(!tu_sock_answers(d->sock),
		      "the private daemon still answers");
}

/* Exit statuses: findings 1 (or --error-exitcode), clean 0, the command's
 * own failure, and a command that does not exist. */
START_TEST(session_run_exit_statuses)
{
	char *race = tu_write_file("race.trace", race_trace);
	char *clean = tu_write_file("clean.trace", clean_trace);
	char *rep = strdup(tu_bin("agent/npusan-replay")), *out, *err;
	struct tu_daemon d;

	tu_daemon_init(&d);
	ck_assert_int_eq(ctl(&out, &err, "run", "--job", "j1", "--", rep,
			     race, NULL), 1);
	ck_assert_msg(strstr(out, "possible data race") != NULL, "%s%s", out,
		      err);
	ck_assert_ptr_nonnull(strstr(out, "job.py:7 in step"));
	ck_assert_ptr_nonnull(strstr(out, "npusan: job j1: 1 finding (1 data "
					  "race) on rank 0; 1 rank"));
	free(out);
	free(err);
	no_daemon_left(&d);
	ck_assert_int_eq(ctl(&out, NULL, "run", "--error-exitcode", "9", "--",
			     rep, race, NULL), 9);
	free(out);
	ck_assert_int_eq(ctl(&out, NULL, "run", "--job", "j2", "--", rep,
			     clean, NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "npusan: job j2: clean; 1 rank"));
	free(out);
	/* The command's failure wins over the findings. */
	ck_assert_int_eq(ctl(&out, NULL, "run", "--", "/bin/sh", "-c",
			     "\"$0\" \"$1\"; exit 3", rep, race, NULL), 3);
	ck_assert_ptr_nonnull(strstr(out, "1 finding"));
	free(out);
	ck_assert_int_eq(ctl(NULL, &err, "run", "--", "/nonexistent/job",
			     NULL), 127);
	ck_assert_msg(strstr(err, "cannot run '/nonexistent/job'") != NULL,
		      "%s", err);
	free(err);
	ck_assert_int_eq(ctl(NULL, &err, "run", NULL), 2);
	free(err);
	no_daemon_left(&d);
	free(rep);
	free(race);
	free(clean);
	free(d.dir);
}
END_TEST

/*
 * A job npusan saw nothing of is no clean job (4), whether no process
 * registered or one did and sent nothing; a job with operations lost and
 * nothing found is not either (5), unless the user allows it.
 */
START_TEST(session_run_blind_or_incomplete_is_not_clean)
{
	static const char silent_trace[] = "npusan-trace 1\n"
					   "process pid=1 rank=0\n";
	static const char lossy_trace[] = "npusan-trace 1\n"
					  "process pid=1 rank=0\n"
					  "launch stream=0 op=a write=0x10+8\n"
					  "gap lost=12\n"
					  "launch stream=0 op=b write=0x10+8\n";
	char *silent = tu_write_file("silent.trace", silent_trace);
	char *lossy = tu_write_file("lossy.trace", lossy_trace);
	char *rep = strdup(tu_bin("agent/npusan-replay")), *out, *err;
	struct tu_daemon d;

	tu_daemon_init(&d);
	/* Nothing under the agent at all: a variable's typo, an adapter
	 * that turned off before its process did anything. */
	ck_assert_int_eq(ctl(&out, NULL, "run", "--job", "b1", "--", "/bin/true",
			     NULL), 4);
	ck_assert_msg(strstr(out, "npusan: job b1: nothing analysed: ") !=
			      NULL, "%s", out);
	ck_assert_ptr_null(strstr(out, "clean"));
	free(out);
	ck_assert_int_eq(ctl(&out, NULL, "run", "--job", "b2", "--", rep,
			     silent, NULL), 4);
	/* The replay and its child, the rank. */
	ck_assert_msg(strstr(out, "npusan: job b2: nothing analysed: 2 "
				  "processes registered") != NULL, "%s", out);
	free(out);
	/* The command's failure still wins. */
	ck_assert_int_eq(ctl(&out, NULL, "run", "--", "/bin/sh", "-c", "exit 7",
			     NULL), 7);
	free(out);
	ck_assert_int_eq(ctl(&out, &err, "run", "--job", "l1", "--", rep,
			     lossy, NULL), 5);
	ck_assert_msg(strstr(out, "npusan: job l1: no findings in what was "
				  "analysed; 1 rank, 2 operations, 12 lost") !=
			      NULL, "%s%s", out, err);
	free(out);
	free(err);
	ck_assert_int_eq(ctl(&out, NULL, "run", "--allow-incomplete", "--job",
			     "l2", "--", rep, lossy, NULL), 0);
	free(out);
	no_daemon_left(&d);
	free(rep);
	free(silent);
	free(lossy);
	free(d.dir);
}
END_TEST

/*
 * Two runs under one job name: each run's verdict is its own, and report
 * speaks of the latest unless asked for another run (--run) or all.
 */
START_TEST(session_run_reusing_a_job_name_is_a_run_of_its_own)
{
	char *race = tu_write_file("race.trace", race_trace);
	char *clean = tu_write_file("clean.trace", clean_trace);
	char *rep = strdup(tu_bin("agent/npusan-replay")), *out, *err;
	char junit[PATH_MAX];
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	setenv("NPUSAN_RUN", "ci-1", 1);
	ck_assert_int_eq(ctl(&out, NULL, "run", "--job", "nightly", "--", rep,
			     race, NULL), 1);
	unsetenv("NPUSAN_RUN");
	free(out);
	ck_assert_int_eq(ctl(&out, NULL, "run", "--job", "nightly", "--", rep,
			     clean, NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "npusan: job nightly: clean;"));
	free(out);
	/* Yesterday's finding is not today's. */
	snprintf(junit, sizeof(junit), "%s/nightly.xml", d.dir);
	ck_assert_int_eq(ctl(&out, &err, "report", "--job", "nightly",
			     "--junit", junit, NULL), 0);
	ck_assert_msg(strstr(out, "(of 2 runs under this name") != NULL &&
			      strstr(out, "npusan: job nightly: clean;") != NULL,
		      "%s%s", out, err);
	free(out);
	free(err);
	ck_assert_int_eq(ctl(&out, NULL, "report", "--job", "nightly", "--run",
			     "ci-1", "--json", NULL), 1);
	ck_assert_ptr_nonnull(strstr(out, "{\"job\":\"nightly\",\"run\":"
					  "\"ci-1\",\"runs\":2,"));
	ck_assert_ptr_nonnull(strstr(out, "\"findings\":1,"));
	free(out);
	ck_assert_int_eq(ctl(&out, NULL, "report", "--job", "nightly", "--all",
			     NULL), 1);
	free(out);
	ck_assert_int_eq(ctl(NULL, &err, "report", "--job", "nightly", "--run",
			     "ci-0", NULL), 2);
	ck_assert_ptr_nonnull(strstr(err, "ran as run 'ci-0'"));
	free(err);
	tu_daemon_stop(&d, SIGTERM);
	free(rep);
	free(race);
	free(clean);
	free(d.dir);
}
END_TEST

/* A launcher that exits at once, leaving its rank running: run waits for
 * the rank, and --json prints exactly analyze's findings. */
START_TEST(session_run_waits_for_what_the_command_leaves)
{
	static const char *const varying[] = { "id", "pid", "job",
					       "first_seen", "last_seen",
					       NULL };
	char *race = tu_write_file("race.trace", race_trace);
	char *rep = strdup(tu_bin("agent/npusan-replay"));
	char *out, *err, *want, *a, *b;
	struct tu_daemon d;

	tu_daemon_init(&d);
	/* The rank starts after the launcher exited, and after a sleep that
	 * is no process of the job's (its agent is off): only waiting for
	 * every descendant, not only for those the daemon knows, finds it. */
	ck_assert_int_eq(ctl(&out, &err, "run", "--json", "--", "/bin/sh",
			     "-c",
			     "(NPUSAN=0 sleep 0.5; exec \"$0\" \"$1\") & exit 0",
			     rep, race, NULL), 1);
	ck_assert_ptr_nonnull(strstr(err, "1 finding"));
	ck_assert_int_eq(ctl(&want, NULL, "analyze", "--json", race, NULL), 1);
	a = tu_json_lines(out, "\"kind\"", varying);
	b = tu_json_lines(want, "\"kind\"", varying);
	ck_assert_str_eq(a, b);
	ck_assert_uint_eq(tu_count_lines(out, "\"first_seen\""), 1);
	no_daemon_left(&d);
	free(a);
	free(b);
	free(want);
	free(out);
	free(err);
	free(rep);
	free(race);
	free(d.dir);
}
END_TEST

/* With a daemon already there, run uses it and leaves it running. */
START_TEST(session_run_uses_a_running_daemon)
{
	char *race = tu_write_file("race.trace", race_trace);
	char *rep = strdup(tu_bin("agent/npusan-replay")), *out;
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	ck_assert_int_eq(ctl(&out, NULL, "run", "--job", "shared", "--", rep,
			     race, NULL), 1);
	free(out);
	ck_assert(tu_sock_answers(d.sock));
	ck_assert_int_eq(ctl(&out, NULL, "findings", "--json", "--job",
			     "shared", NULL), 1);
	ck_assert_uint_eq(tu_count_lines(out, "\"kind\""), 1);
	tu_daemon_stop(&d, SIGTERM);
	free(out);
	free(rep);
	free(race);
	free(d.dir);
}
END_TEST

/* The first child of `pid`, once it has one; 0 if none came. */
static pid_t first_child(pid_t pid)
{
	char path[96];
	int child = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid,
		 (int)pid);
	for (int i = 0; i < 1000 && child == 0; i++) {
		FILE *f = fopen(path, "r");

		if (f != NULL) {
			if (fscanf(f, "%d", &child) != 1)
				child = 0;
			fclose(f);
		}
		if (child == 0)
			tu_nap_ms(10);
	}
	return (pid_t)child;
}

/* Whether npusanctl, exec'd as `pid`, has a handler for `sig` (SigCgt of
 * /proc/PID/status: before the exec it is the test's own). */
static bool ctl_catches(pid_t pid, int sig)
{
	char path[64], line[256], name[32] = "";
	unsigned long long mask = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return false;
	while (fgets(line, sizeof(line), f) != NULL) {
		sscanf(line, "Name: %31s", name);
		if (sscanf(line, "SigCgt: %llx", &mask) == 1)
			break;
	}
	fclose(f);
	return strcmp(name, "npusanctl") == 0 && ((mask >> (sig - 1)) & 1);
}

/* Starts `run -- CMD` with stdout to /dev/null; its pid. */
static pid_t start_run(const char *const *cmd)
{
	char *bin = strdup(tu_bin("npusanctl"));
	const char *argv[8] = { bin, "run", "--" };
	pid_t pid;

	for (int i = 0; cmd[i] != NULL; i++) {
		ck_assert_int_lt(i, 4);
		argv[3 + i] = cmd[i];
	}
	pid = spawn_quiet(argv);
	free(bin);
	return pid;
}

/* Whether `pid` exited within `ms`; its wait status into *status. */
static bool reaped_within(pid_t pid, int ms, int *status)
{
	for (int i = 0; i < ms / 10; i++) {
		pid_t w = waitpid(pid, status, WNOHANG);

		ck_assert_int_ge(w, 0);
		if (w == pid)
			return true;
		tu_nap_ms(10);
	}
	return false;
}

/* run's wait status, failing when it has not exited within 30 s. A run
 * that missed the signal gets another, so that it stops its daemon and
 * CMD rather than leave them holding the test's output. */
static int reap_within_30s(pid_t pid)
{
	int status;

	if (reaped_within(pid, 30000, &status))
		return status;
	kill(pid, SIGTERM);
	if (!reaped_within(pid, 10000, &status)) {
		kill(pid, SIGKILL);
		reap(pid);
	}
	ck_abort_msg("run did not end within 30 s of SIGTERM");
	return -1;
}

/* SIGTERM sent to run the moment CMD exists reaches CMD; run reports. */
START_TEST(session_run_forwards_sigterm)
{
	static const char *const cmd[] = { "/bin/sleep", "60", NULL };
	struct tu_daemon d;
	pid_t run;
	int status;

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	run = start_run(cmd);
	ck_assert_int_gt(first_child(run), 0);
	ck_assert_int_eq(kill(run, SIGTERM), 0);
	status = reap_within_30s(run);
	ck_assert_msg(WIFEXITED(status), "run was killed by signal %d",
		      WTERMSIG(status));
	ck_assert_int_eq(WEXITSTATUS(status), 128 + SIGTERM);
	tu_daemon_stop(&d, SIGTERM);
	free(d.dir);
}
END_TEST

/* SIGTERM while run's private daemon starts: run ends 143 without leaving
 * the daemon behind, and without leaving CMD to run on. */
START_TEST(session_run_sigterm_while_its_daemon_starts)
{
	char *marker = tu_write_file("ran", "");
	const char *const cmd[] = { "/bin/sh", "-c", "rm \"$0\"; exec sleep 60",
				    marker, NULL };
	struct tu_daemon d;
	pid_t run;
	int status;

	tu_daemon_init(&d);
	run = start_run(cmd);
	for (int i = 0; i < 100000 && !ctl_catches(run, SIGTERM); i++)
		sched_yield();
	ck_assert(ctl_catches(run, SIGTERM));
	ck_assert_int_eq(kill(run, SIGTERM), 0);
	status = reap_within_30s(run);
	ck_assert_msg(WIFEXITED(status), "run was killed by signal %d",
		      WTERMSIG(status));
	ck_assert_int_eq(WEXITSTATUS(status), 128 + SIGTERM);
	no_daemon_left(&d);
	ck_assert_msg(access(marker, F_OK) == 0, "CMD was started");
	free(marker);
	free(d.dir);
}
END_TEST

/* The entries of directory `dir`, not counting . and .. */
static unsigned entries(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	unsigned n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* The whole of file `path` (caller frees). */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = NULL;
	size_t len = 0;
	FILE *m;
	int c;

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	m = open_memstream(&buf, &len);
	ck_assert_ptr_nonnull(m);
	while ((c = fgetc(f)) != EOF)
		fputc(c, m);
	fclose(f);
	fclose(m);
	return buf;
}

/*
 * --output: the report (JSON or text) goes to the file, the job's own
 * output stays on standard output, the exit status is as ever; a file
 * that cannot be made is a usage error before the job starts.
 */
START_TEST(session_run_output_keeps_the_jobs_own_output_apart)
{
	char *race = tu_write_file("race.trace", race_trace), *dir = tu_tmpdir();
	char *rep = strdup(tu_bin("agent/npusan-replay")), *out, *err, *rpt;
	char tmpl[512], file[512], mark[512], *pidp;
	struct tu_daemon d;

	tu_daemon_init(&d);
	setenv("NPUSAN_TEST_TAG", "o1", 1);
	snprintf(tmpl, sizeof(tmpl), "%s/run-%%q{NPUSAN_TEST_TAG}-%%p.jsonl",
		 dir);
	ck_assert_int_eq(ctl(&out, &err, "run", "--json", "--output", tmpl,
			     "--job", "o1", "--", "/bin/sh", "-c",
			     "echo job-says-hi; exec \"$0\" \"$1\"", rep, race,
			     NULL),
			 1);
	ck_assert_str_eq(out, "job-says-hi\n");
	ck_assert_msg(strstr(err, "npusan: job o1: 1 finding") != NULL, "%s",
		      err);
	free(out);
	free(err);
	ck_assert_uint_eq(entries(dir), 1);
	{
		DIR *dd = opendir(dir);
		struct dirent *e;

		while ((e = readdir(dd)) != NULL && e->d_name[0] == '.')
			;
		ck_assert_ptr_nonnull(e);
		ck_assert_msg(strncmp(e->d_name, "run-o1-", 7) == 0, "%s",
			      e->d_name);
		pidp = e->d_name + 7;
		ck_assert(*pidp >= '1' && *pidp <= '9');
		ck_assert_ptr_nonnull(strstr(pidp, ".jsonl"));
		snprintf(file, sizeof(file), "%s/%s", dir, e->d_name);
		closedir(dd);
	}
	rpt = slurp(file);
	ck_assert_uint_eq(tu_count_lines(rpt, ""), 1);
	ck_assert_uint_eq(tu_count_lines(rpt, "{\"id\":"), 1);
	ck_assert_ptr_nonnull(strstr(rpt, "\"kind\":\"data_race\""));
	free(rpt);
	/* Text: the verdict line goes with the report. */
	snprintf(file, sizeof(file), "%s/report.txt", dir);
	ck_assert_int_eq(ctl(&out, NULL, "run", "--output", file, "--job",
			     "o2", "--", "/bin/sh", "-c",
			     "echo job-says-hi; exec \"$0\" \"$1\"", rep, race,
			     NULL),
			 1);
	ck_assert_str_eq(out, "job-says-hi\n");
	rpt = slurp(file);
	ck_assert_ptr_nonnull(strstr(rpt, "possible data race"));
	ck_assert_ptr_nonnull(strstr(rpt, "npusan: job o2: 1 finding"));
	free(rpt);
	free(out);
	/* Cannot be made: exit 2, and the job never ran. */
	snprintf(mark, sizeof(mark), "%s/ran", dir);
	snprintf(file, sizeof(file), "%s/no/such/dir", dir);
	ck_assert_int_eq(ctl(&out, &err, "run", "--output", file, "--",
			     "/bin/touch", mark, NULL),
			 2);
	ck_assert_msg(strstr(err, "cannot open --output file") != NULL, "%s",
		      err);
	ck_assert_int_eq(access(mark, F_OK), -1);
	free(out);
	free(err);
	ck_assert_int_eq(ctl(&out, &err, "run", "--output", "x-%y", "--",
			     "/bin/touch", mark, NULL),
			 2);
	ck_assert_ptr_nonnull(strstr(err, "--output: unknown '%y'"));
	ck_assert_int_eq(access(mark, F_OK), -1);
	free(out);
	free(err);
	no_daemon_left(&d);
	free(rep);
	free(race);
	free(dir);
	free(d.dir);
}
END_TEST

/*
 * --print-limit hides findings but not the verdict nor the exit status;
 * --op/--exclude-op leave findings out of both, say so on stderr, and a
 * run that lost operations is still no clean run.
 */
START_TEST(session_run_print_limit_and_op_filters)
{
	static const char lossy_race[] =
		"npusan-trace 1\n"
		"process pid=1 rank=0\n"
		"alloc ptr=0x1000 size=64 stream=0\n"
		"stream_create stream=1\n"
		"launch stream=0 op=produce write=0x1000+64\n"
		"launch stream=1 op=consume read=0x1000+64\n"
		"gap lost=3\n"
		"device_sync\n"
		"free ptr=0x1000\n";
	char *race = tu_write_file("race.trace", race_trace);
	char *lossy = tu_write_file("lossy.trace", lossy_race);
	char *rep = strdup(tu_bin("agent/npusan-replay")), *out, *err;
	struct tu_daemon d;

	tu_daemon_init(&d);
	ck_assert_int_eq(ctl(&out, &err, "run", "--print-limit", "0", "--job",
			     "p1", "--", rep, race, NULL),
			 1);
	ck_assert_ptr_null(strstr(out, "possible data race"));
	ck_assert_ptr_nonnull(strstr(out, "npusan: job p1: 1 finding"));
	ck_assert_msg(strstr(err, "npusanctl: 1 more finding not printed "
				  "(--print-limit 0)\n") != NULL, "%s", err);
	free(out);
	free(err);
	ck_assert_int_eq(ctl(&out, &err, "run", "--op", "cons*", "--job", "p2",
			     "--", rep, race, NULL),
			 1);
	ck_assert_ptr_nonnull(strstr(out, "possible data race"));
	ck_assert_ptr_null(strstr(err, "filtered out"));
	free(out);
	free(err);
	ck_assert_int_eq(ctl(&out, &err, "run", "--exclude-op", "produce",
			     "--job", "p3", "--", rep, race, NULL),
			 0);
	ck_assert_ptr_null(strstr(out, "possible data race"));
	ck_assert_msg(strstr(err, "npusanctl: 1 finding filtered out by "
				  "--op/--exclude-op\n") != NULL, "%s", err);
	free(out);
	free(err);
	ck_assert_int_eq(ctl(&out, &err, "run", "--exclude-op", "produce",
			     "--job", "p4", "--", rep, lossy, NULL),
			 5);
	ck_assert_ptr_nonnull(strstr(err, "1 finding filtered out"));
	free(out);
	free(err);
	no_daemon_left(&d);
	free(rep);
	free(race);
	free(lossy);
	free(d.dir);
}
END_TEST

void test_session_run_add(TCase *run)
{
	tcase_set_timeout(run, 120);
	tcase_add_test(run, session_run_exit_statuses);
	tcase_add_test(run, session_run_blind_or_incomplete_is_not_clean);
	tcase_add_test(run, session_run_reusing_a_job_name_is_a_run_of_its_own);
	tcase_add_test(run, session_run_waits_for_what_the_command_leaves);
	tcase_add_test(run, session_run_uses_a_running_daemon);
	tcase_add_test(run, session_run_forwards_sigterm);
	tcase_add_test(run, session_run_sigterm_while_its_daemon_starts);
	tcase_add_test(run, session_run_output_keeps_the_jobs_own_output_apart);
	tcase_add_test(run, session_run_print_limit_and_op_filters);
}
