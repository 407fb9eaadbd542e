/*
 * client.c - one query to npusand: connect, send, read the answer (see
 * client.h), and the pieces every query command shares.
 *
 * Waiting is done in ppoll() so that, when following, SIGINT and SIGTERM
 * are taken only there: they stay blocked while a frame is read and
 * printed, and a signal that arrives meanwhile ends the next wait. A frame
 * is then read with frame_recv() under the same per-frame timeout.
 *
 * Following asks again every CLIENT_POLL_MS on a fresh connection rather
 * than holding one open for the daemon to push on: a poll sees a finding
 * whose count grew (a push is sent for new rows only), and a daemon that
 * restarts is simply asked again once it answers, as agents register
 * again.
 */
#include "client.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "clock.h"
#include "frame.h"
#include "grow.h"
#include "paths.h"

/* The longest --timeout, in seconds: a day. */
#define CLIENT_TIMEOUT_MAX_S 86400
/* Following: how often to ask again, and the longest wait between tries
 * while no daemon answers (the agents' backoff). */
#define CLIENT_POLL_MS 1000
#define CLIENT_RETRY_MAX_MS 5000

static volatile sig_atomic_t client_stop;

static void client_stop_cb(int sig)
{
	client_stop = sig;
}

int64_t client_mono_ms(void)
{
	return (int64_t)clock_mono_ms();
}

int64_t client_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * A connected socket to `path` in *out. A listener whose backlog is full
 * answers EAGAIN; that is retried until `timeout_ms` has passed.
 * 0; -ENAMETOOLONG; -ETIMEDOUT; a negative errno from socket(2) or
 * connect(2): -ENOENT and -ECONNREFUSED mean that no daemon listens.
 */
static int client_connect(const char *path, int timeout_ms, int *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int64_t deadline = client_mono_ms() + timeout_ms;
	int fd, err;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	for (;;) {
		struct timespec nap = { .tv_nsec = 5 * 1000000 };

		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
		err = -errno;
		if (err == -EINTR)
			continue;
		if (err == -EINPROGRESS) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };
			socklen_t len = sizeof(err);

			if (poll(&p, 1, timeout_ms) == 0) {
				err = -ETIMEDOUT;
				goto err;
			}
			if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
				err = errno;
			if (err == 0)
				break;
			err = -err;
			goto err;
		}
		if (err != -EAGAIN)
			goto err;
		if (client_mono_ms() >= deadline) {
			err = -ETIMEDOUT;
			goto err;
		}
		nanosleep(&nap, NULL);
	}
	*out = fd;
	return 0;
err:
	close(fd);
	return err;
}

/* Sends `q` in a ToDaemon frame. 0; -ENOMEM; frame_send()'s errors. */
static int client_send(int fd, Npusan__Query *q, int timeout_ms)
{
	Npusan__ToDaemon env = NPUSAN__TO_DAEMON__INIT;
	size_t len;
	uint8_t *buf;
	int err;

	q->has_protocol_version = true;
	q->protocol_version = CLIENT_PROTOCOL_VERSION;
	env.msg_case = NPUSAN__TO_DAEMON__MSG_QUERY;
	env.query = q;
	len = npusan__to_daemon__get_packed_size(&env);
	buf = malloc(len ? len : 1);
	if (buf == NULL)
		return -ENOMEM;
	npusan__to_daemon__pack(&env, buf);
	err = frame_send(fd, buf, len, -1, timeout_ms);
	free(buf);
	return err;
}

/*
 * Waits until `fd` is readable: 0; -ETIMEDOUT after `timeout_ms` (-1:
 * never); -EINTR when a stop signal came (only where `mask` unblocks one).
 */
static int client_wait(int fd, int timeout_ms, const sigset_t *mask)
{
	int64_t deadline = client_mono_ms() + timeout_ms;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int64_t left = deadline - client_mono_ms();
		struct timespec ts = { .tv_sec = left / 1000,
				       .tv_nsec = left % 1000 * 1000000 };
		int n;

		if (timeout_ms >= 0 && left <= 0)
			return -ETIMEDOUT;
		n = ppoll(&p, 1, timeout_ms < 0 ? NULL : &ts, mask);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
		if (client_stop)
			return -EINTR;
	}
}

/* The daemon's Error, as one line; "no finding 42" needs no preface. */
static void client_refused(const char *cmd, const Npusan__Error *e)
{
	if (e != NULL && e->has_code && e->code == ENOENT &&
	    e->message != NULL && e->message[0] != '\0') {
		fprintf(stderr, "%s: ", cmd);
		text_put(stderr, e->message);
		fputc('\n', stderr);
		return;
	}
	fprintf(stderr, "%s: the daemon refused the request: ", cmd);
	if (e != NULL && e->message != NULL && e->message[0] != '\0')
		text_put(stderr, e->message);
	else if (e != NULL && e->has_code && e->code > 0)
		fputs(strerror(e->code), stderr);
	else
		fputs("no reason given", stderr);
	fputc('\n', stderr);
}

/* The exit status for the daemon's Error: what was asked for does not
 * exist (ENOENT: `show` of no such finding) is the asker's mistake, like a
 * bad argument; anything else the daemon's refusal. */
static int client_error_status(const Npusan__Error *e)
{
	return e != NULL && e->has_code && e->code == ENOENT ? CLI_USAGE :
							       CLI_DAEMON;
}

/* Says why connecting to `path` failed. */
static void client_no_daemon(const char *cmd, const char *path, int err)
{
	if (err == -ENOENT || err == -ECONNREFUSED || err == -ENOTDIR)
		fprintf(stderr, "%s: no daemon is listening on %s; start one "
				"with 'npusand &' (as a user) or 'systemctl "
				"start npusand' (the system service), or name "
				"its socket with --socket or NPUSAN_SOCKET\n",
			cmd, path);
	else if (err == -EACCES || err == -EPERM)
		fprintf(stderr, "%s: no permission to connect to %s (%s)\n",
			cmd, path, strerror(-err));
	else if (err == -ETIMEDOUT)
		fprintf(stderr, "%s: the daemon on %s accepts no connection "
				"(it is too busy or stuck)\n",
			cmd, path);
	else
		fprintf(stderr, "%s: cannot connect to %s: %s\n", cmd,
			path[0] != '\0' ? path : "the daemon's socket",
			strerror(-err));
}

/* Says why reading a reply failed. */
static void client_recv_failed(const char *cmd, const char *path, int err,
			       int timeout_ms)
{
	if (err == -ETIMEDOUT || err == -EAGAIN)
		fprintf(stderr, "%s: the daemon on %s did not answer within "
				"%g s\n",
			cmd, path, timeout_ms / 1000.0);
	else if (err == -ECONNRESET || err == -EPIPE)
		fprintf(stderr, "%s: the daemon on %s closed the connection "
				"before it finished answering\n",
			cmd, path);
	else if (err == -EPROTO || err == -EBADMSG || err == -EMSGSIZE)
		fprintf(stderr, "%s: the daemon on %s sent a malformed reply\n",
			cmd, path);
	else
		fprintf(stderr, "%s: reading the daemon's reply from %s failed: "
				"%s\n",
			cmd, path, strerror(-err));
}

/*
 * Blocks SIGINT and SIGTERM (the mask before in *old, the one to wait
 * with in *waitmask) and points them at client_stop_cb.
 */
static void client_catch(sigset_t *old, sigset_t *waitmask,
			 struct sigaction old_act[2])
{
	struct sigaction sa = { .sa_handler = client_stop_cb };
	sigset_t stop;

	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &stop, old);
	*waitmask = *old;
	sigdelset(waitmask, SIGINT);
	sigdelset(waitmask, SIGTERM);
	sigemptyset(&sa.sa_mask);
	client_stop = 0;
	sigaction(SIGINT, &sa, &old_act[0]);
	sigaction(SIGTERM, &sa, &old_act[1]);
}

static void client_uncatch(const sigset_t *old,
			   const struct sigaction old_act[2])
{
	sigaction(SIGINT, &old_act[0], NULL);
	sigaction(SIGTERM, &old_act[1], NULL);
	sigprocmask(SIG_SETMASK, old, NULL);
}

/* Reads and hands replies to `cb` until it is done: an exit status. */
static int client_answer(const struct client_opts *o, const char *cmd,
			 const char *path, int fd, uint8_t *buf,
			 const sigset_t *mask, client_reply_cb cb, void *arg)
{
	int next = CLIENT_MORE;

	while (next != CLIENT_DONE) {
		Npusan__FromDaemon *m;
		size_t len;
		int err = client_wait(fd, o->timeout_ms, mask);

		if (err == -EINTR)
			return CLI_OK;
		if (err == 0)
			err = frame_recv(fd, buf, FRAME_MAX, &len, NULL,
					 o->timeout_ms);
		if (err < 0) {
			client_recv_failed(cmd, path, err, o->timeout_ms);
			return CLI_DAEMON;
		}
		m = npusan__from_daemon__unpack(NULL, len, buf);
		if (m == NULL) {
			client_recv_failed(cmd, path, -EBADMSG, 0);
			return CLI_DAEMON;
		}
		if (m->msg_case == NPUSAN__FROM_DAEMON__MSG_ERROR) {
			int status = client_error_status(m->error);

			client_refused(cmd, m->error);
			npusan__from_daemon__free_unpacked(m, NULL);
			return status;
		}
		next = cb(arg, m);
		fflush(stdout);
		if (next == -EBADMSG) {
			client_recv_failed(cmd, path, next, 0);
			return CLI_DAEMON;
		}
		if (next < 0) {
			fprintf(stderr, "%s: %s\n", cmd, strerror(-next));
			return CLI_DAEMON;
		}
	}
	return CLI_OK;
}

int client_socket_path(const struct client_opts *o, const char *cmd,
		       char path[PATHS_SOCKET_MAX + 1])
{
	if (o->socket != NULL) {
		if (strlen(o->socket) > PATHS_SOCKET_MAX) {
			fprintf(stderr, "%s: the socket path is longer than "
					"%d bytes\n",
				cmd, PATHS_SOCKET_MAX);
			return CLI_USAGE;
		}
		snprintf(path, PATHS_SOCKET_MAX + 1, "%s", o->socket);
	} else if (paths_socket(path, PATHS_SOCKET_MAX + 1) < 0) {
		fprintf(stderr, "%s: the socket path in NPUSAN_SOCKET or "
				"XDG_RUNTIME_DIR is longer than %d bytes\n",
			cmd, PATHS_SOCKET_MAX);
		return CLI_USAGE;
	}
	return CLI_OK;
}

int client_probe(const char *path, int timeout_ms)
{
	int fd, err = client_connect(path, timeout_ms, &fd);

	if (err == 0)
		close(fd);
	return err;
}

/* One query on a fresh connection to `path`, answers to `cb`; while
 * `mask` is set, a signal it lets through ends the wait with CLI_OK. */
static int client_exchange(const struct client_opts *o, const char *cmd,
			   const char *path, Npusan__Query *q,
			   const sigset_t *mask, client_reply_cb cb, void *arg)
{
	uint8_t *buf = NULL;
	int fd = -1, err, status = CLI_DAEMON;

	err = client_connect(path, o->timeout_ms, &fd);
	if (err < 0) {
		client_no_daemon(cmd, path, err);
		return CLI_DAEMON;
	}
	buf = malloc(FRAME_MAX);
	if (buf == NULL) {
		fprintf(stderr, "%s: out of memory\n", cmd);
		goto out;
	}
	err = client_send(fd, q, o->timeout_ms);
	if (err == -ENOMEM) {
		fprintf(stderr, "%s: out of memory\n", cmd);
		goto out;
	}
	if (err < 0) {
		client_recv_failed(cmd, path, err, o->timeout_ms);
		goto out;
	}
	status = client_answer(o, cmd, path, fd, buf, mask, cb, arg);
out:
	free(buf);
	close(fd);
	return status;
}

int client_query(const struct client_opts *o, const char *cmd,
		 Npusan__Query *q, client_reply_cb cb, void *arg)
{
	char path[PATHS_SOCKET_MAX + 1] = "";
	int status = client_socket_path(o, cmd, path);

	if (status != CLI_OK)
		return status;
	return client_exchange(o, cmd, path, q, NULL, cb, arg);
}

/* Sleeps `ms`, or less when a signal `mask` lets through comes. */
static void client_nap(int ms, const sigset_t *mask)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	if (!client_stop)
		ppoll(NULL, 0, &ts, mask);
}

int client_follow(const struct client_opts *o, const char *cmd,
		  Npusan__Query *q, client_again_cb again, client_reply_cb cb,
		  void *arg)
{
	char path[PATHS_SOCKET_MAX + 1] = "";
	struct sigaction old_act[2];
	sigset_t old, waitmask;
	int status = client_socket_path(o, cmd, path), delay = CLIENT_POLL_MS;
	bool up = true;

	if (status != CLI_OK)
		return status;
	client_catch(&old, &waitmask, old_act);
	status = client_exchange(o, cmd, path, q, &waitmask, cb, arg);
	while (status == CLI_OK && !client_stop) {
		client_nap(up ? CLIENT_POLL_MS : delay, &waitmask);
		if (client_stop)
			break;
		if (!up && client_probe(path, CLIENT_POLL_MS) < 0) {
			delay = delay * 2 < CLIENT_RETRY_MAX_MS ?
					delay * 2 :
					CLIENT_RETRY_MAX_MS;
			continue;
		}
		if (!up)
			fprintf(stderr, "%s: the daemon on %s answers again; "
					"following\n",
				cmd, path);
		up = true;
		delay = CLIENT_POLL_MS;
		again(arg, q);
		/* A daemon that went away: the exchange said so. */
		if (client_exchange(o, cmd, path, q, &waitmask, cb, arg) !=
			    CLI_OK &&
		    !client_stop) {
			fprintf(stderr, "%s: waiting for the daemon on %s to "
					"answer again (Ctrl-C to stop)\n",
				cmd, path);
			up = false;
		}
	}
	client_uncatch(&old, old_act);
	return status;
}

/* ---- options ------------------------------------------------------------ */

void client_opts_init(struct client_opts *o)
{
	*o = (struct client_opts){ .timeout_ms = CLIENT_TIMEOUT_MS };
}

int client_parse_u64(const char *s, uint64_t min, uint64_t max,
		     uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0' || v < min || v > max)
		return -EINVAL;
	*out = v;
	return 0;
}

int client_parse_exitcode(const char *cmd, const char *s, int *code)
{
	uint64_t v;

	if (client_parse_u64(s, 0, 255, &v) < 0) {
		fprintf(stderr, "%s: --error-exitcode needs a number from 0 "
				"to 255, not '%s'\n",
			cmd, s);
		return CLI_USAGE;
	}
	*code = (int)v;
	return -1;
}

/* SECONDS: a positive decimal number, fractions allowed, up to a day. */
static int client_parse_timeout(const char *s, int *ms)
{
	char *end;
	double v;

	if (s[0] < '0' || s[0] > '9')
		return -EINVAL;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || *end != '\0' || !(v > 0) ||
	    v > CLIENT_TIMEOUT_MAX_S)
		return -EINVAL;
	*ms = (int)(v * 1000) > 0 ? (int)(v * 1000) : 1;
	return 0;
}

int client_option(const char *cmd, int c, const char *usage, char **argv,
		  struct client_opts *o)
{
	switch (c) {
	case CLIENT_OPT_SOCKET:
		if (optarg[0] == '\0') {
			fprintf(stderr, "%s: --socket needs a path\n", cmd);
			return CLI_USAGE;
		}
		o->socket = optarg;
		return -1;
	case CLIENT_OPT_TIMEOUT:
		if (client_parse_timeout(optarg, &o->timeout_ms) < 0) {
			fprintf(stderr, "%s: --timeout needs a number of "
					"seconds above 0 (at most %d), not "
					"'%s'\n",
				cmd, CLIENT_TIMEOUT_MAX_S, optarg);
			return CLI_USAGE;
		}
		return -1;
	case 'h':
		fputs(usage, stdout);
		return CLI_OK;
	case ':':
		fprintf(stderr, "%s: %s needs a value\n", cmd,
			argv[optind - 1]);
		break;
	default:
		/* argv[optind - 1] is the option only when it stood alone. */
		if (strncmp(argv[optind - 1], "--", 2) != 0 && optopt > 0 &&
		    optopt < 0x80)
			fprintf(stderr, "%s: unknown option '-%c'\n", cmd,
				optopt);
		else
			fprintf(stderr, "%s: unknown option '%s'\n", cmd,
				argv[optind - 1]);
		break;
	}
	fprintf(stderr, "Try '%s --help'.\n", cmd);
	return CLI_USAGE;
}

int client_end_output(const char *cmd, int status)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		fprintf(stderr, "%s: writing the output failed: %s\n", cmd,
			strerror(errno));
		return CLI_USAGE;
	}
	return status;
}

/* ---- replies ------------------------------------------------------------ */

static struct finding_stack client_stack(char **frames, size_t n)
{
	return (struct finding_stack){ (const char *const *)frames, n };
}

static void client_access(const Npusan__Access *a, struct finding_view_access *out)
{
	out->stream = a->stream;
	out->seq = a->seq;
	out->write = a->has_write && a->write;
	out->op = a->op;
	out->arg = a->arg;
	out->stack = client_stack(a->stack, a->n_stack);
	out->has_graph = a->has_graph;
	out->graph = a->has_graph ? a->graph : 0;
}

int client_replies_keep(struct client_replies *rs, Npusan__FromDaemon *m)
{
	if (grow_array((void **)&rs->v, &rs->cap, rs->n + 1,
		       sizeof(*rs->v)) < 0)
		return -ENOMEM;
	rs->v[rs->n++] = m;
	return 0;
}

void client_replies_free(struct client_replies *rs)
{
	for (size_t i = 0; i < rs->n; i++)
		npusan__from_daemon__free_unpacked(rs->v[i], NULL);
	free(rs->v);
	*rs = (struct client_replies){ 0 };
}

int client_finding(const Npusan__Finding *f, struct finding_view *out)
{
	struct finding_view r = { 0 };

	if (!f->has_id || f->kind == NULL || f->access == NULL ||
	    f->detected_at == NULL)
		return -EBADMSG;
	r.id = (uint64_t)f->id;
	r.kind = f->kind;
	r.detected_at = f->detected_at;
	r.has_pid = f->has_pid;
	r.pid = f->pid;
	r.job = f->job;
	r.has_rank = f->has_rank;
	r.rank = f->rank;
	r.ptr = f->ptr;
	if (f->alloc != NULL) {
		r.has_alloc = true;
		r.alloc.ptr = f->alloc->ptr;
		r.alloc.size = f->alloc->size;
		r.alloc.has_stream = f->alloc->has_stream;
		r.alloc.stream = f->alloc->stream;
		r.alloc.stack = client_stack(f->alloc->stack,
					     f->alloc->n_stack);
	}
	client_access(f->access, &r.access);
	if (f->previous != NULL) {
		r.has_previous = true;
		client_access(f->previous, &r.previous);
	}
	if (f->free != NULL) {
		r.has_free = true;
		r.free_stack = client_stack(f->free->stack, f->free->n_stack);
	}
	r.count = f->has_count ? f->count : 1;
	r.has_first = f->has_first_ms;
	r.first_ms = f->first_ms;
	r.has_last = f->has_last_ms;
	r.last_ms = f->last_ms;
	r.suppressed = f->suppressed;
	*out = r;
	return 0;
}

/* ---- human units -------------------------------------------------------- */

void client_age(int64_t ms, char *buf, size_t len)
{
	int64_t s = ms > 0 ? ms / 1000 : 0;

	if (s < 60)
		snprintf(buf, len, "%" PRId64 "s", s);
	else if (s < 3600)
		snprintf(buf, len, "%" PRId64 "m", s / 60);
	else if (s < 86400)
		snprintf(buf, len, "%" PRId64 "h", s / 3600);
	else
		snprintf(buf, len, "%" PRId64 "d", s / 86400);
}

void client_span(int64_t ms, char *buf, size_t len)
{
	int64_t s = ms > 0 ? ms / 1000 : 0;

	if (s < 60)
		snprintf(buf, len, "%" PRId64 "s", s);
	else if (s < 3600)
		snprintf(buf, len, "%" PRId64 "m %" PRId64 "s", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, len, "%" PRId64 "h %" PRId64 "m", s / 3600,
			 s % 3600 / 60);
	else
		snprintf(buf, len, "%" PRId64 "d %" PRId64 "h", s / 86400,
			 s % 86400 / 3600);
}

void client_bytes(uint64_t n, char *buf, size_t len)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB",
					     "PiB", "EiB" };
	double v = (double)n;
	size_t u = 0;

	if (n < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", n);
		return;
	}
	v /= 1024;
	while (v >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024;
		u++;
	}
	snprintf(buf, len, "%.1f %s", v, units[u]);
}
