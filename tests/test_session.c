/*
 * test_session.c - the flows a user meets on day one, with real processes:
 * attaching to a running job and detaching, a daemon killed or stopped and
 * restarted under a running 4-rank job, rings that overflow (drop and
 * block), processes that started before the daemon, traces with gaps, and
 * `npusanctl run` on jobs that fail, find something, are clean or do not
 * exist.
 *
 * Replays stop themselves at chosen operations (npusan-replay --pause-at),
 * so every step happens at a known point of a trace, never after a guessed
 * sleep.
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

#include "testutil.h"

/* ---- helpers ------------------------------------------------------------- */

/* `npusanctl ARGS... NULL`: the exit status, stdout and stderr. */
static int ctl(char **out, char **err, ...)
{
	const char *argv[32];
	char *bin = strdup(tu_bin("npusanctl"));
	va_list ap;
	size_t n = 1;
	int st;

	argv[0] = bin;
	va_start(ap, err);
	while ((argv[n] = va_arg(ap, const char *)) != NULL)
		ck_assert_uint_lt(++n, 31);
	va_end(ap);
	st = tu_run(argv, NULL, out, err);
	free(bin);
	return st;
}

/* Starts argv[0] with stdout to /dev/null, in the background; its pid. */
static pid_t spawn_quiet(const char *const *argv)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, STDOUT_FILENO);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

/* Starts npusan-replay with ARGS... NULL in the background; its pid. */
static pid_t replay_start(const char *a0, ...)
{
	const char *argv[32] = { tu_bin("agent/npusan-replay"), a0 };
	char *bin = strdup(argv[0]);
	size_t n = 2;
	va_list ap;
	pid_t pid;

	argv[0] = bin;
	va_start(ap, a0);
	while ((argv[n] = va_arg(ap, const char *)) != NULL)
		ck_assert_uint_lt(++n, 31);
	va_end(ap);
	pid = spawn_quiet(argv);
	free(bin);
	return pid;
}

static int reap(pid_t pid)
{
	int status;

	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}

/* The state letter of /proc/PID/stat ('T' stopped), or 0 when gone. */
static char proc_state(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p != NULL && p[1] == ' ' ? p[2] : 0;
}

/* Stops process `pid` and waits until every thread of it is stopped: a
 * daemon's drain thread may otherwise take one more batch. */
static void stop_all_threads(pid_t pid)
{
	char dir[64], path[384];
	bool all = false;

	ck_assert_int_eq(kill(pid, SIGSTOP), 0);
	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	for (int i = 0; i < 1000 && !all; i++) {
		DIR *d = opendir(dir);
		struct dirent *e;

		ck_assert_ptr_nonnull(d);
		all = true;
		while ((e = readdir(d)) != NULL) {
			char buf[512], *p;
			FILE *f;
			size_t n;

			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s/stat", dir,
				 e->d_name);
			f = fopen(path, "r");
			if (f == NULL)
				continue;
			n = fread(buf, 1, sizeof(buf) - 1, f);
			fclose(f);
			buf[n] = '\0';
			p = strrchr(buf, ')');
			all = all && p != NULL && p[2] == 'T';
		}
		closedir(d);
		if (!all)
			tu_nap_ms(1);
	}
	ck_assert_msg(all, "pid %d did not stop", (int)pid);
}

/* Waits until each of the `n` processes is stopped (a --pause-at point). */
static void pids_stopped(const pid_t *pids, unsigned n)
{
	for (unsigned r = 0; r < n; r++) {
		for (int i = 0; i < 1000 && proc_state(pids[r]) != 'T'; i++)
			tu_nap_ms(10);
		ck_assert_msg(proc_state(pids[r]) == 'T', "rank %u not stopped",
			      r);
	}
}

/*
 * The pids of the `want` processes of job `job` that have a rank, by rank,
 * once npusand lists every one of them; then waits until each is stopped.
 */
static void job_stopped(const char *job, pid_t *pids, unsigned want)
{
	char needle[96], *out = NULL, *at;
	unsigned found = 0;

	snprintf(needle, sizeof(needle), "\"job\":\"%s\",\"rank\":", job);
	for (int i = 0; i < 500 && found < want; i++) {
		free(out);
		ctl(&out, NULL, "list", "--json", NULL);
		found = tu_count_lines(out, needle);
		if (found < want)
			tu_nap_ms(10);
	}
	ck_assert_msg(found == want, "%u of %u processes of %s: %s", found,
		      want, job, out);
	for (at = out; (at = strstr(at, "{\"id\":")) != NULL; at++) {
		char *j = strstr(at, needle);
		unsigned rank;
		int pid;

		if (j == NULL || strchr(at, '\n') < j ||
		    sscanf(strstr(at, "\"pid\":"), "\"pid\":%d", &pid) != 1 ||
		    sscanf(j + strlen(needle), "%u", &rank) != 1)
			continue;
		ck_assert_uint_lt(rank, want);
		pids[rank] = (pid_t)pid;
	}
	free(out);
	pids_stopped(pids, want);
}

static void job_continue(const pid_t *pids, unsigned n)
{
	for (unsigned r = 0; r < n; r++)
		ck_assert_int_eq(kill(pids[r], SIGCONT), 0);
}

/* `npusanctl list --json` once every process of `job` has exited. */
static char *job_exited(const char *job, unsigned want)
{
	char needle[96], *out = NULL;

	snprintf(needle, sizeof(needle), "\"job\":\"%s\"", job);
	for (int i = 0; i < 1000; i++) {
		free(out);
		ctl(&out, NULL, "list", "--json", "--job", job, NULL);
		if (tu_count_lines(out, "\"state\":\"exited\"") == want &&
		    tu_count_lines(out, needle) == want)
			return out;
		tu_nap_ms(10);
	}
	ck_abort_msg("job %s did not exit: %s", job, out);
	return NULL;
}

/* A number field of the list line of `rank` in `list`. */
static unsigned long long list_field(const char *list, unsigned rank,
				     const char *field)
{
	char needle[32], key[48];
	const char *l, *f;
	unsigned long long v;

	snprintf(needle, sizeof(needle), "\"rank\":%u,", rank);
	snprintf(key, sizeof(key), "\"%s\":", field);
	l = strstr(list, needle);
	ck_assert_msg(l != NULL, "no rank %u in %s", rank, list);
	while (l > list && l[-1] != '\n')
		l--;
	f = strstr(l, key);
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(sscanf(f + strlen(key), "%llu", &v), 1);
	return v;
}

/* `npusanctl findings --json --job JOB`, once there are `want` (or after a
 * while, whatever there is). */
static char *job_findings(const char *job, unsigned want)
{
	char *out = NULL;

	for (int i = 0; i < 200; i++) {
		free(out);
		ctl(&out, NULL, "findings", "--json", "--job", job, NULL);
		if (tu_count_lines(out, "\"kind\"") >= want)
			break;
		tu_nap_ms(10);
	}
	return out;
}

/* A growing trace text. */
struct text {
	char *s;
	size_t len;
	unsigned ops;
};

static void add(struct text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Appends one line; counts it as an operation unless it is a header. */
static void add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	char line[512];
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	ck_assert_int_lt(n, (int)sizeof(line) - 1);
	t->s = realloc(t->s, t->len + (size_t)n + 2);
	memcpy(t->s + t->len, line, (size_t)n);
	t->len += (size_t)n;
	t->s[t->len++] = '\n';
	t->s[t->len] = '\0';
	if (strncmp(line, "npusan-trace", 12) != 0 &&
	    strncmp(line, "process ", 8) != 0 && strncmp(line, "stack ", 6))
		t->ops++;
}

static char *text_file(struct text *t, const char *name)
{
	char *path = tu_write_file(name, t->s);

	free(t->s);
	t->s = NULL;
	return path;
}

/* Two launches on streams 0 and 1 that write and read [p, p+64) with
 * nothing between them: a race, named after `tag`. */
static void race(struct text *t, unsigned long p, const char *tag)
{
	add(t, "launch stream=0 op=w_%s write=0x%lx+64", tag, p);
	add(t, "launch stream=1 op=r_%s read=0x%lx+64", tag, p);
}

/* `n` launches on stream 0 over their own memory: nothing to find. */
static void filler(struct text *t, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		add(t, "launch stream=0 op=fill write=0x%x+8",
		    0x10000000u + i * 8);
}

static char *pause_arg(unsigned n)
{
	char *s;

	ck_assert_int_gt(asprintf(&s, "%u", n), 0);
	return s;
}

/* ---- attach and detach --------------------------------------------------- */

/*
 * A dormant process attached mid-run: the race before the attach is not
 * found, nor is the pair that spans it, nor a missing record_stream the
 * agent cannot know was called; the race after it is, on memory the
 * snapshot named.
 */
START_TEST(session_attach_mid_run_finds_only_what_follows)
{
	struct text t = { 0 };
	struct tu_daemon d;
	char *trace, *at, *out, *list, *err;
	unsigned attach_at;
	pid_t rp, pid;

	add(&t, "npusan-trace 1");
	add(&t, "process pid=1 job=att rank=0");
	add(&t, "stack id=1 frame=\"train.py:10 in before\"");
	add(&t, "stack id=2 frame=\"train.py:20 in after\"");
	add(&t, "stream_create stream=1");
	add(&t, "alloc ptr=0x1000 size=256 stream=0 stack=1");
	add(&t, "launch stream=1 op=use write=0x1000+256");
	add(&t, "record_stream ptr=0x1000 stream=1");
	add(&t, "alloc ptr=0x5000 size=64 stream=0 stack=1");
	race(&t, 0x5000, "before");
	attach_at = t.ops;
	add(&t, "launch stream=1 op=use_again read=0x1000+256");
	add(&t, "free ptr=0x1000");
	race(&t, 0x5000, "after");
	add(&t, "device_sync");
	add(&t, "free ptr=0x5000");
	trace = text_file(&t, "attach.trace");
	at = pause_arg(attach_at);

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	setenv("NPUSAN", "dormant", 1);
	rp = replay_start("--pause-at", at, trace, NULL);
	unsetenv("NPUSAN");
	job_stopped("att", &pid, 1);
	ck_assert_int_eq(ctl(&list, NULL, "list", "--json", "--job", "att",
			     NULL), 0);
	ck_assert_msg(tu_count_lines(list, "\"state\":\"dormant\"") == 1,
		      "%s", list);
	ck_assert_uint_eq(list_field(list, 0, "events"), 0);
	free(list);
	ck_assert_int_eq(ctl(&out, &err, "attach", "--job", "att", NULL), 0);
	ck_assert_msg(strstr(out, "attached pid") != NULL, "%s %s", out, err);
	free(out);
	free(err);
	job_continue(&pid, 1);
	ck_assert_int_eq(WEXITSTATUS(reap(rp)), 0);
	list = job_exited("att", 1);
	out = job_findings("att", 1);
	ck_assert_msg(tu_count_lines(out, "\"kind\"") == 1, "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "\"op\":\"r_after\""));
	ck_assert_ptr_nonnull(strstr(out, "\"op\":\"w_after\""));
	/* The snapshot named the allocation, with its stack. */
	ck_assert_ptr_nonnull(strstr(out, "\"alloc\":{\"ptr\":\"0x5000\","
					  "\"size\":64,\"stream\":0,\"stack\":"
					  "[\"train.py:10 in before\"]}"));
	ck_assert_uint_eq(list_field(list, 0, "gaps"), 1);
	ck_assert_uint_eq(list_field(list, 0, "lost"), 0);
	tu_daemon_stop(&d, SIGTERM);
	free(list);
	free(out);
	free(at);
	free(trace);
	free(d.dir);
}
END_TEST

/* Detached, nothing is analysed; attached again, errors are found again,
 * none spanning the detached stretch. */
START_TEST(session_detach_then_attach_again)
{
	struct text t = { 0 };
	struct tu_daemon d;
	char *trace, *p1, *p2, *p3, *out, *pidarg;
	pid_t rp, pid;

	add(&t, "npusan-trace 1");
	add(&t, "process pid=1 job=det rank=0");
	add(&t, "stream_create stream=1");
	p1 = pause_arg(t.ops);
	race(&t, 0x1000, "one");
	add(&t, "launch stream=0 op=w_span write=0x3000+64");
	ck_assert_int_gt(asprintf(&p2, "%u:detached", t.ops), 0);
	race(&t, 0x2000, "detached");
	p3 = pause_arg(t.ops);
	add(&t, "launch stream=1 op=r_span read=0x3000+64");
	race(&t, 0x4000, "two");
	trace = text_file(&t, "detach.trace");

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	setenv("NPUSAN", "dormant", 1);
	rp = replay_start("--pause-at", p1, "--pause-at", p2, "--pause-at",
			  p3, trace, NULL);
	unsetenv("NPUSAN");
	job_stopped("det", &pid, 1);
	ck_assert_int_eq(asprintf(&pidarg, "%d", (int)pid), (int)strlen(pidarg));
	ck_assert_int_eq(ctl(NULL, NULL, "attach", pidarg, NULL), 0);
	job_continue(&pid, 1);
	pids_stopped(&pid, 1);
	ck_assert_int_eq(ctl(&out, NULL, "detach", pidarg, NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "detached pid"));
	free(out);
	job_continue(&pid, 1);
	pids_stopped(&pid, 1);
	ck_assert_int_eq(ctl(NULL, NULL, "attach", pidarg, NULL), 0);
	job_continue(&pid, 1);
	ck_assert_int_eq(WEXITSTATUS(reap(rp)), 0);
	free(job_exited("det", 1));
	out = job_findings("det", 2);
	ck_assert_msg(tu_count_lines(out, "\"kind\"") == 2, "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "\"op\":\"r_one\""));
	ck_assert_ptr_nonnull(strstr(out, "\"op\":\"r_two\""));
	tu_daemon_stop(&d, SIGTERM);
	free(out);
	free(pidarg);
	free(p1);
	free(p2);
	free(p3);
	free(trace);
	free(d.dir);
}
END_TEST

START_TEST(session_attach_unknown_pid_is_said)
{
	struct tu_daemon d;
	char *err;

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	ck_assert_int_eq(ctl(NULL, &err, "attach", "999999", NULL), 2);
	ck_assert_msg(strstr(err, "no registered process 999999") != NULL,
		      "%s", err);
	free(err);
	ck_assert_int_eq(ctl(NULL, &err, "detach", "--job", "nojob", NULL), 2);
	ck_assert_ptr_nonnull(strstr(err, "no registered process of job"));
	free(err);
	ck_assert_int_eq(ctl(NULL, &err, "attach", NULL), 2);
	free(err);
	tu_daemon_stop(&d, SIGTERM);
	free(d.dir);
}
END_TEST

/* A user may attach only their own processes: as nobody, root's dormant
 * process is no registered process; root attaches it. */
START_TEST(session_attach_only_ones_own_processes)
{
	struct text t = { 0 };
	struct tu_daemon d;
	char *trace, *pidarg, *bin;
	pid_t rp, pid, child;
	int status;

	add(&t, "npusan-trace 1");
	add(&t, "process pid=1 job=mine rank=0");
	add(&t, "stream_create stream=1");
	trace = text_file(&t, "mine.trace");
	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	/* Root's daemon socket is 0666; let nobody reach it. */
	ck_assert_int_eq(chmod(d.dir, 0755), 0);
	setenv("NPUSAN", "dormant", 1);
	rp = replay_start("--pause-at", "1", trace, NULL);
	unsetenv("NPUSAN");
	job_stopped("mine", &pid, 1);
	ck_assert_int_gt(asprintf(&pidarg, "%d", (int)pid), 0);
	bin = strdup(tu_bin("npusanctl"));
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		int null = open("/dev/null", O_WRONLY);

		dup2(null, STDERR_FILENO);
		if (setresgid(65534, 65534, 65534) < 0 ||
		    setresuid(65534, 65534, 65534) < 0)
			_exit(100);
		execl(bin, bin, "attach", pidarg, (char *)NULL);
		_exit(101);
	}
	status = reap(child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 2,
		      "nobody's attach: status %d", status);
	ck_assert_int_eq(ctl(NULL, NULL, "attach", pidarg, NULL), 0);
	job_continue(&pid, 1);
	ck_assert_int_eq(WEXITSTATUS(reap(rp)), 0);
	tu_daemon_stop(&d, SIGTERM);
	free(bin);
	free(pidarg);
	free(trace);
	free(d.dir);
}
END_TEST

/* ---- a daemon restarted under a running job ------------------------------ */

/*
 * Four ranks run while their daemon is killed (`sig`), the rings overflow
 * with no daemon, and a new daemon starts: every agent registers again,
 * the findings from before the kill are kept, the race made after the
 * restart is found, and list shows each rank's gap and lost operations.
 */
static void restart_during_run(int sig)
{
	struct tu_daemon d;
	char *traces[4], *p1, *p2, *list, *out, name[32];
	pid_t rp, pids[4];
	unsigned before = 0;

	for (unsigned r = 0; r < 4; r++) {
		struct text t = { 0 };

		add(&t, "npusan-trace 1");
		add(&t, "process pid=1 job=restart rank=%u", r);
		add(&t, "stream_create stream=1");
		if (r == 0) {
			race(&t, 0x1000, "before");
		} else if (r == 2) {
			/* The names of the race after the restart, defined to
			 * the first daemon only: the second must learn them. */
			add(&t, "launch stream=0 op=w_after write=0x7000+8");
			add(&t, "launch stream=0 op=r_after read=0x7000+8");
		} else {
			filler(&t, 2);
		}
		before = t.ops;
		filler(&t, 3000); /* overflows a 64 KiB ring: ~1200 fit */
		if (r == 2)
			race(&t, 0x2000, "after");
		add(&t, "device_sync");
		snprintf(name, sizeof(name), "restart%u.trace", r);
		traces[r] = text_file(&t, name);
	}
	/* The first pause goes on at once: the daemon is dead by then. */
	ck_assert_int_gt(asprintf(&p1, "%u:go", before), 0);
	p2 = pause_arg(before + 3000);
	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	setenv("NPUSAN_RING_SIZE", "64K", 1);
	setenv("NPUSAN_RING_FULL", "drop", 1);
	/* --wait: room for the agents' backoff, which grew while no daemon
	 * answered, before they register with the new one. */
	rp = replay_start("--wait", "10000", "--pause-at", p1, "--pause-at",
			  p2, traces[0], traces[1], traces[2], traces[3],
			  NULL);
	unsetenv("NPUSAN_RING_SIZE");
	unsetenv("NPUSAN_RING_FULL");
	job_stopped("restart", pids, 4);
	/* Everything so far is stored before the kill. */
	for (int i = 0; i < 500; i++) {
		ctl(&list, NULL, "list", "--json", "--job", "restart", NULL);
		if (tu_count_lines(list, "\"findings\":1,") == 1 &&
		    list_field(list, 3, "events") == before)
			break;
		free(list);
		list = NULL;
		tu_nap_ms(10);
	}
	ck_assert_ptr_nonnull(list);
	free(list);
	tu_daemon_stop(&d, sig);
	job_continue(pids, 4);
	pids_stopped(pids, 4);
	tu_daemon_start(&d, NULL);
	job_continue(pids, 4);
	ck_assert_int_eq(WEXITSTATUS(reap(rp)), 0);
	list = job_exited("restart", 4);
	out = job_findings("restart", 2);
	ck_assert_msg(tu_count_lines(out, "\"kind\"") == 2, "%s", out);
	ck_assert_uint_eq(tu_count_lines(out, "\"op\":\"r_before\""), 1);
	ck_assert_uint_eq(tu_count_lines(out, "\"op\":\"r_after\""), 1);
	ck_assert_uint_eq(tu_count_lines(out, "\"rank\":0}"), 1);
	ck_assert_uint_eq(tu_count_lines(out, "\"rank\":2}"), 1);
	for (unsigned r = 0; r < 4; r++) {
		ck_assert_msg(list_field(list, r, "lost") > 0, "%s", list);
		ck_assert_msg(list_field(list, r, "gaps") >= 1, "%s", list);
	}
	tu_daemon_stop(&d, SIGTERM);
	free(list);
	free(out);
	free(p1);
	free(p2);
	for (unsigned r = 0; r < 4; r++)
		free(traces[r]);
	free(d.dir);
}

START_TEST(session_daemon_killed_and_restarted_during_4_rank_run)
{
	restart_during_run(SIGKILL);
}
END_TEST

START_TEST(session_daemon_stopped_and_restarted_during_4_rank_run)
{
	restart_during_run(SIGTERM);
}
END_TEST

/* ---- ring overflow ------------------------------------------------------- */

/*
 * A process overflows its ring while its daemon is stopped (SIGSTOP). The
 * stretch lost holds the only sync between a write before it and a read
 * after it: that pair must not be reported. The races before and after
 * are. With drop, every lost operation is counted; with block, none is
 * lost and the sync is seen.
 */
static void overflow(const char *policy)
{
	struct text t = { 0 };
	struct tu_daemon d;
	char *trace, *k1, *k2, *list, *out;
	bool drop = strcmp(policy, "drop") == 0;
	unsigned long long events, lost;
	pid_t rp, pid;

	add(&t, "npusan-trace 1");
	add(&t, "process pid=1 job=flood rank=0");
	add(&t, "stream_create stream=1");
	add(&t, "event_create event=9");
	race(&t, 0x1000, "before");
	add(&t, "launch stream=1 op=w_synced write=0x3000+64");
	k1 = pause_arg(t.ops);
	filler(&t, 3000);
	add(&t, "event_record event=9 stream=1");
	add(&t, "event_wait event=9 stream=0");
	k2 = pause_arg(t.ops);
	add(&t, "launch stream=0 op=r_synced read=0x3000+64");
	race(&t, 0x2000, "after");
	trace = text_file(&t, "flood.trace");

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	setenv("NPUSAN_RING_SIZE", "64K", 1);
	setenv("NPUSAN_RING_FULL", policy, 1);
	rp = replay_start("--wait", "300", "--pause-at", k1, "--pause-at", k2,
			  trace, NULL);
	unsetenv("NPUSAN_RING_SIZE");
	unsetenv("NPUSAN_RING_FULL");
	job_stopped("flood", &pid, 1);
	stop_all_threads(d.pid);
	job_continue(&pid, 1);
	if (!drop) {
		/* The producer waits for room while the daemon is stopped. */
		tu_nap_ms(300);
		ck_assert_int_ne(proc_state(pid), 'T');
		ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	}
	pids_stopped(&pid, 1);
	if (drop)
		ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	job_continue(&pid, 1);
	ck_assert_int_eq(WEXITSTATUS(reap(rp)), 0);
	list = job_exited("flood", 1);
	out = job_findings("flood", 2);
	ck_assert_msg(tu_count_lines(out, "\"kind\"") == 2, "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "\"op\":\"r_before\""));
	ck_assert_ptr_nonnull(strstr(out, "\"op\":\"r_after\""));
	ck_assert_ptr_null(strstr(out, "r_synced"));
	events = list_field(list, 0, "events");
	lost = list_field(list, 0, "lost");
	/* Exact: every operation was either analysed or counted lost. */
	ck_assert_msg(events + lost == t.ops, "%llu + %llu != %u", events,
		      lost, t.ops);
	if (drop) {
		ck_assert_uint_gt(lost, 1000);
		ck_assert_uint_eq(list_field(list, 0, "gaps"), 1);
	} else {
		ck_assert_uint_eq(lost, 0);
		ck_assert_uint_eq(list_field(list, 0, "gaps"), 0);
	}
	tu_daemon_stop(&d, SIGTERM);
	free(list);
	free(out);
	free(k1);
	free(k2);
	free(trace);
	free(d.dir);
}

START_TEST(session_ring_overflow_drop_counts_every_lost_operation)
{
	overflow("drop");
}
END_TEST

START_TEST(session_ring_overflow_block_loses_nothing)
{
	overflow("block");
}
END_TEST

/* ---- start order and gaps ------------------------------------------------ */

/* A process that started before any daemon is picked up when one starts,
 * with everything its ring kept. */
START_TEST(session_process_started_before_daemon_is_picked_up)
{
	struct text t = { 0 };
	struct tu_daemon d;
	char *trace, *out, *list;
	pid_t rp;

	add(&t, "npusan-trace 1");
	add(&t, "process pid=1 job=early rank=0");
	add(&t, "stream_create stream=1");
	race(&t, 0x1000, "early");
	filler(&t, 400);
	race(&t, 0x2000, "late");
	trace = text_file(&t, "early.trace");
	tu_daemon_init(&d);
	/* 400 operations a second: a second to find the daemon, which
	 * starts after a fifth of one. */
	rp = replay_start("--rate", "400", trace, NULL);
	tu_nap_ms(200);
	tu_daemon_start(&d, NULL);
	ck_assert_int_eq(WEXITSTATUS(reap(rp)), 0);
	list = job_exited("early", 1);
	ck_assert_uint_eq(list_field(list, 0, "events"), t.ops);
	out = job_findings("early", 2);
	ck_assert_msg(tu_count_lines(out, "\"kind\"") == 2, "%s", out);
	tu_daemon_stop(&d, SIGTERM);
	free(list);
	free(out);
	free(trace);
	free(d.dir);
}
END_TEST

/* A daemon that has not answered the registration yet (it is stopped)
 * is waited for: the agent's ring is not taken for one nobody drains. */
START_TEST(session_wait_drained_waits_for_a_registration_in_flight)
{
	const char *argv[] = { NULL, "drain", NULL };
	struct tu_daemon d;
	char *out = NULL, *bin = strdup(tu_bin("tests/agent_prog"));
	int p[2], status;
	pid_t pid;

	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	stop_all_threads(d.pid);
	argv[0] = bin;
	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(p[1], STDOUT_FILENO);
		setenv("NPUSAN", "1", 1);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	close(p[1]);
	tu_nap_ms(300);
	ck_assert_int_eq(kill(d.pid, SIGCONT), 0);
	status = reap(pid);
	ck_assert_int_eq(WEXITSTATUS(status), 0);
	out = calloc(1, 64);
	ck_assert_int_gt(read(p[0], out, 63), 0);
	close(p[0]);
	ck_assert_str_eq(out, "0\n");
	tu_daemon_stop(&d, SIGTERM);
	free(out);
	free(bin);
	free(d.dir);
}
END_TEST

/* A trace with gaps, live and offline: the races on each side are found,
 * the pairs that span a gap are not, and the daemon counts the gaps. */
START_TEST(session_gaps_in_a_trace_live_and_offline)
{
	static const char *const varying[] = { "id", "pid", "first_seen",
					       "last_seen", NULL };
	struct text t = { 0 };
	struct tu_daemon d;
	char *trace, *live, *offline, *a, *b, *list;
	pid_t rp;

	add(&t, "npusan-trace 1");
	add(&t, "process pid=1 job=gaps rank=0");
	add(&t, "stream_create stream=1");
	race(&t, 0x1000, "first");
	add(&t, "launch stream=0 op=w_across write=0x9000+64");
	add(&t, "gap lost=12");
	add(&t, "launch stream=1 op=r_across read=0x9000+64");
	race(&t, 0x2000, "second");
	add(&t, "gap");
	race(&t, 0x3000, "third");
	trace = text_file(&t, "gaps.trace");
	ck_assert_int_eq(ctl(&offline, NULL, "analyze", "--json", trace, NULL),
			 1);
	ck_assert_uint_eq(tu_count_lines(offline, "\"kind\""), 3);
	ck_assert_ptr_null(strstr(offline, "r_across"));
	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	rp = replay_start(trace, NULL);
	ck_assert_int_eq(WEXITSTATUS(reap(rp)), 0);
	list = job_exited("gaps", 1);
	ck_assert_uint_eq(list_field(list, 0, "gaps"), 2);
	ck_assert_uint_eq(list_field(list, 0, "lost"), 12);
	live = job_findings("gaps", 3);
	a = tu_json_lines(live, "\"kind\"", varying);
	b = tu_json_lines(offline, "\"kind\"", varying);
	ck_assert_str_eq(a, b);
	tu_daemon_stop(&d, SIGTERM);
	free(a);
	free(b);
	free(list);
	free(live);
	free(offline);
	free(trace);
	free(d.dir);
}
END_TEST

/* A process naming more streams than the engine follows: the daemon and
 * analyze skip the same operations, count them lost in one gap, and find
 * the same (the race after the gap, not the pair across it). */
START_TEST(session_streams_past_the_limit_live_and_offline)
{
	static const char *const varying[] = { "id", "pid", "first_seen",
					       "last_seen", NULL };
	struct text t = { 0 };
	struct tu_daemon d;
	char *trace, *live, *offline, *err, *a, *b, *list;
	pid_t rp;

	add(&t, "npusan-trace 1");
	add(&t, "process pid=1 job=streams rank=0");
	add(&t, "launch stream=0 op=w_across write=0x9000+64");
	for (int i = 1; i <= 1100; i++)
		add(&t, "stream_create stream=%d", i);
	add(&t, "launch stream=1 op=r_across read=0x9000+64");
	race(&t, 0x1000, "after");
	trace = text_file(&t, "streams.trace");
	ck_assert_int_eq(ctl(&offline, &err, "analyze", "--json", trace, NULL),
			 1);
	ck_assert_ptr_nonnull(strstr(err, "77 operations on streams beyond"));
	ck_assert_uint_eq(tu_count_lines(offline, "\"kind\""), 1);
	ck_assert_ptr_null(strstr(offline, "r_across"));
	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	rp = replay_start(trace, NULL);
	ck_assert_int_eq(WEXITSTATUS(reap(rp)), 0);
	list = job_exited("streams", 1);
	ck_assert_uint_eq(list_field(list, 0, "lost"), 77);
	ck_assert_uint_eq(list_field(list, 0, "gaps"), 1);
	ck_assert_uint_eq(list_field(list, 0, "events"), t.ops - 77);
	live = job_findings("streams", 1);
	a = tu_json_lines(live, "\"kind\"", varying);
	b = tu_json_lines(offline, "\"kind\"", varying);
	ck_assert_str_eq(a, b);
	tu_daemon_stop(&d, SIGTERM);
	free(a);
	free(b);
	free(list);
	free(live);
	free(offline);
	free(err);
	free(trace);
	free(d.dir);
}
END_TEST

/* ---- findings --follow --------------------------------------------------- */

/* Reads `fd` into *buf until it holds `want`; fails after 20 s. */
static void read_until(int fd, char **buf, size_t *len, const char *want)
{
	for (int i = 0; i < 2000; i++) {
		char chunk[4096];
		ssize_t n;

		if (*buf != NULL && strstr(*buf, want) != NULL)
			return;
		n = read(fd, chunk, sizeof(chunk));
		if (n > 0) {
			*buf = realloc(*buf, *len + (size_t)n + 1);
			memcpy(*buf + *len, chunk, (size_t)n);
			*len += (size_t)n;
			(*buf)[*len] = '\0';
			continue;
		}
		tu_nap_ms(10);
	}
	ck_abort_msg("no '%s' in: %s", want, *buf ? *buf : "");
}

/*
 * A follower sees a finding when it is stored, again when its count
 * grows, and goes on across a daemon restart, saying so; Ctrl-C ends it
 * with 0.
 */
START_TEST(session_findings_follow_shows_updates_across_restarts)
{
	struct text t = { 0 }, t2 = { 0 };
	struct tu_daemon d;
	char *trace, *trace2, *k1, *out = NULL, *err = NULL, *bin;
	size_t len = 0, elen = 0;
	int po[2], pe[2], status;
	pid_t fol, rp, pid;

	add(&t, "npusan-trace 1");
	add(&t, "process pid=1 job=fol rank=0");
	add(&t, "stream_create stream=1");
	race(&t, 0x1000, "x");
	k1 = pause_arg(t.ops);
	race(&t, 0x2000, "x"); /* the same finding: its count grows */
	trace = text_file(&t, "fol.trace");
	add(&t2, "npusan-trace 1");
	add(&t2, "process pid=1 job=fol rank=1");
	add(&t2, "stream_create stream=1");
	race(&t2, 0x1000, "y");
	trace2 = text_file(&t2, "fol2.trace");
	tu_daemon_init(&d);
	tu_daemon_start(&d, NULL);
	ck_assert_int_eq(pipe2(po, O_CLOEXEC | O_NONBLOCK), 0);
	ck_assert_int_eq(pipe2(pe, O_CLOEXEC | O_NONBLOCK), 0);
	bin = strdup(tu_bin("npusanctl"));
	fol = fork();
	ck_assert_int_ge(fol, 0);
	if (fol == 0) {
		dup2(po[1], STDOUT_FILENO);
		dup2(pe[1], STDERR_FILENO);
		execl(bin, bin, "findings", "--follow", "--json", "--job",
		      "fol", (char *)NULL);
		_exit(127);
	}
	close(po[1]);
	close(pe[1]);
	rp = replay_start("--pause-at", k1, trace, NULL);
	job_stopped("fol", &pid, 1);
	read_until(po[0], &out, &len, "\"count\":1,");
	job_continue(&pid, 1);
	ck_assert_int_eq(WEXITSTATUS(reap(rp)), 0);
	read_until(po[0], &out, &len, "\"count\":2,");
	tu_daemon_stop(&d, SIGTERM);
	read_until(pe[0], &err, &elen, "waiting for the daemon");
	tu_daemon_start(&d, NULL);
	read_until(pe[0], &err, &elen, "answers again");
	rp = replay_start(trace2, NULL);
	ck_assert_int_eq(WEXITSTATUS(reap(rp)), 0);
	read_until(po[0], &out, &len, "\"op\":\"r_y\"");
	ck_assert_int_eq(kill(fol, SIGINT), 0);
	status = reap(fol);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "status %d", status);
	/* Each state once: first seen, grown, and the second rank's. */
	ck_assert_uint_eq(tu_count_lines(out, "\"kind\""), 3);
	tu_daemon_stop(&d, SIGTERM);
	close(po[0]);
	close(pe[0]);
	free(out);
	free(err);
	free(bin);
	free(k1);
	free(trace);
	free(trace2);
	free(d.dir);
}
END_TEST

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

static Suite *session_suite(void)
{
	Suite *s = suite_create("session");
	TCase *at = tcase_create("attach");
	TCase *re = tcase_create("restart");
	TCase *ov = tcase_create("overflow");
	TCase *run = tcase_create("run");

	tcase_set_timeout(at, 120);
	tcase_add_test(at, session_attach_mid_run_finds_only_what_follows);
	tcase_add_test(at, session_detach_then_attach_again);
	tcase_add_test(at, session_attach_unknown_pid_is_said);
	suite_add_tcase(s, at);
	tcase_set_timeout(re, 120);
	tcase_add_test(re,
		       session_daemon_killed_and_restarted_during_4_rank_run);
	tcase_add_test(re,
		       session_daemon_stopped_and_restarted_during_4_rank_run);
	tcase_add_test(re, session_process_started_before_daemon_is_picked_up);
	tcase_add_test(re,
		       session_wait_drained_waits_for_a_registration_in_flight);
	suite_add_tcase(s, re);
	tcase_set_timeout(ov, 120);
	tcase_add_test(ov, session_ring_overflow_drop_counts_every_lost_operation);
	tcase_add_test(ov, session_ring_overflow_block_loses_nothing);
	tcase_add_test(ov, session_gaps_in_a_trace_live_and_offline);
	tcase_add_test(ov, session_streams_past_the_limit_live_and_offline);
	tcase_add_test(ov,
		       session_findings_follow_shows_updates_across_restarts);
	suite_add_tcase(s, ov);
	tcase_set_timeout(run, 120);
	tcase_add_test(run, session_run_exit_statuses);
	tcase_add_test(run, session_run_blind_or_incomplete_is_not_clean);
	tcase_add_test(run, session_run_reusing_a_job_name_is_a_run_of_its_own);
	tcase_add_test(run, session_run_waits_for_what_the_command_leaves);
	tcase_add_test(run, session_run_uses_a_running_daemon);
	tcase_add_test(run, session_run_forwards_sigterm);
	tcase_add_test(run, session_run_sigterm_while_its_daemon_starts);
	suite_add_tcase(s, run);
	return s;
}

/* The test that needs root, to be root and nobody. */
static Suite *isolation_suite(void)
{
	Suite *s = suite_create("isolation");
	TCase *tc = tcase_create("isolation");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, session_attach_only_ones_own_processes);
	suite_add_tcase(s, tc);
	return s;
}

/*
 * `test_session isolation` runs the test that needs root (its CTest entry
 * test_session_isolation), and exits 77, CTest's skip, where it cannot run:
 * never a pass.
 */
int main(int argc, char **argv)
{
	if (argc < 2)
		return tu_main(session_suite());
	if (strcmp(argv[1], "isolation") != 0) {
		fprintf(stderr, "test_session: no group %s\n", argv[1]);
		return 2;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "test_session isolation: skipped, needs root, "
				"to become nobody\n");
		return 77;
	}
	if (!tu_runnable_by(65534, tu_bin("npusanctl"))) {
		fprintf(stderr, "test_session isolation: skipped, nobody "
				"cannot run %s\n", tu_bin("npusanctl"));
		return 77;
	}
	return tu_main(isolation_suite());
}
