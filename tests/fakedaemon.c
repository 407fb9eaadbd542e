/*
 * fakedaemon.c - the registration half of npusand, enough for tests and
 * benchmarks to run a real agent against, and a ring drainer.
 *
 * DESIGN
 * 1. One thread owns the listener and every connection: it alone accepts,
 *    reads, replies and closes them. Other threads reach it through the
 *    eventfd (stop, disconnect requests) and the queue, both under `lock`.
 * 2. A connection lives until its peer closes it, fakedaemon_disconnect()
 *    or fakedaemon_stop(); the thread never closes one because it went
 *    quiet, since the agent takes a close for a daemon restart.
 * 3. A queued fd belongs to the queue until fakedaemon_next() hands it
 *    out; fakedaemon_stop() closes the ones nobody took.
 */
#include "fakedaemon.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "npusan.pb-c.h"
#include "ringdec.h"
#include "ringread.h"

/* How long a started frame may take to arrive whole. */
#define FD_RECV_TIMEOUT_MS 1000
#define FD_SEND_TIMEOUT_MS 1000
#define FD_MAX_CONNS 256
#define FD_RX_MAX 65536

struct fakedaemon {
	int lfd;
	int wake; /* eventfd: stop or disconnect asked */
	pthread_t thread;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	uint8_t rx[FD_RX_MAX];

	/* Owned by the thread (DESIGN 1). */
	int conns[FD_MAX_CONNS];
	unsigned nconns;

	pthread_mutex_t lock;
	pthread_cond_t cond; /* queue grew, or a request was served */
	struct fakedaemon_agent *queue;
	size_t qhead, qlen, qcap;
	bool stopping;
	bool running;		/* the thread has not exited */
	unsigned disconnect_req; /* asked for; served == req when done */
	unsigned disconnect_served;
	unsigned nconns_shared; /* a copy of nconns for other threads */
	/* Set by the test, read by the thread; relaxed: a setting and a
	 * count, ordering nothing else. */
	_Atomic unsigned reply_delay_ms;
	_Atomic unsigned replies; /* replies the agent's socket took */
};

static int fd_now_abs(unsigned timeout_ms, struct timespec *ts)
{
	if (clock_gettime(CLOCK_MONOTONIC, ts) < 0)
		return -errno;
	ts->tv_sec += timeout_ms / 1000;
	ts->tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (ts->tv_nsec >= 1000000000) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000;
	}
	return 0;
}

static void fd_publish_nconns(struct fakedaemon *d)
{
	pthread_mutex_lock(&d->lock);
	d->nconns_shared = d->nconns;
	pthread_mutex_unlock(&d->lock);
}

static void fd_close_conn(struct fakedaemon *d, unsigned i)
{
	close(d->conns[i]);
	d->conns[i] = d->conns[--d->nconns];
	fd_publish_nconns(d);
}

/* Queues an accepted agent; the queue owns a->fd from here (DESIGN 3). */
static void fd_enqueue(struct fakedaemon *d, const struct fakedaemon_agent *a)
{
	pthread_mutex_lock(&d->lock);
	if (d->qhead > 0 && d->qhead == d->qlen)
		d->qhead = d->qlen = 0; /* all taken: start again at 0 */
	if (d->qlen == d->qcap) {
		size_t cap = d->qcap ? d->qcap * 2 : 16;
		void *q = realloc(d->queue, cap * sizeof(*d->queue));

		if (q == NULL) {
			pthread_mutex_unlock(&d->lock);
			if (a->fd >= 0)
				close(a->fd);
			return;
		}
		d->queue = q;
		d->qcap = cap;
	}
	d->queue[d->qlen++] = *a;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

static int fd_reply(int conn)
{
	Npusan__RegisterReply rr = NPUSAN__REGISTER_REPLY__INIT;
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	uint8_t buf[256];
	size_t len;

	rr.has_accepted = 1;
	rr.accepted = 1;
	rr.daemon_version = (char *)"fakedaemon";
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_REGISTER_REPLY;
	m.register_reply = &rr;
	len = npusan__from_daemon__pack(&m, buf);
	return frame_send(conn, buf, len, -1, FD_SEND_TIMEOUT_MS);
}

/* fd_reply() after the delay the test asked for, counting a reply the
 * agent's socket took (one that had exited refuses it). */
static int fd_reply_late(struct fakedaemon *d, int conn)
{
	unsigned ms = atomic_load_explicit(&d->reply_delay_ms,
					   memory_order_relaxed);
	struct timespec nap = { ms / 1000, (long)(ms % 1000) * 1000000L };
	int err;

	if (ms != 0)
		nanosleep(&nap, NULL);
	err = fd_reply(conn);
	if (err == 0)
		atomic_fetch_add_explicit(&d->replies, 1, memory_order_relaxed);
	return err;
}

static void fd_fill(struct fakedaemon_agent *a, const Npusan__Register *r,
		    int fd)
{
	memset(a, 0, sizeof(*a));
	a->fd = fd;
	a->pid = r->has_pid ? r->pid : 0;
	a->start_time = r->has_start_time ? r->start_time : 0;
	if (r->job != NULL) {
		strncpy(a->job, r->job, sizeof(a->job) - 1);
		a->job[sizeof(a->job) - 1] = '\0';
	}
	a->has_rank = r->has_rank;
	a->rank = r->has_rank ? r->rank : 0;
	a->ring_size = r->has_ring_size ? r->ring_size : 0;
	a->ring_header_size = r->has_ring_header_size ? r->ring_header_size
						      : 0;
	a->ring_flags = r->has_ring_flags ? r->ring_flags : 0;
}

/*
 * Reads one frame from connection `i`. A Register is answered and queued;
 * anything else is ignored. False when the connection must close.
 */
static bool fd_serve(struct fakedaemon *d, unsigned i)
{
	Npusan__ToDaemon *m;
	struct fakedaemon_agent a;
	size_t len;
	int fd = -1;
	int err = frame_recv(d->conns[i], d->rx, sizeof(d->rx), &len, &fd,
			     FD_RECV_TIMEOUT_MS);

	if (err == -EAGAIN)
		return true;
	if (err < 0)
		return false;
	m = npusan__to_daemon__unpack(NULL, len, d->rx);
	if (m == NULL) {
		if (fd >= 0)
			close(fd);
		return false;
	}
	if (m->msg_case != NPUSAN__TO_DAEMON__MSG_REGISTER) {
		npusan__to_daemon__free_unpacked(m, NULL);
		if (fd >= 0)
			close(fd);
		return true;
	}
	fd_fill(&a, m->register_, fd);
	npusan__to_daemon__free_unpacked(m, NULL);
	/* Queued before the reply goes out: once the agent says it is
	 * registered, fakedaemon_next() already has it. */
	fd_enqueue(d, &a);
	return fd_reply_late(d, d->conns[i]) == 0;
}

static void fd_accept(struct fakedaemon *d)
{
	int c = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC);

	if (c < 0)
		return;
	if (d->nconns == FD_MAX_CONNS) {
		close(c);
		return;
	}
	d->conns[d->nconns++] = c;
	fd_publish_nconns(d);
}

/* Serves disconnect requests; true when asked to stop. */
static bool fd_requests(struct fakedaemon *d)
{
	uint64_t n;
	bool stop;
	unsigned req;

	if (read(d->wake, &n, sizeof(n)) < 0 && errno != EAGAIN)
		return true;
	pthread_mutex_lock(&d->lock);
	stop = d->stopping;
	req = d->disconnect_req;
	pthread_mutex_unlock(&d->lock);
	if (req != d->disconnect_served) {
		while (d->nconns > 0)
			fd_close_conn(d, d->nconns - 1);
		pthread_mutex_lock(&d->lock);
		d->disconnect_served = req;
		pthread_cond_broadcast(&d->cond);
		pthread_mutex_unlock(&d->lock);
	}
	return stop;
}

static void *fd_thread(void *arg)
{
	struct fakedaemon *d = arg;
	struct pollfd p[FD_MAX_CONNS + 2];

	for (;;) {
		unsigned n = d->nconns;

		p[0] = (struct pollfd){ .fd = d->wake, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = d->lfd, .events = POLLIN };
		for (unsigned i = 0; i < n; i++)
			p[i + 2] = (struct pollfd){ .fd = d->conns[i],
						    .events = POLLIN };
		if (poll(p, n + 2, -1) < 0) {
			if (errno == EINTR || errno == ENOMEM)
				continue;
			break;
		}
		if (p[0].revents != 0 && fd_requests(d))
			break;
		if (n != d->nconns)
			continue; /* a disconnect renumbered them */
		/* Backwards: closing i moves the last connection into it. */
		for (unsigned i = n; i-- > 0;)
			if (p[i + 2].revents != 0 && !fd_serve(d, i))
				fd_close_conn(d, i);
		if (p[1].revents != 0)
			fd_accept(d);
	}
	while (d->nconns > 0)
		fd_close_conn(d, d->nconns - 1);
	pthread_mutex_lock(&d->lock);
	d->running = false;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	return NULL;
}

static int fd_listen(const char *path, int *out)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, err;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(fd, 64) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	*out = fd;
	return 0;
}

int fakedaemon_start(const char *sock_path, struct fakedaemon **out)
{
	struct fakedaemon *d;
	pthread_condattr_t ca;
	sigset_t all, old;
	int err;

	if (strlen(sock_path) >= sizeof(d->path))
		return -ENAMETOOLONG;
	d = calloc(1, sizeof(*d));
	if (d == NULL)
		return -ENOMEM;
	strcpy(d->path, sock_path);
	d->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (d->wake < 0) {
		err = -errno;
		goto err_free;
	}
	err = fd_listen(sock_path, &d->lfd);
	if (err < 0)
		goto err_wake;
	pthread_mutex_init(&d->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cond, &ca);
	pthread_condattr_destroy(&ca);
	d->running = true;
	/* Every signal blocked: the test's signals go to the test. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = -pthread_create(&d->thread, NULL, fd_thread, d);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err < 0)
		goto err_listen;
	*out = d;
	return 0;
err_listen:
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	close(d->lfd);
	unlink(sock_path);
err_wake:
	close(d->wake);
err_free:
	free(d);
	return err;
}

int fakedaemon_next(struct fakedaemon *d, unsigned timeout_ms,
		    struct fakedaemon_agent *out)
{
	struct timespec until;
	int err = fd_now_abs(timeout_ms, &until);

	if (err < 0)
		return err;
	pthread_mutex_lock(&d->lock);
	while (d->qhead == d->qlen && err == 0)
		err = -pthread_cond_timedwait(&d->cond, &d->lock, &until);
	if (d->qhead < d->qlen) {
		*out = d->queue[d->qhead++];
		err = 0;
	}
	pthread_mutex_unlock(&d->lock);
	return err;
}

unsigned fakedaemon_connections(struct fakedaemon *d)
{
	unsigned n;

	pthread_mutex_lock(&d->lock);
	n = d->nconns_shared;
	pthread_mutex_unlock(&d->lock);
	return n;
}

static void fd_kick(struct fakedaemon *d)
{
	uint64_t one = 1;

	while (write(d->wake, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

int fakedaemon_disconnect(struct fakedaemon *d)
{
	unsigned req;
	int err = 0;

	pthread_mutex_lock(&d->lock);
	req = ++d->disconnect_req;
	pthread_mutex_unlock(&d->lock);
	fd_kick(d);
	pthread_mutex_lock(&d->lock);
	while (d->running && d->disconnect_served != req)
		pthread_cond_wait(&d->cond, &d->lock);
	if (d->disconnect_served != req)
		err = -ECANCELED;
	pthread_mutex_unlock(&d->lock);
	return err;
}

void fakedaemon_stop(struct fakedaemon *d)
{
	if (d == NULL)
		return;
	pthread_mutex_lock(&d->lock);
	d->stopping = true;
	pthread_mutex_unlock(&d->lock);
	fd_kick(d);
	pthread_join(d->thread, NULL);
	close(d->lfd);
	unlink(d->path);
	close(d->wake);
	for (size_t i = d->qhead; i < d->qlen; i++)
		if (d->queue[i].fd >= 0)
			close(d->queue[i].fd);
	free(d->queue);
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->lock);
	free(d);
}

/* ---- draining a ring ---------------------------------------------------- */

struct fakedaemon_ring {
	struct ringread *rr;
	struct ringdec *dec;
	struct fakedaemon_collected n;
	fakedaemon_op_cb cb;
	void *arg;
};

int fakedaemon_ring_open(int ring_fd, struct symtab *syms,
			 struct fakedaemon_ring **out)
{
	struct fakedaemon_ring *r = calloc(1, sizeof(*r));
	int err;

	if (r == NULL)
		return -ENOMEM;
	err = ringread_map(ring_fd, &r->rr, NULL);
	if (err == 0)
		err = ringdec_new(syms, &r->dec);
	if (err < 0) {
		fakedaemon_ring_close(r);
		return err;
	}
	*out = r;
	return 0;
}

void fakedaemon_ring_close(struct fakedaemon_ring *r)
{
	if (r == NULL)
		return;
	ringdec_free(r->dec);
	ringread_unmap(r->rr);
	free(r);
}

static int fd_record_cb(void *arg, unsigned type, const void *payload,
			size_t len)
{
	struct fakedaemon_ring *r = arg;
	struct op op;
	int ret = ringdec_record(r->dec, type, payload, len, &op);

	r->n.records++;
	if (ret == -EBADMSG) {
		r->n.malformed++;
		return 0;
	}
	if (ret < 0)
		return ret; /* -ENOMEM, -E2BIG: stops the collection */
	if (ret == 0)
		return 0;
	r->n.ops++;
	return r->cb(r->arg, &op);
}

static int64_t fd_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The drops no gap record carried, as a final gap op (DEAD only). */
static int fd_pending_gap(struct fakedaemon_ring *r)
{
	struct op op = { .kind = OP_GAP, .has_lost = true };

	op.lost = ringread_take_pending(r->rr);
	if (op.lost == 0)
		return 0;
	r->n.ops++;
	return r->cb(r->arg, &op);
}

int fakedaemon_ring_collect(struct fakedaemon_ring *r, unsigned quiet_ms,
			    unsigned flags, fakedaemon_op_cb cb, void *arg,
			    struct fakedaemon_collected *stats)
{
	struct timespec nap = { 0, 200000 };
	struct ringread_counters c;
	uint64_t ops0 = r->n.ops;
	int64_t last = fd_now_ms();
	int n;

	r->cb = cb;
	r->arg = arg;
	for (;;) {
		n = ringread_drain(r->rr, 4096, flags, fd_record_cb, r);
		if (n < 0)
			return n;
		if (n > 0) {
			last = fd_now_ms();
			continue;
		}
		if (flags & RINGREAD_DEAD) {
			n = fd_pending_gap(r);
			if (n < 0)
				return n;
			break;
		}
		if (fd_now_ms() - last >= (int64_t)quiet_ms)
			break;
		nanosleep(&nap, NULL);
	}
	if (stats != NULL) {
		ringread_counters(r->rr, &c);
		r->n.dropped = c.dropped;
		r->n.lost_bytes = c.lost_bytes;
		*stats = r->n;
	}
	return (int)(r->n.ops - ops0);
}

int fakedaemon_collect(int ring_fd, unsigned quiet_ms, unsigned flags,
		       struct symtab *syms, fakedaemon_op_cb cb, void *arg,
		       struct fakedaemon_collected *stats)
{
	struct fakedaemon_ring *r;
	int err = fakedaemon_ring_open(ring_fd, syms, &r);

	if (err < 0)
		return err;
	err = fakedaemon_ring_collect(r, quiet_ms, flags, cb, arg, stats);
	fakedaemon_ring_close(r);
	return err;
}

void fakedaemon_delay_replies(struct fakedaemon *d, unsigned ms)
{
	atomic_store_explicit(&d->reply_delay_ms, ms, memory_order_relaxed);
}

unsigned fakedaemon_replies(struct fakedaemon *d)
{
	return atomic_load_explicit(&d->replies, memory_order_relaxed);
}
