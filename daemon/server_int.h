/*
 * server_int.h - what the parts of npusand's socket share, as libuv's
 * src/unix/internal.h: the structs and the functions one part calls in
 * another. Not a public header: only server.c, conn.c and rpc.c include it.
 *
 *   server.c  the listener: accepting (and the pause when descriptors run
 *             out), the sweep of connections that dawdle, the limits per
 *             user, the peer's identity and an agent's registration
 *   conn.c    one connection: its frames in and out, closing it
 *   rpc.c     the queries: list, findings (and follows), show, stats,
 *             attach, run as jobs on libuv's thread pool
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
 * Ownership: the server owns its connections (a list) and the per-user
 * counts; a connection owns its descriptors, output queue, cursor, list
 * answer and agent info, all freed by conn__free() from its poll handle's
 * close callback (DESIGN 4); a job owns what its work made until its reply
 * takes it (rpc.c).
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
 *    never before (or, when a job (8) runs for it then, once the job is
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
#ifndef NPUSAN_DAEMON_SERVER_INT_H
#define NPUSAN_DAEMON_SERVER_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "ingest.h"
#include "server.h"
#include "store.h"
#include "wire.h"

#ifndef NPUSAN_VERSION
#error "define NPUSAN_VERSION (the project version) when compiling the server"
#endif

/* Answers stop filling a connection's queue at this many bytes. */
#define SERVER_OUT_HIGH (256u * 1024)

enum conn_kind { CONN_NEW, CONN_AGENT, CONN_QUERY };

/* One queued frame. */
struct conn_out {
	struct conn_out *next;
	uint8_t *data;
	size_t len, off;
};

/* A list answer in progress: the processes it names, and the next one. */
struct rpc_list_cursor {
	int64_t *ids;
	size_t n, next;
};

/* A findings answer in progress, and then, with follow, a follow. */
struct rpc_cursor {
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
	uint64_t since_ms;	  /* accept, frame start or last answer */
	uint64_t out_moved_ms;	  /* output last moved */
	uint64_t closing_ms;
	struct conn_out *out_head, *out_tail;
	size_t out_bytes;
	struct ingest_proc *proc; /* AGENT: ours to disconnect */
	struct rpc_cursor *cur;	  /* QUERY: a findings answer or follow */
	struct rpc_list_cursor *lcur; /* QUERY: a list answer (DESIGN 3) */
	struct conn_agent *agent; /* AGENT: what attach needs to know */
	struct rpc_job *job;	  /* QUERY: its job in flight (DESIGN 8) */
	bool closed; /* its poll handle closed while its job ran */
};

/* An agent's process, as attach matches and answers it. */
struct conn_agent {
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
	uint64_t refused_log_ms; /* last "refusing" warning, rate-limited */
	uint64_t refused;
};

/* ---- server.c ---------------------------------------------------------- */

/* One of the server's handles closed; the last frees a server that
 * server_start() could not start. */
void server__handle_closed(struct server *s);

/* Uncounts connection `c`; a user with none left is forgotten. */
void server__uid_remove(struct server *s, const struct conn *c);

/* Makes NEW connection `c` an agent's or a query connection, counted. */
void server__set_kind(struct conn *c, enum conn_kind kind);

/*
 * Refuses NEW connection `c`'s first request, of `kind`, when its user has
 * as many of those as it may (DESIGN 7), closing `fd` (ours, or -1) then.
 * Whether refused.
 */
bool server__limit_refused(struct conn *c, enum conn_kind kind, int fd);

/* The Register `r` arrived with descriptor `fd` (ours, or -1: taken). */
void server__on_register(struct conn *c, const Npusan__Register *r, int fd);

/* ---- conn.c ------------------------------------------------------------ */

/* Frees `c` and what it holds; its handle has closed (DESIGN 4). */
void conn__free(struct conn *c);

/* Closes at once, dropping what is queued (DESIGN 4). */
void conn__close(struct conn *c);

/*
 * Queues `frame` (taking it) and writes what the socket takes now.
 * 0; -ENOMEM (the frame is freed and the connection closed); -EPIPE when
 * the connection closed.
 */
int conn__send(struct conn *c, uint8_t *frame, size_t len);

/* Packs and sends `m`; a failure to pack closes the connection. */
void conn__send_msg(struct conn *c, const Npusan__FromDaemon *m);

/* An Error reply; with `fatal` the connection closes after it (DESIGN 2). */
void conn__error(struct conn *c, int code, const char *msg, bool fatal);

/* Watches what the connection's state asks for (DESIGN 3). */
void conn__update(struct conn *c);

/* ---- rpc.c ------------------------------------------------------------- */

/* A Query arrived on `c` (NEW or QUERY). */
void rpc__on_query(struct conn *c, const Npusan__Query *q);

/* Whether the cursor has findings, or a list answer processes, to walk
 * now. */
bool rpc__walking(const struct conn *c);

/* Starts c's next walk when the output queue has room (DESIGN 3). */
void rpc__pump(struct conn *c);

/* Ends c's list answer, if any, freeing it. */
void rpc__list_done(struct conn *c);

/* Whether the field numbers rpc.c names match the generated code. */
bool rpc__proto_matches(void);

#endif
