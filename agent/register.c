/*
 * register.c - registering this process and its ring with npusand.
 *
 * A small state machine runs first in register_start() (one attempt with a
 * deadline of a few milliseconds), then in a background thread that sleeps
 * in poll() on the socket and on an eventfd register_stop() writes to.
 *
 * DESIGN
 * 1. The Register message is built and packed once, in register_start(),
 *    in its two forms (dormant or not; register_set_dormant() picks one):
 *    the identity of a process does not change while it lives, and the
 *    thread never reads the environment (getenv races with setenv).
 * 2. Whoever runs the state machine owns `state`, the timers and the
 *    receive buffer: register_start() until it creates the thread, the
 *    thread afterwards, register_stop() once it has joined the thread.
 * 3. The socket and eventfd are atomics, published as soon as they exist
 *    and taken (exchanged for -1) before they are closed, so that
 *    register_atfork_child() closes exactly the descriptors the parent's
 *    thread held at fork time, never a number it had already given back.
 *    A fork between socket() and its publication leaves the child one
 *    unknown socket; it is close-on-exec and goes away with the child.
 *    Their loads and stores are relaxed: only the state machine's owner
 *    uses them while it runs; register_stop() takes them after joining the
 *    thread, and fork() takes reg_step_lock (DESIGN 5) and the agent's
 *    lock, under which agent/npusan.c calls register_start(), so a mutex
 *    orders every store before register_atfork_child() reads it.
 * 4. The thread is created with every signal blocked and is woken only by
 *    the eventfd: the application's signals always reach the application.
 * 5. Each step of the thread (what it does when poll() returns) holds
 *    reg_step_lock, and fork() waits for it (register_atfork_prepare()).
 *    glibc's malloc is fork-safe, but not every allocator is (GCC 12's
 *    AddressSanitizer deadlocked a forked child that way): a fork must not
 *    land while our thread is inside malloc. A step is short; the longest
 *    is a Register sent to a daemon that does not read, which gives up
 *    after REG_SEND_TIMEOUT_MS.
 */
#include "register.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "agentlog.h"
#include "clock.h"
#include "frame.h"
#include "identity.h"
#include "npusan.pb-c.h"
#include "paths.h"
#include "text.h"
#include "thread.h"

#ifndef NPUSAN_VERSION
#error "define NPUSAN_VERSION (the project version) when compiling register.c"
#endif

#define REG_BACKOFF_MIN_MS 50
#define REG_BACKOFF_MAX_MS 5000
/* How long a connected daemon may take to answer before we try again. */
#define REG_REPLY_TIMEOUT_MS 10000
/* How long the thread may wait for room to send a Register. */
#define REG_SEND_TIMEOUT_MS 100
/* Largest frame we accept from the daemon. */
#define REG_RX_MAX 16384

enum reg_state {
	REG_IDLE,    /* no connection: wait out the backoff, then connect */
	REG_PENDING, /* Register sent, waiting for the reply */
	REG_UP,	     /* accepted: watch the connection */
	REG_REFUSED, /* refused: never try again */
};

enum reg_log_level { REG_LOG_OFF, REG_LOG_INFO, REG_LOG_DEBUG };

static struct {
	/* Set by register_start(), read-only while the thread runs. */
	int memfd;
	uint8_t *msg[2]; /* the packed ToDaemon{register}: [1] dormant */
	size_t msg_len[2];
	void (*event_cb)(enum register_event ev, void *arg);
	void *cb_arg;
	char *socket_path;  /* cfg->socket_path, or NULL: resolve */
	char *env_socket;   /* $NPUSAN_SOCKET at start, or NULL */
	char *env_xdg;	    /* $XDG_RUNTIME_DIR at start, or NULL */
	enum reg_log_level log;
	bool started;
	bool thread_running;
	pthread_t thread;

	/* Owned by whoever runs the state machine (DESIGN 2). */
	enum reg_state state;
	bool ever_up; /* a daemon accepted this ring before */
	unsigned backoff_ms;
	int64_t timer_ms; /* IDLE: next attempt; PENDING: reply deadline */
	uint64_t rng;
	char path[PATHS_SOCKET_MAX + 1]; /* the socket last tried */

	/* Touched by any thread and by register_atfork_child(); each use
	 * says its memory order. */
	atomic_int sock;
	atomic_int wake;
	atomic_bool connected;
	atomic_bool pending; /* a Register is sent, its reply not in yet */
	atomic_bool dormant;
} reg = { .sock = -1, .wake = -1, .memfd = -1 };

static uint8_t reg_rx[REG_RX_MAX];
/* DESIGN 5; taken before the agent's own locks. */
static pthread_mutex_t reg_step_lock = PTHREAD_MUTEX_INITIALIZER;

static void reg_log(enum reg_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void reg_log(enum reg_log_level level, const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	if (reg.log < level)
		return;
	va_start(ap, fmt);
	agent_vlog(fmt, ap);
	va_end(ap);
	errno = saved;
}

static const char *reg_strerror(int err, char *buf, size_t len)
{
	return strerror_r(err < 0 ? -err : err, buf, len);
}

static int64_t reg_now_ms(void)
{
	return (int64_t)clock_mono_ms();
}

static int reg_ms_left(int64_t deadline)
{
	int64_t left = deadline - reg_now_ms();

	return left <= 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

/* xorshift64: jitter only, nothing secret. */
static unsigned reg_rand(void)
{
	reg.rng ^= reg.rng << 13;
	reg.rng ^= reg.rng >> 7;
	reg.rng ^= reg.rng << 17;
	return (unsigned)(reg.rng >> 32);
}

/* ---- the Register message ---------------------------------------------- */

/* Packs `r` in its envelope into reg.msg[i]. 0, -ENOMEM or -EMSGSIZE. */
static int reg_pack(Npusan__Register *r, int i)
{
	Npusan__ToDaemon env = NPUSAN__TO_DAEMON__INIT;
	size_t len;

	env.msg_case = NPUSAN__TO_DAEMON__MSG_REGISTER;
	env.register_ = r;
	len = npusan__to_daemon__get_packed_size(&env);
	if (len > FRAME_MAX)
		return -EMSGSIZE;
	reg.msg[i] = malloc(len > 0 ? len : 1);
	if (reg.msg[i] == NULL)
		return -ENOMEM;
	reg.msg_len[i] = npusan__to_daemon__pack(&env, reg.msg[i]);
	return 0;
}

/* The Register of this process and `cfg`'s ring into reg.msg, attached
 * and dormant: the identity is the same, only that flag changes. */
static int reg_build(const struct register_cfg *cfg)
{
	Npusan__Register r = NPUSAN__REGISTER__INIT;
	char host[256], exe[PATH_MAX];
	struct identity id;
	ssize_t n;
	int err;

	r.has_protocol_version = 1;
	r.protocol_version = REGISTER_PROTOCOL_VERSION;
	r.agent_version = (char *)NPUSAN_VERSION;
	r.has_pid = 1;
	r.pid = (uint32_t)getpid();
	r.has_start_time = identity_start_time(&r.start_time) == 0;
	r.has_uid = 1;
	r.uid = (uint32_t)getuid();
	if (gethostname(host, sizeof(host)) == 0) {
		host[sizeof(host) - 1] = '\0';
		r.hostname = host;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		r.executable = exe;
	}
	identity_from_env(&id);
	r.job = (char *)id.job;
	r.run = (char *)id.run;
	r.has_rank = id.has_rank;
	r.rank = id.rank;
	r.has_local_rank = id.has_local_rank;
	r.local_rank = id.local_rank;
	r.has_world_size = id.has_world_size;
	r.world_size = id.world_size;
	r.has_ring_size = r.has_ring_header_size = r.has_ring_flags = 1;
	r.ring_size = cfg->ring_size;
	r.ring_header_size = cfg->ring_header_size;
	r.ring_flags = cfg->ring_flags;
	r.has_dormant = 1;
	r.dormant = 0;
	err = reg_pack(&r, 0);
	r.dormant = 1;
	return err < 0 ? err : reg_pack(&r, 1);
}

/* ---- configuration ----------------------------------------------------- */

/* A copy of `s`, NULL for NULL; -ENOMEM through *err. */
static char *reg_strdup(const char *s, int *err)
{
	char *d;

	if (s == NULL)
		return NULL;
	d = strdup(s);
	if (d == NULL)
		*err = -ENOMEM;
	return d;
}

/* The socket to try now, into reg.path. 0 or -ENAMETOOLONG. */
static int reg_resolve(void)
{
	if (reg.socket_path == NULL)
		return paths_socket_from(reg.env_socket, reg.env_xdg, reg.path,
					 sizeof(reg.path));
	if (strlen(reg.socket_path) >= sizeof(reg.path))
		return -ENAMETOOLONG;
	strcpy(reg.path, reg.socket_path);
	return 0;
}

static enum reg_log_level reg_parse_log(const char *v)
{
	if (v != NULL && strcmp(v, "debug") == 0)
		return REG_LOG_DEBUG;
	if (v != NULL && strcmp(v, "info") == 0)
		return REG_LOG_INFO;
	return REG_LOG_OFF;
}

/* Frees what register_start() allocated, a parent's leftovers included. */
static void reg_free(void)
{
	for (int i = 0; i < 2; i++) {
		free(reg.msg[i]);
		reg.msg[i] = NULL;
		reg.msg_len[i] = 0;
	}
	free(reg.socket_path);
	free(reg.env_socket);
	free(reg.env_xdg);
	reg.socket_path = reg.env_socket = reg.env_xdg = NULL;
}

static int reg_config(const struct register_cfg *cfg)
{
	int err = 0;

	reg.log = reg_parse_log(getenv("NPUSAN_LOG"));
	reg.memfd = cfg->memfd;
	reg.event_cb = cfg->event_cb;
	reg.cb_arg = cfg->arg;
	/* Relaxed: before the thread exists; pthread_create() orders it. */
	atomic_store_explicit(&reg.dormant, cfg->dormant, memory_order_relaxed);
	reg.socket_path = reg_strdup(cfg->socket_path, &err);
	reg.env_socket = reg_strdup(getenv("NPUSAN_SOCKET"), &err);
	reg.env_xdg = reg_strdup(getenv("XDG_RUNTIME_DIR"), &err);
	if (err == 0)
		err = reg_resolve();
	if (err == 0)
		err = reg_build(cfg);
	return err;
}

/* ---- the connection ---------------------------------------------------- */

static void reg_close_sock(void)
{
	/* Relaxed: the owner's or after the join (DESIGN 3). */
	int fd = atomic_exchange_explicit(&reg.sock, -1, memory_order_relaxed);

	if (fd >= 0)
		close(fd);
}

/* The socket, for its owner. Relaxed (DESIGN 3). */
static int reg_sock(void)
{
	return atomic_load_explicit(&reg.sock, memory_order_relaxed);
}

/* Release: pairs with the acquire load in register_pending(). A thread
 * that sees the false stored after an accepted reply also sees `connected`
 * set before it, so that npusan_wait_drained() never finds neither. */
static void reg_set_pending(bool pending)
{
	atomic_store_explicit(&reg.pending, pending, memory_order_release);
}

/* Connects a fresh non-blocking socket to reg.path. 0 or -errno. */
static int reg_connect(void)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, err = reg_resolve();

	if (err < 0)
		return err;
	memcpy(sa.sun_path, reg.path, strlen(reg.path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* Relaxed (DESIGN 3): published for register_atfork_child(). */
	atomic_store_explicit(&reg.sock, fd, memory_order_relaxed);
	/* A Unix connect completes at once or fails (EAGAIN when the
	 * daemon's backlog is full); EINPROGRESS is left to frame_send(). */
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 &&
	    errno != EINPROGRESS) {
		err = -errno;
		reg_close_sock();
		return err;
	}
	return 0;
}

static void reg_schedule_retry(void)
{
	unsigned b = reg.backoff_ms;

	/* Half fixed, half random: agents of a job started together do not
	 * knock on a restarted daemon in step. */
	reg.timer_ms = reg_now_ms() + b / 2 + reg_rand() % (b / 2 + 1);
	reg.backoff_ms = b * 2 < REG_BACKOFF_MAX_MS ? b * 2 :
						       REG_BACKOFF_MAX_MS;
	reg.state = REG_IDLE;
}

static void reg_event(enum register_event ev)
{
	if (reg.event_cb != NULL)
		reg.event_cb(ev, reg.cb_arg);
}

/* Gives up the connection (err says why) and schedules the next attempt. */
static void reg_drop(int err)
{
	char eb[128];
	bool was_up = reg.state == REG_UP;

	if (was_up)
		reg.backoff_ms = REG_BACKOFF_MIN_MS; /* a restart: be quick */
	reg_log(REG_LOG_DEBUG, "connection to %s lost: %s", reg.path,
		reg_strerror(err, eb, sizeof(eb)));
	/* Relaxed: false publishes nothing; a waiter only waits on. */
	atomic_store_explicit(&reg.connected, false, memory_order_relaxed);
	reg_set_pending(false);
	reg_close_sock();
	reg_schedule_retry();
	if (was_up)
		reg_event(REGISTER_DOWN);
}

/* Connects and sends the Register; PENDING on success, else a retry. */
static void reg_attempt(int timeout_ms)
{
	char eb[128];
	int err = reg_connect();
	/* Relaxed: picks one of two messages built before the thread; a
	 * Register racing register_set_dormant() sends either, as one sent
	 * a moment earlier or later would. */
	bool dormant = atomic_load_explicit(&reg.dormant, memory_order_relaxed);
	int i = dormant ? 1 : 0;

	if (err == 0)
		err = frame_send(reg_sock(), reg.msg[i],
				 reg.msg_len[i], reg.memfd, timeout_ms);
	if (err < 0) {
		reg_log(REG_LOG_DEBUG, "cannot register with %s: %s",
			reg.path[0] ? reg.path : "(no socket)",
			reg_strerror(err, eb, sizeof(eb)));
		reg_close_sock();
		reg_schedule_retry();
		return;
	}
	reg.state = REG_PENDING;
	reg_set_pending(true);
	reg.timer_ms = reg_now_ms() + REG_REPLY_TIMEOUT_MS;
}

static void reg_on_reply(const Npusan__RegisterReply *rr)
{
	char why[256];

	if (rr->has_accepted && rr->accepted) {
		bool again = reg.ever_up;

		reg.state = REG_UP;
		reg.ever_up = true;
		reg.backoff_ms = REG_BACKOFF_MIN_MS;
		reg_log(REG_LOG_INFO, "registered with %s", reg.path);
		/* Before `connected`: whoever waits for it (and a drained
		 * ring, npusan_wait_drained()) then also waits for what the
		 * callback pushes for a new daemon. */
		reg_event(again ? REGISTER_UP_AGAIN : REGISTER_UP);
		/* Release: pairs with the acquire load in
		 * register_connected(), so that a thread that sees it also
		 * sees the ring's head past what the callback pushed. */
		atomic_store_explicit(&reg.connected, true,
				      memory_order_release);
		reg_set_pending(false);
		return;
	}
	if (text_clean(rr->error, why, sizeof(why)) == NULL)
		why[0] = '\0';
	/* Always said, as configuration errors are: this process now runs
	 * unanalysed, and `npusanctl run` points at this line. */
	agent_log("registration refused by %s: %s; this process runs on "
		  "unanalysed",
		  reg.path, why[0] ? why : "no reason given");
	reg_close_sock();
	reg.state = REG_REFUSED;
	reg_set_pending(false);
}

/* A Control while UP: attach or detach. */
static void reg_on_control(const Npusan__Control *c)
{
	bool attach = c->has_attach && c->attach;

	reg_log(REG_LOG_INFO, "%s by %s", attach ? "attached" : "detached",
		reg.path);
	reg_event(attach ? REGISTER_ATTACH : REGISTER_DETACH);
}

/*
 * Reads one frame from the daemon, waiting at most `timeout_ms`: the reply
 * while PENDING, a Control while UP; anything else is checked and ignored.
 * EOF or garbage drops the connection.
 */
static void reg_receive(int timeout_ms)
{
	Npusan__FromDaemon *m;
	size_t len;
	int err = frame_recv(reg_sock(), reg_rx, sizeof(reg_rx),
			     &len, NULL, timeout_ms);

	if (err == -EAGAIN)
		return;
	if (err < 0) {
		reg_drop(err);
		return;
	}
	m = npusan__from_daemon__unpack(NULL, len, reg_rx);
	if (m == NULL) {
		reg_drop(-EBADMSG);
		return;
	}
	if (reg.state == REG_PENDING &&
	    m->msg_case == NPUSAN__FROM_DAEMON__MSG_REGISTER_REPLY)
		reg_on_reply(m->register_reply);
	else if (reg.state == REG_UP &&
		 m->msg_case == NPUSAN__FROM_DAEMON__MSG_CONTROL)
		reg_on_control(m->control);
	npusan__from_daemon__free_unpacked(m, NULL);
}

/* ---- the thread -------------------------------------------------------- */

/* The poll() timeout the current state needs. */
static int reg_poll_timeout(void)
{
	return reg.state == REG_UP ? -1 : reg_ms_left(reg.timer_ms);
}

/* Acts on an expired timer: attempt again, or give up on a silent daemon. */
static void reg_on_timer(void)
{
	if (reg.state == REG_UP || reg_now_ms() < reg.timer_ms)
		return;
	if (reg.state == REG_IDLE)
		reg_attempt(REG_SEND_TIMEOUT_MS);
	else
		reg_drop(-ETIMEDOUT);
}

static void *reg_thread(void *arg)
{
	(void)arg;
	while (reg.state != REG_REFUSED) {
		int sock = reg_sock();
		/* Relaxed: stored before pthread_create(), which orders it. */
		struct pollfd p[2] = {
			{ .fd = atomic_load_explicit(&reg.wake,
						     memory_order_relaxed),
			  .events = POLLIN },
			{ .fd = sock, .events = POLLIN },
		};
		int n = poll(p, sock >= 0 ? 2 : 1, reg_poll_timeout());

		if (n < 0 && errno != EINTR && errno != ENOMEM)
			break; /* a bug of ours: stop quietly, never spin */
		if (p[0].revents != 0)
			break; /* register_stop() */
		pthread_mutex_lock(&reg_step_lock);
		if (n > 0 && sock >= 0 && p[1].revents != 0)
			reg_receive(0);
		else
			reg_on_timer();
		pthread_mutex_unlock(&reg_step_lock);
	}
	return NULL;
}

/* Creates the thread with every signal blocked (DESIGN 4). */
static int reg_thread_start(void)
{
	int err = thread_start(&reg.thread, reg_thread, NULL);

	if (err < 0)
		return err;
	reg.thread_running = true;
	return 0;
}

/* ---- public ------------------------------------------------------------ */

/* The synchronous attempt: connect, send, and wait until `deadline`. */
static void reg_first_attempt(int64_t deadline)
{
	reg.backoff_ms = REG_BACKOFF_MIN_MS;
	reg_attempt(reg_ms_left(deadline));
	if (reg.state == REG_PENDING)
		reg_receive(reg_ms_left(deadline));
	/* Still PENDING: the thread waits for the reply in flight. */
}

int register_start(const struct register_cfg *cfg)
{
	unsigned timeout;
	int64_t deadline;
	int err, wake;

	if (cfg == NULL || cfg->memfd < 0)
		return -EINVAL;
	if (reg.started)
		return -EALREADY;
	timeout = cfg->sync_timeout_ms ? cfg->sync_timeout_ms :
					 REGISTER_SYNC_TIMEOUT_MS;
	deadline = reg_now_ms() + (timeout < INT_MAX ? timeout : INT_MAX);
	reg_free(); /* what a parent left before fork() */
	reg.rng = (uint64_t)getpid() << 32 ^ (uint64_t)reg_now_ms() ^ 1;
	reg.state = REG_IDLE;
	reg.ever_up = false;
	err = reg_config(cfg);
	wake = err == 0 ? eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) : -1;
	if (err == 0 && wake < 0)
		err = -errno;
	if (err < 0) {
		reg_free();
		return err;
	}
	/* Relaxed: the thread is created after it (DESIGN 3). */
	atomic_store_explicit(&reg.wake, wake, memory_order_relaxed);
	reg.started = true;
	reg_log(REG_LOG_DEBUG, "registering pid %d with %s", (int)getpid(),
		reg.path);
	reg_first_attempt(deadline);
	err = reg.state == REG_REFUSED ? 0 : reg_thread_start();
	if (err < 0)
		register_stop();
	return err;
}

bool register_connected(void)
{
	/* Acquire: pairs with the release store in reg_on_reply(). */
	return atomic_load_explicit(&reg.connected, memory_order_acquire);
}

bool register_pending(void)
{
	/* Acquire: pairs with the release store in reg_set_pending(). */
	return atomic_load_explicit(&reg.pending, memory_order_acquire);
}

void register_set_dormant(bool dormant)
{
	/* Relaxed: see reg_attempt(), its one reader. */
	atomic_store_explicit(&reg.dormant, dormant, memory_order_relaxed);
}

void register_atfork_prepare(void)
{
	pthread_mutex_lock(&reg_step_lock);
}

void register_atfork_release(void)
{
	pthread_mutex_unlock(&reg_step_lock);
}

void register_atfork_child(void)
{
	/* Relaxed, all: the child has one thread, and the locks fork()
	 * held order what the parent stored (DESIGN 3). */
	int fd = atomic_exchange_explicit(&reg.sock, -1, memory_order_relaxed);

	if (fd >= 0)
		close(fd);
	fd = atomic_exchange_explicit(&reg.wake, -1, memory_order_relaxed);
	if (fd >= 0)
		close(fd);
	atomic_store_explicit(&reg.connected, false, memory_order_relaxed);
	reg_set_pending(false);
	reg.thread_running = false;
	reg.started = false;
	reg.ever_up = false;
	reg.state = REG_IDLE;
}

void register_stop(void)
{
	/* Relaxed: register_start() stored it, and its caller orders the
	 * two (register.h). */
	int wake = atomic_load_explicit(&reg.wake, memory_order_relaxed);

	if (reg.thread_running) {
		uint64_t one = 1;

		while (write(wake, &one, sizeof(one)) < 0 && errno == EINTR)
			;
		pthread_join(reg.thread, NULL);
		reg.thread_running = false;
	}
	reg_close_sock();
	/* Relaxed, all: the thread is joined (DESIGN 3). */
	wake = atomic_exchange_explicit(&reg.wake, -1, memory_order_relaxed);
	if (wake >= 0)
		close(wake);
	atomic_store_explicit(&reg.connected, false, memory_order_relaxed);
	reg_set_pending(false);
	reg.started = false;
	reg.ever_up = false;
	reg.state = REG_IDLE;
	reg.memfd = -1;
	reg.event_cb = NULL;
	reg_free();
}
