/*
 * fakedaemon.h - a stand-in for npusand, for tests and benchmarks.
 *
 * It listens on a Unix socket and accepts every agent that registers: a
 * thread answers each Register with accepted=true and queues the agent's
 * ring memfd and identity for fakedaemon_next(). It never closes a
 * connection on its own, because the agent takes a closed connection for a
 * daemon restart and registers again; fakedaemon_disconnect() does that on
 * purpose. It analyses nothing: fakedaemon_collect() and the
 * fakedaemon_ring_* functions drain a ring into ops for the test to check.
 *
 * Not for production: one thread serves every connection in turn, and a
 * peer that stalls mid-frame holds it up to a second.
 */
#ifndef NPUSAN_FAKEDAEMON_H
#define NPUSAN_FAKEDAEMON_H

#include <stdbool.h>
#include <stdint.h>

#include "op.h"
#include "symtab.h"

struct fakedaemon;

#define FAKEDAEMON_JOB_MAX 128

/* One accepted Register. Fields the agent left out read 0 / false / "". */
struct fakedaemon_agent {
	int fd;		   /* the ring's memfd, -1 when none came; the
			      caller owns it and closes it */
	uint32_t pid;
	uint64_t start_time;
	char job[FAKEDAEMON_JOB_MAX]; /* cut short when longer */
	bool has_rank;
	uint32_t rank;
	uint64_t ring_size;
	uint32_t ring_header_size;
	uint32_t ring_flags;
};

/*
 * Binds and listens on `sock_path` (which must not exist) and starts the
 * thread. Caller owns *out; release with fakedaemon_stop(). 0;
 * -ENAMETOOLONG when the path does not fit a sockaddr_un; -ENOMEM; a
 * negative errno from socket, bind, listen, eventfd or pthread_create.
 */
int fakedaemon_start(const char *sock_path, struct fakedaemon **out);

/*
 * Takes the oldest accepted registration not taken yet into *out, waiting
 * up to `timeout_ms` for one. 0; -ETIMEDOUT. A re-registration after
 * fakedaemon_disconnect() is queued again, with a fresh fd of the same ring.
 */
int fakedaemon_next(struct fakedaemon *d, unsigned timeout_ms,
		    struct fakedaemon_agent *out);

/* Connections open now (registered or not). */
unsigned fakedaemon_connections(struct fakedaemon *d);

/*
 * Closes every agent connection, as a daemon restart does, and returns
 * once they are closed; the listener stays up. 0 or -ECANCELED when the
 * thread is gone.
 */
int fakedaemon_disconnect(struct fakedaemon *d);

/*
 * Answers each Register `ms` milliseconds late from now on, as a busy
 * daemon would; 0 answers at once.
 */
void fakedaemon_delay_replies(struct fakedaemon *d, unsigned ms);

/* Register replies the agents' sockets took so far; a reply to an agent
 * that had exited is not counted. */
unsigned fakedaemon_replies(struct fakedaemon *d);

/*
 * Stops the thread, closes the listener, every connection and every fd
 * still queued, and removes the socket file. Accepts NULL.
 */
void fakedaemon_stop(struct fakedaemon *d);

/* ---- draining a ring ---------------------------------------------------- */

/*
 * Called with each operation decoded from the ring, in ring order; `op` and
 * its ranges are valid until the callback returns, its string and stack ids
 * are ids of the caller's symtab. A lost stretch of the ring comes as a gap
 * op. 0 to go on; a negative value stops the collection and is returned.
 */
typedef int (*fakedaemon_op_cb)(void *arg, const struct op *op);

/* What a collection saw. */
struct fakedaemon_collected {
	uint64_t ops;	    /* callbacks made */
	uint64_t records;   /* records drained, definitions included */
	uint64_t malformed; /* records ringdec refused (skipped) */
	uint64_t dropped;   /* the producers' drop counter (untrusted) */
	uint64_t lost_bytes; /* ring bytes skipped as lost */
};

/* A ring being drained across several collections. */
struct fakedaemon_ring;

/*
 * Maps the ring in memfd `ring_fd` (which stays the caller's) and decodes
 * into `syms`, which must outlive the reader. Caller owns *out; release with
 * fakedaemon_ring_close(), which accepts NULL. 0; -EINVAL when the fd is not
 * a ring; -ENOMEM; a negative errno from ringread_map().
 */
int fakedaemon_ring_open(int ring_fd, struct symtab *syms,
			 struct fakedaemon_ring **out);
void fakedaemon_ring_close(struct fakedaemon_ring *r);

/*
 * Drains the ring and calls `cb` per op until nothing new has arrived for
 * `quiet_ms`. With RINGREAD_DEAD in `flags` (the producer is known to be
 * gone) it instead returns at the first empty drain, skipping records the
 * producer left unfinished and reporting drops no gap record carried as a
 * final gap op. Definitions persist across calls on the same reader.
 * Returns the ops delivered by this call, with the totals so far in *stats
 * when it is not NULL; a callback's negative return; -ENOMEM or -E2BIG from
 * the decoder.
 */
int fakedaemon_ring_collect(struct fakedaemon_ring *r, unsigned quiet_ms,
			    unsigned flags, fakedaemon_op_cb cb, void *arg,
			    struct fakedaemon_collected *stats);

/* fakedaemon_ring_open(), one fakedaemon_ring_collect(), close. */
int fakedaemon_collect(int ring_fd, unsigned quiet_ms, unsigned flags,
		       struct symtab *syms, fakedaemon_op_cb cb, void *arg,
		       struct fakedaemon_collected *stats);

#endif
