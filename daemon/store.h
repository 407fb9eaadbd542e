/*
 * store.h - the daemon's database: the processes it watches and the
 * findings it made, in SQLite. Only the store's files (store.c,
 * store_writer.c, store_query.c) speak SQL.
 *
 * Writes are queued and committed in batches by the store's own writer
 * thread, on its own connection, so the threads that drain rings and run
 * the engines, and the loop that registers processes asynchronously,
 * never wait for the disk; store_flush(), store_process_register(),
 * store_prune() and store_close() do wait for the writer. Reads run on a
 * second connection (WAL lets them proceed while the writer commits), on
 * the caller's thread, which waits for the disk; they see what has been
 * committed. store.c lists which call waits for what.
 *
 * Caller owns the struct store; release with store_close(), which commits
 * everything queued first and accepts NULL. Every struct passed in is
 * copied; every struct passed to a callback is valid during the call only.
 */
#ifndef NPUSAN_STORE_H
#define NPUSAN_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "finding_view.h"

/* X(enum suffix, name in queries and the database) */
#define STORE_STATES(X)           \
	X(RUNNING, "running")     \
	X(EXITED, "exited")       \
	X(DORMANT, "dormant")

enum store_state {
#define STORE_STATE_ENUM(name, str) STORE_##name,
	STORE_STATES(STORE_STATE_ENUM)
#undef STORE_STATE_ENUM
	STORE_STATE_COUNT
};

/* The name of `st`, NULL when out of range. */
const char *store_state_name(enum store_state st);

/* A process. Strings are NUL-terminated, NULL when unknown. */
struct store_process {
	int64_t id; /* the store's; 0 before store_process_register() */
	uint32_t pid;
	uint64_t start_time; /* clock ticks after boot (/proc/PID/stat) */
	uint32_t uid;
	const char *host;
	const char *exe;
	const char *job;
	const char *run; /* one run of the job (NPUSAN_RUN); NULL if none */
	bool has_rank, has_local_rank, has_world_size;
	uint32_t rank, local_rank, world_size;
	enum store_state state;
	uint64_t events;   /* operations analysed */
	uint64_t lost;     /* operations lost */
	uint64_t gaps;     /* gaps in the analysis (lost operations, attaches,
			      daemon restarts) */
	uint64_t findings; /* finding rows; filled by queries, ignored on write */
	uint64_t suppressed; /* of them, those suppressed; the same */
	int64_t first_ms;  /* first and last activity, Unix ms */
	int64_t last_ms;
};

/*
 * A finding as the store keeps it: the resolved finding (findings.md) and
 * the process it belongs to. On write, v.id, v.has_first/has_last and the
 * process fields of v are ignored; v.count is how many occurrences to
 * add, v.first_ms and v.last_ms when they happened (Unix ms); v.kind and
 * v.detected_at must be names this build knows. Queries fill every field,
 * the process's pid, job and rank included.
 */
struct store_finding {
	int64_t process_id; /* store_process.id */
	struct finding_view v;
};

struct store;

struct store_opts {
	const char *path;     /* the database file; its directory must exist */
	unsigned retain_days; /* prune exited processes older than this; 0: never */
	/* Called on the writer thread after each commit that stored findings
	 * or process changes, e.g. to wake followers; NULL for none. It may
	 * queue writes, but must not call store_flush(), _register(),
	 * _prune() or _close(), which wait for that thread. */
	void (*commit_cb)(void *arg);
	void *commit_arg;
	/* Bytes of findings that may wait for the disk (a full disk, a
	 * database locked by another program) before more are refused and
	 * counted (store_stats.findings_dropped); 0: 256 MiB. Registrations
	 * and counter updates are never refused (updates of a process are
	 * merged while they wait, so they are bounded by the processes). */
	size_t max_queue_bytes;
};

/*
 * Opens (creating when missing) the database, runs the schema migrations,
 * marks processes left running by a previous daemon as exited, and starts
 * the writer thread. 0; -ENOMEM; -EIO with the reason (naming the file) in
 * *errmsg (caller frees) when SQLite cannot open or migrate it, or the
 * database was written by a newer npusan (a schema version it does not
 * know).
 */
int store_open(const struct store_opts *o, struct store **out, char **errmsg);

/* Commits what is queued, stops the writer, closes. Accepts NULL. */
void store_close(struct store *s);

/* A process's counters, totals since it first registered. */
struct store_counters {
	uint64_t events;   /* operations analysed */
	uint64_t lost;     /* operations lost */
	uint64_t gaps;     /* gaps in the analysis */
	uint64_t ring_ops; /* operations its ring had handed out when these
			      were taken (ringread_counters.ops): what a
			      daemon that takes the ring over compares with */
};

/*
 * Records a process registering (synchronously: the caller needs the id),
 * in state p->state (running or dormant). A process already stored with
 * the same host, pid and start time (it registered with an earlier daemon)
 * gets its row back in that state, and its counters as last stored in
 * *was (zero for a new process; `was` may be NULL). A stored process never
 * changes owner: one stored under another uid is refused.
 * 0 with the id in *id; -EPERM when stored under another uid; -EIO;
 * -EINVAL for a state other than those two.
 */
int store_process_register(struct store *s, const struct store_process *p,
			   int64_t *id, struct store_counters *was);

/*
 * Queues a process registering, as store_process_register() does, but
 * never waits for the disk: the loop thread registers this way. With `ref`
 * set, *ref is a provisional id (negative) that store_process_update() and
 * store_finding_submit() take in place of the store's id at once; their
 * writes are stored after the registration, in order, whenever the
 * database takes writes again. store_process_registered() says when the
 * row is stored; store_process_forget() releases the provisional id.
 * 0; -ENOMEM; -EINVAL for a state other than running or dormant.
 */
int store_process_register_async(struct store *s,
				 const struct store_process *p, int64_t *ref);

/*
 * Whether the registration of provisional id `ref` is stored: 1 with the
 * store's id in *id and, in *was, the process's counters as stored before
 * it registered (as store_process_register() gives them); 0 while it
 * waits for the disk; -EIO when SQLite refused it (a constraint: what is
 * queued with `ref` is dropped); -ENOENT for an unknown ref. Never waits
 * for the disk. `was` may be NULL.
 */
int store_process_registered(struct store *s, int64_t ref, int64_t *id,
			     struct store_counters *was);

/*
 * The caller will queue nothing more with provisional id `ref`; the store
 * releases it once what was queued with it is stored. Accepts 0 and
 * ids that are not provisional.
 */
void store_process_forget(struct store *s, int64_t ref);

/*
 * Queues new counters and state for process `id` (the store's, or a
 * provisional one). Never blocks on the disk: an update of a process whose
 * previous one still waits replaces it. 0; -ENOMEM; -EINVAL when `st` is
 * out of range.
 */
int store_process_update(struct store *s, int64_t id,
			 const struct store_counters *c, int64_t last_ms,
			 enum store_state st);

/*
 * Queues a finding: a new row, or, when the process already has a finding
 * with the same key (kind, both streams, both operators, both access types,
 * both stacks; findings.md's deduplication), f->count more occurrences of
 * it and a later last_ms. `f->process_id` may be a provisional id. Never
 * blocks on the disk. 0; -ENOBUFS when max_queue_bytes of findings wait
 * for the disk already (the finding is dropped and counted in
 * store_stats.findings_dropped); -ENOMEM; -EINVAL when kind or detected_at
 * is not a name of engine.h.
 */
int store_finding_submit(struct store *s, const struct store_finding *f);

/* Commits everything queued so far before returning. 0; -EIO. */
int store_flush(struct store *s);

/* Query filters; a field applies when its has_ flag (or pointer) is set. */
struct store_filter {
	const char *job;
	bool has_pid, has_rank, has_kind, has_uid;
	uint32_t pid, rank, uid; /* uid: only this user's processes */
	enum finding_kind kind;
	int64_t since_ms; /* last_ms at or after; 0: any */
	int64_t after_id; /* findings with a larger id only (follow) */
	uint32_t limit;   /* the newest `limit` only; 0: all */
};

typedef int (*store_process_cb)(void *arg, const struct store_process *p);
typedef int (*store_finding_cb)(void *arg, const struct store_finding *f,
				const struct store_process *p);

/*
 * Calls `cb` for each matching process, most recent activity first, or
 * each matching finding, oldest id first (the newest `limit` when set).
 * A callback's negative return stops the walk and is returned. 0; -EIO.
 */
int store_list(struct store *s, const struct store_filter *f,
	       store_process_cb cb, void *arg);
int store_findings(struct store *s, const struct store_filter *f,
		   store_finding_cb cb, void *arg);

/*
 * A list answer that is walked a page at a time: the ids of the processes
 * store_list() would call back with, in its order, into *ids (*n of them;
 * caller frees, NULL for none); then store_list_get() calls `cb` for those
 * of `n` ids still stored, in that order, as they are now.
 * 0; -E2BIG when more than `max` match; -ENOMEM; -EIO; a callback's
 * negative return.
 */
int store_list_ids(struct store *s, const struct store_filter *f,
		   size_t max, int64_t **ids, size_t *n);
int store_list_get(struct store *s, const int64_t *ids, size_t n,
		   store_process_cb cb, void *arg);

/* Calls `cb` with finding `id` when it matches `f` (uid). 0; -ENOENT. */
int store_finding_get(struct store *s, int64_t id,
		      const struct store_filter *f, store_finding_cb cb,
		      void *arg);

struct store_stats {
	uint32_t processes[STORE_STATE_COUNT];
	uint64_t findings; /* rows */
	uint64_t db_bytes; /* the database file and its WAL */
};

/* The writer's state, read without touching the database. */
struct store_health {
	bool failing;              /* the latest commit failed */
	uint64_t queued;           /* writes waiting for the disk */
	uint64_t findings_dropped; /* occurrences refused since open */
};

/* Never waits for the disk. */
void store_get_health(struct store *s, struct store_health *out);

int store_stats(struct store *s, struct store_stats *out);

/*
 * Deletes exited processes whose last activity is older than retain_days
 * before `now_ms`, with their findings (and strings no finding uses any
 * more). The number of processes deleted; -EIO.
 */
int store_prune(struct store *s, int64_t now_ms);

/* Queues store_prune(); never waits for the disk. The writer logs what it
 * deleted. 0; -ENOMEM. */
int store_prune_async(struct store *s, int64_t now_ms);

#endif
