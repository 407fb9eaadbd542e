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
 *
 * This file holds the suite and every flow but `npusanctl run`'s, which
 * are in test_session_run.c; session_helpers.h has what they share.
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
	test_session_run_add(run);
	test_session_run_daemon_add(run);
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
