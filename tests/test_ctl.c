/*
 * test_ctl.c - `npusanctl list`, `findings`, `show` and `stats` as a user
 * types them, against a fake npusand: a thread on a Unix socket in a
 * temporary directory that reads one Query and answers with canned
 * FromDaemon frames (split as a test says), garbage, silence or an Error.
 * The output is checked exactly: table alignment, the JSON of
 * docs/findings.md (the same bytes `analyze --json` prints, plus
 * first_seen and last_seen), the text report of `analyze`.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "npusan.pb-c.h"
#include "testutil.h"

extern char **environ;

/* tests/test_ctl_limits.c: --print-limit and --op/--exclude-op. */
void test_ctl_limits_add(TCase *tc);

/* ---- the fake daemon ----------------------------------------------------- */

enum fq_act {
	FQ_SEND,  /* bytes as they are (a frame, or garbage) */
	FQ_SLEEP, /* ms */
	FQ_GO,    /* wait until the test calls fq_go() */
	FQ_CLOSE, /* close at once instead of waiting for the client */
	FQ_ACCEPT, /* close, and take the client's next connection's query */
};

struct fq_step {
	enum fq_act act;
	uint8_t *data;
	size_t len;
	int ms;
};

struct fq {
	char path[108];
	int lfd;
	int stop[2];
	int go[2];
	pthread_t th;
	struct fq_step steps[32];
	size_t nsteps;
	/* What the thread saw; read after fq_stop(). */
	unsigned nconn;
	Npusan__ToDaemon *got;
	bool peer_closed; /* the client closed its end */
};

/* Waits for `fd` or the stop pipe; true when `fd` is ready, also when the
 * stop came at the same time: a client that hung up just before the test
 * stops the thread must still be seen to (peer_closed). */
static bool fq_wait(struct fq *q, int fd, int ms)
{
	struct pollfd p[2] = { { fd, POLLIN, 0 }, { q->stop[0], POLLIN, 0 } };

	return poll(p, 2, ms) > 0 && (p[0].revents & (POLLIN | POLLHUP));
}

/* Takes the next connection and its query (into q->got). The connection,
 * or -1 when none came. */
static int fq_accept(struct fq *q, uint8_t *buf)
{
	size_t len;
	int c;

	if (!fq_wait(q, q->lfd, 30000))
		return -1;
	c = accept4(q->lfd, NULL, NULL, SOCK_CLOEXEC);
	if (c < 0)
		return -1;
	q->nconn++;
	if (q->got != NULL)
		npusan__to_daemon__free_unpacked(q->got, NULL);
	q->got = NULL;
	if (frame_recv(c, buf, FRAME_MAX, &len, NULL, 10000) == 0)
		q->got = npusan__to_daemon__unpack(NULL, len, buf);
	return c;
}

static void *fq_main(void *arg)
{
	struct fq *q = arg;
	uint8_t *buf = malloc(FRAME_MAX);
	bool close_now = false;
	int c;

	if (buf == NULL || (c = fq_accept(q, buf)) < 0)
		goto out;
	for (size_t i = 0; i < q->nsteps && !close_now; i++) {
		const struct fq_step *s = &q->steps[i];
		struct timespec ts = { s->ms / 1000, s->ms % 1000 * 1000000L };

		if (s->act == FQ_SEND)
			send(c, s->data, s->len, MSG_NOSIGNAL);
		else if (s->act == FQ_SLEEP)
			nanosleep(&ts, NULL);
		else if (s->act == FQ_GO)
			close_now = !fq_wait(q, q->go[0], 30000) ||
				    read(q->go[0], &ts, 1) != 1;
		else if (s->act == FQ_CLOSE)
			close_now = true;
		else if (close(c), (c = fq_accept(q, buf)) < 0)
			goto out; /* FQ_ACCEPT */
	}
	/* Hold the connection until the client hangs up. */
	while (!close_now && fq_wait(q, c, 30000)) {
		if (recv(c, buf, FRAME_MAX, 0) <= 0) {
			q->peer_closed = true;
			break;
		}
	}
	close(c);
out:
	free(buf);
	return NULL;
}

/* A fake daemon in a fresh directory; NPUSAN_SOCKET names it. */
static struct fq *fq_new(void)
{
	struct fq *q = calloc(1, sizeof(*q));
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char *dir = tu_tmpdir();

	ck_assert_ptr_nonnull(q);
	ck_assert_int_lt(snprintf(q->path, sizeof(q->path), "%s/npusand.sock",
				  dir),
			 (int)sizeof(sa.sun_path));
	free(dir);
	strcpy(sa.sun_path, q->path);
	q->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(q->lfd, 0);
	ck_assert_int_eq(bind(q->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(q->lfd, 8), 0);
	ck_assert_int_eq(pipe2(q->stop, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(q->go, O_CLOEXEC), 0);
	setenv("NPUSAN_SOCKET", q->path, 1);
	return q;
}

static void fq_step(struct fq *q, struct fq_step s)
{
	ck_assert_uint_lt(q->nsteps, sizeof(q->steps) / sizeof(q->steps[0]));
	q->steps[q->nsteps++] = s;
}

/* Queues `m` as one frame. */
static void fq_frame(struct fq *q, const Npusan__FromDaemon *m)
{
	size_t len = npusan__from_daemon__get_packed_size(m);
	uint8_t *b = malloc(FRAME_HEADER_SIZE + len + 1);

	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(frame_header_encode(len, b), 0);
	npusan__from_daemon__pack(m, b + FRAME_HEADER_SIZE);
	fq_step(q, (struct fq_step){ FQ_SEND, b, FRAME_HEADER_SIZE + len, 0 });
}

/* Queues `len` raw bytes. */
static void fq_raw(struct fq *q, const void *p, size_t len)
{
	uint8_t *b = malloc(len);

	ck_assert_ptr_nonnull(b);
	memcpy(b, p, len);
	fq_step(q, (struct fq_step){ FQ_SEND, b, len, 0 });
}

static void fq_sleep(struct fq *q, int ms)
{
	fq_step(q, (struct fq_step){ FQ_SLEEP, NULL, 0, ms });
}

/* The script waits here for fq_go(). */
static void fq_wait_go(struct fq *q)
{
	fq_step(q, (struct fq_step){ FQ_GO, NULL, 0, 0 });
}

static void fq_go(struct fq *q)
{
	ck_assert_int_eq(write(q->go[1], "g", 1), 1);
}

static void fq_close(struct fq *q)
{
	fq_step(q, (struct fq_step){ FQ_CLOSE, NULL, 0, 0 });
}

/* The script goes on with the client's next connection. */
static void fq_next(struct fq *q)
{
	fq_step(q, (struct fq_step){ FQ_ACCEPT, NULL, 0, 0 });
}

static void fq_start(struct fq *q)
{
	ck_assert_int_eq(pthread_create(&q->th, NULL, fq_main, q), 0);
}

/* Stops the thread; what it saw stays readable until fq_free(). */
static void fq_stop(struct fq *q)
{
	ck_assert_int_eq(write(q->stop[1], "x", 1), 1);
	pthread_join(q->th, NULL);
}

static void fq_free(struct fq *q)
{
	close(q->lfd);
	close(q->stop[0]);
	close(q->stop[1]);
	close(q->go[0]);
	close(q->go[1]);
	unlink(q->path);
	for (size_t i = 0; i < q->nsteps; i++)
		free(q->steps[i].data);
	if (q->got != NULL)
		npusan__to_daemon__free_unpacked(q->got, NULL);
	free(q);
}

/* The query the fake daemon received. */
static const Npusan__Query *fq_query(const struct fq *q)
{
	ck_assert_ptr_nonnull(q->got);
	ck_assert_int_eq(q->got->msg_case, NPUSAN__TO_DAEMON__MSG_QUERY);
	ck_assert(q->got->query->has_protocol_version);
	ck_assert_uint_eq(q->got->query->protocol_version, 1);
	return q->got->query;
}

/* ---- canned replies ------------------------------------------------------ */

static char *spec_stack[] = { (char *)"train.py:14 in step",
			      (char *)"train.py:30 in main" };

#define T0_MS INT64_C(1714557600000) /* 2024-05-01T10:00:00.000Z */
#define T1_MS INT64_C(1714561205042) /* 2024-05-01T11:00:05.042Z */
#define T0 "2024-05-01T10:00:00.000Z"
#define T1 "2024-05-01T11:00:05.042Z"

/* A finding with its parts, all in one place. */
struct cf {
	Npusan__Finding f;
	Npusan__Alloc alloc;
	Npusan__Access access, previous;
};

static void cf_access(Npusan__Access *a, uint64_t stream, uint64_t seq,
		      bool write, const char *op, char **stack, size_t n)
{
	*a = (Npusan__Access)NPUSAN__ACCESS__INIT;
	a->has_stream = a->has_seq = a->has_write = true;
	a->stream = stream;
	a->seq = seq;
	a->write = write;
	a->op = (char *)op;
	a->stack = stack;
	a->n_stack = n;
}

/*
 * docs/findings.md's example: the data race (id 1) or the missing
 * record_stream (id 2) of process 4242, job demo, rank 0.
 */
static void cf_spec(struct cf *c, bool race)
{
	Npusan__Finding *f = &c->f;

	*f = (Npusan__Finding)NPUSAN__FINDING__INIT;
	c->alloc = (Npusan__Alloc)NPUSAN__ALLOC__INIT;
	c->alloc.has_ptr = c->alloc.has_size = c->alloc.has_stream = true;
	c->alloc.ptr = 0x1000;
	c->alloc.size = 4096;
	c->alloc.stream = 0;
	c->alloc.stack = spec_stack;
	c->alloc.n_stack = 2;
	cf_access(&c->access, 7, 2, false, "aten::add.Tensor", NULL, 0);
	cf_access(&c->previous, 0, 1, true, "aten::randn", spec_stack, 2);
	f->has_id = f->has_pid = f->has_rank = f->has_ptr = true;
	f->id = race ? 1 : 2;
	f->kind = (char *)(race ? "data_race" : "missing_record_stream");
	f->pid = 4242;
	f->job = (char *)"demo";
	f->rank = 0;
	f->ptr = 0x1000;
	f->alloc = &c->alloc;
	f->access = &c->access;
	f->previous = race ? &c->previous : NULL;
	f->detected_at = (char *)(race ? "launch" : "free");
	f->has_count = f->has_first_ms = f->has_last_ms = true;
	f->count = 1;
	f->first_ms = T0_MS;
	f->last_ms = T1_MS;
}

/* Queues a FindingsReply frame of `n` findings. */
static void fq_findings(struct fq *q, struct cf *const *v, size_t n,
			bool done)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__FindingsReply r = NPUSAN__FINDINGS_REPLY__INIT;
	Npusan__Finding *fs[8];

	ck_assert_uint_le(n, 8);
	for (size_t i = 0; i < n; i++)
		fs[i] = &v[i]->f;
	r.n_findings = n;
	r.findings = fs;
	r.has_done = done;
	r.done = done;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_FINDINGS;
	m.findings = &r;
	fq_frame(q, &m);
}

static void fq_error(struct fq *q, const char *msg, int code)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__Error e = NPUSAN__ERROR__INIT;

	e.message = (char *)msg;
	e.has_code = true;
	e.code = code;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_ERROR;
	m.error = &e;
	fq_frame(q, &m);
}

/* The JSON of the spec example as `analyze --json` prints it. */
#define SPEC_RACE_JSON                                                        \
	"{\"id\":1,\"kind\":\"data_race\",\"process\":{\"pid\":4242,"         \
	"\"job\":\"demo\",\"rank\":0},\"ptr\":\"0x1000\",\"alloc\":{"         \
	"\"ptr\":\"0x1000\",\"size\":4096,\"stream\":0,\"stack\":["           \
	"\"train.py:14 in step\",\"train.py:30 in main\"]},\"access\":{"      \
	"\"stream\":7,\"seq\":2,\"type\":\"read\",\"op\":"                    \
	"\"aten::add.Tensor\",\"stack\":[],\"graph\":null},\"previous\":{\"stream\":0,"      \
	"\"seq\":1,\"type\":\"write\",\"op\":\"aten::randn\",\"stack\":["     \
	"\"train.py:14 in step\",\"train.py:30 in main\"],\"graph\":null},"                  \
	"\"detected_at\":\"launch\",\"count\":1"
#define SPEC_MRS_JSON SPEC_MRS_HEAD ",\"count\":1"
#define SPEC_MRS_HEAD                                                         \
	"{\"id\":2,\"kind\":\"missing_record_stream\",\"process\":{"          \
	"\"pid\":4242,\"job\":\"demo\",\"rank\":0},\"ptr\":\"0x1000\","       \
	"\"alloc\":{\"ptr\":\"0x1000\",\"size\":4096,\"stream\":0,"           \
	"\"stack\":[\"train.py:14 in step\",\"train.py:30 in main\"]},"       \
	"\"access\":{\"stream\":7,\"seq\":2,\"type\":\"read\",\"op\":"        \
	"\"aten::add.Tensor\",\"stack\":[],\"graph\":null},\"previous\":null,"               \
	"\"detected_at\":\"free\""
#define SEEN_JSON ",\"first_seen\":\"" T0 "\",\"last_seen\":\"" T1 "\"}\n"

static const char spec_trace[] =
	"npusan-trace 1\n"
	"process pid=4242 job=demo rank=0\n"
	"stack id=1 frame=\"train.py:14 in step\" frame=\"train.py:30 in main\"\n"
	"alloc ptr=0x1000 size=4096 stream=0 stack=1\n"
	"launch stream=0 op=aten::randn write=0x1000 stack=1\n"
	"stream_create stream=7\n"
	"launch stream=7 op=aten::add.Tensor read=0x1000 write=0x2000\n"
	"free ptr=0x1000\n";

/* ---- running npusanctl --------------------------------------------------- */

static int ctlv(char **out, char **err, va_list ap)
{
	const char *argv[24] = { tu_bin("npusanctl") };
	int n = 1;

	while (n < 23 && (argv[n] = va_arg(ap, const char *)) != NULL)
		n++;
	return tu_run(argv, NULL, out, err);
}

/* Runs `npusanctl ARGS...` (NULL-terminated). */
static int ctl(char **out, char **err, ...)
{
	va_list ap;
	int rc;

	va_start(ap, err);
	rc = ctlv(out, err, ap);
	va_end(ap);
	return rc;
}

/* Runs `npusanctl ARGS...` against `q`, stopped after. */
static int ctl_fq(struct fq *q, char **out, char **err, ...)
{
	va_list ap;
	int rc;

	fq_start(q);
	va_start(ap, err);
	rc = ctlv(out, err, ap);
	va_end(ap);
	fq_stop(q);
	return rc;
}

/* Starts npusanctl with its standard output on `out_fd`. */
static pid_t ctl_spawn(const char *const *argv, int out_fd)
{
	posix_spawn_file_actions_t fa;
	pid_t pid;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
	ck_assert_int_eq(posix_spawn(&pid, argv[0], &fa, NULL,
				     (char *const *)argv, environ),
			 0);
	posix_spawn_file_actions_destroy(&fa);
	return pid;
}

/*
 * Reads `fd` into *buf (NUL-terminated, grown as needed) until it holds
 * `want` (NULL: until end of file, or EIO, a pty's end) or 20 s pass.
 */
static void read_until(int fd, char **buf, size_t *len, const char *want)
{
	while (want == NULL || *buf == NULL || strstr(*buf, want) == NULL) {
		struct pollfd p = { fd, POLLIN, 0 };
		char tmp[4096];
		ssize_t n;

		ck_assert_int_eq(poll(&p, 1, 20000), 1);
		n = read(fd, tmp, sizeof(tmp));
		if (n <= 0)
			break;
		*buf = realloc(*buf, *len + (size_t)n + 1);
		ck_assert_ptr_nonnull(*buf);
		memcpy(*buf + *len, tmp, (size_t)n);
		*len += (size_t)n;
		(*buf)[*len] = '\0';
	}
	if (*buf == NULL)
		*buf = strdup("");
}

static int wait_status(pid_t pid)
{
	int status;

	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return WIFSIGNALED(status) ? 128 + WTERMSIG(status) :
				     WEXITSTATUS(status);
}

/* Runs npusanctl with a terminal on standard output; what it printed. */
static int ctl_tty(char **out, const char *const *argv)
{
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC), s;
	size_t len = 0;
	pid_t pid;

	ck_assert_int_ge(m, 0);
	ck_assert_int_eq(grantpt(m), 0);
	ck_assert_int_eq(unlockpt(m), 0);
	s = open(ptsname(m), O_RDWR | O_NOCTTY | O_CLOEXEC);
	ck_assert_int_ge(s, 0);
	pid = ctl_spawn(argv, s);
	close(s);
	*out = NULL;
	read_until(m, out, &len, NULL);
	close(m);
	return wait_status(pid);
}

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

/* ---- findings ------------------------------------------------------------ */

START_TEST(ctl_findings_json_is_findings_md_exactly)
{
	struct fq *q = fq_new();
	struct cf a, b;
	struct cf *v[] = { &a, &b };
	char *out, *err;

	cf_spec(&a, true);
	cf_spec(&b, false);
	fq_findings(q, v, 2, true);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "findings", "--json", NULL), 1);
	ck_assert_str_eq(out, SPEC_RACE_JSON SEEN_JSON SPEC_MRS_JSON SEEN_JSON);
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_json_matches_analyze_byte_for_byte)
{
	/* One formatter: the daemon's finding prints as analyze's does. */
	struct fq *q = fq_new();
	struct cf a, b;
	struct cf *v[] = { &a, &b };
	char *trace = tu_write_file("spec.trace", spec_trace), *live, *offline;
	char *p;

	cf_spec(&a, true);
	cf_spec(&b, false);
	fq_findings(q, v, 2, true);
	ck_assert_int_eq(ctl_fq(q, &live, NULL, "findings", "--json", NULL), 1);
	ck_assert_int_eq(ctl(&offline, NULL, "analyze", "--json", trace, NULL),
			 1);
	/* take out first_seen and last_seen, which only the daemon has */
	while ((p = strstr(live, ",\"first_seen\"")) != NULL)
		memmove(p, p + strlen(SEEN_JSON) - 2,
			strlen(p + strlen(SEEN_JSON) - 2) + 1);
	ck_assert_str_eq(live, offline);
	free(live);
	free(offline);
	free(trace);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_json_null_alloc_previous_and_big_pointers)
{
	struct fq *q = fq_new();
	struct cf a;
	struct cf *v[] = { &a };
	char *stack[] = { (char *)"tab\there \"q\"", (char *)"\xff bad" };
	char *out;

	cf_spec(&a, false);
	a.f.id = 9007199254740993; /* 2^53 + 1 */
	a.f.ptr = UINT64_C(0xffffffffffff0000);
	a.f.alloc = NULL;
	a.f.has_rank = false;
	a.f.job = NULL;
	a.f.has_first_ms = false;
	a.f.count = 12;
	a.access.stack = stack;
	a.access.n_stack = 2;
	a.access.write = true;
	a.access.stream = UINT64_C(18446744073709551615);
	fq_findings(q, v, 1, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "findings", "--json", NULL), 1);
	ck_assert_str_eq(
		out,
		"{\"id\":9007199254740993,\"kind\":\"missing_record_stream\","
		"\"process\":{\"pid\":4242,\"job\":null,\"rank\":null},"
		"\"ptr\":\"0xffffffffffff0000\",\"alloc\":null,\"access\":{"
		"\"stream\":18446744073709551615,\"seq\":2,\"type\":\"write\","
		"\"op\":\"aten::add.Tensor\",\"stack\":[\"tab\\there "
		"\\\"q\\\"\",\"\\ufffd bad\"],\"graph\":null},\"previous\":null,"
		"\"detected_at\":\"free\",\"count\":12,\"first_seen\":null,"
		"\"last_seen\":\"" T1 "\"}\n");
	free(out);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_answer_in_several_frames)
{
	struct fq *q = fq_new();
	struct cf a, b;
	struct cf *v1[] = { &a }, *v2[] = { &b };
	char *out, *err;

	cf_spec(&a, true);
	cf_spec(&b, false);
	fq_findings(q, v1, 1, false);
	fq_sleep(q, 50);
	fq_findings(q, NULL, 0, false);
	fq_findings(q, v2, 1, true);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "findings", "--json", NULL), 1);
	ck_assert_str_eq(out, SPEC_RACE_JSON SEEN_JSON SPEC_MRS_JSON SEEN_JSON);
	ck_assert_str_eq(err, "");
	ck_assert(q->peer_closed);
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_answer_cut_short_is_an_error)
{
	/*
	 * The negative control of the test above: without `done` the answer
	 * is not complete, and a daemon that hangs up then is an error.
	 */
	struct fq *q = fq_new();
	struct cf a;
	struct cf *v[] = { &a };
	char *out, *err;

	cf_spec(&a, true);
	fq_findings(q, v, 1, false);
	fq_close(q);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "findings", "--json", NULL), 3);
	/* JSON lines go out as they come */
	ck_assert_str_eq(out, SPEC_RACE_JSON SEEN_JSON);
	ck_assert_ptr_nonnull(strstr(err, "closed the connection before it "
					  "finished answering"));
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_table_is_aligned)
{
	struct fq *q = fq_new();
	struct cf a, b, c;
	struct cf *v1[] = { &a }, *v2[] = { &b, &c };
	int64_t now = (int64_t)time(NULL) * 1000;
	char *out, *err;

	cf_spec(&a, true);
	cf_spec(&b, false);
	cf_spec(&c, true);
	a.f.last_ms = now - 150 * 1000;	      /* 2m */
	b.f.last_ms = now - 5 * 3600 * 1000 - 60000; /* 5h */
	c.f.id = 1234;
	c.f.job = (char *)"pretrain-llama";
	c.f.rank = 17;
	c.f.pid = 99;
	c.f.count = 4096;
	c.f.has_last_ms = false;
	c.previous.op = (char *)"nccl:all_reduce";
	c.previous.stream = 12;
	fq_findings(q, v1, 1, false);
	fq_findings(q, v2, 2, true);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "findings", NULL), 1);
	ck_assert_str_eq(
		out,
		"  ID  KIND                   JOB             RANK   PID  OPS"
		"                               STREAMS  COUNT  LAST SEEN\n"
		"   1  data_race              demo               0  4242  "
		"aten::add.Tensor/aten::randn      7/0          1  2m ago\n"
		"   2  missing_record_stream  demo               0  4242  "
		"aten::add.Tensor                  7/0          1  5h ago\n"
		"1234  data_race              pretrain-llama    17    99  "
		"aten::add.Tensor/nccl:all_reduce  7/12      4096  -\n");
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_none_exits_0)
{
	struct fq *q = fq_new();
	char *out;

	fq_findings(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "findings", NULL), 0);
	ck_assert_str_eq(out, "No findings.\n");
	free(out);
	fq_free(q);
	q = fq_new();
	fq_findings(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "findings", "--json", NULL), 0);
	ck_assert_str_eq(out, "");
	free(out);
	fq_free(q);
}
END_TEST

static void fq_list(struct fq *q, Npusan__Process **v, size_t n, bool done);

START_TEST(ctl_findings_sends_every_filter)
{
	struct fq *q = fq_new();
	const Npusan__FindingsRequest *r;

	/* A job's or a process's: first its processes, for those that
	 * exited but are not stored yet (none here). */
	fq_list(q, NULL, 0, true);
	fq_next(q);
	fq_findings(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, NULL, NULL, "findings", "--job", "demo",
				"--pid", "4242", "--rank", "3", "--kind",
				"missing_record_stream", "--since",
				"2024-05-01T12:00:00.5+02:00", "--limit", "7", NULL),
			 0);
	ck_assert_int_eq(fq_query(q)->q_case, NPUSAN__QUERY__Q_FINDINGS);
	r = fq_query(q)->findings;
	ck_assert_str_eq(r->job, "demo");
	ck_assert(r->has_pid && r->pid == 4242);
	ck_assert(r->has_rank && r->rank == 3);
	ck_assert_str_eq(r->kind, "missing_record_stream");
	ck_assert(r->has_since_ms);
	ck_assert_int_eq(r->since_ms, T0_MS + 500);
	ck_assert(r->has_limit && r->limit == 7);
	ck_assert(!r->follow);
	fq_free(q);

	/* Every kind of findings.md is one --kind takes, the graph ones too. */
	for (int k = 0; k < 4; k++) {
		static const char *const kinds[] = {
			"data_race", "missing_record_stream",
			"stale_graph_address", "unjoined_capture"
		};
		const char *name = kinds[k];

		q = fq_new();
		fq_findings(q, NULL, 0, true);
		ck_assert_int_eq(ctl_fq(q, NULL, NULL, "findings", "--kind",
					name, NULL), 0);
		ck_assert_str_eq(fq_query(q)->findings->kind, name);
		fq_free(q);
	}

	/* No filter given: none sent. */
	q = fq_new();
	fq_findings(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, NULL, NULL, "findings", NULL), 0);
	r = fq_query(q)->findings;
	ck_assert(r->job == NULL && !r->has_pid && !r->has_rank &&
		  r->kind == NULL && !r->has_since_ms && !r->has_limit);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_since_takes_durations_and_timestamps)
{
	static const struct {
		const char *arg;
		int64_t back_ms; /* from now; -1: T0_MS exactly */
	} cases[] = {
		{ "90m", 90 * 60000 },	     { "1h30m", 90 * 60000 },
		{ "2d", 2 * 86400000LL },    { "45s", 45000 },
		{ "1w", 604800000LL },	     { "250ms", 250 },
		{ "2024-05-01T10:00:00Z", -1 }, { "2024-05-01 10:00Z", -1 },
		{ "2024-05-01T10:00:00", -1 }, { "2024-05-01T06:00:00-04:00", -1 },
		{ "2024-05-01T10:00:00.000z", -1 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct fq *q = fq_new();
		int64_t before = (int64_t)time(NULL) * 1000, got;

		fq_findings(q, NULL, 0, true);
		ck_assert_int_eq(ctl_fq(q, NULL, NULL, "findings", "--since",
					cases[i].arg, NULL),
				 0);
		got = fq_query(q)->findings->since_ms;
		if (cases[i].back_ms < 0) {
			ck_assert_int_eq(got, T0_MS);
		} else {
			int64_t want = before - cases[i].back_ms;

			ck_assert_msg(got >= want && got <= want + 10000,
				      "%s: %" PRId64 " vs %" PRId64,
				      cases[i].arg, got, want);
		}
		fq_free(q);
	}
}
END_TEST

/*
 * --follow asks again every second for what was seen lately, printing a
 * finding that is new or whose count grew, and nothing twice; SIGINT ends
 * it with 0.
 */
START_TEST(ctl_findings_follow_prints_new_and_updated_until_sigint)
{
	struct fq *q = fq_new();
	struct cf a, b, b3;
	struct cf *v1[] = { &a }, *v2[] = { &a, &b }, *v3[] = { &a, &b3 };
	const char *argv[] = { tu_bin("npusanctl"), "findings", "--json",
			       "--follow", "--timeout", "0.5", NULL };
	char *out = NULL;
	size_t len = 0;
	int64_t before = (int64_t)time(NULL) * 1000;
	int p[2];
	pid_t pid;

	cf_spec(&a, true);
	cf_spec(&b, false);
	cf_spec(&b3, false);
	b3.f.count = 3;
	fq_findings(q, v1, 1, true);
	fq_next(q);
	fq_findings(q, v2, 2, true); /* a again, and b: new */
	fq_next(q);
	fq_findings(q, v3, 2, true); /* b's count grew */
	fq_next(q);
	fq_start(q);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid = ctl_spawn(argv, p[1]);
	close(p[1]);
	read_until(p[0], &out, &len, "\"count\":3");
	ck_assert_int_eq(kill(pid, SIGINT), 0);
	read_until(p[0], &out, &len, NULL);
	close(p[0]);
	ck_assert_int_eq(wait_status(pid), 0);
	ck_assert_str_eq(out, SPEC_RACE_JSON SEEN_JSON SPEC_MRS_HEAD
			 ",\"count\":1" SEEN_JSON SPEC_MRS_HEAD
			 ",\"count\":3" SEEN_JSON);
	fq_stop(q);
	/* A later ask: no push wanted, only what was seen lately. */
	ck_assert(!fq_query(q)->findings->follow);
	ck_assert(fq_query(q)->findings->has_since_ms);
	ck_assert_int_ge(fq_query(q)->findings->since_ms, before - 11000);
	ck_assert_uint_ge(q->nconn, 3);
	free(out);
	fq_free(q);
}
END_TEST

START_TEST(ctl_findings_follow_table_prints_rows_as_they_come)
{
	struct fq *q = fq_new();
	struct cf a;
	struct cf *v[] = { &a };
	const char *argv[] = { tu_bin("npusanctl"), "findings", "--follow",
			       NULL };
	char *out = NULL;
	size_t len = 0;
	int p[2];
	pid_t pid;

	cf_spec(&a, true);
	a.f.has_last_ms = false;
	fq_findings(q, NULL, 0, true);
	fq_wait_go(q);
	fq_next(q);
	fq_findings(q, v, 1, true);
	fq_next(q);
	fq_start(q);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid = ctl_spawn(argv, p[1]);
	close(p[1]);
	/* the header at once, though nothing matched yet */
	read_until(p[0], &out, &len, "LAST SEEN\n");
	ck_assert_ptr_null(strstr(out, "data_race"));
	fq_go(q);
	read_until(p[0], &out, &len, "aten::randn");
	ck_assert_int_eq(kill(pid, SIGTERM), 0);
	read_until(p[0], &out, &len, NULL);
	close(p[0]);
	ck_assert_int_eq(wait_status(pid), 0);
	ck_assert_str_eq(out, "ID  KIND  JOB  RANK  PID  OPS  STREAMS  COUNT  "
			      "LAST SEEN\n"
			      " 1  data_race  demo     0  4242  "
			      "aten::add.Tensor/aten::randn  7/0          1  "
			      "-\n");
	fq_stop(q);
	free(out);
	fq_free(q);
}
END_TEST

/* ---- errors from the daemon ---------------------------------------------- */

START_TEST(ctl_error_reply_is_reported_and_exits_3)
{
	struct fq *q = fq_new();
	char *out, *err;

	fq_error(q, "database error\033[31m", EIO);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "show", "42", NULL), 3);
	ck_assert_str_eq(out, "");
	ck_assert_str_eq(err, "npusanctl show: the daemon refused the "
			      "request: database error?[31m\n");
	ck_assert_int_eq(fq_query(q)->q_case, NPUSAN__QUERY__Q_SHOW);
	ck_assert_int_eq(fq_query(q)->show->id, 42);
	free(out);
	free(err);
	fq_free(q);

	/* No message: the code speaks. */
	q = fq_new();
	fq_error(q, NULL, EPROTO);
	ck_assert_int_eq(ctl_fq(q, NULL, &err, "stats", NULL), 3);
	ck_assert_ptr_nonnull(strstr(err, strerror(EPROTO)));
	free(err);
	fq_free(q);
}
END_TEST

/* No such finding is the asker's mistake, not a missing daemon: 2. */
START_TEST(ctl_show_of_no_such_finding_exits_2)
{
	struct fq *q = fq_new();
	char *out, *err;

	fq_error(q, "no finding 42\033[31m", ENOENT);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "show", "42", NULL), 2);
	ck_assert_str_eq(out, "");
	ck_assert_str_eq(err, "npusanctl show: no finding 42?[31m\n");
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_malformed_replies_exit_3)
{
	static const uint8_t garbage[] = { 5, 0, 0, 0, 0xff, 0xff, 0xff,
					   0xff, 0xff };
	static const uint8_t huge[] = { 0xff, 0xff, 0xff, 0x7f };
	struct fq *q = fq_new();
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__StatsReply st = NPUSAN__STATS_REPLY__INIT;
	struct cf a;
	struct cf *v[] = { &a };
	char *out, *err;

	/* not protobuf */
	fq_raw(q, garbage, sizeof(garbage));
	ck_assert_int_eq(ctl_fq(q, &out, &err, "list", NULL), 3);
	ck_assert_ptr_nonnull(strstr(err, "sent a malformed reply"));
	free(out);
	free(err);
	fq_free(q);

	/* a frame past FRAME_MAX */
	q = fq_new();
	fq_raw(q, huge, sizeof(huge));
	ck_assert_int_eq(ctl_fq(q, NULL, &err, "findings", NULL), 3);
	ck_assert_ptr_nonnull(strstr(err, "sent a malformed reply"));
	free(err);
	fq_free(q);

	/* the wrong kind of reply */
	q = fq_new();
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_STATS;
	m.stats = &st;
	fq_frame(q, &m);
	ck_assert_int_eq(ctl_fq(q, NULL, &err, "list", NULL), 3);
	ck_assert_ptr_nonnull(strstr(err, "sent a malformed reply"));
	free(err);
	fq_free(q);

	/* a finding without its access */
	q = fq_new();
	cf_spec(&a, true);
	a.f.access = NULL;
	fq_findings(q, v, 1, true);
	ck_assert_int_eq(ctl_fq(q, &out, &err, "findings", "--json", NULL), 3);
	ck_assert_str_eq(out, "");
	ck_assert_ptr_nonnull(strstr(err, "sent a malformed reply"));
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_silent_daemon_times_out)
{
	struct fq *q = fq_new();
	char *out, *err;
	time_t t0 = time(NULL);

	ck_assert_int_eq(ctl_fq(q, &out, &err, "list", "--timeout", "0.3", NULL), 3);
	ck_assert_ptr_nonnull(strstr(err, "did not answer within 0.3 s"));
	ck_assert_str_eq(out, "");
	ck_assert_int_le(time(NULL) - t0, 5);
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

/* ---- show ---------------------------------------------------------------- */

static void fq_show(struct fq *q, struct cf *c)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__ShowReply r = NPUSAN__SHOW_REPLY__INIT;

	r.finding = c != NULL ? &c->f : NULL;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_SHOW;
	m.show = &r;
	fq_frame(q, &m);
}

START_TEST(ctl_show_prints_analyze_report_with_seen)
{
	struct fq *q = fq_new();
	struct cf a;
	char *trace = tu_write_file("spec.trace", spec_trace), *live, *offline;
	char *want, *second_line, *end;

	cf_spec(&a, true);
	a.f.has_last_ms = false;
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &live, NULL, "show", "1", NULL), 0);
	ck_assert_int_eq(fq_query(q)->show->id, 1);
	ck_assert_int_eq(ctl(&offline, NULL, "analyze", trace, NULL), 1);
	/* analyze's first report, with the daemon's line after the header */
	end = strstr(offline, "\n\n");
	ck_assert_ptr_nonnull(end);
	end[2] = '\0';
	second_line = strchr(strchr(offline, '\n') + 1, '\n') + 1;
	ck_assert_int_gt(asprintf(&want, "%.*sSeen once, at " T0 ".\n%s",
				  (int)(second_line - offline), offline,
				  second_line),
			 0);
	ck_assert_str_eq(live, want);
	ck_assert_ptr_nonnull(strstr(live, "  train.py:30 in main\n"));
	ck_assert_ptr_null(strchr(live, '\033'));
	free(want);
	free(live);
	free(offline);
	free(trace);
	fq_free(q);
}
END_TEST

START_TEST(ctl_show_repeats_and_json)
{
	struct fq *q = fq_new();
	struct cf a;
	char *out;

	cf_spec(&a, false);
	a.f.count = 5;
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "2", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "npusan detected a missing "
					  "record_stream on memory at 0x1000 in "
					  "process 4242, job demo, rank 0\n"
					  "Seen 5 times from " T0 " to " T1
					  "; the first occurrence is shown.\n"
					  "Allocated on stream 0, used on "
					  "stream 7, then freed"));
	free(out);
	fq_free(q);

	q = fq_new();
	a.f.count = 1;
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "--json", "2", NULL), 0);
	ck_assert_str_eq(out, SPEC_MRS_JSON SEEN_JSON);
	free(out);
	fq_free(q);

	/* a ShowReply without its finding is malformed */
	q = fq_new();
	fq_show(q, NULL);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "2", NULL), 3);
	ck_assert_str_eq(out, "");
	free(out);
	fq_free(q);
}
END_TEST

/* A graph finding (trace format v2), shaped as graphs.md's Findings table
 * has it: a stale_graph_address found at a replay of graph 1, or an
 * unjoined_capture found at the end of graph 4's capture. */
static void cf_graph(struct cf *c, bool stale)
{
	cf_spec(c, false);
	c->f.id = stale ? 3 : 4;
	if (stale) {
		c->f.kind = (char *)"stale_graph_address";
		c->f.detected_at = (char *)"replay";
		cf_access(&c->access, 0, 9, false, "aten::mm", spec_stack, 2);
		c->access.graph = 1;
	} else {
		c->f.kind = (char *)"unjoined_capture";
		c->f.detected_at = (char *)"capture_end";
		c->f.ptr = 0x2000;
		c->f.alloc = NULL;
		cf_access(&c->access, 2, 3, true, "aten::add_", spec_stack, 2);
		c->access.graph = 4;
	}
	c->access.has_graph = true;
}

START_TEST(ctl_show_stale_graph_address_text_and_json)
{
	struct fq *q = fq_new();
	struct cf a;
	char *out;

	cf_graph(&a, true);
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "3", NULL), 0);
	ck_assert_str_eq(
		out,
		"============================\n"
		"npusan detected a stale graph address on memory at 0x1000 in process 4242, job demo, rank 0\n"
		"Seen once, at 2024-05-01T10:00:00.000Z.\n"
		"A replay of graph 1 on stream 0 (seq 9) ran a captured kernel on memory whose\n"
		"allocation was freed (or reallocated) after the capture: the replay reads\n"
		"memory that is no longer the graph's, and may now belong to another tensor.\n"
		"Captured kernel:\n"
		"aten::mm\n"
		"reading from the captured allocation\n"
		"With stack trace (at its capture):\n"
		"  train.py:14 in step\n"
		"  train.py:30 in main\n"
		"The captured allocation (gone since) was allocated at 0x1000 (4096 bytes on stream 0) with stack trace:\n"
		"  train.py:14 in step\n"
		"  train.py:30 in main\n"
		"Fix it in one of three ways:\n"
		"  - keep the tensor alive (hold a reference to it) for as long as graph 1 can be\n"
		"    replayed,\n"
		"  - copy new data into the captured buffer (captured.copy_(new)) instead of\n"
		"    binding a new tensor in its place, or\n"
		"  - allocate it from the graph's memory pool, so that the graph keeps the\n"
		"    memory.\n"
		"\n");
	free(out);
	fq_free(q);

	q = fq_new();
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "--json", "3", NULL),
			 0);
	ck_assert_str_eq(
		out,
		"{\"id\":3,\"kind\":\"stale_graph_address\",\"process\":{"
		"\"pid\":4242,\"job\":\"demo\",\"rank\":0},\"ptr\":\"0x1000\","
		"\"alloc\":{\"ptr\":\"0x1000\",\"size\":4096,\"stream\":0,"
		"\"stack\":[\"train.py:14 in step\",\"train.py:30 in main\"]},"
		"\"access\":{\"stream\":0,\"seq\":9,\"type\":\"read\",\"op\":"
		"\"aten::mm\",\"stack\":[\"train.py:14 in step\","
		"\"train.py:30 in main\"],\"graph\":1},\"previous\":null,"
		"\"detected_at\":\"replay\",\"count\":1" SEEN_JSON);
	free(out);
	fq_free(q);
}
END_TEST

START_TEST(ctl_show_unjoined_capture_text_and_json)
{
	struct fq *q = fq_new();
	struct cf a;
	char *out;

	cf_graph(&a, false);
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "4", NULL), 0);
	ck_assert_str_eq(
		out,
		"============================\n"
		"npusan detected an unjoined graph capture on memory at 0x2000 in process 4242, job demo, rank 0\n"
		"Seen once, at 2024-05-01T10:00:00.000Z.\n"
		"The capture of graph 4 ended while stream 2, which joined it, had captured work\n"
		"the capture's origin stream was never made to wait for: the runtime fails the\n"
		"capture (CUDA: unjoined work; ACL: ACL_ERROR_RT_STREAM_UNJOINED).\n"
		"Last captured launch by stream 2 (seq 3 in the capture of graph 4) during kernel:\n"
		"aten::add_\n"
		"writing to 0x2000\n"
		"With stack trace:\n"
		"  train.py:14 in step\n"
		"  train.py:30 in main\n"
		"Fix it by making the origin stream wait for stream 2 after that kernel and\n"
		"before the capture ends: origin.wait_stream(stream 2), or record an event on\n"
		"stream 2 and wait_event it on the origin stream.\n"
		"\n");
	free(out);
	fq_free(q);

	q = fq_new();
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "--json", "4", NULL),
			 0);
	ck_assert_str_eq(
		out,
		"{\"id\":4,\"kind\":\"unjoined_capture\",\"process\":{"
		"\"pid\":4242,\"job\":\"demo\",\"rank\":0},\"ptr\":\"0x2000\","
		"\"alloc\":null,\"access\":{\"stream\":2,\"seq\":3,"
		"\"type\":\"write\",\"op\":\"aten::add_\",\"stack\":["
		"\"train.py:14 in step\",\"train.py:30 in main\"],\"graph\":4},"
		"\"previous\":null,\"detected_at\":\"capture_end\",\"count\":1"
		SEEN_JSON);
	free(out);
	fq_free(q);
}
END_TEST

/* A race at a replay names the graph of each access that has one; a race
 * inside a capture says its numbers are the capture's. */
START_TEST(ctl_show_races_with_graphs_name_them)
{
	struct fq *q = fq_new();
	struct cf a;
	char *out;

	cf_spec(&a, true);
	a.f.detected_at = (char *)"replay";
	a.access.has_graph = true;
	a.access.graph = 1;
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "1", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "Access by stream 7 (seq 2, replay "
					  "of graph 1) during kernel:\n"));
	ck_assert_ptr_nonnull(strstr(out, "Previous access by stream 0 (seq "
					  "1) during kernel:\n"));
	free(out);
	fq_free(q);

	q = fq_new();
	a.f.detected_at = (char *)"capture";
	a.access.graph = a.previous.graph = 3;
	a.previous.has_graph = true;
	fq_show(q, &a);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "show", "1", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "Access by stream 7 (seq 2 in the "
					  "capture of graph 3) during "
					  "kernel:\n"));
	ck_assert_ptr_nonnull(strstr(out, "Previous access by stream 0 (seq "
					  "1 in the capture of graph 3) "
					  "during kernel:\n"));
	free(out);
	fq_free(q);
}
END_TEST

START_TEST(ctl_colour_only_on_a_terminal_and_not_with_no_color)
{
	struct fq *q = fq_new();
	struct cf a;
	struct cf *v[] = { &a };
	const char *argv[] = { tu_bin("npusanctl"), "findings", NULL };
	const char *show[] = { tu_bin("npusanctl"), "show", "1", NULL };
	char *out;

	cf_spec(&a, true);
	fq_findings(q, v, 1, true);
	unsetenv("NO_COLOR");
	fq_start(q);
	ck_assert_int_eq(ctl_tty(&out, argv), 1);
	fq_stop(q);
	ck_assert_ptr_nonnull(strstr(out, "\033[1;31mdata_race\033[0m"));
	free(out);
	fq_free(q);

	/* the negative control: the same terminal, NO_COLOR set */
	q = fq_new();
	fq_findings(q, v, 1, true);
	setenv("NO_COLOR", "1", 1);
	fq_start(q);
	ck_assert_int_eq(ctl_tty(&out, argv), 1);
	fq_stop(q);
	ck_assert_ptr_nonnull(strstr(out, "data_race"));
	ck_assert_ptr_null(strchr(out, '\033'));
	free(out);
	fq_free(q);

	/* show paints the report as analyze does */
	q = fq_new();
	fq_show(q, &a);
	unsetenv("NO_COLOR");
	fq_start(q);
	ck_assert_int_eq(ctl_tty(&out, show), 0);
	fq_stop(q);
	ck_assert_ptr_nonnull(strstr(out, "\033[1;31mnpusan detected"));
	ck_assert_ptr_nonnull(strstr(out, "\033[1maten::randn\033[0m"));
	free(out);
	fq_free(q);
}
END_TEST

/* ---- list ---------------------------------------------------------------- */

static void proc_init(Npusan__Process *p, uint32_t pid, const char *job,
		      int rank, const char *state, uint64_t events,
		      uint64_t lost, uint64_t findings, int64_t last_ms)
{
	*p = (Npusan__Process)NPUSAN__PROCESS__INIT;
	p->has_id = p->has_pid = true;
	p->id = pid + 1000;
	p->pid = pid;
	p->job = (char *)job;
	p->has_rank = rank >= 0;
	p->rank = rank >= 0 ? (uint32_t)rank : 0;
	p->state = (char *)state;
	p->has_events = p->has_lost = p->has_findings = p->has_gaps = true;
	p->events = events;
	p->lost = lost;
	p->gaps = lost > 0; /* the gap that lost them */
	p->findings = findings;
	p->has_first_ms = true;
	p->first_ms = T0_MS;
	p->has_last_ms = last_ms != 0;
	p->last_ms = last_ms;
}

static void fq_list(struct fq *q, Npusan__Process **v, size_t n, bool done)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__ListReply r = NPUSAN__LIST_REPLY__INIT;

	r.n_processes = n;
	r.processes = v;
	r.has_done = done;
	r.done = done;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_LIST;
	m.list = &r;
	fq_frame(q, &m);
}

/* Four processes of two jobs and none, newest activity first. */
struct procs {
	Npusan__Process p[4];
	Npusan__Process *v[4];
};

static void procs_init(struct procs *s)
{
	int64_t now = (int64_t)time(NULL) * 1000;

	proc_init(&s->p[0], 4243, "demo", 1, "running", 1500000, 0, 2,
		  now - 150 * 1000);
	proc_init(&s->p[1], 99, "other", -1, "exited", 10, 3, 0,
		  now - 3 * 3600 * 1000 - 60000);
	proc_init(&s->p[2], 4242, "demo", 0, "running", 20, 0, 1,
		  now - 26 * 3600 * 1000);
	proc_init(&s->p[3], 7, NULL, -1, "exited", 0, 0, 0, 0);
	s->p[3].has_events = false;
	for (int i = 0; i < 4; i++)
		s->v[i] = &s->p[i];
}

START_TEST(ctl_list_groups_by_job_in_an_aligned_table)
{
	struct fq *q = fq_new();
	struct procs s;
	char *out, *err;

	procs_init(&s);
	fq_list(q, s.v, 2, false);
	fq_list(q, s.v + 2, 2, true);
	ck_assert_msg(ctl_fq(q, &out, &err, "list", NULL) == 0, "%s", err);
	ck_assert_str_eq(out,
			 "JOB     PID  RANK  STATE     EVENTS  LOST  GAPS  "
			 "FINDINGS  AGE\n"
			 "demo   4242     0  running       20     0     0  "
			 "       1  1d\n"
			 "demo   4243     1  running  1500000     0     0  "
			 "       2  2m\n"
			 "\n"
			 "other    99     -  exited        10     3     1  "
			 "       0  3h\n"
			 "\n"
			 "-         7     -  exited         -     0     0  "
			 "       0  -\n");
	ck_assert_str_eq(err, "");
	ck_assert_int_eq(fq_query(q)->q_case, NPUSAN__QUERY__Q_LIST);
	ck_assert(!fq_query(q)->list->has_pid);
	free(out);
	free(err);
	fq_free(q);
}
END_TEST

START_TEST(ctl_list_json_and_filters)
{
	struct fq *q = fq_new();
	struct procs s;
	char *out;

	procs_init(&s);
	s.p[0].has_last_ms = false;
	s.p[0].hostname = (char *)"node\"1";
	s.p[0].executable = (char *)"/usr/bin/python3";
	s.p[0].has_local_rank = s.p[0].has_world_size = true;
	s.p[0].local_rank = 1;
	s.p[0].world_size = 8;
	s.p[0].has_uid = s.p[0].has_start_time = true;
	s.p[0].uid = 1000;
	s.p[0].start_time = 123456;
	fq_list(q, s.v, 1, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "list", "--json", "--job",
				"demo", "--pid", "4243", NULL),
			 0);
	ck_assert_str_eq(out, "{\"id\":5243,\"pid\":4243,\"job\":\"demo\","
			      "\"rank\":1,\"local_rank\":1,\"world_size\":8,"
			      "\"state\":\"running\",\"events\":1500000,"
			      "\"lost\":0,\"gaps\":0,\"findings\":2,\"uid\":1000,"
			      "\"host\":\"node\\\"1\",\"executable\":"
			      "\"/usr/bin/python3\",\"run\":null,"
			      "\"start_time\":123456,"
			      "\"first_seen\":\"" T0 "\",\"last_seen\":null}\n");
	ck_assert_str_eq(fq_query(q)->list->job, "demo");
	ck_assert(fq_query(q)->list->has_pid);
	ck_assert_uint_eq(fq_query(q)->list->pid, 4243);
	free(out);
	fq_free(q);

	q = fq_new();
	fq_list(q, NULL, 0, true);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "list", NULL), 0);
	ck_assert_str_eq(out, "No processes.\n");
	free(out);
	fq_free(q);
}
END_TEST

/* ---- stats --------------------------------------------------------------- */

START_TEST(ctl_stats_text_and_json)
{
	struct fq *q = fq_new();
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__StatsReply r = NPUSAN__STATS_REPLY__INIT;
	char *out;

	r.has_uptime_ms = r.has_processes_running = r.has_processes_exited =
		true;
	r.has_events = r.has_events_per_s = r.has_lost = r.has_findings =
		r.has_db_bytes = true;
	r.uptime_ms = (3 * 86400 + 4 * 3600 + 5 * 60) * INT64_C(1000);
	r.processes_running = 3;
	r.processes_exited = 2;
	r.events = 123456789;
	r.events_per_s = 2000000.4;
	r.lost = 17;
	r.findings = 12;
	r.db_bytes = 5 * 1024 * 1024 + 300 * 1024;
	r.daemon_version = (char *)"0.1.0";
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_STATS;
	m.stats = &r;
	fq_frame(q, &m);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "stats", NULL), 0);
	ck_assert_str_eq(out, "uptime           3d 4h\n"
			      "processes        5 (3 running, 2 exited)\n"
			      "events/s         2000000\n"
			      "events           123456789\n"
			      "records dropped  17\n"
			      "findings         12\n"
			      "database size    5.3 MiB\n"
			      "daemon version   0.1.0\n");
	ck_assert_int_eq(fq_query(q)->q_case, NPUSAN__QUERY__Q_STATS);
	free(out);
	fq_free(q);

	q = fq_new();
	fq_frame(q, &m);
	ck_assert_int_eq(ctl_fq(q, &out, NULL, "stats", "--json", NULL), 0);
	ck_assert_str_eq(out, "{\"uptime_ms\":273900000,\"processes_running\":3,"
			      "\"processes_exited\":2,\"events_per_s\":"
			      "2000000.4,\"events\":123456789,\"lost\":17,"
			      "\"findings\":12,\"db_bytes\":5550080,"
			      "\"daemon_version\":\"0.1.0\"}\n");
	free(out);
	fq_free(q);
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
	tcase_add_test(tc, ctl_findings_json_is_findings_md_exactly);
	tcase_add_test(tc, ctl_findings_json_matches_analyze_byte_for_byte);
	tcase_add_test(tc, ctl_findings_json_null_alloc_previous_and_big_pointers);
	tcase_add_test(tc, ctl_findings_answer_in_several_frames);
	tcase_add_test(tc, ctl_findings_answer_cut_short_is_an_error);
	tcase_add_test(tc, ctl_findings_table_is_aligned);
	tcase_add_test(tc, ctl_findings_none_exits_0);
	tcase_add_test(tc, ctl_findings_sends_every_filter);
	tcase_add_test(tc, ctl_findings_since_takes_durations_and_timestamps);
	tcase_add_test(tc, ctl_findings_follow_prints_new_and_updated_until_sigint);
	tcase_add_test(tc, ctl_findings_follow_table_prints_rows_as_they_come);
	tcase_add_test(tc, ctl_error_reply_is_reported_and_exits_3);
	tcase_add_test(tc, ctl_show_of_no_such_finding_exits_2);
	tcase_add_test(tc, ctl_malformed_replies_exit_3);
	tcase_add_test(tc, ctl_silent_daemon_times_out);
	tcase_add_test(tc, ctl_show_prints_analyze_report_with_seen);
	tcase_add_test(tc, ctl_show_repeats_and_json);
	tcase_add_test(tc, ctl_show_stale_graph_address_text_and_json);
	tcase_add_test(tc, ctl_show_unjoined_capture_text_and_json);
	tcase_add_test(tc, ctl_show_races_with_graphs_name_them);
	tcase_add_test(tc, ctl_colour_only_on_a_terminal_and_not_with_no_color);
	tcase_add_test(tc, ctl_list_groups_by_job_in_an_aligned_table);
	tcase_add_test(tc, ctl_list_json_and_filters);
	tcase_add_test(tc, ctl_stats_text_and_json);
	test_ctl_limits_add(tc);
	tcase_set_timeout(tc, 60);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(ctl_suite());
}
