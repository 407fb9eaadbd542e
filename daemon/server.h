/*
 * server.h - npusand's Unix socket: accepting agents and npusanctl,
 * reading their frames, registering agents with ingest, answering queries
 * from the store, and pushing new findings to followers.
 *
 * Everything runs on the libuv loop's thread but the store reads of
 * queries, which run on libuv's thread pool (rpc.c; server_int.h, DESIGN
 * 8), so the loop never waits for SQLite; the store's writer thread
 * reaches it only through server_on_commit(), which the caller calls from
 * a uv_async_t. Caller owns the struct server: server_stop(), run the
 * loop until it returns, then server_free().
 */
#ifndef NPUSAN_DAEMON_SERVER_H
#define NPUSAN_DAEMON_SERVER_H

#include <uv.h>

#include "ingest.h"
#include "store.h"

/* Connections open at once, at most; more are refused (and logged). */
#define SERVER_MAX_CONNS 4096
/* Of those, this many (at most a quarter) only root may take, so that an
 * administrator can always ask what is going on. */
#define SERVER_ROOT_RESERVE 16
/* One user's (not root's) connections, agents and queries apart; a user's
 * connections that have not said which yet count against the sum. */
#define SERVER_AGENTS_PER_UID 1024
#define SERVER_QUERIES_PER_UID 64

struct server;

struct server_opts {
	uv_loop_t *loop;
	int listen_fd;         /* listening, AF_UNIX SOCK_STREAM; the server
				  owns it and closes it */
	struct store *store;   /* must outlive the server */
	struct ingest *ingest; /* must outlive the server */
	unsigned max_conns;    /* 0: SERVER_MAX_CONNS */
	unsigned max_agents_per_uid;  /* 0: SERVER_AGENTS_PER_UID */
	unsigned max_queries_per_uid; /* 0: SERVER_QUERIES_PER_UID */
	uint64_t start_ns;     /* uv_hrtime() at start, for the uptime */
};

/*
 * Starts accepting on o->listen_fd. 0; -ENOMEM; a negative errno from
 * libuv. On error the listening descriptor is still the caller's.
 */
int server_start(const struct server_opts *o, struct server **out);

/* The store committed: followers look for new findings. Loop thread. */
void server_on_commit(struct server *s);

/*
 * Stops accepting and closes every connection, sending nothing more.
 * Agents are not disconnected from ingest: ingest_free() drains them all,
 * and each agent registers again with the next daemon. The handles close
 * in the next loop iterations.
 */
void server_stop(struct server *s);

/* Frees the server once the loop has closed its handles. Accepts NULL. */
void server_free(struct server *s);

#endif
