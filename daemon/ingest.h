/*
 * ingest.h - the processes the daemon watches: for each, its ring, the
 * decoder and the engine that analyse what it pushes, and its findings on
 * their way to the store.
 *
 * Drain threads of ingest's own take the registered processes in turn,
 * draining a bounded batch from each, so a flooding process delays no
 * other and never the thread serving sockets and queries. A finding
 * reaches the store (queued, then committed by the store's writer) within
 * a drain period of the operation that caused it.
 *
 * Caller owns the struct ingest; release with ingest_free(). Handles of
 * registered processes belong to ingest.
 */
#ifndef NPUSAN_INGEST_H
#define NPUSAN_INGEST_H

#include <stdint.h>

#include "store.h"

struct ingest;
struct ingest_proc;

struct ingest_opts {
	struct store *store; /* must outlive the ingest */
	unsigned threads;    /* drain threads; 0: one per CPU up to 3, then
				one per two CPUs */
	unsigned period_ms;  /* how long a drain thread naps when idle; 0: 10 */
	/* npusand --suppressions: the findings it matches are stored marked
	 * with the suppression's name. NULL: none. Must outlive the ingest. */
	const struct suppress_set *supp;
};

/* Starts the drain threads. 0; -ENOMEM; -errno from pthread_create. */
int ingest_new(const struct ingest_opts *o, struct ingest **out);

/*
 * Stops the threads after a last drain of every ring, hands every finding
 * and counter to the store, and frees everything. Accepts NULL.
 */
void ingest_free(struct ingest *in);

/*
 * Starts watching the process `p` (its identity, as registered, and its
 * state, running or dormant; copied) whose ring is in memfd `fd`. On
 * success ingest owns fd and *out is the process's handle until
 * ingest_disconnect(); a process that registers again while its ring is
 * still drained here gets its handle back, and fd is closed. Never waits
 * for the database: the process is drained and analysed while its row
 * waits to be stored (ingest.c, DESIGN 6). 0; -EINVAL when the fd is not a
 * ring this daemon reads (*why says why, a static string); -ENOMEM.
 */
int ingest_register(struct ingest *in, const struct store_process *p, int fd,
		    struct ingest_proc **out, const char **why);

/* The store's id of the process; 0 while its row waits to be stored. */
int64_t ingest_proc_id(const struct ingest_proc *proc);

/* The process was attached (STORE_RUNNING) or detached (STORE_DORMANT):
 * the state its next update stores. Loop thread. */
void ingest_set_state(struct ingest_proc *proc, enum store_state st);

/*
 * The agent's connection closed: one call for each ingest_register() that
 * returned the handle. Once the last is made and the process has exited
 * (at once when it has), ingest drains what it left, records the process
 * as exited and frees the handle; the caller must not use it again.
 */
void ingest_disconnect(struct ingest *in, struct ingest_proc *proc);

struct ingest_stats {
	uint32_t running;    /* processes being watched */
	uint64_t events;     /* operations analysed since start */
	uint64_t lost;       /* operations lost since start */
	double events_per_s; /* over the last few seconds */
	/* Occurrences of findings since start, by enum finding_kind: firsts
	 * and repeats alike (the store counts distinct findings). */
	uint64_t findings[FINDING_KIND_COUNT];
	/* Of those, the occurrences ingest_opts.supp suppressed. */
	uint64_t suppressed[FINDING_KIND_COUNT];
	/* The fullest ring as its drain thread saw it after its latest
	 * round: (head - tail) / capacity, 0 to 1; 0 with no ring. */
	double ring_fill;
	/* Analysis lag: over the rings being drained, the longest time since
	 * a drain thread last found a ring empty right after draining it; 0
	 * when every ring was empty at its latest drain. Seconds. */
	double lag_s;
};

void ingest_get_stats(struct ingest *in, struct ingest_stats *out);

#endif
