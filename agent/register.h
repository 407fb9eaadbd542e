/*
 * register.h - the agent's registration with npusand.
 *
 * register_start() tells the daemon who this process is (pid, start time,
 * uid, host, executable, job, rank) and hands it the ring's memfd over the
 * daemon's Unix socket. It makes one attempt bounded by a few milliseconds;
 * a background thread then keeps trying with backoff until a daemon accepts,
 * watches the connection, and registers again, with the same ring, when the
 * daemon restarts. Without a daemon the application runs on untouched:
 * nothing goes to stdout, nothing to stderr unless NPUSAN_LOG asks
 * (`info`: a line per registration; `debug`: every step), no signal is
 * raised (MSG_NOSIGNAL, and the thread blocks every signal) and nothing
 * exits.
 *
 * One registration per process. register_start() and register_stop() must
 * not run concurrently with each other (the agent's init and teardown
 * serialize them); register_connected() may be called from any thread.
 */
#ifndef NPUSAN_REGISTER_H
#define NPUSAN_REGISTER_H

#include <stdbool.h>
#include <stdint.h>

/* Register.protocol_version of this agent. */
#define REGISTER_PROTOCOL_VERSION 1

/* register_cfg.sync_timeout_ms when it is 0. */
#define REGISTER_SYNC_TIMEOUT_MS 5

/* What register_cfg.event_cb hears of. */
enum register_event {
	REGISTER_UP,	   /* a daemon accepted the ring, the first one */
	REGISTER_UP_AGAIN, /* accepted again, after the connection was lost:
			      a new daemon may have the ring */
	REGISTER_DOWN,	   /* the accepted connection was lost */
	REGISTER_ATTACH,   /* the daemon asks for every operation */
	REGISTER_DETACH,   /* the daemon asks for none */
};

struct register_cfg {
	int memfd;		   /* the ring's memfd; register dups nothing,
				      the caller keeps it open until
				      register_stop() */
	uint64_t ring_size;	   /* data capacity, bytes */
	uint32_t ring_header_size;
	uint32_t ring_flags;
	const char *socket_path;   /* NULL: paths_socket()'s order, resolved
				      again at every retry */
	unsigned sync_timeout_ms;  /* how long register_start() may wait for
				      a first answer; 0: the default */
	bool dormant;		   /* registers as not pushing (see
				      register_set_dormant()) */
	/*
	 * Called on the thread running the state machine (register_start()'s
	 * caller for its first attempt, else the registration thread), never
	 * with a lock of this module held; NULL for none. It must not call
	 * register_start() or register_stop().
	 */
	void (*event_cb)(enum register_event ev, void *arg);
	void *arg;
};

/*
 * Gathers this process's identity, makes one synchronous attempt lasting at
 * most cfg->sync_timeout_ms, and leaves the rest to a background thread
 * (none when the daemon already refused). `cfg` is copied; the environment
 * is read here, never later.
 * 0 whether or not a daemon answered (see register_connected());
 * -EINVAL when cfg is NULL or cfg->memfd is negative; -EALREADY when started
 * and not stopped; -ENAMETOOLONG when the socket path does not fit a
 * sockaddr_un; -ENOMEM; a negative errno from eventfd(2) or
 * pthread_create(3). On error nothing is left running or open.
 */
int register_start(const struct register_cfg *cfg);

/* Whether a daemon accepted us, the event callback for it returned, and
 * that connection is still up. */
bool register_connected(void);

/* Whether a Register is on its way: sent to a daemon that has not answered
 * yet. Any thread. Once it reads false after an accepted reply,
 * register_connected() reads true (unless the connection was lost since). */
bool register_pending(void);

/*
 * What the next Register says: whether the agent pushes nothing (dormant)
 * or everything. Any thread.
 */
void register_set_dormant(bool dormant);

/*
 * From pthread_atfork()'s prepare handler, before any other lock of the
 * agent's: waits until the thread is between two steps (it allocates while
 * it reads a reply or a Control and runs the event callback), so that the
 * child never inherits an allocator lock the thread held. Held until
 * register_atfork_release() in the parent and in the child.
 */
void register_atfork_prepare(void);
void register_atfork_release(void);

/*
 * For the child of fork(), from a pthread_atfork() child handler:
 * async-signal-safe. Closes the inherited socket (close, never shutdown,
 * which would cut the parent's connection) and wake-up descriptor and
 * forgets the parent's thread, which does not exist in the child, so that
 * the child can register_start() its own ring. Memory inherited from the
 * parent is released by the next register_start() or register_stop().
 */
void register_atfork_child(void);

/*
 * Wakes and joins the thread, closes the connection and releases
 * everything; the memfd is the caller's again. Harmless when not started.
 */
void register_stop(void);

#endif
