/*
 * test_session_run_daemon.c - test_session's `npusanctl run` flows around
 * its daemon and its command: no daemon to start, one that fails to start,
 * one that goes away under the job, a private one other jobs come to use;
 * a command that is killed, cannot be executed, or is named badly.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
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

static const char race_trace[] =
	"npusan-trace 1\n"
	"process pid=1 rank=0\n"
	"alloc ptr=0x1000 size=64 stream=0\n"
	"stream_create stream=1\n"
	"launch stream=0 op=produce write=0x1000+64\n"
	"launch stream=1 op=consume read=0x1000+64\n"
	"device_sync\n"
	"free ptr=0x1000\n";

/* Copies file `from` to `to` with `mode`. */
static void copy_file(const char *from, const char *to, mode_t mode)
{
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	char buf[65536];
	ssize_t n;

	ck_assert_int_ge(in, 0);
	ck_assert_int_ge(out, 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		ck_assert_int_eq(write(out, buf, (size_t)n), n);
	ck_assert_int_eq(n, 0);
	close(in);
	ck_assert_int_eq(close(out), 0);
}

/* Writes the shell script `text` to `path`, executable. */
static void write_script(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(path, 0755), 0);
}

/* The whole of file `path` (caller frees). */
static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf = calloc(1, 1 << 16);
	size_t n;

	ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
	ck_assert_ptr_nonnull(buf);
	n = fread(buf, 1, (1 << 16) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* `bin`'s `run ARGS... NULL`: the exit status, stdout and stderr. */
static int run_as(const char *bin, char **out, char **err, ...)
{
	const char *argv[16] = { bin, "run" };
	size_t n = 2;
	va_list ap;

	va_start(ap, err);
	while ((argv[n] = va_arg(ap, const char *)) != NULL)
		ck_assert_uint_lt(++n, 15);
	va_end(ap);
	return tu_run(argv, NULL, out, err);
}

/*
 * An npusanctl installed without the rest: it says where it looked for
 * the agent and for a daemon to start, and exits 2 and 3 without running
 * the command; a daemon that exits as it starts is said to, with its own
 * message, and is 3 too.
 */
START_TEST(session_run_without_a_daemon_to_start)
{
	char *dir = tu_tmpdir(), bin[512], npusand[512], marker[512];
	char lib[512], report[512], *out, *err;
	struct tu_daemon d;
	struct stat st;

	tu_daemon_init(&d);
	snprintf(report, sizeof(report), "%s/report.txt", dir);
	snprintf(bin, sizeof(bin), "%s/npusanctl", dir);
	snprintf(npusand, sizeof(npusand), "%s/npusand", dir);
	snprintf(marker, sizeof(marker), "%s/ran", dir);
	snprintf(lib, sizeof(lib), "%s", tu_bin("agent/libnpusan.so"));
	copy_file(tu_bin("npusanctl"), bin, 0755);
	unsetenv("NPUSAN_LIBRARY");
	ck_assert_int_eq(run_as(bin, &out, &err, "--output", report, "--",
				"/bin/touch", marker, NULL), 2);
	ck_assert_msg(strstr(err, "cannot find the agent library (looked "
				  "for ") != NULL && strstr(err, "NPUSAN_LIBRARY=") !=
			      NULL, "%s", err);
	free(out);
	free(err);
	setenv("NPUSAN_LIBRARY", "libnpusan.so", 1);
	ck_assert_int_eq(run_as(bin, NULL, &err, "--", "/bin/touch", marker,
				NULL), 2);
	ck_assert_msg(strstr(err, "looked for libnpusan.so)") != NULL, "%s",
		      err);
	free(err);
	setenv("NPUSAN_LIBRARY", lib, 1);
	ck_assert_int_eq(run_as(bin, NULL, &err, "--output", report, "--",
				"/bin/touch", marker, NULL), 3);
	ck_assert_msg(strstr(err, "no daemon answers on ") != NULL &&
			      strstr(err, "there is no npusand to start (looked "
					  "for ") != NULL &&
			      strstr(err, npusand) != NULL, "%s", err);
	/* No verdict: no empty report left to pass for a clean one. */
	ck_assert_msg(access(report, F_OK) < 0 &&
			      strstr(err, "removed the --output file") != NULL,
		      "%s", err);
	free(err);
	/* A device given as the file is left alone. */
	ck_assert_int_eq(run_as(bin, NULL, &err, "--output", "/dev/null",
				"--", "/bin/touch", marker, NULL), 3);
	ck_assert(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
	ck_assert_ptr_null(strstr(err, "removed the --output file"));
	free(err);
	/* One that cannot be executed at all. */
	write_script(npusand, "not a program\n");
	ck_assert_int_eq(run_as(bin, NULL, &err, "--", "/bin/touch", marker,
				NULL), 3);
	ck_assert_msg(strstr(err, "cannot run ") != NULL &&
			      strstr(err, strerror(ENOEXEC)) != NULL &&
			      strstr(err, ": it exited") != NULL, "%s", err);
	free(err);
	write_script(npusand, "#!/bin/sh\n"
			      "echo 'npusand: fails as it starts' >&2\n"
			      "exit 1\n");
	ck_assert_int_eq(run_as(bin, NULL, &err, "--", "/bin/touch", marker,
				NULL), 3);
	ck_assert_msg(strstr(err, "npusand: fails as it starts") != NULL &&
			      strstr(err, "cannot start a daemon on ") != NULL &&
			      strstr(err, ": it exited") != NULL, "%s", err);
	free(err);
	ck_assert_msg(access(marker, F_OK) < 0, "the command ran");
	unsetenv("NPUSAN_LIBRARY");
	free(dir);
	free(d.dir);
}
END_TEST

/*
 * A daemon that never says it is ready (READY=1) is given 15 s, then
 * stopped rather than left behind; run exits 3 without running the
 * command.
 */
START_TEST(session_run_daemon_that_never_gets_ready)
{
	char *dir = tu_tmpdir(), bin[512], npusand[512], marker[512];
	char pidfile[512], script[1200], *err, *pid, state;
	struct tu_daemon d;

	tu_daemon_init(&d);
	snprintf(bin, sizeof(bin), "%s/npusanctl", dir);
	snprintf(npusand, sizeof(npusand), "%s/npusand", dir);
	snprintf(marker, sizeof(marker), "%s/ran", dir);
	snprintf(pidfile, sizeof(pidfile), "%s/npusand.pid", dir);
	copy_file(tu_bin("npusanctl"), bin, 0755);
	/* Its standard error not run's, which the test reads to the end. */
	snprintf(script, sizeof(script), "#!/bin/sh\necho $$ >'%s'\n"
		 "exec sleep 60 2>/dev/null\n", pidfile);
	write_script(npusand, script);
	setenv("NPUSAN_LIBRARY", tu_bin("agent/libnpusan.so"), 1);
	ck_assert_int_eq(run_as(bin, NULL, &err, "--", "/bin/touch", marker,
				NULL), 3);
	unsetenv("NPUSAN_LIBRARY");
	ck_assert_msg(strstr(err, "it did not become ready in time") != NULL,
		      "%s", err);
	ck_assert_msg(access(marker, F_OK) < 0, "the command ran");
	pid = slurp(pidfile);
	state = proc_state((pid_t)atoi(pid));
	if (state != 0 && state != 'Z')
		kill((pid_t)atoi(pid), SIGKILL);
	ck_assert_msg(state == 0 || state == 'Z',
		      "the daemon that never got ready is left running");
	free(pid);
	free(err);
	free(dir);
	free(d.dir);
}
END_TEST

/* `run ARGS...` as a user other than root: as ourselves, or, for root,
 * as uid 1000 in a user namespace of our own (whose files are still
 * root's outside it), so that no test touches root's system socket. */
static int run_as_user(char **out, char **err, const char *const *args)
{
	const char *argv[24];
	char *bin = strdup(tu_bin("npusanctl"));
	size_t n = 0;
	int st;

	if (geteuid() == 0) {
		argv[n++] = "/usr/bin/unshare";
		argv[n++] = "--map-user=1000";
		argv[n++] = "--map-group=1000";
	}
	argv[n++] = bin;
	argv[n++] = "run";
	for (; *args != NULL; args++) {
		ck_assert_uint_lt(n, 23);
		argv[n++] = *args;
	}
	argv[n] = NULL;
	st = tu_run(argv, NULL, out, err);
	free(bin);
	return st;
}

/*
 * With no socket named, run starts the user's own daemon where npusand
 * binds by default, under $XDG_RUNTIME_DIR, and stops it afterwards; an
 * $XDG_RUNTIME_DIR too long for a socket path is a usage error saying so.
 */
START_TEST(session_run_starts_the_users_default_daemon)
{
	char *race = tu_write_file("race.trace", race_trace);
	char *rep = strdup(tu_bin("agent/npusan-replay"));
	const char *const job[] = { "--job", "dflt", "--", rep, race, NULL };
	const char *const none[] = { "--", "/bin/true", NULL };
	char xdg[512], sockdir[600], sock[700], longdir[400], *out, *err;
	struct tu_daemon d;

	tu_daemon_init(&d);
	unsetenv("NPUSAN_SOCKET");
	snprintf(xdg, sizeof(xdg), "%s/xdg", d.dir);
	ck_assert_int_eq(mkdir(xdg, 0700), 0);
	snprintf(sockdir, sizeof(sockdir), "%s/npusan", xdg);
	snprintf(sock, sizeof(sock), "%s/npusand.sock", sockdir);
	setenv("XDG_RUNTIME_DIR", xdg, 1);
	ck_assert_int_eq(run_as_user(&out, &err, job), 1);
	ck_assert_msg(strstr(out, "npusan: job dflt: 1 finding") != NULL,
		      "%s%s", out, err);
	/* Where npusand made its socket's directory. */
	ck_assert_msg(access(sockdir, F_OK) == 0, "no %s", sockdir);
	ck_assert_msg(!tu_sock_answers(sock), "the daemon at %s still "
		      "answers", sock);
	free(out);
	free(err);
	memset(longdir, 'x', sizeof(longdir) - 1);
	longdir[0] = '/';
	longdir[sizeof(longdir) - 1] = '\0';
	setenv("XDG_RUNTIME_DIR", longdir, 1);
	ck_assert_int_eq(run_as_user(NULL, &err, none), 2);
	ck_assert_msg(strstr(err, "$XDG_RUNTIME_DIR is too long for a socket "
				  "path; use --socket") != NULL, "%s", err);
	free(err);
	unsetenv("XDG_RUNTIME_DIR");
	free(rep);
	free(race);
	free(d.dir);
}
END_TEST

/* The daemon killed under the job: run cannot tell whether the job is
 * clean, says so and exits 3, never 0. */
START_TEST(session_run_daemon_going_away_is_no_clean_verdict)
{
	char pid[16], *out, *err;
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	snprintf(pid, sizeof(pid), "%d", (int)d.pid);
	ck_assert_int_eq(ctl(&out, &err, "run", "--job", "gone", "--",
			     "/bin/sh", "-c", "kill -KILL \"$0\"; sleep 0.5",
			     pid, NULL), 3);
	ck_assert_ptr_null(strstr(out, "clean"));
	ck_assert_msg(strstr(err, d.sock) != NULL, "%s", err);
	free(out);
	free(err);
	tu_daemon_stop(&d, SIGKILL);
	free(d.dir);
}
END_TEST

/* Its pid from run's "(pid N, " message, or 0. */
static pid_t daemon_pid_in(const char *err)
{
	const char *at = strstr(err, "(pid ");
	int pid = 0;

	if (at == NULL || sscanf(at, "(pid %d,", &pid) != 1)
		return 0;
	return (pid_t)pid;
}

/* Whether process `pid` (no child of ours) is gone within 15 s. */
static bool gone_within_15s(pid_t pid)
{
	for (int i = 0; i < 1500; i++) {
		char state = proc_state(pid);

		if (state == 0 || state == 'Z')
			return true;
		tu_nap_ms(10);
	}
	return false;
}

/*
 * A private daemon that another job has come to use by the time run is
 * done is left running for it, and run says so; the job's verdict is
 * its own.
 */
START_TEST(session_run_leaves_its_daemon_to_other_jobs)
{
	static const char other_trace[] = "npusan-trace 1\n"
					  "process pid=1 job=other rank=0\n"
					  "stream_create stream=1\n";
	char *trace = tu_write_file("other.trace", other_trace);
	char *race = tu_write_file("race.trace", race_trace);
	char *rep = strdup(tu_bin("agent/npusan-replay"));
	char *bin = strdup(tu_bin("npusanctl"));
	char go[512], errpath[512], *err;
	const char *argv[] = { bin, "run", "--job", "mine", "--", "/bin/sh",
			       "-c",
			       "while [ ! -e \"$0\" ]; do sleep 0.05; done; "
			       "exec \"$1\" \"$2\"",
			       go, rep, race, NULL };
	struct tu_daemon d;
	pid_t run, rp, other, daemon;
	int status;

	tu_daemon_init(&d);
	snprintf(go, sizeof(go), "%s/go", d.dir);
	snprintf(errpath, sizeof(errpath), "%s/run.err", d.dir);
	run = fork();
	ck_assert_int_ge(run, 0);
	if (run == 0) {
		int fd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int null = open("/dev/null", O_WRONLY);

		dup2(null, STDOUT_FILENO);
		dup2(fd, STDERR_FILENO);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 2000 && !tu_sock_answers(d.sock); i++)
		tu_nap_ms(10);
	ck_assert_msg(tu_sock_answers(d.sock), "run started no daemon");
	rp = replay_start("--pause-at", "1", trace, NULL);
	job_stopped("other", &other, 1);
	write_script(go, "");
	status = reap(run);
	err = slurp(errpath);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1,
		      "status %d: %s", status, err);
	ck_assert_msg(strstr(err, "now watches other jobs too; it is left "
				  "running") != NULL, "%s", err);
	ck_assert(tu_sock_answers(d.sock));
	daemon = daemon_pid_in(err);
	ck_assert_int_gt(daemon, 0);
	job_continue(&other, 1);
	ck_assert_int_eq(WEXITSTATUS(reap(rp)), 0);
	ck_assert_int_eq(kill(daemon, SIGTERM), 0);
	ck_assert(gone_within_15s(daemon));
	free(err);
	free(bin);
	free(rep);
	free(race);
	free(trace);
	free(d.dir);
}
END_TEST

/*
 * The command's own end is run's exit status: 128 + N when signal N killed
 * it, 126 when it cannot be executed; a job named by $NPUSAN_JOB is
 * reported under that name; options out of range are usage errors.
 */
START_TEST(session_run_statuses_of_the_command)
{
	char *race = tu_write_file("race.trace", race_trace);
	char *text = tu_write_file("notes.txt", "not a program\n");
	char *rep = strdup(tu_bin("agent/npusan-replay")), *out, *err;
	char *bin = strdup(tu_bin("npusanctl"));
	const char *const ulimited[] = {
		"/bin/sh", "-c",
		"for fd in 3 4 5 6 7 8 9; do eval \"exec $fd>&-\"; done; "
		"ulimit -n 4 && exec \"$0\" run -- /bin/true", bin, NULL
	};
	struct tu_daemon d;

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	ck_assert_int_eq(ctl(&out, NULL, "run", "--job", "k", "--", "/bin/sh",
			     "-c", "kill -KILL $$", NULL), 128 + SIGKILL);
	free(out);
	ck_assert_int_eq(chmod(text, 0644), 0);
	ck_assert_int_eq(ctl(NULL, &err, "run", "--", text, NULL), 126);
	ck_assert_msg(strstr(err, "cannot run '") != NULL &&
			      strstr(err, strerror(EACCES)) != NULL, "%s", err);
	free(err);
	setenv("NPUSAN_JOB", "from-env", 1);
	ck_assert_int_eq(ctl(&out, NULL, "run", "--", rep, race, NULL), 1);
	unsetenv("NPUSAN_JOB");
	ck_assert_msg(strstr(out, "npusan: job from-env: 1 finding") != NULL,
		      "%s", out);
	free(out);
	ck_assert_int_eq(ctl(NULL, &err, "run", "--error-exitcode", "256",
			     "--", rep, race, NULL), 2);
	ck_assert_ptr_nonnull(strstr(err, "--error-exitcode"));
	free(err);
	ck_assert_int_eq(ctl(NULL, &err, "run", "--job", "", "--", rep, race,
			     NULL), 2);
	free(err);
	ck_assert_int_eq(ctl(NULL, &err, "run", "--print-limit", "many", "--",
			     rep, race, NULL), 2);
	ck_assert_ptr_nonnull(strstr(err, "--print-limit"));
	free(err);
	/* No descriptors left to start the command with (4: the standard
	 * ones and one for the daemon's socket): said, and 3. */
	ck_assert_msg(tu_run(ulimited, NULL, NULL, &err) == 3, "%s", err);
	ck_assert_msg(strstr(err, "cannot start /bin/true: ") != NULL, "%s",
		      err);
	free(err);
	tu_daemon_stop(&d, SIGTERM);
	free(bin);
	free(rep);
	free(text);
	free(race);
	free(d.dir);
}
END_TEST

void test_session_run_daemon_add(TCase *run)
{
	tcase_add_test(run, session_run_without_a_daemon_to_start);
	tcase_add_test(run, session_run_daemon_that_never_gets_ready);
	tcase_add_test(run, session_run_starts_the_users_default_daemon);
	tcase_add_test(run, session_run_daemon_going_away_is_no_clean_verdict);
	tcase_add_test(run, session_run_leaves_its_daemon_to_other_jobs);
	tcase_add_test(run, session_run_statuses_of_the_command);
}
