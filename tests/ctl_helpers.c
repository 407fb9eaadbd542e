/*
 * ctl_helpers.c - test_ctl's shared helpers (ctl_helpers.h): the fake
 * npusand (a thread on a Unix socket that reads one Query and answers with
 * the steps a test queued), the canned replies of docs/findings.md's
 * example, and npusanctl run as a user would, on a pipe or a terminal.
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
#include <unistd.h>

#include "ctl_helpers.h"
#include "frame.h"
#include "npusan.pb-c.h"
#include "testutil.h"

extern char **environ;

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
struct fq *fq_new(void)
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
void fq_frame(struct fq *q, const Npusan__FromDaemon *m)
{
	size_t len = npusan__from_daemon__get_packed_size(m);
	uint8_t *b = malloc(FRAME_HEADER_SIZE + len + 1);

	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(frame_header_encode(len, b), 0);
	npusan__from_daemon__pack(m, b + FRAME_HEADER_SIZE);
	fq_step(q, (struct fq_step){ FQ_SEND, b, FRAME_HEADER_SIZE + len, 0 });
}

/* Queues `len` raw bytes. */
void fq_raw(struct fq *q, const void *p, size_t len)
{
	uint8_t *b = malloc(len);

	ck_assert_ptr_nonnull(b);
	memcpy(b, p, len);
	fq_step(q, (struct fq_step){ FQ_SEND, b, len, 0 });
}

void fq_sleep(struct fq *q, int ms)
{
	fq_step(q, (struct fq_step){ FQ_SLEEP, NULL, 0, ms });
}

/* The script waits here for fq_go(). */
void fq_wait_go(struct fq *q)
{
	fq_step(q, (struct fq_step){ FQ_GO, NULL, 0, 0 });
}

void fq_go(struct fq *q)
{
	ck_assert_int_eq(write(q->go[1], "g", 1), 1);
}

void fq_close(struct fq *q)
{
	fq_step(q, (struct fq_step){ FQ_CLOSE, NULL, 0, 0 });
}

/* The script goes on with the client's next connection. */
void fq_next(struct fq *q)
{
	fq_step(q, (struct fq_step){ FQ_ACCEPT, NULL, 0, 0 });
}

void fq_start(struct fq *q)
{
	ck_assert_int_eq(pthread_create(&q->th, NULL, fq_main, q), 0);
}

/* Stops the thread; what it saw stays readable until fq_free(). */
void fq_stop(struct fq *q)
{
	ck_assert_int_eq(write(q->stop[1], "x", 1), 1);
	pthread_join(q->th, NULL);
}

void fq_free(struct fq *q)
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
const Npusan__Query *fq_query(const struct fq *q)
{
	ck_assert_ptr_nonnull(q->got);
	ck_assert_int_eq(q->got->msg_case, NPUSAN__TO_DAEMON__MSG_QUERY);
	ck_assert(q->got->query->has_protocol_version);
	ck_assert_uint_eq(q->got->query->protocol_version, 1);
	return q->got->query;
}

char *spec_stack[2] = { (char *)"train.py:14 in step",
			(char *)"train.py:30 in main" };

void cf_access(Npusan__Access *a, uint64_t stream, uint64_t seq,
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
void cf_spec(struct cf *c, bool race)
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
	/* analyze's free of the example carries no stack */
	c->free = (Npusan__Free)NPUSAN__FREE__INIT;
	f->free = race ? NULL : &c->free;
	f->has_count = f->has_first_ms = f->has_last_ms = true;
	f->count = 1;
	f->first_ms = T0_MS;
	f->last_ms = T1_MS;
}

/* Queues a FindingsReply frame of `n` findings. */
void fq_findings(struct fq *q, struct cf *const *v, size_t n,
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

void fq_error(struct fq *q, const char *msg, int code)
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

const char spec_trace[] =
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
int ctl(char **out, char **err, ...)
{
	va_list ap;
	int rc;

	va_start(ap, err);
	rc = ctlv(out, err, ap);
	va_end(ap);
	return rc;
}

/* Runs `npusanctl ARGS...` against `q`, stopped after. */
int ctl_fq(struct fq *q, char **out, char **err, ...)
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
pid_t ctl_spawn(const char *const *argv, int out_fd)
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
void read_until(int fd, char **buf, size_t *len, const char *want)
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

int wait_status(pid_t pid)
{
	int status;

	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	return WIFSIGNALED(status) ? 128 + WTERMSIG(status) :
				     WEXITSTATUS(status);
}

/* Runs npusanctl with a terminal on standard output; what it printed. */
int ctl_tty(char **out, const char *const *argv)
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

void fq_list(struct fq *q, Npusan__Process **v, size_t n, bool done)
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

void fq_show(struct fq *q, struct cf *c)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__ShowReply r = NPUSAN__SHOW_REPLY__INIT;

	r.finding = c != NULL ? &c->f : NULL;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_SHOW;
	m.show = &r;
	fq_frame(q, &m);
}
