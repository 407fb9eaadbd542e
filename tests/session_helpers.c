/*
 * session_helpers.c - test_session's shared helpers (session_helpers.h):
 * the programs run as a user would, and the processes they leave.
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

/* `npusanctl ARGS... NULL`: the exit status, stdout and stderr. */
int ctl(char **out, char **err, ...)
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
pid_t spawn_quiet(const char *const *argv)
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
pid_t replay_start(const char *a0, ...)
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

int reap(pid_t pid)
{
	int status;

	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return status;
}

/* The state letter of /proc/PID/stat ('T' stopped), or 0 when gone. */
char proc_state(pid_t pid)
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
void stop_all_threads(pid_t pid)
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
void pids_stopped(const pid_t *pids, unsigned n)
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
void job_stopped(const char *job, pid_t *pids, unsigned want)
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

void job_continue(const pid_t *pids, unsigned n)
{
	for (unsigned r = 0; r < n; r++)
		ck_assert_int_eq(kill(pids[r], SIGCONT), 0);
}

/* `npusanctl list --json` once every process of `job` has exited. */
char *job_exited(const char *job, unsigned want)
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
unsigned long long list_field(const char *list, unsigned rank,
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
char *job_findings(const char *job, unsigned want)
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

/* Appends one line; counts it as an operation unless it is a header. */
void add(struct text *t, const char *fmt, ...)
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

char *text_file(struct text *t, const char *name)
{
	char *path = tu_write_file(name, t->s);

	free(t->s);
	t->s = NULL;
	return path;
}

/* Two launches on streams 0 and 1 that write and read [p, p+64) with
 * nothing between them: a race, named after `tag`. */
void race(struct text *t, unsigned long p, const char *tag)
{
	add(t, "launch stream=0 op=w_%s write=0x%lx+64", tag, p);
	add(t, "launch stream=1 op=r_%s read=0x%lx+64", tag, p);
}

/* `n` launches on stream 0 over their own memory: nothing to find. */
void filler(struct text *t, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		add(t, "launch stream=0 op=fill write=0x%x+8",
		    0x10000000u + i * 8);
}

char *pause_arg(unsigned n)
{
	char *s;

	ck_assert_int_gt(asprintf(&s, "%u", n), 0);
	return s;
}
