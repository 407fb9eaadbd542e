/*
 * conn.c - one connection of npusand's socket (the design is
 * server_int.h's): reading its frames with the descriptors that come with
 * them, handing each whole frame to a registration (server.c) or a query
 * (rpc.c), queueing and writing its answers, and closing it.
 *
 * A connection's memory, and everything it holds (descriptors, output
 * queue, cursor, list answer, agent info), is freed by conn__free() in its
 * poll handle's close callback, or by its job's end when a job was still
 * running then (DESIGN 4). A frame being read is the connection's; a
 * descriptor that came with it is closed here unless a registration takes
 * it.
 */
#include "server_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"

/* Descriptors one recvmsg() takes; the kernel closes any beyond. */
#define CONN_MAX_FDS 4
/* Reads per readiness callback, so one busy peer cannot hog the loop. */
#define CONN_READS_PER_CB 16

/* ---- closing ----------------------------------------------------------- */

static void conn_free_out(struct conn *c)
{
	while (c->out_head != NULL) {
		struct conn_out *o = c->out_head;

		c->out_head = o->next;
		free(o->data);
		free(o);
	}
	c->out_tail = NULL;
	c->out_bytes = 0;
}

void conn__free(struct conn *c)
{
	rpc__list_done(c);
	free(c->cur);
	free(c->agent);
	free(c);
}

static void conn_closed_cb(uv_handle_t *h)
{
	struct conn *c = (struct conn *)h;
	struct server *s = c->srv;

	close(c->fd);
	if (c->rx_fd >= 0)
		close(c->rx_fd);
	if (c->pidfd >= 0)
		close(c->pidfd);
	wire_rx_reset(&c->rx);
	conn_free_out(c);
	if (c->job != NULL)
		c->closed = true; /* rpc_job_done_cb() frees it (DESIGN 4) */
	else
		conn__free(c);
	server__handle_closed(s);
}

/* Closes at once, dropping what is queued (DESIGN 4). */
void conn__close(struct conn *c)
{
	struct server *s = c->srv;

	if (c->dead)
		return;
	c->dead = true;
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	s->nconns--;
	server__uid_remove(s, c);
	if (c->kind == CONN_AGENT && c->proc != NULL && !s->stopping)
		ingest_disconnect(s->ingest, c->proc);
	c->proc = NULL;
	log_debug("connection from pid %d uid %u closed", (int)c->pid,
		  (unsigned)c->uid);
	uv_poll_stop(&c->poll);
	uv_close((uv_handle_t *)&c->poll, conn_closed_cb);
}

/* ---- output ------------------------------------------------------------ */

/* Writes what the socket takes; closes on a dead peer. */
static void conn_flush(struct conn *c)
{
	while (c->out_head != NULL) {
		struct conn_out *o = c->out_head;
		ssize_t n = send(c->fd, o->data + o->off, o->len - o->off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			log_debug("send to pid %d: %s", (int)c->pid,
				  strerror(errno));
			conn__close(c);
			return;
		}
		c->out_moved_ms = clock_mono_ms();
		o->off += (size_t)n;
		c->out_bytes -= (size_t)n;
		if (o->off < o->len)
			continue;
		c->out_head = o->next;
		if (c->out_head == NULL)
			c->out_tail = NULL;
		free(o->data);
		free(o);
	}
	if (c->out_head == NULL && c->closing) {
		conn__close(c);
		return;
	}
}

/*
 * Queues `frame` (taking it) and writes what the socket takes now.
 * 0; -ENOMEM (the frame is freed and the connection closed).
 */
int conn__send(struct conn *c, uint8_t *frame, size_t len)
{
	struct conn_out *o = malloc(sizeof(*o));

	if (o == NULL) {
		free(frame);
		conn__close(c);
		return -ENOMEM;
	}
	*o = (struct conn_out){ .data = frame, .len = len };
	if (c->out_tail != NULL)
		c->out_tail->next = o;
	else
		c->out_head = o;
	if (c->out_head == o)
		c->out_moved_ms = clock_mono_ms();
	c->out_tail = o;
	c->out_bytes += len;
	conn_flush(c);
	return c->dead ? -EPIPE : 0;
}

void conn__send_msg(struct conn *c, const Npusan__FromDaemon *m)
{
	uint8_t *f;
	size_t len;
	int err = wire_pack(m, &f, &len);

	if (err < 0) {
		log_error("cannot pack a reply for pid %d: %s", (int)c->pid,
			  strerror(-err));
		conn__close(c);
		return;
	}
	conn__send(c, f, len);
}

/* An Error reply; with `fatal` the connection closes after it (DESIGN 2). */
void conn__error(struct conn *c, int code, const char *msg, bool fatal)
{
	uint8_t *f;
	size_t len;

	if (fatal) {
		log_info("closing connection from pid %d uid %u: %s",
			 (int)c->pid, (unsigned)c->uid, msg);
		c->closing = true;
		c->closing_ms = clock_mono_ms();
		wire_rx_reset(&c->rx);
	}
	if (wire_error(code, msg, &f, &len) < 0) {
		conn__close(c);
		return;
	}
	conn__send(c, f, len);
	if (!c->dead)
		conn__update(c);
}

/* ---- input ------------------------------------------------------------- */

/* A whole frame arrived; `fd` came with it (ours, or -1). */
static void conn_on_frame(struct conn *c, const uint8_t *p, size_t len,
			  int fd)
{
	Npusan__ToDaemon *m;
	const char *why;
	int err;

	if (c->cur != NULL) {
		/* Only a follower reads with a cursor (conn__update()). */
		if (fd >= 0)
			close(fd);
		conn__error(c, EBUSY, "a request while following: close the "
			    "connection to stop following", true);
		return;
	}
	err = wire_decode(p, len, &m, &why);
	if (err < 0) {
		if (fd >= 0)
			close(fd);
		conn__error(c, err == -EBADMSG ? EBADMSG : EPROTO, why, true);
		return;
	}
	if (m->msg_case == NPUSAN__TO_DAEMON__MSG_REGISTER) {
		if (c->kind != CONN_NEW) {
			if (fd >= 0)
				close(fd);
			conn__error(c, EPROTO, c->kind == CONN_AGENT ?
				    "already registered" :
				    "a registration on a query connection",
				    true);
		} else if (!server__limit_refused(c, CONN_AGENT, fd)) {
			server__on_register(c, m->register_, fd);
		}
	} else {
		if (fd >= 0)
			close(fd); /* a descriptor with a query: dropped */
		rpc__on_query(c, m->query);
	}
	npusan__to_daemon__free_unpacked(m, NULL);
}

/* Keeps the first descriptor for the frame when it may carry one. */
static void conn_take_fds(struct conn *c, struct msghdr *msg, bool first)
{
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm != NULL;
	     cm = CMSG_NXTHDR(msg, cm)) {
		size_t n;

		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
			/* Only a new connection's first frame, at its first
			 * byte, may bring the ring. */
			if (first && c->kind == CONN_NEW && c->rx_fd < 0)
				c->rx_fd = fd;
			else
				close(fd);
		}
	}
}

/*
 * One recvmsg() into the frame in the making. 1: more may follow; 0: stop
 * reading for now; the connection may have closed (check dead).
 */
static int conn_read_some(struct conn *c)
{
	union {
		char buf[CMSG_SPACE(CONN_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov;
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = ctl.buf,
			      .msg_controllen = sizeof(ctl.buf) };
	bool first = wire_rx_idle(&c->rx);
	uint8_t *p;
	size_t n, len;
	ssize_t r;
	int err;

	wire_rx_next(&c->rx, &p, &n);
	iov.iov_base = p;
	iov.iov_len = n;
	r = recvmsg(c->fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	if (r < 0) {
		if (errno == EINTR)
			return 1;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		conn__close(c);
		return 0;
	}
	conn_take_fds(c, &msg, first);
	if (r == 0) {
		if (!wire_rx_idle(&c->rx))
			conn__error(c, EPROTO, "truncated frame", true);
		else
			conn__close(c);
		return 0;
	}
	if (first)
		c->since_ms = clock_mono_ms();
	err = wire_rx_advance(&c->rx, (size_t)r);
	if (err == -EMSGSIZE) {
		conn__error(c, EMSGSIZE, "frame too large", true);
		return 0;
	}
	if (err < 0) {
		conn__error(c, ENOMEM, "out of memory", true);
		return 0;
	}
	if (err == 1) {
		int fd = c->rx_fd;
		const uint8_t *payload = wire_rx_payload(&c->rx, &len);

		c->rx_fd = -1;
		conn_on_frame(c, payload, len, fd);
		wire_rx_reset(&c->rx);
		if (c->dead)
			return 0;
		conn__update(c);
		return (c->events & UV_READABLE) ? 1 : 0;
	}
	return 1;
}

static void conn_poll_cb(uv_poll_t *h, int status, int events)
{
	struct conn *c = (struct conn *)h;

	if (status < 0) {
		log_debug("poll on pid %d's connection: %s", (int)c->pid,
			  uv_strerror(status));
		conn__close(c);
		return;
	}
	if (events & UV_WRITABLE) {
		conn_flush(c);
		if (c->dead)
			return;
		rpc__pump(c);
		if (c->dead)
			return;
	}
	if (events & (UV_READABLE | UV_DISCONNECT)) {
		for (int i = 0; i < CONN_READS_PER_CB && !c->dead &&
				(c->events & UV_READABLE);
		     i++)
			if (conn_read_some(c) == 0)
				break;
	}
	if (!c->dead)
		conn__update(c);
}

/* Watches what the connection's state asks for (DESIGN 3). */
void conn__update(struct conn *c)
{
	int want = 0;

	if (c->dead)
		return;
	if (!c->closing && c->out_bytes < SERVER_OUT_HIGH && c->job == NULL &&
	    c->lcur == NULL &&
	    (c->cur == NULL || c->cur->following))
		want |= UV_READABLE;
	if (c->out_head != NULL ||
	    (!c->closing && c->out_bytes < SERVER_OUT_HIGH && c->job == NULL &&
	     rpc__walking(c)))
		want |= UV_WRITABLE;
	if (want == c->events)
		return;
	c->events = want;
	if (want == 0)
		uv_poll_stop(&c->poll);
	else if (uv_poll_start(&c->poll, want, conn_poll_cb) < 0)
		conn__close(c);
}

