/*
 * server.c - npusand's listener (server.h; the design is server_int.h's):
 * accepting connections, pausing when descriptors run out, sweeping the
 * ones that dawdle, counting each user's connections against the limits,
 * and who the peer is: its identity at accept and an agent's registration.
 *
 * Owns the struct server (freed by server_free(), or by the last handle's
 * close callback when server_start() failed), its uid counts and the
 * listening descriptor. A connection it accepts is the server's from then
 * on; conn.c frees it (conn__free()).
 */
#include "server_int.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "grow.h"
#include "log.h"
#include "procstat.h"

/* A new connection must have sent its first frame within this. */
#define SERVER_FIRST_TIMEOUT_MS 10000
/* A frame once begun must be whole within this. */
#define SERVER_FRAME_TIMEOUT_MS 10000
/* A query connection may sit idle, between requests, this long. */
#define SERVER_IDLE_TIMEOUT_MS 60000
/* Output that does not move for this long closes the connection. */
#define SERVER_STALL_TIMEOUT_MS 60000
/* A closing connection may take this long to take its last frames. */
#define SERVER_LINGER_MS 5000
/* How often the sweep looks for the above. */
#define SERVER_SWEEP_MS 1000
/* Accept failures (no descriptors left) pause accepting this long. */
#define SERVER_ACCEPT_PAUSE_MS 100

/* Wall-clock milliseconds, for a process's first and last seen. */
static int64_t server_real_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- limits per user (DESIGN 7) ---------------------------------------- */

static struct server_uid *server_uid_find(struct server *s, uid_t uid)
{
	for (size_t i = 0; i < s->nuids; i++)
		if (s->uids[i].uid == uid)
			return &s->uids[i];
	return NULL;
}

/* Counts a new connection of `uid`. 0; -ENOMEM. */
static int server_uid_add(struct server *s, uid_t uid)
{
	struct server_uid *u = server_uid_find(s, uid);

	if (u == NULL) {
		void *uids = s->uids;

		if (grow_array(&uids, &s->uids_cap, s->nuids + 1,
			       sizeof(*s->uids)) < 0)
			return -ENOMEM;
		s->uids = uids;
		u = &s->uids[s->nuids++];
		*u = (struct server_uid){ .uid = uid };
	}
	u->conns++;
	return 0;
}

/* Uncounts connection `c`; a user with none left is forgotten. */
void server__uid_remove(struct server *s, const struct conn *c)
{
	struct server_uid *u = server_uid_find(s, c->uid);

	assert(u != NULL && u->conns > 0);
	u->conns--;
	if (c->kind == CONN_AGENT)
		u->agents--;
	else if (c->kind == CONN_QUERY)
		u->queries--;
	if (u->conns == 0)
		*u = s->uids[--s->nuids];
}

/* Makes NEW connection `c` an agent's or a query connection, counted. */
void server__set_kind(struct conn *c, enum conn_kind kind)
{
	struct server_uid *u = server_uid_find(c->srv, c->uid);

	assert(c->kind == CONN_NEW && kind != CONN_NEW && u != NULL);
	c->kind = kind;
	/* Identity is settled (DESIGN 5): the descriptor goes back. */
	if (c->pidfd >= 0)
		close(c->pidfd);
	c->pidfd = -1;
	if (kind == CONN_AGENT)
		u->agents++;
	else
		u->queries++;
}

/*
 * Why user `uid` may not have one more connection of `kind` (CONN_NEW: any
 * connection, at accept), written into `buf`; NULL when it may. Root is
 * never refused here, only by the cap on all connections.
 */
static const char *server_uid_over(struct server *s, uid_t uid,
				   enum conn_kind kind, char *buf, size_t len)
{
	unsigned reserve = s->max_conns / 4 < SERVER_ROOT_RESERVE ?
				   s->max_conns / 4 : SERVER_ROOT_RESERVE;
	struct server_uid *u = server_uid_find(s, uid);
	unsigned agents = u ? u->agents : 0, queries = u ? u->queries : 0;

	if (uid == 0)
		return NULL;
	if (kind == CONN_NEW && s->nconns >= s->max_conns - reserve)
		snprintf(buf, len, "too many connections: %u open, the last "
			 "%u kept for root", s->nconns, reserve);
	else if (kind == CONN_NEW && u != NULL &&
		 u->conns >= s->max_agents + s->max_queries)
		snprintf(buf, len, "too many connections of uid %u: %u open, "
			 "its limit", (unsigned)uid, u->conns);
	else if (kind == CONN_AGENT && agents >= s->max_agents)
		snprintf(buf, len, "too many agents of uid %u: %u connected, "
			 "its limit (npusand --max-agents-per-user)",
			 (unsigned)uid, agents);
	else if (kind == CONN_QUERY && queries >= s->max_queries)
		snprintf(buf, len, "too many query connections of uid %u: %u "
			 "open, its limit (npusand --max-queries-per-user)",
			 (unsigned)uid, queries);
	else
		return NULL;
	return buf;
}

/* Counts a refusal and says who, at most every 10 s. */
static void server_log_refusal(struct server *s, pid_t pid, uid_t uid,
			       const char *why)
{
	uint64_t now = clock_mono_ms();

	s->refused++;
	if (now - s->refused_log_ms < 10000)
		return;
	log_warn("refusing connections: pid %d uid %u: %s (%" PRIu64
		 " refused so far)", (int)pid, (unsigned)uid, why, s->refused);
	s->refused_log_ms = now;
}

/* ---- identity ---------------------------------------------------------- */

/* Linux 6.5's SO_PEERPIDFD, where the C library's headers lack it (its
 * value in asm-generic/socket.h, which these architectures use). */
#if !defined(SO_PEERPIDFD) &&                                          \
	(defined(__x86_64__) || defined(__i386__) || defined(__aarch64__) || \
	 defined(__riscv) || defined(__arm__) || defined(__s390x__) ||     \
	 defined(__loongarch__))
#define SO_PEERPIDFD 77
#endif

/*
 * A pidfd of the process at the other end of `fd`, whose SO_PEERCRED pid is
 * `pid`: SO_PEERPIDFD's names the very process that connected; on an older
 * kernel pidfd_open(2) names whoever has the pid at accept. The descriptor;
 * -ESRCH when that process is gone; another negative errno when the kernel
 * offers no pidfd.
 */
static int server_peer_pidfd(int fd, pid_t pid)
{
	int pfd = -1;

#ifdef SO_PEERPIDFD
	socklen_t len = sizeof(pfd);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pfd, &len) == 0)
		return pfd;
	if (errno != ENOPROTOOPT && errno != EINVAL)
		return -errno;
#else
	(void)fd;
#endif
	pfd = (int)syscall(SYS_pidfd_open, pid, 0);
	return pfd < 0 ? -errno : pfd;
}

/* Whether the process `pidfd` names has not exited (it is readable once
 * it has). */
static bool server_pidfd_alive(int pidfd)
{
	struct pollfd p = { .fd = pidfd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

/*
 * The start time of c's peer as the kernel vouched for it (DESIGN 5): read
 * from /proc/PID/stat at accept while the pidfd taken then showed that
 * process alive, so the pid had not passed to another process; that stays
 * true when the process exits later, so a process that registers and exits
 * at once (a worker that does its work and _exit()s) is still drained.
 * Without a pidfd (a kernel before 5.3) the start time read at accept and
 * the one read now must agree. 0; -ESRCH when the process that connected
 * was gone at accept (or, without a pidfd, is now); a negative errno when
 * /proc cannot be read.
 */
static int server_peer_start_time(const struct conn *c, uint64_t *out)
{
	uint64_t st;
	int err;

	if (c->start_err < 0)
		return c->start_err;
	if (c->pidfd >= 0) {
		*out = c->start_time;
		return 0;
	}
	err = procstat_start_time(c->pid, &st);
	if (err == -ENOENT)
		return -ESRCH;
	if (err < 0)
		return err;
	if (st != c->start_time)
		return -ESRCH; /* the pid passed to a later process */
	*out = st;
	return 0;
}

/* Takes what the kernel says of c's peer at accept (DESIGN 5). */
static void server_identify(struct conn *c)
{
	int pfd = server_peer_pidfd(c->fd, c->pid);

	c->pidfd = pfd >= 0 ? pfd : -1;
	c->start_err = pfd == -ESRCH ? -ESRCH : 0;
	if (c->start_err == 0) {
		c->start_err = procstat_start_time(c->pid, &c->start_time);
		if (c->start_err == -ENOENT)
			c->start_err = -ESRCH;
	}
	if (c->start_err == 0 && c->pidfd >= 0 &&
	    !server_pidfd_alive(c->pidfd))
		c->start_err = -ESRCH;
}

/* Why a registration from c's peer cannot be verified, into `buf`. */
static const char *server_unverified_why(const struct conn *c, int err,
					 char *buf, size_t len)
{
	if (err == -ESRCH)
		snprintf(buf, len, "the process that connected (pid %d) has "
			 "exited: only a live process registers, itself",
			 (int)c->pid);
	else
		snprintf(buf, len, "cannot verify the sender: /proc/%d/stat: "
			 "%s", (int)c->pid, strerror(-err));
	return buf;
}

/* ---- registration ------------------------------------------------------ */

static void server_register_reply(struct conn *c, const char *error)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__RegisterReply rr = NPUSAN__REGISTER_REPLY__INIT;
	char clean[256];

	rr.has_accepted = 1;
	rr.accepted = error == NULL;
	rr.error = wire_clean(error, clean, sizeof(clean));
	rr.daemon_version = (char *)NPUSAN_VERSION;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_REGISTER_REPLY;
	m.register_reply = &rr;
	conn__send_msg(c, &m);
}

/* Refuses a registration and closes once the reply is out. */
static void server_refuse_register(struct conn *c, const char *why)
{
	log_info("refused registration from pid %d uid %u: %s", (int)c->pid,
		 (unsigned)c->uid, why);
	c->closing = true;
	c->closing_ms = clock_mono_ms();
	server_register_reply(c, why);
	if (!c->dead)
		conn__update(c);
}

/*
 * Refuses NEW connection `c`'s first request, of `kind`, when its user has
 * as many of those as it may (DESIGN 7), closing `fd` (ours, or -1) then.
 * The log line is server_log_refusal()'s, rate-limited. Whether refused.
 */
bool server__limit_refused(struct conn *c, enum conn_kind kind, int fd)
{
	char buf[160];
	const char *why = server_uid_over(c->srv, c->uid, kind, buf,
					  sizeof(buf));

	if (why == NULL)
		return false;
	if (fd >= 0)
		close(fd);
	server_log_refusal(c->srv, c->pid, c->uid, why);
	c->closing = true;
	c->closing_ms = clock_mono_ms();
	if (kind == CONN_AGENT)
		server_register_reply(c, why);
	else
		conn__error(c, EMFILE, why, false);
	if (!c->dead)
		conn__update(c);
	return true;
}

/* Ingest took c's process `p` as `proc`: c becomes an agent's
 * connection, and `ai` (which c takes) says what attach needs. */
static void server_registered(struct conn *c, const struct store_process *p,
			      struct ingest_proc *proc, struct conn_agent *ai)
{
	char rank[16];

	server__set_kind(c, CONN_AGENT);
	c->proc = proc;
	ai->has_rank = p->has_rank;
	ai->rank = p->rank;
	ai->state = p->state;
	if (p->job != NULL)
		snprintf(ai->job, sizeof(ai->job), "%s", p->job);
	c->agent = ai;
	if (p->has_rank)
		snprintf(rank, sizeof(rank), "%" PRIu32, p->rank);
	log_info("registered pid %d uid %u job %s rank %s exe %s%s",
		 (int)c->pid, (unsigned)c->uid, p->job ? p->job : "-",
		 p->has_rank ? rank : "-", p->exe ? p->exe : "-",
		 p->state == STORE_DORMANT ? " (dormant)" : "");
}

/* The Register `r` arrived with descriptor `fd` (ours, or -1). */
void server__on_register(struct conn *c, const Npusan__Register *r, int fd)
{
	struct wire_strings *strs = malloc(sizeof(*strs));
	struct conn_agent *ai = calloc(1, sizeof(*ai));
	struct store_process p;
	struct ingest_proc *proc;
	const char *why = NULL;
	char msg[160];
	uint64_t st = 0;
	int err;

	if (strs == NULL || ai == NULL) {
		free(strs);
		free(ai);
		if (fd >= 0)
			close(fd);
		conn__error(c, ENOMEM, "out of memory", true);
		return;
	}
	if (wire_register_process(r, strs, &p, &why) < 0)
		goto refuse;
	if ((pid_t)p.pid != c->pid || p.pid == 0) {
		snprintf(msg, sizeof(msg),
			 "pid %" PRIu32 " is not the sender's (%d): a process "
			 "registers only itself", p.pid, (int)c->pid);
		why = msg;
		goto refuse;
	}
	if (fd < 0) {
		why = "no ring descriptor came with the registration";
		goto refuse;
	}
	/* The kernel's start time, never the message's: with the pid it
	 * names the process in the store, so the peer must not choose it. */
	err = server_peer_start_time(c, &st);
	if (err < 0) {
		why = server_unverified_why(c, err, msg, sizeof(msg));
		goto refuse;
	}
	if (r->has_start_time && r->start_time != st) {
		why = "start time does not match /proc";
		goto refuse;
	}
	p.start_time = st;
	p.uid = (uint32_t)c->uid;
	p.first_ms = p.last_ms = server_real_ms();
	err = ingest_register(c->srv->ingest, &p, fd, &proc, &why);
	if (err < 0) {
		/* The fd is still ours: ingest takes it only on success. */
		if (why == NULL && err == -EPERM)
			why = "this process is stored as another user's: a "
			      "stored process never changes owner";
		if (why == NULL)
			why = err == -EIO ? "database error" : strerror(-err);
		goto refuse;
	}
	server_registered(c, &p, proc, ai);
	free(strs);
	server_register_reply(c, NULL);
	return;
refuse:
	if (fd >= 0)
		close(fd);
	server_refuse_register(c, why);
	free(strs);
	free(ai);
}

/* ---- accepting --------------------------------------------------------- */

static void server_listen_resume(struct server *s);

static void server_accept_pause_cb(uv_timer_t *t)
{
	struct server *s = t->data;

	s->accept_paused = false;
	server_listen_resume(s);
}

/*
 * Refuses `fd` with a best-effort Error saying `why`; NULL: the cap on all
 * connections, logged now and then here (the caller logs any other).
 */
static void server_refuse(struct server *s, int fd, const char *why)
{
	uint64_t now = clock_mono_ms();
	uint8_t *f;
	size_t len;

	if (wire_error(EMFILE, why ? why : "too many connections", &f,
		       &len) == 0) {
		ssize_t n = send(fd, f, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		(void)n;
		free(f);
	}
	close(fd);
	if (why != NULL)
		return;
	s->refused++;
	if (now - s->refused_log_ms >= 10000) {
		log_warn("refusing connections: %u open, the limit (%" PRIu64
			 " refused so far)", s->nconns, s->refused);
		s->refused_log_ms = now;
	}
}

static void server_add_conn(struct server *s, int fd)
{
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	const char *why;
	struct conn *c;
	char buf[160];

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		log_warn("SO_PEERCRED: %s", strerror(errno));
		close(fd);
		return;
	}
	why = server_uid_over(s, cred.uid, CONN_NEW, buf, sizeof(buf));
	if (why != NULL) {
		server_refuse(s, fd, why);
		server_log_refusal(s, cred.pid, cred.uid, why);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL || server_uid_add(s, cred.uid) < 0) {
		log_warn("cannot take a connection: out of memory");
		free(c);
		close(fd);
		return;
	}
	c->uid = cred.uid;
	if (uv_poll_init(s->loop, &c->poll, fd) < 0) {
		log_warn("cannot take a connection: out of memory");
		server__uid_remove(s, c);
		free(c);
		close(fd);
		return;
	}
	s->open_handles++;
	c->srv = s;
	c->fd = fd;
	c->rx_fd = -1;
	c->pid = cred.pid;
	server_identify(c);
	c->since_ms = clock_mono_ms();
	c->next = s->conns;
	if (s->conns != NULL)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	log_debug("connection from pid %d uid %u", (int)c->pid,
		  (unsigned)c->uid);
	conn__update(c);
}

static void server_listener_cb(uv_poll_t *h, int status, int events)
{
	struct server *s = h->data;

	(void)events;
	if (status < 0) {
		log_error("listening socket: %s", uv_strerror(status));
		return;
	}
	for (int i = 0; i < 64 && !s->stopping; i++) {
		int fd = accept4(s->lfd, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			/* EMFILE, ENFILE, ENOBUFS, ENOMEM: the connection
			 * waits in the backlog; retry a little later rather
			 * than spin on a readable listener. */
			log_warn("accept: %s; pausing %d ms", strerror(errno),
				 SERVER_ACCEPT_PAUSE_MS);
			s->accept_paused = true;
			uv_poll_stop(&s->listener);
			uv_timer_start(&s->accept_pause, server_accept_pause_cb,
				       SERVER_ACCEPT_PAUSE_MS, 0);
			break;
		}
		if (s->nconns >= s->max_conns)
			server_refuse(s, fd, NULL);
		else
			server_add_conn(s, fd);
	}
}

static void server_listen_resume(struct server *s)
{
	if (s->stopping || s->accept_paused)
		return;
	if (uv_poll_start(&s->listener, UV_READABLE, server_listener_cb) < 0)
		log_error("cannot watch the listening socket");
}

/* Closes what dawdles (DESIGN 3). */
static void server_sweep_cb(uv_timer_t *t)
{
	struct server *s = t->data;
	uint64_t now = clock_mono_ms();
	struct conn *next;

	for (struct conn *c = s->conns; c != NULL; c = next) {
		next = c->next;
		if (c->closing) {
			if (now - c->closing_ms >= SERVER_LINGER_MS)
				conn__close(c);
		} else if (c->out_head != NULL &&
			   now - c->out_moved_ms >= SERVER_STALL_TIMEOUT_MS) {
			log_info("pid %d does not read its answers; closing",
				 (int)c->pid);
			conn__close(c);
		} else if (!wire_rx_idle(&c->rx)) {
			if (now - c->since_ms >= SERVER_FRAME_TIMEOUT_MS)
				conn__error(c, ETIMEDOUT, "frame timed out",
					    true);
		} else if (c->kind == CONN_NEW) {
			if (now - c->since_ms >= SERVER_FIRST_TIMEOUT_MS) {
				log_debug("pid %d sent nothing; closing",
					  (int)c->pid);
				conn__close(c);
			}
		} else if (c->kind == CONN_QUERY && c->cur == NULL &&
			   c->lcur == NULL && c->job == NULL &&
			   c->out_head == NULL &&
			   now - c->since_ms >= SERVER_IDLE_TIMEOUT_MS) {
			conn__close(c);
		}
	}
}

/* ---- public ------------------------------------------------------------ */

void server__handle_closed(struct server *s)
{
	if (--s->open_handles == 0 && s->free_when_closed) {
		free(s->uids);
		free(s);
	}
}

static void server_timer_closed_cb(uv_handle_t *h)
{
	server__handle_closed(h->data);
}

int server_start(const struct server_opts *o, struct server **out)
{
	struct server *s = calloc(1, sizeof(*s));
	int err;

	/* The reply fields rpc.c names are the generated code's. */
	assert(rpc__proto_matches());
	if (s == NULL)
		return -ENOMEM;
	s->loop = o->loop;
	s->store = o->store;
	s->ingest = o->ingest;
	s->start_ns = o->start_ns;
	s->max_conns = o->max_conns ? o->max_conns : SERVER_MAX_CONNS;
	s->max_agents = o->max_agents_per_uid ? o->max_agents_per_uid :
						SERVER_AGENTS_PER_UID;
	s->max_queries = o->max_queries_per_uid ? o->max_queries_per_uid :
						  SERVER_QUERIES_PER_UID;
	s->lfd = o->listen_fd;
	err = uv_poll_init(s->loop, &s->listener, s->lfd);
	if (err < 0) {
		free(s);
		return err;
	}
	s->listener.data = s;
	uv_timer_init(s->loop, &s->sweep);
	s->sweep.data = s;
	uv_timer_init(s->loop, &s->accept_pause);
	s->accept_pause.data = s;
	s->open_handles = 3;
	err = uv_poll_start(&s->listener, UV_READABLE, server_listener_cb);
	if (err == 0)
		err = uv_timer_start(&s->sweep, server_sweep_cb,
				     SERVER_SWEEP_MS, SERVER_SWEEP_MS);
	if (err < 0) {
		/* The caller keeps the descriptor: never close it here. The
		 * handles free the server as they close. */
		s->lfd = -1;
		s->free_when_closed = true;
		server_stop(s);
		return err;
	}
	*out = s;
	return 0;
}

void server_on_commit(struct server *s)
{
	struct conn *next;

	if (s == NULL || s->stopping)
		return;
	for (struct conn *c = s->conns; c != NULL; c = next) {
		next = c->next;
		if (c->cur != NULL && c->cur->following) {
			c->cur->pending = true;
			rpc__pump(c);
		}
	}
}

static void server_listener_closed_cb(uv_handle_t *h)
{
	struct server *s = h->data;

	if (s->lfd >= 0)
		close(s->lfd);
	s->lfd = -1;
	server__handle_closed(s);
}

void server_stop(struct server *s)
{
	if (s == NULL || s->stopping)
		return;
	s->stopping = true;
	uv_close((uv_handle_t *)&s->listener, server_listener_closed_cb);
	uv_close((uv_handle_t *)&s->sweep, server_timer_closed_cb);
	uv_close((uv_handle_t *)&s->accept_pause, server_timer_closed_cb);
	while (s->conns != NULL)
		conn__close(s->conns);
}

void server_free(struct server *s)
{
	if (s == NULL)
		return;
	/* The loop ran until the handles closed (server.h). */
	if (s->open_handles != 0)
		log_error("server freed with %u handles open", s->open_handles);
	free(s->uids);
	free(s);
}
