/*
 * session_helpers.h - what test_session's files share: npusanctl and
 * npusan-replay run as a user would, processes stopped and continued at
 * known points of a trace, npusanctl's answers waited for, and trace texts
 * written line by line. Built into test_session alone (session_helpers.c).
 */
#ifndef NPUSAN_TESTS_SESSION_HELPERS_H
#define NPUSAN_TESTS_SESSION_HELPERS_H

#include <check.h>
#include <stddef.h>
#include <sys/types.h>

/* A growing trace text. */
struct text {
	char *s;
	size_t len;
	unsigned ops;
};

/* `npusanctl ARGS... NULL`: the exit status, stdout and stderr. */
int ctl(char **out, char **err, ...);

/* Starts argv[0] with stdout to /dev/null, in the background; its pid. */
pid_t spawn_quiet(const char *const *argv);

/* Starts npusan-replay with ARGS... NULL in the background; its pid. */
pid_t replay_start(const char *a0, ...);

int reap(pid_t pid);

/* The state letter of /proc/PID/stat ('T' stopped), or 0 when gone. */
char proc_state(pid_t pid);

/* Stops process `pid` and waits until every thread of it is stopped: a
 * daemon's drain thread may otherwise take one more batch. */
void stop_all_threads(pid_t pid);

/* Waits until each of the `n` processes is stopped (a --pause-at point). */
void pids_stopped(const pid_t *pids, unsigned n);

/*
 * The pids of the `want` processes of job `job` that have a rank, by rank,
 * once npusand lists every one of them; then waits until each is stopped.
 */
void job_stopped(const char *job, pid_t *pids, unsigned want);

void job_continue(const pid_t *pids, unsigned n);

/* `npusanctl list --json` once every process of `job` has exited. */
char *job_exited(const char *job, unsigned want);

/* A number field of the list line of `rank` in `list`. */
unsigned long long list_field(const char *list, unsigned rank,
			      const char *field);

/* `npusanctl findings --json --job JOB`, once there are `want` (or after a
 * while, whatever there is). */
char *job_findings(const char *job, unsigned want);

/* Appends one line; counts it as an operation unless it is a header. */
void add(struct text *t, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

char *text_file(struct text *t, const char *name);

/* Two launches on streams 0 and 1 that write and read [p, p+64) with
 * nothing between them: a race, named after `tag`. */
void race(struct text *t, unsigned long p, const char *tag);

/* `n` launches on stream 0 over their own memory: nothing to find. */
void filler(struct text *t, unsigned n);

char *pause_arg(unsigned n);

/* The tests of test_session_run.c, added to the TCase `run`. */
void test_session_run_add(TCase *run);

/* The tests of test_session_run_daemon.c, added to the TCase `run`. */
void test_session_run_daemon_add(TCase *run);

#endif
