/*
 * server.c - npusand's socket (see server.h): connections, their frames,
 * registrations and queries.
 *
 * Every socket is a uv_poll_t over a descriptor we read with recvmsg(2)
 * and write with send(2) ourselves, the listener included. A libuv IPC pipe
 * (uv_pipe_init(..., ipc=1)) would hand us descriptors too, and on Unix it
 * adds no framing of its own, but it queues every descriptor a peer sends,
 * without bound, apart from the bytes they came with; it would give the
 * memfd to uv_accept() as if it were a stream; and a plain pipe reads with
 * read(2), so the kernel drops the descriptor. Reading ourselves keeps the
 * ring's memfd with the frame it came with and bounds both.
 *
 * DESIGN
 * 1. A connection is NEW until its first frame: a Register makes it an
 *    AGENT's, a Query a QUERY connection. An agent sends nothing more; a
 *    query connection may ask again once an answer is complete.
 * 2. A malformed, truncated or oversized frame, an unknown message, a
 *    second Register, or a Query of another protocol version is answered
 *    with an Error where the socket still takes it, and the connection
 *    closes (CLOSING: no more reading, the queue flushes, then close).
 *    A well-formed request the daemon cannot serve (an unknown id or kind)
 *    gets an Error and the connection stays.
 * 3. What one connection may make the daemon hold is bounded: a request
 *    frame of WIRE_RX_MAX, allocated only while it arrives, and an output
 *    queue that answers stop filling at SERVER_OUT_HIGH (findings, and
 *    the processes of a list answer, are walked page by page from the
 *    store as the queue drains: a list answer holds the ids it will send,
 *    8 bytes each, and nothing more; a follower's new findings wait in
 *    the store, not here). Connections are capped;
 *    one that dawdles (SERVER_*_TIMEOUT_MS) is closed by the sweep.
 * 4. A connection's memory is freed in its poll handle's close callback,
 *    never before (or, when a job (7) runs for it then, once the job is
 *    done): code that may close one checks `dead` afterwards.
 * 5. The uid that decides what a query sees, and the pid an agent may
 *    register, come from SO_PEERCRED at accept, never from a message; so
 *    does the start time that names the process with its pid: read from
 *    /proc while a pidfd of the process that connected shows it alive. A
 *    registration that cannot be verified so is refused; the store refuses
 *    one of a process stored under another uid.
 * 6. A findings answer is a cursor: the last id sent. It walks the store
 *    page by page (after_id), and with follow it stays, and each commit of
 *    the store's writer (server_on_commit(), through the caller's
 *    uv_async_t) walks what was stored after it. A follower is sent new
 *    findings only: a finding it has seen whose count grows later keeps
 *    its id and is not sent again (`npusanctl show` has the count).
 * 7. No user locks others out: a user other than root holds at most
 *    max_agents agent and max_queries query connections, and at most their
 *    sum in all; the last SERVER_ROOT_RESERVE connections are root's. A
 *    refusal says so to the peer and in the log (rate-limited), naming
 *    the uid.
 * 8. The loop never waits for SQLite: registrations are queued (the
 *    store's provisional ids), and list, stats, show, each page of a list
 *    answer and each page of findings run as a job on libuv's thread pool
 *    (uv_queue_work), which reads the store and packs the reply there; the
 *    loop sends it. While its job runs a connection reads nothing, so it
 *    has one at most.
 */
#include "server.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "procstat.h"
#include "wire.h"

#ifndef NPUSAN_VERSION
#error "define NPUSAN_VERSION (the project version) when compiling server.c"
#endif

/* Answers stop filling a connection's queue at this many bytes. */
#define SERVER_OUT_HIGH (256u * 1024)
/* An answer frame is sent once its items pass this many bytes. */
#define SERVER_FRAME_TARGET (128u * 1024)
/* A list answer naming more processes than this is refused: filter it. */
#define SERVER_LIST_MAX_PROCS (1u << 20)
/* Processes a list answer walks at a time (DESIGN 3). */
#define SERVER_LIST_PAGE 256
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
/* Descriptors one recvmsg() takes; the kernel closes any beyond. */
#define SERVER_MAX_FDS 4
/* Reads per readiness callback, so one busy peer cannot hog the loop. */
#define SERVER_READS_PER_CB 16
/* Accept failures (no descriptors left) pause accepting this long. */
#define SERVER_ACCEPT_PAUSE_MS 100

enum conn_kind { CONN_NEW, CONN_AGENT, CONN_QUERY };

/* One queued frame. */
struct out {
	struct out *next;
	uint8_t *data;
	size_t len, off;
};

/* A list answer in progress: the processes it names, and the next one. */
struct list_cursor {
	int64_t *ids;
	size_t n, next;
};

/* A findings answer in progress, and then, with follow, a follow. */
struct cursor {
	struct store_filter f;
	struct wire_strings strs;
	int64_t after_id; /* the last finding sent */
	uint32_t left;    /* with a limit: how many more the answer may send */
	bool limited;
	bool follow;
	bool following; /* the first answer is complete */
	bool pending;   /* following: the store committed since the last walk */
};

struct conn {
	uv_poll_t poll; /* first: the close callback gets the conn */
	struct server *srv;
	struct conn *prev, *next;
	int fd;
	pid_t pid; /* SO_PEERCRED (DESIGN 5) */
	uid_t uid;
	int pidfd;	     /* the connecting process's, or -1 (DESIGN 5) */
	uint64_t start_time; /* the pid's at accept, when start_err is 0 */
	int start_err;
	enum conn_kind kind;
	int events; /* what the poll handle watches now */
	bool closing;
	bool dead;
	struct wire_rx rx;
	int rx_fd;		  /* the descriptor that came with this frame */
	int64_t since_ms;	  /* accept, frame start or last answer */
	int64_t out_moved_ms;	  /* output last moved */
	int64_t closing_ms;
	struct out *out_head, *out_tail;
	size_t out_bytes;
	struct ingest_proc *proc; /* AGENT: ours to disconnect */
	struct cursor *cur;	  /* QUERY: a findings answer or follow */
	struct list_cursor *lcur; /* QUERY: a list answer (DESIGN 3) */
	struct agent_info *agent; /* AGENT: what attach needs to know */
	struct conn_job *job;	  /* QUERY: its job in flight (DESIGN 7) */
	bool closed; /* its poll handle closed while its job ran */
};

/* An agent's process, as attach matches and answers it. */
struct agent_info {
	bool has_rank;
	uint32_t rank;
	enum store_state state; /* running (attached) or dormant */
	char job[WIRE_JOB_MAX + 1]; /* "" when none */
};

/* One user's connections (DESIGN 7). */
struct server_uid {
	uid_t uid;
	unsigned conns; /* all of them, NEW ones included */
	unsigned agents;
	unsigned queries;
};

struct server {
	uv_loop_t *loop;
	struct store *store;
	struct ingest *ingest;
	uint64_t start_ns;
	unsigned max_conns;
	unsigned max_agents; /* per uid */
	unsigned max_queries;
	unsigned nconns;
	struct server_uid *uids; /* the users with a connection open */
	size_t nuids, uids_cap;
	int lfd;
	bool stopping;
	bool accept_paused;
	uv_poll_t listener;
	uv_timer_t sweep;
	uv_timer_t accept_pause;
	struct conn *conns; /* a list, newest first */
	unsigned open_handles;
	bool free_when_closed; /* server_start() failed: nobody frees it */
	int64_t refused_log_ms; /* last "refusing" warning, rate-limited */
	uint64_t refused;
};

static void conn_update(struct conn *c);
static bool conn_walking(const struct conn *c);
static void conn_list_done(struct conn *c);
static void conn_pump(struct conn *c);

static int64_t now_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_real_ms(void)
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
		if (s->nuids == s->uids_cap) {
			size_t cap = s->uids_cap ? 2 * s->uids_cap : 8;
			struct server_uid *v = realloc(s->uids,
						       cap * sizeof(*v));

			if (v == NULL)
				return -ENOMEM;
			s->uids = v;
			s->uids_cap = cap;
		}
		u = &s->uids[s->nuids++];
		*u = (struct server_uid){ .uid = uid };
	}
	u->conns++;
	return 0;
}

/* Uncounts connection `c`; a user with none left is forgotten. */
static void server_uid_remove(struct server *s, const struct conn *c)
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
static void conn_set_kind(struct conn *c, enum conn_kind kind)
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
	int64_t now = now_mono_ms();

	s->refused++;
	if (now - s->refused_log_ms < 10000)
		return;
	log_warn("refusing connections: pid %d uid %u: %s (%" PRIu64
		 " refused so far)", (int)pid, (unsigned)uid, why, s->refused);
	s->refused_log_ms = now;
}

/* ---- closing ----------------------------------------------------------- */

static void server_handle_closed(struct server *s)
{
	if (--s->open_handles == 0 && s->free_when_closed) {
		free(s->uids);
		free(s);
	}
}

static void conn_free_out(struct conn *c)
{
	while (c->out_head != NULL) {
		struct out *o = c->out_head;

		c->out_head = o->next;
		free(o->data);
		free(o);
	}
	c->out_tail = NULL;
	c->out_bytes = 0;
}

static void conn_free(struct conn *c)
{
	conn_list_done(c);
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
		c->closed = true; /* conn_job_done_cb() frees it (DESIGN 4) */
	else
		conn_free(c);
	server_handle_closed(s);
}

/* Closes at once, dropping what is queued (DESIGN 4). */
static void conn_close(struct conn *c)
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
	server_uid_remove(s, c);
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
		struct out *o = c->out_head;
		ssize_t n = send(c->fd, o->data + o->off, o->len - o->off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			log_debug("send to pid %d: %s", (int)c->pid,
				  strerror(errno));
			conn_close(c);
			return;
		}
		c->out_moved_ms = now_mono_ms();
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
		conn_close(c);
		return;
	}
}

/*
 * Queues `frame` (taking it) and writes what the socket takes now.
 * 0; -ENOMEM (the frame is freed and the connection closed).
 */
static int conn_send(struct conn *c, uint8_t *frame, size_t len)
{
	struct out *o = malloc(sizeof(*o));

	if (o == NULL) {
		free(frame);
		conn_close(c);
		return -ENOMEM;
	}
	*o = (struct out){ .data = frame, .len = len };
	if (c->out_tail != NULL)
		c->out_tail->next = o;
	else
		c->out_head = o;
	if (c->out_head == o)
		c->out_moved_ms = now_mono_ms();
	c->out_tail = o;
	c->out_bytes += len;
	conn_flush(c);
	return c->dead ? -EPIPE : 0;
}

static void conn_send_msg(struct conn *c, const Npusan__FromDaemon *m)
{
	uint8_t *f;
	size_t len;
	int err = wire_pack(m, &f, &len);

	if (err < 0) {
		log_error("cannot pack a reply for pid %d: %s", (int)c->pid,
			  strerror(-err));
		conn_close(c);
		return;
	}
	conn_send(c, f, len);
}

/* An Error reply; with `fatal` the connection closes after it (DESIGN 2). */
static void conn_error(struct conn *c, int code, const char *msg, bool fatal)
{
	uint8_t *f;
	size_t len;

	if (fatal) {
		log_info("closing connection from pid %d uid %u: %s",
			 (int)c->pid, (unsigned)c->uid, msg);
		c->closing = true;
		c->closing_ms = now_mono_ms();
		wire_rx_reset(&c->rx);
	}
	if (wire_error(code, msg, &f, &len) < 0) {
		conn_close(c);
		return;
	}
	conn_send(c, f, len);
	if (!c->dead)
		conn_update(c);
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
static int conn_peer_start_time(const struct conn *c, uint64_t *out)
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
static void conn_identify(struct conn *c)
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
static const char *conn_unverified_why(const struct conn *c, int err,
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

static void conn_register_reply(struct conn *c, const char *error)
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
	conn_send_msg(c, &m);
}

/* Refuses a registration and closes once the reply is out. */
static void conn_refuse(struct conn *c, const char *why)
{
	log_info("refused registration from pid %d uid %u: %s", (int)c->pid,
		 (unsigned)c->uid, why);
	c->closing = true;
	c->closing_ms = now_mono_ms();
	conn_register_reply(c, why);
	if (!c->dead)
		conn_update(c);
}

/*
 * Refuses NEW connection `c`'s first request, of `kind`, when its user has
 * as many of those as it may (DESIGN 7), closing `fd` (ours, or -1) then.
 * The log line is server_log_refusal()'s, rate-limited. Whether refused.
 */
static bool conn_limit_refused(struct conn *c, enum conn_kind kind, int fd)
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
	c->closing_ms = now_mono_ms();
	if (kind == CONN_AGENT)
		conn_register_reply(c, why);
	else
		conn_error(c, EMFILE, why, false);
	if (!c->dead)
		conn_update(c);
	return true;
}

/* The Register `r` arrived with descriptor `fd` (ours, or -1). */
static void conn_on_register(struct conn *c, const Npusan__Register *r,
			     int fd)
{
	struct wire_strings *strs = malloc(sizeof(*strs));
	struct agent_info *ai = calloc(1, sizeof(*ai));
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
		conn_error(c, ENOMEM, "out of memory", true);
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
	err = conn_peer_start_time(c, &st);
	if (err < 0) {
		why = conn_unverified_why(c, err, msg, sizeof(msg));
		goto refuse;
	}
	if (r->has_start_time && r->start_time != st) {
		why = "start time does not match /proc";
		goto refuse;
	}
	p.start_time = st;
	p.uid = (uint32_t)c->uid;
	p.first_ms = p.last_ms = now_real_ms();
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
	conn_set_kind(c, CONN_AGENT);
	c->proc = proc;
	ai->has_rank = p.has_rank;
	ai->rank = p.rank;
	ai->state = p.state;
	if (p.job != NULL)
		snprintf(ai->job, sizeof(ai->job), "%s", p.job);
	c->agent = ai;
	if (p.has_rank)
		snprintf(msg, sizeof(msg), "%" PRIu32, p.rank);
	log_info("registered pid %d uid %u job %s rank %s exe %s%s",
		 (int)c->pid, (unsigned)c->uid, p.job ? p.job : "-",
		 p.has_rank ? msg : "-", p.exe ? p.exe : "-",
		 p.state == STORE_DORMANT ? " (dormant)" : "");
	free(strs);
	conn_register_reply(c, NULL);
	return;
refuse:
	if (fd >= 0)
		close(fd);
	conn_refuse(c, why);
	free(strs);
	free(ai);
}

/* ---- jobs: queries off the loop (DESIGN 7) ---------------------------- */

struct conn_job;
typedef void (*conn_job_fn)(struct conn_job *j);

/*
 * A query's store work. `work` runs on a pool thread and touches only the
 * job (never the connection); `reply` runs on the loop, the connection
 * still open. The job owns `frame`, `batch` and `frames` until reply
 * takes them; what is left is freed with the job in conn_job_done_cb().
 */
struct conn_job {
	uv_work_t req;
	struct conn *c;
	struct store *store;
	conn_job_fn work, reply;
	int err;	/* work's: 0 or a negative errno */
	uint8_t *frame; /* a packed reply, or NULL */
	size_t len;
	struct wire_batch batch; /* a reply in the making */
	struct out *frames, **ftail; /* packed replies, in order */
	void *owned; /* work's result, freed with the job unless reply took it */
	union {
		struct store_stats stats;
		struct {
			int64_t id;
			struct store_filter f;
		} show;
		struct {
			struct wire_strings strs;
			struct store_filter f;
			size_t n; /* ids, in `owned` */
		} list;
		struct {
			const int64_t *ids; /* the connection's lcur's */
			size_t n;
			bool done;
		} page;
		/* A copy of the connection's cursor, walked on the pool;
		 * its filter's strings stay the connection's, which
		 * outlive the job. */
		struct cursor walk;
	} u;
};

static void conn_job_work_cb(uv_work_t *req)
{
	struct conn_job *j = req->data;

	j->work(j);
}

static void conn_job_done_cb(uv_work_t *req, int status)
{
	struct conn_job *j = req->data;
	struct conn *c = j->c;

	c->job = NULL;
	if (c->closed) {
		conn_free(c);
	} else if (!c->dead) {
		if (status == 0)
			j->reply(j);
		else
			conn_error(c, EIO, "the query was cancelled", false);
		if (!c->dead) {
			c->since_ms = now_mono_ms();
			conn_update(c);
		}
	}
	free(j->owned);
	free(j->frame);
	wire_batch_free(&j->batch);
	while (j->frames != NULL) {
		struct out *o = j->frames;

		j->frames = o->next;
		free(o->data);
		free(o);
	}
	free(j);
}

/* A new job for `c`, or NULL (out of memory: an Error was sent). */
static struct conn_job *conn_job_new(struct conn *c, conn_job_fn work,
				     conn_job_fn reply)
{
	struct conn_job *j = calloc(1, sizeof(*j));

	if (j == NULL) {
		conn_error(c, ENOMEM, "out of memory", false);
		return NULL;
	}
	j->c = c;
	j->store = c->srv->store;
	j->work = work;
	j->reply = reply;
	j->req.data = j;
	j->ftail = &j->frames;
	return j;
}

/* Runs `j` on the pool; `c` reads nothing until it is done. */
static void conn_job_start(struct conn *c, struct conn_job *j)
{
	int err = uv_queue_work(c->srv->loop, &j->req, conn_job_work_cb,
				conn_job_done_cb);

	if (err < 0) {
		free(j);
		conn_error(c, EIO, uv_strerror(err), false);
		return;
	}
	c->job = j;
	conn_update(c);
}

/* Sends the job's frame, or an Error for its err. */
static void conn_job_send(struct conn_job *j)
{
	if (j->err == 0 && j->frame != NULL) {
		conn_send(j->c, j->frame, j->len);
		j->frame = NULL; /* conn_send() took it */
		return;
	}
	conn_error(j->c, j->err == -ENOMEM ? ENOMEM : EIO,
		   j->err == -ENOMEM ? "out of memory" : "database error",
		   false);
}

/* ---- queries ----------------------------------------------------------- */

/* The store filter's uid part: a non-root peer sees only its own. */
static void conn_restrict(const struct conn *c, struct store_filter *f)
{
	if (c->uid != 0) {
		f->has_uid = true;
		f->uid = (uint32_t)c->uid;
	}
}

static void process_msg(const struct store_process *p, Npusan__Process *m)
{
	npusan__process__init(m);
	m->has_id = m->has_pid = m->has_start_time = m->has_uid = 1;
	m->id = p->id;
	m->pid = p->pid;
	m->start_time = p->start_time;
	m->uid = p->uid;
	m->hostname = (char *)p->host;
	m->executable = (char *)p->exe;
	m->job = (char *)p->job;
	m->run = (char *)p->run;
	m->has_rank = p->has_rank;
	m->rank = p->rank;
	m->has_local_rank = p->has_local_rank;
	m->local_rank = p->local_rank;
	m->has_world_size = p->has_world_size;
	m->world_size = p->world_size;
	m->state = (char *)store_state_name(p->state);
	m->has_events = m->has_lost = m->has_findings = 1;
	m->events = p->events;
	m->lost = p->lost;
	m->findings = p->findings;
	m->has_first_ms = m->has_last_ms = 1;
	m->first_ms = p->first_ms;
	m->last_ms = p->last_ms;
	m->has_gaps = 1;
	m->gaps = p->gaps;
}

static void access_msg(const struct store_access *a, Npusan__Access *m)
{
	npusan__access__init(m);
	m->has_stream = m->has_seq = m->has_write = 1;
	m->stream = a->stream;
	m->seq = a->seq;
	m->write = a->write;
	m->op = (char *)a->op;
	m->n_stack = a->nstack;
	m->stack = (char **)a->stack;
}

/* `m` borrows from f, p and the three parts. */
static void finding_msg(const struct store_finding *f,
			const struct store_process *p, Npusan__Finding *m,
			Npusan__Alloc *alloc, Npusan__Access *acc,
			Npusan__Access *prev)
{
	npusan__finding__init(m);
	m->has_id = m->has_process_id = m->has_ptr = m->has_count = 1;
	m->id = f->id;
	m->process_id = f->process_id;
	m->kind = (char *)finding_kind_name(f->kind);
	m->detected_at = (char *)detected_at_name(f->detected_at);
	m->ptr = f->ptr;
	m->count = f->count;
	m->has_first_ms = m->has_last_ms = 1;
	m->first_ms = f->first_ms;
	m->last_ms = f->last_ms;
	if (p != NULL) {
		m->has_pid = 1;
		m->pid = p->pid;
		m->job = (char *)p->job;
		m->has_rank = p->has_rank;
		m->rank = p->rank;
	}
	if (f->has_alloc) {
		npusan__alloc__init(alloc);
		alloc->has_ptr = alloc->has_size = 1;
		alloc->ptr = f->alloc_ptr;
		alloc->size = f->alloc_size;
		alloc->has_stream = f->alloc_has_stream;
		alloc->stream = f->alloc_stream;
		alloc->n_stack = f->alloc_nstack;
		alloc->stack = (char **)f->alloc_stack;
		m->alloc = alloc;
	}
	access_msg(&f->access, acc);
	m->access = acc;
	if (f->has_previous) {
		access_msg(&f->previous, prev);
		m->previous = prev;
	}
}

/* Sends the batch as one frame of `env_field`. False when the connection
 * closed. */
static bool conn_send_batch(struct conn *c, struct wire_batch *b,
			    unsigned env_field, unsigned done_field, bool done)
{
	uint8_t *f;
	size_t len;

	if (wire_batch_frame(b, env_field, done_field, done, &f, &len) < 0) {
		conn_close(c);
		return false;
	}
	return conn_send(c, f, len) == 0;
}

struct list_walk {
	struct conn_job *j;
};

/* Packs the job's batch as a List frame after the job's other frames. */
static int list_frame(struct conn_job *j, bool done)
{
	struct out *o = calloc(1, sizeof(*o));

	if (o == NULL)
		return -ENOMEM;
	if (wire_batch_frame(&j->batch, 3, 2, done, &o->data, &o->len) < 0) {
		free(o);
		return -ENOMEM;
	}
	*j->ftail = o;
	j->ftail = &o->next;
	return 0;
}

/* On the pool (DESIGN 7): a process into the job's frames. */
static int list_cb(void *arg, const struct store_process *p)
{
	struct list_walk *w = arg;
	struct wire_batch *b = &w->j->batch;
	Npusan__Process m;
	int err;

	process_msg(p, &m);
	err = wire_batch_add(b, 1, &m.base);
	if (err == -E2BIG && b->n > 0) {
		if ((err = list_frame(w->j, false)) < 0)
			return err;
		err = wire_batch_add(b, 1, &m.base);
	}
	if (err == -E2BIG) {
		log_warn("process %" PRId64 " does not fit a frame; left out",
			 p->id);
		return 0;
	}
	if (err < 0)
		return err;
	if (b->len >= SERVER_FRAME_TARGET)
		return list_frame(w->j, false);
	return 0;
}

/* Ends c's list answer, if any. */
static void conn_list_done(struct conn *c)
{
	if (c->lcur == NULL)
		return;
	free(c->lcur->ids);
	free(c->lcur);
	c->lcur = NULL;
}

/* The error reply of a list job that failed. */
static void list_failed(struct conn *c, int err)
{
	if (err == -E2BIG)
		conn_error(c, E2BIG, "too many processes: filter by job or pid",
			   false);
	else
		conn_error(c, err == -ENOMEM ? ENOMEM : EIO,
			   err == -ENOMEM ? "out of memory" : "database error",
			   false);
}

/*
 * On the pool: one page of c's list answer (DESIGN 3), the processes
 * lcur->ids[next, next + n), as frames, the last of the answer with done.
 * The ids are the connection's, which nothing frees while a job runs.
 */
static void list_page_work(struct conn_job *j)
{
	struct list_walk w = { .j = j };

	j->err = store_list_get(j->store, j->u.page.ids, j->u.page.n, list_cb,
				&w);
	if (j->err == 0 && (j->batch.n > 0 || j->u.page.done))
		j->err = list_frame(j, j->u.page.done);
}

/* On the loop: the page's frames out, then the next page, if any. */
static void list_page_reply(struct conn_job *j)
{
	struct conn *c = j->c;

	if (j->err < 0) {
		conn_list_done(c);
		list_failed(c, j->err);
		return;
	}
	while (j->frames != NULL && !c->dead) {
		struct out *o = j->frames;

		j->frames = o->next;
		conn_send(c, o->data, o->len); /* takes the data */
		free(o);
	}
	if (c->dead)
		return;
	c->lcur->next += j->u.page.n;
	if (j->u.page.done)
		conn_list_done(c);
	conn_pump(c);
}

/* Starts the next page of c's list answer (conn_pump()). */
static void conn_list_page(struct conn *c)
{
	struct list_cursor *lc = c->lcur;
	struct conn_job *j = conn_job_new(c, list_page_work, list_page_reply);
	size_t k = lc->n - lc->next < SERVER_LIST_PAGE ? lc->n - lc->next :
							  SERVER_LIST_PAGE;

	if (j == NULL)
		return;
	j->u.page.ids = lc->ids + lc->next;
	j->u.page.n = k;
	j->u.page.done = lc->next + k == lc->n;
	conn_job_start(c, j);
}

/*
 * On the pool: the ids of the processes the answer will hold. Everything
 * queued before the request is committed first, so that a process whose
 * registration still waits in the store's queue is listed: `run` and
 * `report` decide from the list whether every process of a job is in,
 * and one missing would make the job look blind or clean. A store that
 * cannot commit now (-EIO) answers with what it has.
 */
static void list_ids_work(struct conn_job *j)
{
	int64_t *ids = NULL;

	(void)store_flush(j->store);

	j->err = store_list_ids(j->store, &j->u.list.f, SERVER_LIST_MAX_PROCS,
				&ids, &j->u.list.n);
	j->owned = ids;
}

/* On the loop: the ids become c's list answer, walked page by page. */
static void list_ids_reply(struct conn_job *j)
{
	struct conn *c = j->c;
	struct list_cursor *lc;

	if (j->err < 0) {
		list_failed(c, j->err);
		return;
	}
	if ((lc = calloc(1, sizeof(*lc))) == NULL) {
		conn_error(c, ENOMEM, "out of memory", false);
		return;
	}
	lc->ids = j->owned;
	lc->n = j->u.list.n;
	j->owned = NULL; /* c's now */
	c->lcur = lc;
	conn_pump(c);
}

static void conn_list(struct conn *c, const Npusan__ListRequest *r)
{
	struct conn_job *j = conn_job_new(c, list_ids_work, list_ids_reply);

	if (j == NULL)
		return;
	wire_list_filter(r, &j->u.list.strs, &j->u.list.f);
	conn_restrict(c, &j->u.list.f);
	conn_job_start(c, j);
}

struct findings_walk {
	struct cursor *cur;
	struct wire_batch b;
	unsigned skipped;
};

/* Stops a walk whose batch is full; not an error. */
#define WALK_FULL (-ECANCELED)

static int findings_cb(void *arg, const struct store_finding *f,
		       const struct store_process *p)
{
	struct findings_walk *w = arg;
	Npusan__Access acc, prev;
	Npusan__Finding m;
	Npusan__Alloc alloc;
	int err;

	finding_msg(f, p, &m, &alloc, &acc, &prev);
	err = wire_batch_add(&w->b, 1, &m.base);
	if (err == -E2BIG && w->b.n > 0)
		return WALK_FULL; /* this one starts the next frame */
	if (err == -E2BIG) {
		w->skipped++;
		log_warn("finding %" PRId64 " does not fit a frame; left out",
			 f->id);
	} else if (err < 0) {
		return err;
	}
	w->cur->after_id = f->id;
	if (w->cur->limited && w->cur->left > 0)
		w->cur->left--;
	if (w->b.len >= SERVER_FRAME_TARGET)
		return WALK_FULL;
	if (w->cur->limited && w->cur->left == 0)
		return WALK_FULL;
	return 0;
}

/*
 * One walk of the cursor, on the pool (DESIGN 7): a frame of findings
 * after cur->after_id, into the job's copy of the cursor.
 */
static void walk_work(struct conn_job *j)
{
	struct cursor *cur = &j->u.walk;
	struct findings_walk w = { .cur = cur };
	struct store_filter f = cur->f;

	f.after_id = cur->after_id;
	f.limit = cur->following || !cur->limited ? 0 : cur->left;
	if (!cur->following && cur->limited && cur->left == 0)
		j->err = 0; /* the limit is reached: nothing more to send */
	else
		j->err = store_findings(j->store, &f, findings_cb, &w);
	j->batch = w.b;
}

/*
 * The walk's frame, on the loop: for the first answer each frame goes
 * out, the last with done; a follow walk sends only frames with findings
 * in them. Then the next walk, if there is one to make now. The cursor
 * is the connection's still: nothing frees it while a job runs.
 */
static void walk_reply(struct conn_job *j)
{
	struct conn *c = j->c;
	struct cursor *cur = c->cur;
	struct wire_batch *b = &j->batch;
	bool complete;
	int err = j->err;

	cur->after_id = j->u.walk.after_id;
	cur->left = j->u.walk.left;
	complete = err == 0 || (err == WALK_FULL && !cur->following &&
				cur->limited && cur->left == 0);
	if (err < 0 && err != WALK_FULL) {
		free(c->cur);
		c->cur = NULL;
		conn_error(c, err == -ENOMEM ? ENOMEM : EIO,
			   err == -ENOMEM ? "out of memory" : "database error",
			   false);
		return;
	}
	/* A follower's walk that found nothing sends nothing. */
	if (!(cur->following && b->n == 0) &&
	    !conn_send_batch(c, b, 4, 2, complete))
		return;
	if (complete && !cur->following && !cur->follow) {
		free(c->cur);
		c->cur = NULL;
		return;
	}
	/* `pending` stays as commits since the walk started left it. */
	if (complete)
		cur->following = true;
	conn_pump(c);
}

/* Whether the cursor has findings, or a list answer processes, to walk
 * now. */
static bool conn_walking(const struct conn *c)
{
	return c->lcur != NULL ||
	       (c->cur != NULL && (!c->cur->following || c->cur->pending));
}

/*
 * Starts the cursor's next walk while the output queue has room (DESIGN
 * 3), one walk at a time: the next starts when its reply is sent, or
 * once the output drains (the poll callback pumps again).
 */
static void conn_pump(struct conn *c)
{
	struct conn_job *j;

	if (c->dead || c->closing || c->job != NULL ||
	    c->out_bytes >= SERVER_OUT_HIGH || !conn_walking(c))
		return;
	if (c->lcur != NULL) {
		conn_list_page(c);
		return;
	}
	j = conn_job_new(c, walk_work, walk_reply);
	if (j == NULL)
		return;
	j->u.walk = *c->cur;
	c->cur->pending = false; /* a commit from now on walks again */
	conn_job_start(c, j);
}

static void conn_findings(struct conn *c, const Npusan__FindingsRequest *r)
{
	struct cursor *cur = calloc(1, sizeof(*cur));
	const char *why;

	if (cur == NULL) {
		conn_error(c, ENOMEM, "out of memory", true);
		return;
	}
	if (wire_findings_filter(r, &cur->strs, &cur->f, &why) < 0) {
		free(cur);
		conn_error(c, EINVAL, why, false);
		return;
	}
	conn_restrict(c, &cur->f);
	cur->limited = cur->f.limit > 0;
	cur->left = cur->f.limit;
	cur->follow = r->has_follow && r->follow;
	c->cur = cur;
	conn_pump(c);
}

/* ---- show and stats ---------------------------------------------------- */

/* Packs finding `f` of process `p` as a Show reply into the job. */
static int show_cb(void *arg, const struct store_finding *f,
		   const struct store_process *p)
{
	struct conn_job *j = arg;
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__ShowReply sr = NPUSAN__SHOW_REPLY__INIT;
	Npusan__Access acc, prev;
	Npusan__Finding fm;
	Npusan__Alloc alloc;
	Npusan__Process pm;

	if (j->frame != NULL)
		return 0;
	finding_msg(f, p, &fm, &alloc, &acc, &prev);
	sr.finding = &fm;
	if (p != NULL) {
		process_msg(p, &pm);
		sr.process = &pm;
	}
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_SHOW;
	m.show = &sr;
	return wire_pack(&m, &j->frame, &j->len);
}

static void show_work(struct conn_job *j)
{
	j->err = store_finding_get(j->store, j->u.show.id, &j->u.show.f,
				   show_cb, j);
}

static void show_reply(struct conn_job *j)
{
	char msg[64];

	if (j->err == -ENOENT || (j->err == 0 && j->frame == NULL)) {
		snprintf(msg, sizeof(msg), "no finding %" PRId64,
			 j->u.show.id);
		conn_error(j->c, ENOENT, msg, false);
		return;
	}
	conn_job_send(j);
}

static void conn_show(struct conn *c, const Npusan__ShowRequest *r)
{
	struct conn_job *j;

	if (!r->has_id) {
		conn_error(c, EINVAL, "show needs a finding id", false);
		return;
	}
	j = conn_job_new(c, show_work, show_reply);
	if (j == NULL)
		return;
	j->u.show.id = r->id;
	conn_restrict(c, &j->u.show.f);
	conn_job_start(c, j);
}

static void stats_work(struct conn_job *j)
{
	j->err = store_stats(j->store, &j->u.stats);
}

/* The reply: the store's figures from the job, ingest's read now. */
static void stats_reply(struct conn_job *j)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__StatsReply sr = NPUSAN__STATS_REPLY__INIT;
	const struct store_stats *ss = &j->u.stats;
	struct server *srv = j->c->srv;
	struct ingest_stats is;

	if (j->err < 0) {
		conn_job_send(j);
		return;
	}
	ingest_get_stats(srv->ingest, &is);
	sr.has_uptime_ms = sr.has_processes_running = 1;
	sr.uptime_ms = (int64_t)((uv_hrtime() - srv->start_ns) / 1000000);
	sr.processes_running = is.running;
	sr.has_processes_exited = sr.has_events = sr.has_events_per_s = 1;
	sr.processes_exited = ss->processes[STORE_EXITED];
	sr.events = is.events;
	sr.events_per_s = is.events_per_s;
	sr.has_lost = sr.has_findings = sr.has_db_bytes = 1;
	sr.lost = is.lost;
	sr.findings = ss->findings;
	sr.db_bytes = ss->db_bytes;
	sr.daemon_version = (char *)NPUSAN_VERSION;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_STATS;
	m.stats = &sr;
	conn_send_msg(j->c, &m);
}

static void conn_stats(struct conn *c)
{
	struct conn_job *j = conn_job_new(c, stats_work, stats_reply);

	if (j != NULL)
		conn_job_start(c, j);
}

/* ---- attach and detach ------------------------------------------------- */

/* Whether agent connection `a` is one `r` names, and `c`'s peer may see. */
static bool attach_matches(const struct conn *c, const struct conn *a,
			   const Npusan__AttachRequest *r, const char *job)
{
	bool named = job != NULL && strcmp(a->agent->job, job) == 0;

	for (size_t i = 0; i < r->n_pids && !named; i++)
		named = (pid_t)r->pids[i] == a->pid;
	return named && (c->uid == 0 || c->uid == a->uid);
}

/* Tells agent `a` to attach or detach; false when its connection closed. */
static bool attach_send(struct conn *a, bool attach)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__Control ctl = NPUSAN__CONTROL__INIT;

	ctl.has_attach = 1;
	ctl.attach = attach;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_CONTROL;
	m.control = &ctl;
	conn_send_msg(a, &m);
	if (a->dead)
		return false;
	a->agent->state = attach ? STORE_RUNNING : STORE_DORMANT;
	ingest_set_state(a->proc, a->agent->state);
	log_info("%s pid %d", attach ? "attached" : "detached", (int)a->pid);
	return true;
}

/* The reply's entry for agent `a`, borrowing its strings. */
static void attach_process_msg(const struct conn *a, Npusan__Process *m)
{
	npusan__process__init(m);
	/* No id while the store has not stored its row yet. */
	m->id = ingest_proc_id(a->proc);
	m->has_id = m->id != 0;
	m->has_pid = m->has_uid = 1;
	m->pid = (uint32_t)a->pid;
	m->uid = (uint32_t)a->uid;
	m->job = a->agent->job[0] ? (char *)a->agent->job : NULL;
	m->has_rank = a->agent->has_rank;
	m->rank = a->agent->rank;
	m->state = (char *)store_state_name(a->agent->state);
}

/* Which of the request's pids matched none of the `n` processes in `got`. */
static size_t attach_unknown(const Npusan__AttachRequest *r,
			     Npusan__Process *got, size_t n, uint32_t *out)
{
	size_t k = 0;

	for (size_t i = 0; i < r->n_pids; i++) {
		bool found = false;

		for (size_t j = 0; j < n && !found; j++)
			found = got[j].pid == r->pids[i];
		if (!found)
			out[k++] = r->pids[i];
	}
	return k;
}

static void conn_attach(struct conn *c, const Npusan__AttachRequest *r)
{
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	Npusan__AttachReply ar = NPUSAN__ATTACH_REPLY__INIT;
	char jobbuf[WIRE_JOB_MAX + 1];
	const char *job = wire_clean(r->job, jobbuf, sizeof(jobbuf));
	size_t n = 0, cap = c->srv->nconns;
	Npusan__Process *procs = calloc(cap ? cap : 1, sizeof(*procs));
	Npusan__Process **ptrs = calloc(cap ? cap : 1, sizeof(*ptrs));
	uint32_t *unknown = calloc(r->n_pids ? r->n_pids : 1, sizeof(*unknown));
	bool attach = !(r->has_detach && r->detach);

	if (procs == NULL || ptrs == NULL || unknown == NULL) {
		conn_error(c, ENOMEM, "out of memory", false);
		goto out;
	}
	if (r->n_pids == 0 && job == NULL) {
		conn_error(c, EINVAL, "attach needs pids or a job", false);
		goto out;
	}
	for (struct conn *a = c->srv->conns; a != NULL && n < cap; a = a->next) {
		if (a->kind != CONN_AGENT || a->agent == NULL || a->dead ||
		    a->closing || !attach_matches(c, a, r, job))
			continue;
		if (!attach_send(a, attach))
			continue;
		attach_process_msg(a, &procs[n]);
		ptrs[n] = &procs[n];
		n++;
	}
	ar.n_processes = n;
	ar.processes = ptrs;
	ar.n_unknown_pids = attach_unknown(r, procs, n, unknown);
	ar.unknown_pids = unknown;
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_ATTACH;
	m.attach = &ar;
	conn_send_msg(c, &m);
out:
	free(procs);
	free(ptrs);
	free(unknown);
}

static void conn_on_query(struct conn *c, const Npusan__Query *q)
{
	const char *why;

	if (c->kind == CONN_AGENT) {
		conn_error(c, EPROTO, "a query on an agent's connection", true);
		return;
	}
	if (wire_query_check(q, &why) < 0) {
		conn_error(c, EPROTO, why, true);
		return;
	}
	if (c->kind == CONN_NEW && conn_limit_refused(c, CONN_QUERY, -1))
		return;
	if (c->kind == CONN_NEW)
		conn_set_kind(c, CONN_QUERY);
	switch (q->q_case) {
	case NPUSAN__QUERY__Q_LIST:
		conn_list(c, q->list);
		break;
	case NPUSAN__QUERY__Q_FINDINGS:
		conn_findings(c, q->findings);
		break;
	case NPUSAN__QUERY__Q_SHOW:
		conn_show(c, q->show);
		break;
	case NPUSAN__QUERY__Q_ATTACH:
		conn_attach(c, q->attach);
		break;
	default: /* wire_query_check() left only stats */
		conn_stats(c);
		break;
	}
	if (!c->dead)
		c->since_ms = now_mono_ms();
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
		/* Only a follower reads while it has a cursor (conn_update). */
		if (fd >= 0)
			close(fd);
		conn_error(c, EBUSY, "a request while following: close the "
				     "connection to stop following", true);
		return;
	}
	err = wire_decode(p, len, &m, &why);
	if (err < 0) {
		if (fd >= 0)
			close(fd);
		conn_error(c, err == -EBADMSG ? EBADMSG : EPROTO, why, true);
		return;
	}
	if (m->msg_case == NPUSAN__TO_DAEMON__MSG_REGISTER) {
		if (c->kind != CONN_NEW) {
			if (fd >= 0)
				close(fd);
			conn_error(c, EPROTO, c->kind == CONN_AGENT ?
				   "already registered" :
				   "a registration on a query connection",
				   true);
		} else if (!conn_limit_refused(c, CONN_AGENT, fd)) {
			conn_on_register(c, m->register_, fd);
		}
	} else {
		if (fd >= 0)
			close(fd); /* a descriptor with a query: dropped */
		conn_on_query(c, m->query);
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
		char buf[CMSG_SPACE(SERVER_MAX_FDS * sizeof(int))];
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
		conn_close(c);
		return 0;
	}
	conn_take_fds(c, &msg, first);
	if (r == 0) {
		if (!wire_rx_idle(&c->rx))
			conn_error(c, EPROTO, "truncated frame", true);
		else
			conn_close(c);
		return 0;
	}
	if (first)
		c->since_ms = now_mono_ms();
	err = wire_rx_advance(&c->rx, (size_t)r);
	if (err == -EMSGSIZE) {
		conn_error(c, EMSGSIZE, "frame too large", true);
		return 0;
	}
	if (err < 0) {
		conn_error(c, ENOMEM, "out of memory", true);
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
		conn_update(c);
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
		conn_close(c);
		return;
	}
	if (events & UV_WRITABLE) {
		conn_flush(c);
		if (c->dead)
			return;
		conn_pump(c);
		if (c->dead)
			return;
	}
	if (events & (UV_READABLE | UV_DISCONNECT)) {
		for (int i = 0; i < SERVER_READS_PER_CB && !c->dead &&
				(c->events & UV_READABLE);
		     i++)
			if (conn_read_some(c) == 0)
				break;
	}
	if (!c->dead)
		conn_update(c);
}

/* Watches what the connection's state asks for (DESIGN 3). */
static void conn_update(struct conn *c)
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
	     conn_walking(c)))
		want |= UV_WRITABLE;
	if (want == c->events)
		return;
	c->events = want;
	if (want == 0)
		uv_poll_stop(&c->poll);
	else if (uv_poll_start(&c->poll, want, conn_poll_cb) < 0)
		conn_close(c);
}

/* ---- accepting --------------------------------------------------------- */

static void server_listen_resume(struct server *s);

static void accept_pause_cb(uv_timer_t *t)
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
	int64_t now = now_mono_ms();
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
		server_uid_remove(s, c);
		free(c);
		close(fd);
		return;
	}
	s->open_handles++;
	c->srv = s;
	c->fd = fd;
	c->rx_fd = -1;
	c->pid = cred.pid;
	conn_identify(c);
	c->since_ms = now_mono_ms();
	c->next = s->conns;
	if (s->conns != NULL)
		s->conns->prev = c;
	s->conns = c;
	s->nconns++;
	log_debug("connection from pid %d uid %u", (int)c->pid,
		  (unsigned)c->uid);
	conn_update(c);
}

static void listener_cb(uv_poll_t *h, int status, int events)
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
			uv_timer_start(&s->accept_pause, accept_pause_cb,
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
	if (uv_poll_start(&s->listener, UV_READABLE, listener_cb) < 0)
		log_error("cannot watch the listening socket");
}

/* Closes what dawdles (DESIGN 3). */
static void sweep_cb(uv_timer_t *t)
{
	struct server *s = t->data;
	int64_t now = now_mono_ms();
	struct conn *next;

	for (struct conn *c = s->conns; c != NULL; c = next) {
		next = c->next;
		if (c->closing) {
			if (now - c->closing_ms >= SERVER_LINGER_MS)
				conn_close(c);
		} else if (c->out_head != NULL &&
			   now - c->out_moved_ms >= SERVER_STALL_TIMEOUT_MS) {
			log_info("pid %d does not read its answers; closing",
				 (int)c->pid);
			conn_close(c);
		} else if (!wire_rx_idle(&c->rx)) {
			if (now - c->since_ms >= SERVER_FRAME_TIMEOUT_MS)
				conn_error(c, ETIMEDOUT, "frame timed out",
					   true);
		} else if (c->kind == CONN_NEW) {
			if (now - c->since_ms >= SERVER_FIRST_TIMEOUT_MS) {
				log_debug("pid %d sent nothing; closing",
					  (int)c->pid);
				conn_close(c);
			}
		} else if (c->kind == CONN_QUERY && c->cur == NULL &&
			   c->lcur == NULL && c->job == NULL &&
			   c->out_head == NULL &&
			   now - c->since_ms >= SERVER_IDLE_TIMEOUT_MS) {
			conn_close(c);
		}
	}
}

/* ---- public ------------------------------------------------------------ */

static void server_timer_closed_cb(uv_handle_t *h)
{
	server_handle_closed(h->data);
}

int server_start(const struct server_opts *o, struct server **out)
{
	struct server *s = calloc(1, sizeof(*s));
	int err;

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
	err = uv_poll_start(&s->listener, UV_READABLE, listener_cb);
	if (err == 0)
		err = uv_timer_start(&s->sweep, sweep_cb, SERVER_SWEEP_MS,
				     SERVER_SWEEP_MS);
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
			conn_pump(c);
		}
	}
}

static void listener_closed_cb(uv_handle_t *h)
{
	struct server *s = h->data;

	if (s->lfd >= 0)
		close(s->lfd);
	s->lfd = -1;
	server_handle_closed(s);
}

void server_stop(struct server *s)
{
	if (s == NULL || s->stopping)
		return;
	s->stopping = true;
	uv_close((uv_handle_t *)&s->listener, listener_closed_cb);
	uv_close((uv_handle_t *)&s->sweep, server_timer_closed_cb);
	uv_close((uv_handle_t *)&s->accept_pause, server_timer_closed_cb);
	while (s->conns != NULL)
		conn_close(s->conns);
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
