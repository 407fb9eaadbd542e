/*
 * testutil.c - helpers the Check suites share.
 */
#include "testutil.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trace.h"

extern char **environ;

struct sink {
	char *buf;
	size_t len;
	size_t cap;
};

static void sink_add(struct sink *s, const char *p, size_t n)
{
	if (s->len + n + 1 > s->cap) {
		s->cap = (s->len + n + 1) * 2;
		s->buf = realloc(s->buf, s->cap);
		ck_assert_ptr_nonnull(s->buf);
	}
	memcpy(s->buf + s->len, p, n);
	s->len += n;
	s->buf[s->len] = '\0';
}

static void pipe_or_die(int fds[2])
{
	ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
}

int tu_run(const char *const argv[], const char *input, char **out, char **err)
{
	int in[2], o[2], e[2], status;
	posix_spawn_file_actions_t fa;
	struct sink so = { 0 }, se = { 0 };
	size_t in_len = input ? strlen(input) : 0, in_off = 0;
	pid_t pid;

	pipe_or_die(in);
	pipe_or_die(o);
	pipe_or_die(e);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, o[1], 1);
	posix_spawn_file_actions_adddup2(&fa, e[1], 2);
	ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL,
				     (char *const *)argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(o[1]);
	close(e[1]);
	signal(SIGPIPE, SIG_IGN);
	if (in_len == 0) {
		close(in[1]);
		in[1] = -1;
	}

	for (int open_fds = 2; open_fds > 0;) {
		struct pollfd p[3] = { { o[0], POLLIN, 0 }, { e[0], POLLIN, 0 },
				       { in[1], POLLOUT, 0 } };
		char buf[65536];

		ck_assert_int_ge(poll(p, in[1] >= 0 ? 3 : 2, -1), 0);
		for (int i = 0; i < 2; i++) {
			ssize_t n;

			if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP)))
				continue;
			n = read(p[i].fd, buf, sizeof(buf));
			if (n <= 0) {
				close(p[i].fd);
				if (i == 0)
					o[0] = -1;
				else
					e[0] = -1;
				open_fds--;
				continue;
			}
			sink_add(i == 0 ? &so : &se, buf, (size_t)n);
		}
		if (in[1] >= 0 && (p[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
			ssize_t n = write(in[1], input + in_off, in_len - in_off);

			if (n > 0)
				in_off += (size_t)n;
			if (n <= 0 || in_off == in_len) {
				close(in[1]);
				in[1] = -1;
			}
		}
	}
	if (in[1] >= 0)
		close(in[1]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	if (out != NULL)
		*out = so.buf ? so.buf : strdup("");
	else
		free(so.buf);
	if (err != NULL)
		*err = se.buf ? se.buf : strdup("");
	else
		free(se.buf);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return WEXITSTATUS(status);
}

const char *tu_bin(const char *name)
{
	static char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", NPUSAN_BINARY_DIR, name);
	return path;
}

/* Directories tu_tmpdir() made in this process, removed at its exit. */
static char *tu_dirs[64];
static size_t tu_ndirs;
static pid_t tu_dirs_pid;

static int tu_remove_cb(const char *path, const struct stat *st, int flag,
			struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void tu_remove_dirs(void)
{
	/* Only the process that made them: a forked child exits too. */
	if (getpid() != tu_dirs_pid)
		return;
	for (size_t i = 0; i < tu_ndirs; i++) {
		nftw(tu_dirs[i], tu_remove_cb, 16, FTW_DEPTH | FTW_PHYS);
		free(tu_dirs[i]);
	}
	tu_ndirs = 0;
}

char *tu_tmpdir(void)
{
	char *dir;

	ck_assert_int_gt(asprintf(&dir, "%s/npusan-test-XXXXXX",
				  getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp"),
			 0);
	ck_assert_ptr_nonnull(mkdtemp(dir));
	if (tu_dirs_pid != getpid()) {
		/* A fresh test process (Check forks one per test). */
		tu_ndirs = 0;
		tu_dirs_pid = getpid();
		atexit(tu_remove_dirs);
	}
	ck_assert_uint_lt(tu_ndirs, sizeof(tu_dirs) / sizeof(tu_dirs[0]));
	tu_dirs[tu_ndirs++] = strdup(dir);
	return dir;
}

char *tu_write_file(const char *name, const char *text)
{
	static char *dir;
	static pid_t dir_pid;
	char *path;
	FILE *f;

	if (dir == NULL || dir_pid != getpid()) {
		free(dir);
		dir = tu_tmpdir();
		dir_pid = getpid();
	}
	ck_assert_int_gt(asprintf(&path, "%s/%s", dir, name), 0);
	f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, strlen(text), f), strlen(text));
	ck_assert_int_eq(fclose(f), 0);
	return path;
}

void tu_nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

unsigned tu_count_lines(const char *text, const char *needle)
{
	size_t nl = strlen(needle);
	unsigned n = 0;

	for (const char *l = text; l != NULL && *l != '\0';) {
		const char *end = strchr(l, '\n');

		if (end == NULL)
			end = l + strlen(l);
		for (const char *p = l; p + nl <= end; p++) {
			if (strncmp(p, needle, nl) == 0) {
				n++;
				break;
			}
		}
		l = *end != '\0' ? end + 1 : end;
	}
	return n;
}

/* Removes `"key":VALUE` (and the comma before or after it) from `line`,
 * for every key in `keys`; VALUE is a number, null or a string without
 * quotes inside. */
static void tu_strip_fields(char *line, const char *const *keys)
{
	char pat[64], *p, *end;

	for (; *keys != NULL; keys++) {
		snprintf(pat, sizeof(pat), "\"%s\":", *keys);
		while ((p = strstr(line, pat)) != NULL) {
			end = p + strlen(pat);
			if (*end == '"')
				end = strchr(end + 1, '"') + 1;
			else
				end += strcspn(end, ",}");
			if (*end == ',')
				end++;
			else if (p > line && p[-1] == ',')
				p--;
			memmove(p, end, strlen(end) + 1);
		}
	}
}

char *tu_json_lines(const char *text, const char *needle,
		    const char *const *strip)
{
	char *out = calloc(1, strlen(text) + 1), *line;
	const char *l = text, *nl;

	ck_assert_ptr_nonnull(out);
	for (; *l != '\0'; l = nl + (*nl != '\0')) {
		nl = strchr(l, '\n');
		if (nl == NULL)
			nl = l + strlen(l);
		line = strndup(l, (size_t)(nl - l));
		if (strstr(line, needle) != NULL) {
			tu_strip_fields(line, strip);
			strcat(out, line);
			strcat(out, "\n");
		}
		free(line);
	}
	return out;
}

bool tu_sock_answers(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool ok;

	ck_assert_int_ge(fd, 0);
	ck_assert_uint_lt(strlen(path), sizeof(sa.sun_path));
	memcpy(sa.sun_path, path, strlen(path) + 1);
	ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return ok;
}

bool tu_runnable_by(uid_t uid, const char *path)
{
	int status;
	pid_t pid = fork();

	/* No ck_assert: a suite's main() asks, before any test runs. */
	if (pid < 0)
		return false;
	if (pid == 0) {
		if (uid != geteuid() &&
		    (setresgid(uid, uid, uid) < 0 || setresuid(uid, uid, uid) < 0))
			_exit(2);
		_exit(access(path, X_OK) == 0 ? 0 : 1);
	}
	return waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	       WEXITSTATUS(status) == 0;
}

void tu_daemon_init(struct tu_daemon *d)
{
	memset(d, 0, sizeof(*d));
	d->dir = tu_tmpdir();
	snprintf(d->sock, sizeof(d->sock), "%s/npusand.sock", d->dir);
	snprintf(d->db, sizeof(d->db), "%s/npusan.db", d->dir);
	snprintf(d->log, sizeof(d->log), "%s/npusand.log", d->dir);
	setenv("NPUSAN_SOCKET", d->sock, 1);
	setenv("NPUSAN_DB", d->db, 1);
	unsetenv("NPUSAN");
	unsetenv("NPUSAN_RECORD");
}

void tu_daemon_start(struct tu_daemon *d, const char *const *extra)
{
	const char *argv[32] = { tu_bin("daemon/npusand"), "--socket",
				 d->sock, "--db", d->db };
	size_t n = 5;
	char *bin = strdup(argv[0]);
	int fd;

	argv[0] = bin;
	for (; extra != NULL && *extra != NULL; extra++) {
		ck_assert_uint_lt(n, 31);
		argv[n++] = *extra;
	}
	d->pid = fork();
	ck_assert_int_ge(d->pid, 0);
	if (d->pid == 0) {
		fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0600);
		dup2(fd, 2);
		execv(bin, (char *const *)argv);
		_exit(127);
	}
	free(bin);
	for (int i = 0; i < 1000 && !tu_sock_answers(d->sock); i++)
		tu_nap_ms(10);
	ck_assert_msg(tu_sock_answers(d->sock), "npusand did not start");
}

int tu_daemon_stop(struct tu_daemon *d, int sig)
{
	int status;

	kill(d->pid, sig);
	ck_assert_int_eq(waitpid(d->pid, &status, 0), d->pid);
	d->pid = 0;
	return status;
}

int tu_main(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? 0 : 1;
}

static void collect_cb(const struct finding *f, bool first, void *arg)
{
	struct tu_findings *out = arg;

	if (!first) {
		for (size_t i = 0; i < out->n; i++) {
			if (out->v[i].id == f->id)
				out->v[i].count = f->count;
		}
		return;
	}
	out->v = realloc(out->v, (out->n + 1) * sizeof(*out->v));
	ck_assert_ptr_nonnull(out->v);
	out->v[out->n++] = *f;
}

void tu_analyze(const char *text, bool dedup, struct tu_findings *out)
{
	struct engine_opts o = { .dedup = dedup, .finding_cb = collect_cb,
				 .arg = out };
	struct trace_reader *r;
	struct engine *e;
	struct op op;
	int rc;

	memset(out, 0, sizeof(*out));
	ck_assert_int_eq(symtab_new(&out->syms), 0);
	ck_assert_int_eq(trace_reader_new_mem(text, strlen(text), "test.trace",
					      out->syms, &r), 0);
	ck_assert_int_eq(engine_new(&o, &e), 0);
	while ((rc = trace_read(r, &op)) == 1) {
		const char *broken;

		rc = engine_feed(e, &op);
		if (rc < 0)
			break;
		broken = engine_check(e);
		ck_assert_msg(broken == NULL, "test.trace:%lu: after this "
			      "operation the engine is inconsistent: %s",
			      trace_reader_line(r), broken);
	}
	out->err = rc;
	if (rc < 0)
		snprintf(out->errmsg, sizeof(out->errmsg), "%s",
			 trace_reader_error(r));
	engine_free(e);
	trace_reader_close(r);
}

void tu_findings_free(struct tu_findings *f)
{
	free(f->v);
	symtab_free(f->syms);
	memset(f, 0, sizeof(*f));
}

const char *tu_op(const struct tu_findings *f, unsigned idx, bool previous)
{
	const char *s;

	ck_assert_uint_lt(idx, f->n);
	s = symtab_str(f->syms, previous ? f->v[idx].previous.op
					 : f->v[idx].access.op, NULL);
	return s ? s : "";
}

size_t tu_count(const struct tu_findings *f, enum finding_kind kind)
{
	size_t n = 0;

	for (size_t i = 0; i < f->n; i++)
		n += f->v[i].kind == kind;
	return n;
}
