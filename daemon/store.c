/*
 * store.c - the daemon's database: processes and findings in SQLite, the
 * schema and its migrations, batched writes, queries and retention.
 *
 * Callers never wait for the disk: writes are copied into a queue that a
 * writer thread of the store's own commits in batches on its connection;
 * queries run on a second connection, which WAL lets read while the writer
 * commits. This is the only file that speaks SQL or knows SQLite's codes.
 *
 * DESIGN
 *  1. The write connection belongs to the writer thread alone (after
 *     store_open() hands it over); the read connection is used only under
 *     `rlock`. Every write, the synchronous ones too (register, prune), is
 *     an item of the one queue, so writes reach the database in the order
 *     they were made: a process's update queued before it re-registers can
 *     never overwrite the `running` state its registration wrote.
 *  2. A round takes the whole queue and commits it in one transaction.
 *     Either all of it is stored or none of it: when the round fails (disk
 *     full, I/O error, a lock held too long by another program), the
 *     queued items go back to the front of the queue, unchanged, to be
 *     retried, and the synchronous ones fail with -EIO. Only an item SQLite
 *     rejects by itself (a constraint it breaks, such as a finding of an
 *     unknown process) is dropped, with a log line, so that one bad item
 *     cannot stall every later one.
 *  3. Items are numbered as they are queued; every item numbered up to
 *     `committed_seq` is in the database (or was dropped as in 2). That is
 *     what store_flush() waits for.
 *  4. Findings of one process with equal deduplication keys are one row.
 *     The key is the engine's (finding_key()), as text in a computed
 *     column (finding_key_text()), because SQLite's UNIQUE treats NULLs as
 *     distinct and every 64-bit stream is a valid stream, so no sentinel
 *     value is free. Operator ids and stack ids in it are this database's,
 *     so equal texts give equal keys, also across daemon restarts.
 *  5. Operator names and frame texts are rows of `strings`, stacks rows of
 *     `stacks` (a JSON array of string ids, innermost first), each stored
 *     once. An empty stack is no row: its id is NULL (0 in keys).
 *  6. Process and finding ids are AUTOINCREMENT, never reused after a
 *     prune, so a follower's after_id and a finding id a user copied keep
 *     naming what they named.
 *  7. The writer remembers the ids of recent strings and stacks in a small
 *     direct-mapped cache, so that a repeated finding costs one statement
 *     rather than one per frame. Ids only change when rows go away, so
 *     the cache is emptied whenever they may have: after a failed round
 *     (its inserts rolled back) and after a prune.
 *  8. 64-bit unsigned values (pointers, streams, sequence numbers, counters)
 *     are stored as the int64 with the same bits and read back the same
 *     way.
 *  9. A finding row's first INSERT, and only that (not a repeat that adds
 *     to its count), yields one info line in logfmt, "finding id=7
 *     kind=... job=... rank=... pid=..." (daemon/README.md), formatted by
 *     the writer in the round and written only once the round committed,
 *     so that a rolled-back and retried round never logs an id twice or
 *     an id that was not stored.
 */
#include "store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "hash.h"
#include "log.h"

/*
 * The batching rule: a round starts 50 ms after the first item of a batch
 * was queued, or as soon as 2000 items wait, whichever comes first (or at
 * once for a flush, a registration or a prune). 50 ms keeps a finding's way
 * to followers well under what a person notices, while one commit then
 * carries everything a busy daemon queued meanwhile instead of costing a
 * WAL append and lock round trip per finding; 2000 items bounds the work
 * (and the time the write lock is held) when a flood fills the queue
 * faster than the timer runs.
 */
#define STORE_BATCH_MS 50
#define STORE_BATCH_MAX 2000
/* After a failed round, the next try waits this long, doubling. */
#define STORE_RETRY_MAX_MS 1000
/* store_close() tries this many rounds before it gives queued items up. */
#define STORE_CLOSE_TRIES 3
/* Queued bytes past which writes are refused (-ENOMEM), e.g. while the
 * disk stays full. */
#define STORE_QUEUE_MAX_BYTES ((size_t)256 << 20)
#define STORE_BUSY_TIMEOUT_MS 5000
#define STORE_MS_PER_DAY INT64_C(86400000)
/* DESIGN 7; a power of two. */
#define STORE_CACHE_SLOTS 1024

static const char *const store_state_names[] = {
#define STORE_STATE_NAME(name, str) str,
	STORE_STATES(STORE_STATE_NAME)
#undef STORE_STATE_NAME
};

const char *store_state_name(enum store_state st)
{
	return (unsigned)st < STORE_STATE_COUNT ? store_state_names[st] : NULL;
}

/*
 * The schema, one migration per entry: entry i brings user_version i to
 * i + 1. Append, never edit one that shipped.
 */
static const char *const store_migrations[] = {
	/* 1: processes, findings, and the strings and stacks they share. */
	"CREATE TABLE processes ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" host TEXT NOT NULL," /* '' when unknown */
	" pid INTEGER NOT NULL,"
	" start_time INTEGER NOT NULL,"
	" uid INTEGER NOT NULL,"
	" exe TEXT,"
	" job TEXT,"
	" rank INTEGER,"
	" local_rank INTEGER,"
	" world_size INTEGER,"
	" state TEXT NOT NULL,"
	" events INTEGER NOT NULL DEFAULT 0,"
	" lost INTEGER NOT NULL DEFAULT 0,"
	" findings INTEGER NOT NULL DEFAULT 0," /* rows; kept by triggers */
	" first_ms INTEGER NOT NULL,"
	" last_ms INTEGER NOT NULL,"
	" UNIQUE (host, pid, start_time));"
	"CREATE INDEX processes_job ON processes (job);"
	"CREATE INDEX processes_pid ON processes (pid);"
	"CREATE INDEX processes_last ON processes (last_ms);"
	"CREATE INDEX processes_state ON processes (state, last_ms);"
	"CREATE TABLE strings ("
	" id INTEGER PRIMARY KEY,"
	" text TEXT NOT NULL UNIQUE);"
	"CREATE TABLE stacks ("
	" id INTEGER PRIMARY KEY,"
	" frames TEXT NOT NULL UNIQUE);" /* JSON array of strings.id */
	"CREATE TABLE findings ("
	" id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" process_id INTEGER NOT NULL"
	"  REFERENCES processes (id) ON DELETE CASCADE,"
	" dedup_key TEXT NOT NULL,"
	" kind TEXT NOT NULL,"
	" detected_at TEXT NOT NULL,"
	" ptr INTEGER NOT NULL,"
	" alloc_ptr INTEGER," /* the alloc_ columns: NULL without one */
	" alloc_size INTEGER,"
	" alloc_stream INTEGER,"
	" alloc_stack INTEGER," /* stacks.id; NULL when empty */
	" acc_stream INTEGER NOT NULL,"
	" acc_seq INTEGER NOT NULL,"
	" acc_write INTEGER NOT NULL,"
	" acc_op INTEGER," /* strings.id */
	" acc_stack INTEGER,"
	" prev_stream INTEGER," /* the prev_ columns: NULL without one */
	" prev_seq INTEGER,"
	" prev_write INTEGER,"
	" prev_op INTEGER,"
	" prev_stack INTEGER,"
	" count INTEGER NOT NULL,"
	" first_ms INTEGER NOT NULL,"
	" last_ms INTEGER NOT NULL,"
	" UNIQUE (process_id, dedup_key));"
	"CREATE INDEX findings_kind ON findings (kind);"
	"CREATE INDEX findings_last ON findings (last_ms);"
	"CREATE TRIGGER findings_added AFTER INSERT ON findings BEGIN"
	" UPDATE processes SET findings = findings + 1"
	"  WHERE id = NEW.process_id; END;"
	"CREATE TRIGGER findings_removed AFTER DELETE ON findings BEGIN"
	" UPDATE processes SET findings = findings - 1"
	"  WHERE id = OLD.process_id; END;",
	/* 2: gaps in a process's analysis, and where in its ring the
	 * counters were taken, for a daemon that takes the ring over. */
	"ALTER TABLE processes ADD COLUMN gaps INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE processes ADD COLUMN ring_ops INTEGER NOT NULL"
	" DEFAULT 0;",
	/* 3: the run of the job (NPUSAN_RUN), telling apart runs that
	 * reuse a job's name. */
	"ALTER TABLE processes ADD COLUMN run TEXT;",
};

#define STORE_SCHEMA_VERSION \
	((int)(sizeof(store_migrations) / sizeof(store_migrations[0])))

/* DESIGN 7: a string ('S') or a stack ('K', frames joined by NULs). */
struct cache_slot {
	uint64_t hash;
	int64_t id;
	char *key;
	size_t len;
	char tag;
};

/* A write waiting for its round. */
enum item_type { ITEM_UPDATE, ITEM_FINDING, ITEM_REGISTER, ITEM_PRUNE };

struct item {
	struct item *next;
	enum item_type type;
	uint64_t seq;
	size_t bytes; /* counted in qbytes; 0 for synchronous items */
	/* Synchronous items live on their caller's stack: set `done` under
	 * the lock, and never touch them afterwards. */
	bool done;
	int rc;
	int64_t result;
	/* A finding's log line (DESIGN 9), written once its round commits. */
	char *logline;
	union {
		struct {
			int64_t id;
			struct store_counters c;
			int64_t last_ms;
			enum store_state st;
		} update;
		struct store_finding finding; /* strings follow the item */
		struct {
			const struct store_process *p;
			struct store_counters was;
		} reg;
		int64_t prune_before_ms;
	} u;
};

struct store {
	char *path;
	char *wal_path;
	unsigned retain_days;
	void (*commit_cb)(void *arg);
	void *commit_arg;

	sqlite3 *wdb; /* the writer thread's (1) */
	sqlite3_stmt *w_str_get, *w_str_put, *w_stack_get, *w_stack_put;
	sqlite3_stmt *w_register, *w_update, *w_finding, *w_repeat;
	sqlite3_stmt *w_proc; /* a process's identity, for finding log lines */
	char *wbuf; /* a stack's JSON */
	size_t wbuf_cap;
	char *kbuf; /* a stack's cache key */
	size_t kbuf_cap;
	struct cache_slot *cache;

	pthread_mutex_t rlock; /* the read connection */
	sqlite3 *rdb;
	sqlite3_stmt *r_stack;

	pthread_mutex_t lock; /* everything below */
	pthread_cond_t wake;  /* the writer waits: items, flush, stop */
	pthread_cond_t done;  /* flushers and synchronous callers wait */
	struct item *head, **tail;
	size_t nqueued;         /* items in the queue */
	size_t qbytes;          /* bytes queued or being committed */
	uint64_t seq;           /* the last item's number (3) */
	uint64_t taken_seq;     /* the last item a round took */
	uint64_t committed_seq; /* (3) */
	uint64_t rounds;        /* rounds started */
	uint64_t failed_round;  /* the latest round that failed */
	struct timespec due;    /* when the next round starts on its own */
	bool urgent, stop, running;
	bool full_logged; /* queue-full line logged, until there is room */
	unsigned test_max_pages;
	pthread_t writer;
};

/* One line per event, in the daemon's log; the level is checked before
 * anything is formatted. */
__attribute__((format(printf, 3, 4))) static void
store_log(const struct store *s, enum log_level level, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if ((int)level > atomic_load_explicit(&log__level, memory_order_relaxed))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	log_write(level, "store: %s: %s", s->path, line);
}

static void timespec_after_ms(struct timespec *ts, unsigned ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += ms / 1000;
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static bool timespec_passed(const struct timespec *ts)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > ts->tv_sec ||
	       (now.tv_sec == ts->tv_sec && now.tv_nsec >= ts->tv_nsec);
}

/* Steps a statement that returns no row and resets it: an SQLite code. */
static int step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static void bind_u64(sqlite3_stmt *st, int i, uint64_t v)
{
	sqlite3_bind_int64(st, i, (sqlite3_int64)v);
}

static void bind_opt_id(sqlite3_stmt *st, int i, int64_t id)
{
	if (id != 0)
		sqlite3_bind_int64(st, i, id);
	else
		sqlite3_bind_null(st, i);
}

static void bind_text(sqlite3_stmt *st, int i, const char *text)
{
	if (text != NULL)
		sqlite3_bind_text(st, i, text, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, i);
}

/* ---- opening ---- */

__attribute__((format(printf, 2, 3))) static void
set_errmsg(char **errmsg, const char *fmt, ...)
{
	va_list ap;

	if (errmsg == NULL || *errmsg != NULL)
		return;
	va_start(ap, fmt);
	if (vasprintf(errmsg, fmt, ap) < 0)
		*errmsg = NULL;
	va_end(ap);
}

static int db_fail(struct store *s, sqlite3 *db, const char *what,
		   char **errmsg)
{
	set_errmsg(errmsg, "%s: %s: %s", s->path, what,
		   db ? sqlite3_errmsg(db) : "out of memory");
	return -EIO;
}

static int db_exec(struct store *s, sqlite3 *db, const char *sql,
		   const char *what, char **errmsg)
{
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return db_fail(s, db, what, errmsg);
	return 0;
}

/*
 * Durability: WAL with synchronous=NORMAL. A commit is in the WAL file,
 * that is in the kernel, when COMMIT returns, so a daemon killed with
 * SIGKILL (or crashing) loses nothing it committed; WAL is fsynced only at
 * checkpoints, so a power loss or kernel crash may lose the last
 * transactions (never corrupt the database). FULL would add an fsync per
 * commit, twenty a second, for findings that a rerun finds again.
 */
static int db_open(struct store *s, bool reader, sqlite3 **out,
		   char **errmsg)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX;
	int rc;

	if (!reader)
		flags |= SQLITE_OPEN_CREATE;
	rc = sqlite3_open_v2(s->path, &db, flags, NULL);
	if (rc != SQLITE_OK) {
		rc = db == NULL ? -ENOMEM : db_fail(s, db, "open", errmsg);
		goto err;
	}
	sqlite3_extended_result_codes(db, 0);
	sqlite3_busy_timeout(db, STORE_BUSY_TIMEOUT_MS);
	if (!reader) {
		/* Also the first read of the file: a file that is not a
		 * database fails here. */
		if (sqlite3_prepare_v2(db, "PRAGMA journal_mode = WAL", -1, &st,
				       NULL) != SQLITE_OK ||
		    sqlite3_step(st) != SQLITE_ROW) {
			rc = db_fail(s, db, "set WAL mode", errmsg);
			goto err;
		}
		if (strcmp((const char *)sqlite3_column_text(st, 0), "wal") !=
		    0) {
			set_errmsg(errmsg, "%s: cannot use WAL mode (%s)",
				   s->path, sqlite3_column_text(st, 0));
			rc = -EIO;
			goto err;
		}
		sqlite3_finalize(st);
		st = NULL;
	}
	rc = db_exec(s, db,
		     reader ? "PRAGMA synchronous = NORMAL;"
			      "PRAGMA query_only = ON;"
			    : "PRAGMA synchronous = NORMAL;"
			      "PRAGMA foreign_keys = ON;",
		     "configure", errmsg);
	if (rc < 0)
		goto err;
	*out = db;
	return 0;
err:
	sqlite3_finalize(st);
	sqlite3_close(db);
	return rc;
}

static int user_version(sqlite3 *db, int *out)
{
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int(st, 0);
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc;
}

/*
 * Brings the schema to STORE_SCHEMA_VERSION, one migration per
 * transaction. The version is read inside the transaction, so two daemons
 * opening one file at once cannot both run a migration.
 */
static int migrate(struct store *s, char **errmsg)
{
	for (;;) {
		char sql[64];
		int v = 0;

		if (db_exec(s, s->wdb, "BEGIN IMMEDIATE", "migrate",
			    errmsg) < 0)
			return -EIO;
		if (user_version(s->wdb, &v) != SQLITE_OK)
			goto fail;
		if (v == STORE_SCHEMA_VERSION)
			break;
		if (v > STORE_SCHEMA_VERSION || v < 0) {
			sqlite3_exec(s->wdb, "ROLLBACK", NULL, NULL, NULL);
			set_errmsg(errmsg,
				   "%s: schema version %d is %s than this "
				   "npusand knows (%d): the database was "
				   "written by a newer npusan, or not by "
				   "npusan at all",
				   s->path, v, v > 0 ? "newer" : "other",
				   STORE_SCHEMA_VERSION);
			return -EIO;
		}
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", v + 1);
		if (sqlite3_exec(s->wdb, store_migrations[v], NULL, NULL,
				 NULL) != SQLITE_OK ||
		    sqlite3_exec(s->wdb, sql, NULL, NULL, NULL) != SQLITE_OK ||
		    sqlite3_exec(s->wdb, "COMMIT", NULL, NULL, NULL) !=
			    SQLITE_OK)
			goto fail;
	}
	return db_exec(s, s->wdb, "COMMIT", "migrate", errmsg);
fail:
	db_fail(s, s->wdb, "migrate", errmsg);
	sqlite3_exec(s->wdb, "ROLLBACK", NULL, NULL, NULL);
	return -EIO;
}

static int prepare(struct store *s, sqlite3 *db, const char *sql,
		   sqlite3_stmt **st, char **errmsg)
{
	if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, st,
			       NULL) != SQLITE_OK)
		return db_fail(s, db, "prepare", errmsg);
	return 0;
}

static int prepare_all(struct store *s, char **errmsg)
{
	const struct {
		sqlite3 **db;
		sqlite3_stmt **st;
		const char *sql;
	} stmts[] = {
		{ &s->wdb, &s->w_str_get, "SELECT id FROM strings WHERE text = ?" },
		{ &s->wdb, &s->w_str_put, "INSERT INTO strings (text) VALUES (?)" },
		{ &s->wdb, &s->w_stack_get,
		  "SELECT id FROM stacks WHERE frames = ?" },
		{ &s->wdb, &s->w_stack_put,
		  "INSERT INTO stacks (frames) VALUES (?)" },
		{ &s->wdb, &s->w_register,
		  "INSERT INTO processes (host, pid, start_time, uid, exe, job,"
		  " rank, local_rank, world_size, state, first_ms, last_ms, run)"
		  " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
		  " ON CONFLICT (host, pid, start_time) DO UPDATE SET"
		  " exe = excluded.exe, job = excluded.job,"
		  " run = excluded.run,"
		  " rank = excluded.rank, local_rank = excluded.local_rank,"
		  " world_size = excluded.world_size, state = excluded.state,"
		  " last_ms = max(last_ms, excluded.last_ms)"
		  " WHERE uid = excluded.uid" /* never changes owner */
		  " RETURNING id, events, lost, gaps, ring_ops" },
		{ &s->wdb, &s->w_update,
		  "UPDATE processes SET events = ?2, lost = ?3, gaps = ?4,"
		  " ring_ops = ?5, last_ms = max(last_ms, ?6), state = ?7"
		  " WHERE id = ?1" },
		{ &s->wdb, &s->w_finding,
		  "INSERT INTO findings (process_id, dedup_key, kind,"
		  " detected_at, ptr, alloc_ptr, alloc_size, alloc_stream,"
		  " alloc_stack, acc_stream, acc_seq, acc_write, acc_op,"
		  " acc_stack, prev_stream, prev_seq, prev_write, prev_op,"
		  " prev_stack, count, first_ms, last_ms)"
		  " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
		  " ?, ?, ?, ?, ?)"
		  " ON CONFLICT (process_id, dedup_key) DO UPDATE SET"
		  " count = count + excluded.count,"
		  " first_ms = min(first_ms, excluded.first_ms),"
		  " last_ms = max(last_ms, excluded.last_ms)" },
		{ &s->wdb, &s->w_repeat,
		  "UPDATE findings SET count = count + ?3,"
		  " first_ms = min(first_ms, ?4), last_ms = max(last_ms, ?5)"
		  " WHERE process_id = ?1 AND dedup_key = ?2" },
		{ &s->wdb, &s->w_proc,
		  "SELECT pid, job, rank FROM processes WHERE id = ?" },
		{ &s->rdb, &s->r_stack,
		  "SELECT s.text FROM stacks k, json_each(k.frames) j"
		  " JOIN strings s ON s.id = j.value"
		  " WHERE k.id = ? ORDER BY j.key" },
	};

	for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++) {
		if (prepare(s, *stmts[i].db, stmts[i].sql, stmts[i].st,
			    errmsg) < 0)
			return -EIO;
	}
	return 0;
}

static void *writer_main(void *arg);

static void store_free(struct store *s)
{
	sqlite3_stmt *stmts[] = { s->w_str_get,  s->w_str_put, s->w_stack_get,
				  s->w_stack_put, s->w_register, s->w_update,
				  s->w_finding,  s->w_repeat,  s->r_stack,
				  s->w_proc };

	for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++)
		sqlite3_finalize(stmts[i]);
	sqlite3_close(s->rdb);
	sqlite3_close(s->wdb);
	pthread_cond_destroy(&s->done);
	pthread_cond_destroy(&s->wake);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->rlock);
	if (s->cache != NULL) {
		for (size_t i = 0; i < STORE_CACHE_SLOTS; i++)
			free(s->cache[i].key);
		free(s->cache);
	}
	free(s->kbuf);
	free(s->wbuf);
	free(s->wal_path);
	free(s->path);
	free(s);
}

static int store_sync_init(struct store *s)
{
	pthread_condattr_t ca;
	int rc;

	if (pthread_condattr_init(&ca) != 0)
		return -ENOMEM;
	rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (rc == 0)
		rc = pthread_cond_init(&s->wake, &ca);
	if (rc == 0 && (rc = pthread_cond_init(&s->done, NULL)) != 0)
		pthread_cond_destroy(&s->wake);
	pthread_condattr_destroy(&ca);
	if (rc != 0)
		return -ENOMEM;
	if (pthread_mutex_init(&s->lock, NULL) != 0)
		goto err_cond;
	if (pthread_mutex_init(&s->rlock, NULL) != 0)
		goto err_lock;
	return 0;
err_lock:
	pthread_mutex_destroy(&s->lock);
err_cond:
	pthread_cond_destroy(&s->done);
	pthread_cond_destroy(&s->wake);
	return -ENOMEM;
}

int store_open(const struct store_opts *o, struct store **out, char **errmsg)
{
	struct store *s;
	sigset_t all, old;
	int rc;

	if (errmsg != NULL)
		*errmsg = NULL;
	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return -ENOMEM;
	if (store_sync_init(s) < 0) {
		free(s);
		return -ENOMEM;
	}
	s->retain_days = o->retain_days;
	s->commit_cb = o->commit_cb;
	s->commit_arg = o->commit_arg;
	s->tail = &s->head;
	s->path = strdup(o->path);
	s->cache = calloc(STORE_CACHE_SLOTS, sizeof(*s->cache));
	if (s->path == NULL || s->cache == NULL ||
	    asprintf(&s->wal_path, "%s-wal", o->path) < 0) {
		s->wal_path = NULL;
		rc = -ENOMEM;
		goto err;
	}
	rc = db_open(s, false, &s->wdb, errmsg);
	if (rc < 0)
		goto err;
	rc = migrate(s, errmsg);
	if (rc < 0)
		goto err;
	/*
	 * No process is watched yet. Those a previous daemon left running
	 * are exited as far as anyone can tell; one still alive registers
	 * again with this daemon, which sets it running.
	 */
	rc = db_exec(s, s->wdb,
		     "UPDATE processes SET state = 'exited'"
		     " WHERE state IN ('running', 'dormant')",
		     "mark processes exited", errmsg);
	if (rc < 0)
		goto err;
	rc = db_open(s, true, &s->rdb, errmsg);
	if (rc < 0)
		goto err;
	rc = prepare_all(s, errmsg);
	if (rc < 0)
		goto err;

	/* Signals stay with the daemon's loop thread. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&s->writer, NULL, writer_main, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		rc = -ENOMEM;
		goto err;
	}
	s->running = true;
	*out = s;
	return 0;
err:
	if (rc == -ENOMEM && errmsg != NULL) {
		free(*errmsg);
		*errmsg = NULL;
	}
	store_free(s);
	return rc;
}

/* ---- the queue ---- */

static void item_free(struct item *it)
{
	if (it->bytes != 0) {
		free(it->logline);
		free(it);
	}
}

/* Appends `it` and wakes the writer when it has a reason to run. Holds
 * the lock. */
static void enqueue_locked(struct store *s, struct item *it, bool urgent)
{
	it->next = NULL;
	it->seq = ++s->seq;
	*s->tail = it;
	s->tail = &it->next;
	s->qbytes += it->bytes;
	if (s->nqueued++ == 0)
		timespec_after_ms(&s->due, STORE_BATCH_MS);
	if (urgent)
		s->urgent = true;
	if (s->nqueued == 1 || s->nqueued == STORE_BATCH_MAX || urgent)
		pthread_cond_signal(&s->wake);
}

static int enqueue(struct store *s, struct item *it)
{
	pthread_mutex_lock(&s->lock);
	if (s->qbytes + it->bytes > STORE_QUEUE_MAX_BYTES) {
		if (!s->full_logged)
			store_log(s, LOG_ERROR, "%zu bytes of writes wait for the "
				     "database; refusing more until they are "
				     "stored", s->qbytes);
		s->full_logged = true;
		pthread_mutex_unlock(&s->lock);
		free(it);
		return -ENOMEM;
	}
	s->full_logged = false;
	enqueue_locked(s, it, false);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* Queues a synchronous item and waits for its round: its rc. */
static int enqueue_sync(struct store *s, struct item *it)
{
	it->bytes = 0;
	it->done = false;
	it->rc = -EIO;
	pthread_mutex_lock(&s->lock);
	enqueue_locked(s, it, true);
	while (!it->done)
		pthread_cond_wait(&s->done, &s->lock);
	pthread_mutex_unlock(&s->lock);
	return it->rc;
}

int store_process_update(struct store *s, int64_t id,
			 const struct store_counters *c, int64_t last_ms,
			 enum store_state st)
{
	struct item *it;

	if (store_state_name(st) == NULL)
		return -EINVAL;
	it = calloc(1, sizeof(*it));
	if (it == NULL)
		return -ENOMEM;
	it->type = ITEM_UPDATE;
	it->bytes = sizeof(*it);
	it->u.update.id = id;
	it->u.update.c = *c;
	it->u.update.last_ms = last_ms;
	it->u.update.st = st;
	return enqueue(s, it);
}

static size_t stack_bytes(const char *const *frames, size_t n)
{
	size_t len = n * sizeof(char *);

	for (size_t i = 0; i < n; i++)
		len += strlen(frames[i] ? frames[i] : "") + 1;
	return len;
}

/* Copies a string into the item's tail at *cur. */
static const char *copy_str(char **cur, const char *src)
{
	char *dst = *cur;
	size_t len;

	if (src == NULL)
		return NULL;
	len = strlen(src) + 1;
	memcpy(dst, src, len);
	*cur += len;
	return dst;
}

/* Copies a stack: its pointer array at *parr, its texts at *cur. */
static const char *const *copy_stack(char ***parr, char **cur,
				     const char *const *frames, size_t n)
{
	char **arr = *parr;

	for (size_t i = 0; i < n; i++)
		arr[i] = (char *)copy_str(cur, frames[i] ? frames[i] : "");
	*parr += n;
	return (const char *const *)arr;
}

int store_finding_submit(struct store *s, const struct store_finding *f)
{
	struct store_finding *c;
	struct item *it;
	size_t anstack = f->has_alloc ? f->alloc_nstack : 0;
	size_t pnstack = f->has_previous ? f->previous.nstack : 0;
	size_t len = sizeof(*it);
	char **arr, *cur;

	if (finding_kind_name(f->kind) == NULL ||
	    detected_at_name(f->detected_at) == NULL)
		return -EINVAL;
	len += stack_bytes(f->alloc_stack, anstack);
	len += stack_bytes(f->access.stack, f->access.nstack);
	len += stack_bytes(f->previous.stack, pnstack);
	if (f->access.op != NULL)
		len += strlen(f->access.op) + 1;
	if (f->has_previous && f->previous.op != NULL)
		len += strlen(f->previous.op) + 1;
	it = malloc(len);
	if (it == NULL)
		return -ENOMEM;
	memset(it, 0, sizeof(*it));
	it->type = ITEM_FINDING;
	it->bytes = len;
	c = &it->u.finding;
	*c = *f;
	/* Pointer arrays first (aligned after the item), then texts. */
	arr = (char **)(it + 1);
	cur = (char *)(arr + anstack + f->access.nstack + pnstack);
	c->alloc_nstack = anstack;
	c->alloc_stack = copy_stack(&arr, &cur, f->alloc_stack, anstack);
	c->access.op = copy_str(&cur, f->access.op);
	c->access.stack = copy_stack(&arr, &cur, f->access.stack,
				     f->access.nstack);
	if (f->has_previous) {
		c->previous.op = copy_str(&cur, f->previous.op);
		c->previous.stack = copy_stack(&arr, &cur, f->previous.stack,
					       pnstack);
	} else {
		memset(&c->previous, 0, sizeof(c->previous));
	}
	return enqueue(s, it);
}

int store_process_register(struct store *s, const struct store_process *p,
			   int64_t *id, struct store_counters *was)
{
	struct item it = { .type = ITEM_REGISTER, .u.reg.p = p };
	int rc;

	if (p->state != STORE_RUNNING && p->state != STORE_DORMANT)
		return -EINVAL;
	rc = enqueue_sync(s, &it);
	/* No row back: the process is stored under another uid. */
	if (rc == 0 && it.result == 0)
		return -EPERM;
	if (rc == 0) {
		*id = it.result;
		if (was != NULL)
			*was = it.u.reg.was;
	}
	return rc;
}

int store_prune(struct store *s, int64_t now_ms)
{
	struct item it = { .type = ITEM_PRUNE };
	int rc;

	if (s->retain_days == 0)
		return 0;
	it.u.prune_before_ms =
		now_ms - (int64_t)s->retain_days * STORE_MS_PER_DAY;
	rc = enqueue_sync(s, &it);
	return rc < 0 ? rc : (int)it.result;
}

int store_flush(struct store *s)
{
	uint64_t target, start;
	int rc;

	pthread_mutex_lock(&s->lock);
	target = s->seq;
	start = s->rounds;
	if (s->committed_seq < target) {
		s->urgent = true;
		pthread_cond_signal(&s->wake);
	}
	/* Done when everything up to target is stored, failed when a round
	 * that started after this call (so held all of it) failed. */
	while (s->committed_seq < target && s->failed_round <= start)
		pthread_cond_wait(&s->done, &s->lock);
	rc = s->committed_seq >= target ? 0 : -EIO;
	pthread_mutex_unlock(&s->lock);
	return rc;
}

/* ---- the writer ---- */

/* Errors SQLite raises for one item itself, whatever the state of the
 * disk: retrying the item cannot help (DESIGN 2). */
static bool item_error(int rc)
{
	return rc == SQLITE_CONSTRAINT || rc == SQLITE_MISMATCH ||
	       rc == SQLITE_TOOBIG || rc == SQLITE_RANGE;
}

/* The id of the row whose unique text `get` looks up, added by `put`
 * when missing (strings and stacks); 0 for NULL. */
static int w_intern(struct store *s, sqlite3_stmt *get, sqlite3_stmt *put,
		    const char *text, int64_t *id)
{
	int rc;

	if (text == NULL) {
		*id = 0;
		return SQLITE_OK;
	}
	sqlite3_bind_text(get, 1, text, -1, SQLITE_STATIC);
	rc = sqlite3_step(get);
	if (rc == SQLITE_ROW)
		*id = sqlite3_column_int64(get, 0);
	sqlite3_reset(get);
	if (rc == SQLITE_ROW)
		return SQLITE_OK;
	if (rc != SQLITE_DONE)
		return rc;
	sqlite3_bind_text(put, 1, text, -1, SQLITE_STATIC);
	rc = step_done(put);
	if (rc == SQLITE_OK)
		*id = sqlite3_last_insert_rowid(s->wdb);
	return rc;
}

static void cache_clear(struct store *s)
{
	for (size_t i = 0; i < STORE_CACHE_SLOTS; i++) {
		free(s->cache[i].key);
		s->cache[i].key = NULL;
	}
}

static struct cache_slot *cache_slot(struct store *s, char tag,
				     const char *key, size_t len,
				     uint64_t *hash)
{
	*hash = hash_bytes(key, len) ^ (uint64_t)(unsigned char)tag;
	return &s->cache[*hash & (STORE_CACHE_SLOTS - 1)];
}

static bool cache_hit(const struct cache_slot *c, char tag, uint64_t hash,
		      const char *key, size_t len)
{
	return c->key != NULL && c->hash == hash && c->tag == tag &&
	       c->len == len && memcmp(c->key, key, len) == 0;
}

/* Remembers an id; without memory, simply does not. */
static void cache_put(struct cache_slot *c, char tag, uint64_t hash,
		      const char *key, size_t len, int64_t id)
{
	free(c->key);
	c->key = malloc(len ? len : 1);
	if (c->key == NULL)
		return;
	memcpy(c->key, key, len);
	c->len = len;
	c->hash = hash;
	c->tag = tag;
	c->id = id;
}

/* The id of string `text`, added when missing; 0 for NULL. */
static int w_string(struct store *s, const char *text, int64_t *id)
{
	struct cache_slot *c;
	size_t len;
	uint64_t h;
	int rc;

	if (text == NULL) {
		*id = 0;
		return SQLITE_OK;
	}
	len = strlen(text);
	c = cache_slot(s, 'S', text, len, &h);
	if (cache_hit(c, 'S', h, text, len)) {
		*id = c->id;
		return SQLITE_OK;
	}
	rc = w_intern(s, s->w_str_get, s->w_str_put, text, id);
	if (rc == SQLITE_OK)
		cache_put(c, 'S', h, text, len, *id);
	return rc;
}

/* Grows a writer buffer to hold `need` bytes. */
static int buf_reserve(char **buf, size_t *cap, size_t need)
{
	char *b;
	size_t n;

	if (need <= *cap)
		return SQLITE_OK;
	n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	b = realloc(*buf, n);
	if (b == NULL)
		return SQLITE_NOMEM;
	*buf = b;
	*cap = n;
	return SQLITE_OK;
}

/* The id of a stack, added when missing; 0 for an empty one. */
static int w_stack(struct store *s, const char *const *frames, size_t n,
		   int64_t *id)
{
	struct cache_slot *c;
	size_t len = 0, klen = 0;
	uint64_t h;
	int rc;

	if (n == 0) {
		*id = 0;
		return SQLITE_OK;
	}
	for (size_t i = 0; i < n; i++) {
		size_t flen = strlen(frames[i]) + 1;

		if (buf_reserve(&s->kbuf, &s->kbuf_cap, klen + flen) !=
		    SQLITE_OK)
			return SQLITE_NOMEM;
		memcpy(s->kbuf + klen, frames[i], flen);
		klen += flen;
	}
	c = cache_slot(s, 'K', s->kbuf, klen, &h);
	if (cache_hit(c, 'K', h, s->kbuf, klen)) {
		*id = c->id;
		return SQLITE_OK;
	}
	for (size_t i = 0; i < n; i++) {
		int64_t fid;

		rc = w_string(s, frames[i], &fid);
		if (rc != SQLITE_OK)
			return rc;
		/* ",%lld" at most 21 bytes, then "]" and a NUL. */
		if (buf_reserve(&s->wbuf, &s->wbuf_cap, len + 24) !=
		    SQLITE_OK)
			return SQLITE_NOMEM;
		len += (size_t)snprintf(s->wbuf + len, s->wbuf_cap - len,
					"%c%" PRId64, i == 0 ? '[' : ',', fid);
	}
	memcpy(s->wbuf + len, "]", 2);
	rc = w_intern(s, s->w_stack_get, s->w_stack_put, s->wbuf, id);
	if (rc == SQLITE_OK)
		cache_put(c, 'K', h, s->kbuf, klen, *id);
	return rc;
}

/* Appends ` key=value` to `b`: the value bare when it is a non-empty run
 * of printable ASCII without space, '"', '=' or '\\', else in double
 * quotes with \\, \", \n, \r, \t and \xNN escapes (bytes from 0x80 as
 * they are), cut after 200 bytes of output with "..." so that a line of
 * three such values stays whole within log_write()'s 1 KiB line. */
static void logfmt_str(FILE *b, const char *key, const char *v)
{
	size_t n = strlen(v), out = 0, i;
	bool bare = n > 0 && n <= 200;

	for (i = 0; i < n && bare; i++) {
		unsigned char c = (unsigned char)v[i];

		bare = c > ' ' && c < 0x7f && c != '"' && c != '=' && c != '\\';
	}
	fprintf(b, " %s=", key);
	if (bare) {
		fputs(v, b);
		return;
	}
	fputc('"', b);
	for (i = 0; i < n && out < 200; i++) {
		unsigned char c = (unsigned char)v[i];

		if (c == '"' || c == '\\')
			out += (size_t)fprintf(b, "\\%c", c);
		else if (c == '\n')
			out += (size_t)fprintf(b, "\\n");
		else if (c == '\r')
			out += (size_t)fprintf(b, "\\r");
		else if (c == '\t')
			out += (size_t)fprintf(b, "\\t");
		else if (c < ' ' || c == 0x7f)
			out += (size_t)fprintf(b, "\\x%02x", c);
		else
			out += fputc(c, b) != EOF;
	}
	fputs(i < n ? "...\"" : "\"", b);
}

/* DESIGN 9: the log line of new finding `id`, into *out (caller frees);
 * *out stays NULL when info lines are off or memory is short. */
static void w_finding_line(struct store *s, const struct store_finding *f,
			   int64_t id, char **out)
{
	sqlite3_stmt *st = s->w_proc;
	char *line = NULL;
	size_t len = 0;
	FILE *b;

	if ((int)LOG_INFO >
	    atomic_load_explicit(&log__level, memory_order_relaxed))
		return;
	b = open_memstream(&line, &len);
	if (b == NULL)
		return;
	fprintf(b, "finding id=%" PRId64 " kind=%s", id,
		finding_kind_name(f->kind));
	sqlite3_bind_int64(st, 1, f->process_id);
	if (sqlite3_step(st) == SQLITE_ROW) {
		if (sqlite3_column_type(st, 1) != SQLITE_NULL)
			logfmt_str(b, "job",
				   (const char *)sqlite3_column_text(st, 1));
		if (sqlite3_column_type(st, 2) != SQLITE_NULL)
			fprintf(b, " rank=%" PRId64,
				(int64_t)sqlite3_column_int64(st, 2));
		fprintf(b, " pid=%" PRId64,
			(int64_t)sqlite3_column_int64(st, 0));
	}
	sqlite3_reset(st);
	if (f->access.op != NULL)
		logfmt_str(b, "op", f->access.op);
	if (f->has_previous && f->previous.op != NULL)
		logfmt_str(b, "previous_op", f->previous.op);
	fprintf(b, " stream=%" PRIu64, f->access.stream);
	if (f->has_previous)
		fprintf(b, " previous_stream=%" PRIu64, f->previous.stream);
	else if (f->has_alloc && f->alloc_has_stream)
		fprintf(b, " alloc_stream=%" PRIu64, f->alloc_stream);
	fprintf(b, " ptr=0x%" PRIx64 " detected_at=%s", f->ptr,
		detected_at_name(f->detected_at));
	if (fclose(b) != 0) {
		free(line);
		return;
	}
	*out = line;
}

/* The engine's deduplication key of `f` as text, its strings and stacks
 * named by this database's ids (DESIGN 4). */
static void store__finding_key(const struct store_finding *f, int64_t aop,
			       int64_t ast, int64_t pop, int64_t pst,
			       int64_t alst, char key[FINDING_KEY_TEXT_MAX])
{
	const struct finding shape = {
		.kind = f->kind,
		.has_alloc = f->has_alloc,
		.has_previous = f->has_previous,
		.alloc = { .has_stream = f->alloc_has_stream,
			   .stream = f->alloc_stream },
		.access = { .stream = f->access.stream,
			    .write = f->access.write },
		.previous = { .stream = f->previous.stream,
			      .write = f->previous.write },
	};
	const struct finding_text text = {
		(uint64_t)aop, (uint64_t)ast, (uint64_t)pop, (uint64_t)pst,
		(uint64_t)alst,
	};
	struct finding_key k;

	finding_key(&shape, &text, &k);
	finding_key_text(&k, key);
}

/* Stores finding `f`; a new row's log line into *line (DESIGN 9). */
static int w_finding(struct store *s, const struct store_finding *f,
		     char **line)
{
	sqlite3_stmt *st = s->w_finding;
	int64_t aop, ast, pop = 0, pst = 0, alst = 0;
	char key[FINDING_KEY_TEXT_MAX];
	int rc;

	if ((rc = w_string(s, f->access.op, &aop)) != SQLITE_OK ||
	    (rc = w_stack(s, f->access.stack, f->access.nstack, &ast)) !=
		    SQLITE_OK)
		return rc;
	if (f->has_previous &&
	    ((rc = w_string(s, f->previous.op, &pop)) != SQLITE_OK ||
	     (rc = w_stack(s, f->previous.stack, f->previous.nstack, &pst)) !=
		     SQLITE_OK))
		return rc;
	if (f->has_alloc &&
	    (rc = w_stack(s, f->alloc_stack, f->alloc_nstack, &alst)) !=
		    SQLITE_OK)
		return rc;

	store__finding_key(f, aop, ast, pop, pst, alst, key);

	/*
	 * A repeat first: the upsert below merges it as well, but a failed
	 * INSERT still takes an AUTOINCREMENT id, which would leave a gap
	 * in the finding ids for every repeat.
	 */
	sqlite3_bind_int64(s->w_repeat, 1, f->process_id);
	sqlite3_bind_text(s->w_repeat, 2, key, -1, SQLITE_STATIC);
	bind_u64(s->w_repeat, 3, f->count);
	sqlite3_bind_int64(s->w_repeat, 4, f->first_ms);
	sqlite3_bind_int64(s->w_repeat, 5, f->last_ms);
	rc = step_done(s->w_repeat);
	if (rc != SQLITE_OK || sqlite3_changes(s->wdb) > 0)
		return rc;

	sqlite3_bind_int64(st, 1, f->process_id);
	sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, finding_kind_name(f->kind), -1,
			  SQLITE_STATIC);
	sqlite3_bind_text(st, 4, detected_at_name(f->detected_at), -1,
			  SQLITE_STATIC);
	bind_u64(st, 5, f->ptr);
	if (f->has_alloc) {
		bind_u64(st, 6, f->alloc_ptr);
		bind_u64(st, 7, f->alloc_size);
		if (f->alloc_has_stream)
			bind_u64(st, 8, f->alloc_stream);
		else
			sqlite3_bind_null(st, 8);
		bind_opt_id(st, 9, alst);
	} else {
		for (int i = 6; i <= 9; i++)
			sqlite3_bind_null(st, i);
	}
	bind_u64(st, 10, f->access.stream);
	bind_u64(st, 11, f->access.seq);
	sqlite3_bind_int(st, 12, f->access.write);
	bind_opt_id(st, 13, aop);
	bind_opt_id(st, 14, ast);
	if (f->has_previous) {
		bind_u64(st, 15, f->previous.stream);
		bind_u64(st, 16, f->previous.seq);
		sqlite3_bind_int(st, 17, f->previous.write);
		bind_opt_id(st, 18, pop);
		bind_opt_id(st, 19, pst);
	} else {
		for (int i = 15; i <= 19; i++)
			sqlite3_bind_null(st, i);
	}
	bind_u64(st, 20, f->count);
	sqlite3_bind_int64(st, 21, f->first_ms);
	sqlite3_bind_int64(st, 22, f->last_ms);
	rc = step_done(st);
	/* No repeat above, so this inserted a row (its trigger's UPDATE
	 * leaves last_insert_rowid alone). */
	if (rc == SQLITE_OK && sqlite3_changes(s->wdb) > 0)
		w_finding_line(s, f, sqlite3_last_insert_rowid(s->wdb), line);
	return rc;
}

static uint64_t col_u64(sqlite3_stmt *st, int c);

static int w_register(struct store *s, const struct store_process *p,
		      int64_t *id, struct store_counters *was)
{
	sqlite3_stmt *st = s->w_register;
	int rc;

	bind_text(st, 1, p->host ? p->host : "");
	sqlite3_bind_int64(st, 2, p->pid);
	bind_u64(st, 3, p->start_time);
	sqlite3_bind_int64(st, 4, p->uid);
	bind_text(st, 5, p->exe);
	bind_text(st, 6, p->job);
	if (p->has_rank)
		sqlite3_bind_int64(st, 7, p->rank);
	else
		sqlite3_bind_null(st, 7);
	if (p->has_local_rank)
		sqlite3_bind_int64(st, 8, p->local_rank);
	else
		sqlite3_bind_null(st, 8);
	if (p->has_world_size)
		sqlite3_bind_int64(st, 9, p->world_size);
	else
		sqlite3_bind_null(st, 9);
	sqlite3_bind_text(st, 10, store_state_name(p->state), -1,
			  SQLITE_STATIC);
	sqlite3_bind_int64(st, 11, p->first_ms);
	sqlite3_bind_int64(st, 12, p->last_ms);
	bind_text(st, 13, p->run);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*id = sqlite3_column_int64(st, 0);
		was->events = col_u64(st, 1);
		was->lost = col_u64(st, 2);
		was->gaps = col_u64(st, 3);
		was->ring_ops = col_u64(st, 4);
		rc = sqlite3_step(st);
	}
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

static int w_update(struct store *s, const struct item *it)
{
	sqlite3_stmt *st = s->w_update;

	sqlite3_bind_int64(st, 1, it->u.update.id);
	bind_u64(st, 2, it->u.update.c.events);
	bind_u64(st, 3, it->u.update.c.lost);
	bind_u64(st, 4, it->u.update.c.gaps);
	bind_u64(st, 5, it->u.update.c.ring_ops);
	sqlite3_bind_int64(st, 6, it->u.update.last_ms);
	sqlite3_bind_text(st, 7, store_state_name(it->u.update.st), -1,
			  SQLITE_STATIC);
	return step_done(st);
}

/* Deletes what DESIGN 5's tables no longer need. The subqueries leave
 * NULLs out: `x NOT IN (..., NULL)` is never true. */
static int w_prune(struct store *s, int64_t before_ms, int64_t *deleted)
{
	sqlite3_stmt *st;
	int rc;

	rc = sqlite3_prepare_v2(s->wdb,
				"DELETE FROM processes WHERE state = 'exited'"
				" AND last_ms < ?",
				-1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_int64(st, 1, before_ms);
	rc = step_done(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_OK)
		return rc;
	*deleted = sqlite3_changes(s->wdb);
	if (*deleted == 0)
		return SQLITE_OK;
	cache_clear(s); /* DESIGN 7 */
	return sqlite3_exec(
		s->wdb,
		"DELETE FROM stacks WHERE id NOT IN ("
		" SELECT alloc_stack FROM findings WHERE alloc_stack NOT NULL"
		" UNION SELECT acc_stack FROM findings WHERE acc_stack NOT NULL"
		" UNION SELECT prev_stack FROM findings"
		"  WHERE prev_stack NOT NULL);"
		"DELETE FROM strings WHERE id NOT IN ("
		" SELECT acc_op FROM findings WHERE acc_op NOT NULL"
		" UNION SELECT prev_op FROM findings WHERE prev_op NOT NULL"
		" UNION SELECT j.value FROM stacks, json_each(stacks.frames) j);",
		NULL, NULL, NULL);
}

static int w_item(struct store *s, struct item *it, bool *wrote)
{
	int rc = SQLITE_OK;

	switch (it->type) {
	case ITEM_UPDATE:
		rc = w_update(s, it);
		break;
	case ITEM_FINDING:
		rc = w_finding(s, &it->u.finding, &it->logline);
		break;
	case ITEM_REGISTER:
		rc = w_register(s, it->u.reg.p, &it->result, &it->u.reg.was);
		break;
	case ITEM_PRUNE:
		rc = w_prune(s, it->u.prune_before_ms, &it->result);
		break;
	}
	if (rc == SQLITE_OK) {
		*wrote = *wrote || it->type != ITEM_PRUNE || it->result > 0;
		it->rc = 0;
	}
	return rc;
}

/*
 * Commits `batch` in one transaction: SQLITE_OK, or the code that failed
 * the whole round (nothing stored, DESIGN 2). Items SQLite rejects alone
 * are marked with it->rc = -EIO and skipped.
 */
static int w_commit(struct store *s, struct item *batch, bool *wrote)
{
	int rc;

	*wrote = false;
	rc = sqlite3_exec(s->wdb, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return rc;
	for (struct item *it = batch; it != NULL; it = it->next) {
		it->rc = -EIO;
		rc = w_item(s, it, wrote);
		if (rc == SQLITE_OK)
			continue;
		if (!item_error(rc))
			goto fail;
		store_log(s, LOG_WARN, "dropped a write the database rejects: %s",
			  sqlite3_errmsg(s->wdb));
	}
	rc = sqlite3_exec(s->wdb, "COMMIT", NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		return SQLITE_OK;
fail:
	store_log(s, LOG_DEBUG, "commit failed, %s: %s", sqlite3_errstr(rc),
		  sqlite3_errmsg(s->wdb));
	cache_clear(s); /* DESIGN 7 */
	/* SQLite may have rolled back itself (SQLITE_FULL can). */
	if (!sqlite3_get_autocommit(s->wdb))
		sqlite3_exec(s->wdb, "ROLLBACK", NULL, NULL, NULL);
	return rc == SQLITE_OK ? SQLITE_ERROR : rc;
}

static void w_set_max_pages(struct store *s, unsigned pages)
{
	char sql[64];

	snprintf(sql, sizeof(sql), "PRAGMA max_page_count = %u", pages);
	sqlite3_exec(s->wdb, sql, NULL, NULL, NULL);
}

/*
 * One round: takes the queue, commits it, settles its items. Called and
 * returns with the lock held. Returns whether the round succeeded.
 */
static bool w_round(struct store *s, unsigned *fails)
{
	struct item *batch = s->head, *keep = NULL, **ktail = &keep, *next;
	uint64_t round = ++s->rounds;
	unsigned pages = s->test_max_pages;
	size_t kept = 0, freed = 0;
	bool wrote;
	int rc;

	s->taken_seq = s->seq;
	s->head = NULL;
	s->tail = &s->head;
	s->nqueued = 0;
	s->urgent = false;
	s->test_max_pages = 0;
	pthread_mutex_unlock(&s->lock);

	if (pages != 0)
		w_set_max_pages(s, pages);
	rc = w_commit(s, batch, &wrote);

	/* Free what is settled outside the lock; synchronous items are
	 * settled under it, below. */
	for (struct item *it = batch, **prev = &batch; it != NULL; it = next) {
		next = it->next;
		if (it->bytes == 0) {
			prev = &it->next;
			continue;
		}
		*prev = next;
		if (it->logline != NULL && rc == SQLITE_OK && it->rc == 0)
			log_write(LOG_INFO, "%s", it->logline);
		free(it->logline); /* a retried round formats it again */
		it->logline = NULL;
		if (rc != SQLITE_OK) {
			*ktail = it;
			ktail = &it->next;
			kept++;
		} else {
			freed += it->bytes;
			free(it);
		}
	}
	*ktail = NULL;

	/*
	 * Before anyone waiting learns of the commit, so that a flush
	 * returns after the callback ran. Unlocked: the callback may queue
	 * writes (but must not wait for this thread: no store_flush(),
	 * register, prune or close).
	 */
	if (rc == SQLITE_OK && wrote && s->commit_cb != NULL)
		s->commit_cb(s->commit_arg);

	pthread_mutex_lock(&s->lock);
	for (struct item *it = batch; it != NULL; it = next) {
		next = it->next;
		if (rc != SQLITE_OK)
			it->rc = -EIO;
		it->done = true; /* its caller may now return: DESIGN 1 */
	}
	s->qbytes -= freed;
	if (rc == SQLITE_OK) {
		/* Every item taken so far is stored now, or was a
		 * synchronous one that failed with its round. */
		s->committed_seq = s->taken_seq;
		if (*fails > 0)
			store_log(s, LOG_WARN,
				  "commits work again after %u failed rounds",
				  *fails);
		*fails = 0;
	} else {
		/* Back in front, in order (DESIGN 2). */
		if (keep != NULL) {
			*ktail = s->head;
			if (s->head == NULL)
				s->tail = ktail;
			s->head = keep;
			s->nqueued += kept;
		}
		s->failed_round = round;
		if (*fails == 0)
			store_log(s, LOG_ERROR,
				  "commit failed (%s); keeping %zu writes "
				  "queued and retrying",
				  sqlite3_errstr(rc), kept);
		(*fails)++;
		timespec_after_ms(&s->due,
				  *fails >= 5 ? STORE_RETRY_MAX_MS
					      : STORE_BATCH_MS << (*fails - 1));
	}
	pthread_cond_broadcast(&s->done);
	return rc == SQLITE_OK;
}

static void *writer_main(void *arg)
{
	struct store *s = arg;
	unsigned fails = 0;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		while (!s->stop && !s->urgent && s->nqueued < STORE_BATCH_MAX &&
		       (s->head == NULL || !timespec_passed(&s->due))) {
			if (s->head == NULL)
				pthread_cond_wait(&s->wake, &s->lock);
			else
				pthread_cond_timedwait(&s->wake, &s->lock,
						       &s->due);
		}
		if (s->head == NULL) {
			s->urgent = false;
			if (s->stop)
				break;
			continue;
		}
		if (w_round(s, &fails) || !s->stop ||
		    fails < STORE_CLOSE_TRIES)
			continue;
		/* Closing, and the disk still refuses: say what is lost. */
		store_log(s, LOG_ERROR, "closing: %zu queued writes could not be stored "
			     "and are lost", s->nqueued);
		while (s->head != NULL) {
			struct item *it = s->head;

			s->head = it->next;
			s->qbytes -= it->bytes;
			item_free(it);
		}
		s->tail = &s->head;
		s->nqueued = 0;
		break;
	}
	pthread_mutex_unlock(&s->lock);
	return NULL;
}

void store_close(struct store *s)
{
	if (s == NULL)
		return;
	if (s->running) {
		pthread_mutex_lock(&s->lock);
		s->stop = true;
		pthread_cond_signal(&s->wake);
		pthread_mutex_unlock(&s->lock);
		pthread_join(s->writer, NULL);
	}
	store_free(s);
}

/* A test hook: the next round sets PRAGMA max_page_count on the writer's
 * connection (0 leaves it), so that tests can fill the "disk". */
int store__max_pages(struct store *s, unsigned pages);
int store__max_pages(struct store *s, unsigned pages)
{
	pthread_mutex_lock(&s->lock);
	s->test_max_pages = pages;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* ---- queries ---- */

/* A query's SQL and arguments, built from the filter's set fields. */
struct query {
	char sql[2048];
	size_t len;
	int nargs;
	struct {
		const char *text; /* NULL: an integer */
		int64_t i;
	} args[16];
};


static void q_add(struct query *q, const char *sql)
{
	size_t n = strlen(sql);

	/* Our own fixed fragments, a bounded number of them. */
	if (q->len + n >= sizeof(q->sql))
		abort();
	memcpy(q->sql + q->len, sql, n + 1);
	q->len += n;
}

static void q_int(struct query *q, const char *sql, int64_t v)
{
	if (q->nargs == (int)(sizeof(q->args) / sizeof(q->args[0])))
		abort();
	q_add(q, sql);
	q->args[q->nargs].text = NULL;
	q->args[q->nargs++].i = v;
}

static void q_text(struct query *q, const char *sql, const char *v)
{
	q_int(q, sql, 0);
	q->args[q->nargs - 1].text = v;
}

/* The filters on the process, `p` in the query. */
static void q_process_filter(struct query *q, const struct store_filter *f)
{
	if (f->job != NULL)
		q_text(q, " AND p.job = ?", f->job);
	if (f->has_pid)
		q_int(q, " AND p.pid = ?", f->pid);
	if (f->has_rank)
		q_int(q, " AND p.rank = ?", f->rank);
	if (f->has_uid)
		q_int(q, " AND p.uid = ?", f->uid);
}

/* Prepares `q` on the read connection. Holds rlock. 0; -EIO. */
static int q_prepare(struct store *s, const struct query *q,
		     sqlite3_stmt **out)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(s->rdb, q->sql, (int)q->len + 1, &st, NULL) !=
	    SQLITE_OK) {
		store_log(s, LOG_ERROR, "query: %s", sqlite3_errmsg(s->rdb));
		return -EIO;
	}
	for (int i = 0; i < q->nargs; i++) {
		if (q->args[i].text != NULL)
			sqlite3_bind_text(st, i + 1, q->args[i].text, -1,
					  SQLITE_STATIC);
		else
			sqlite3_bind_int64(st, i + 1, q->args[i].i);
	}
	*out = st;
	return 0;
}

/* One snapshot for a whole walk, stacks included. Holds rlock. */
static int r_begin(struct store *s)
{
	if (sqlite3_exec(s->rdb, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
		store_log(s, LOG_ERROR, "query: %s", sqlite3_errmsg(s->rdb));
		return -EIO;
	}
	return 0;
}

static void r_end(struct store *s)
{
	if (!sqlite3_get_autocommit(s->rdb))
		sqlite3_exec(s->rdb, "COMMIT", NULL, NULL, NULL);
}

static const char *col_text(sqlite3_stmt *st, int c)
{
	return (const char *)sqlite3_column_text(st, c);
}

static bool col_null(sqlite3_stmt *st, int c)
{
	return sqlite3_column_type(st, c) == SQLITE_NULL;
}

static uint64_t col_u64(sqlite3_stmt *st, int c)
{
	return (uint64_t)sqlite3_column_int64(st, c);
}

#define PROCESS_COLS                                                      \
	"p.id, p.host, p.pid, p.start_time, p.uid, p.exe, p.job, p.rank," \
	" p.local_rank, p.world_size, p.state, p.events, p.lost,"         \
	" p.findings, p.first_ms, p.last_ms, p.gaps, p.run"

/* The process of the row's columns from `c`: 0; -1 for a state this
 * daemon does not know. */
static int row_process(sqlite3_stmt *st, int c, struct store_process *p)
{
	const char *state = col_text(st, c + 10);
	int i;

	memset(p, 0, sizeof(*p));
	for (i = 0; i < STORE_STATE_COUNT; i++) {
		if (state != NULL && strcmp(state, store_state_names[i]) == 0)
			break;
	}
	if (i == STORE_STATE_COUNT)
		return -1;
	p->state = (enum store_state)i;
	p->id = sqlite3_column_int64(st, c);
	p->host = col_text(st, c + 1);
	if (p->host != NULL && p->host[0] == '\0')
		p->host = NULL;
	p->pid = (uint32_t)sqlite3_column_int64(st, c + 2);
	p->start_time = col_u64(st, c + 3);
	p->uid = (uint32_t)sqlite3_column_int64(st, c + 4);
	p->exe = col_text(st, c + 5);
	p->job = col_text(st, c + 6);
	p->has_rank = !col_null(st, c + 7);
	p->rank = (uint32_t)sqlite3_column_int64(st, c + 7);
	p->has_local_rank = !col_null(st, c + 8);
	p->local_rank = (uint32_t)sqlite3_column_int64(st, c + 8);
	p->has_world_size = !col_null(st, c + 9);
	p->world_size = (uint32_t)sqlite3_column_int64(st, c + 9);
	p->events = col_u64(st, c + 11);
	p->lost = col_u64(st, c + 12);
	p->findings = col_u64(st, c + 13);
	p->first_ms = sqlite3_column_int64(st, c + 14);
	p->last_ms = sqlite3_column_int64(st, c + 15);
	p->gaps = col_u64(st, c + 16);
	p->run = col_text(st, c + 17);
	return 0;
}

#define FINDING_COLS                                                        \
	"f.id, f.process_id, f.kind, f.detected_at, f.ptr, f.alloc_ptr,"    \
	" f.alloc_size, f.alloc_stream, f.alloc_stack, f.acc_stream,"       \
	" f.acc_seq, f.acc_write, ao.text, f.acc_stack, f.prev_stream,"     \
	" f.prev_seq, f.prev_write, po.text, f.prev_stack, f.count,"        \
	" f.first_ms, f.last_ms"
#define FINDING_NCOLS 22
#define FINDING_FROM                                              \
	" FROM findings f JOIN processes p ON p.id = f.process_id" \
	" LEFT JOIN strings ao ON ao.id = f.acc_op"                \
	" LEFT JOIN strings po ON po.id = f.prev_op WHERE 1"

/* The frame texts of one row's stacks, valid until the next row. */
struct frames {
	char *buf; /* NUL-terminated texts, one after another */
	size_t len, cap;
	size_t *off; /* each text's offset in buf */
	const char **ptr;
	size_t n, cap_n;
};

static const char *const no_frames[1] = { NULL };

static int frames_add(struct frames *fr, const char *text, size_t len)
{
	if (fr->n == fr->cap_n) {
		size_t cap = fr->cap_n ? fr->cap_n * 2 : 64;
		size_t *off = realloc(fr->off, cap * sizeof(*off));
		const char **ptr;

		if (off == NULL)
			return -ENOMEM;
		fr->off = off;
		ptr = realloc(fr->ptr, cap * sizeof(*ptr));
		if (ptr == NULL)
			return -ENOMEM;
		fr->ptr = ptr;
		fr->cap_n = cap;
	}
	if (fr->len + len + 1 > fr->cap) {
		size_t cap = (fr->len + len + 1) * 2;
		char *b = realloc(fr->buf, cap);

		if (b == NULL)
			return -ENOMEM;
		fr->buf = b;
		fr->cap = cap;
	}
	memcpy(fr->buf + fr->len, text, len);
	fr->buf[fr->len + len] = '\0';
	fr->off[fr->n++] = fr->len;
	fr->len += len + 1;
	return 0;
}

/* Loads the stack whose id is column `c` of `row` (NULL: empty); its
 * frames are fr->n - *first from *first on. 0; -ENOMEM; -EIO. */
static int frames_load(struct store *s, struct frames *fr, sqlite3_stmt *row,
		       int c, size_t *first)
{
	sqlite3_stmt *st = s->r_stack;
	int rc = 0, src;

	*first = fr->n;
	if (col_null(row, c))
		return 0;
	sqlite3_bind_int64(st, 1, sqlite3_column_int64(row, c));
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		const char *t = col_text(st, 0);

		rc = frames_add(fr, t ? t : "", (size_t)sqlite3_column_bytes(st, 0));
		if (rc < 0)
			break;
	}
	if (rc == 0 && src != SQLITE_DONE) {
		store_log(s, LOG_ERROR, "query: %s", sqlite3_errmsg(s->rdb));
		rc = -EIO;
	}
	sqlite3_reset(st);
	return rc;
}

static const char *const *frames_get(struct frames *fr, size_t first,
				     size_t end, size_t *n)
{
	*n = end - first;
	return *n ? fr->ptr + first : no_frames;
}

static void frames_free(struct frames *fr)
{
	free(fr->buf);
	free(fr->off);
	free(fr->ptr);
}

static bool name_of(const char *text, const char *(*name)(int), int count,
		    int *out)
{
	for (int i = 0; text != NULL && i < count; i++) {
		if (strcmp(text, name(i)) == 0) {
			*out = i;
			return true;
		}
	}
	return false;
}

static const char *kind_name_int(int i)
{
	return finding_kind_name((enum finding_kind)i);
}

static const char *detected_at_name_int(int i)
{
	return detected_at_name((enum detected_at)i);
}

/*
 * The finding of the row. 1; 0 for a row this daemon cannot express (a
 * kind added by a later npusan); -ENOMEM; -EIO.
 */
static int row_finding(struct store *s, sqlite3_stmt *st, struct frames *fr,
		       struct store_finding *f)
{
	size_t a0, c0, p0, end;
	int kind, at, rc;

	memset(f, 0, sizeof(*f));
	if (!name_of(col_text(st, 2), kind_name_int, FINDING_KIND_COUNT,
		     &kind) ||
	    !name_of(col_text(st, 3), detected_at_name_int, DETECTED_AT_COUNT,
		     &at))
		return 0;
	fr->n = fr->len = 0;
	if ((rc = frames_load(s, fr, st, 8, &a0)) < 0 ||
	    (rc = frames_load(s, fr, st, 13, &c0)) < 0 ||
	    (rc = frames_load(s, fr, st, 18, &p0)) < 0)
		return rc;
	end = fr->n;
	for (size_t i = 0; i < fr->n; i++)
		fr->ptr[i] = fr->buf + fr->off[i];

	f->id = sqlite3_column_int64(st, 0);
	f->process_id = sqlite3_column_int64(st, 1);
	f->kind = (enum finding_kind)kind;
	f->detected_at = (enum detected_at)at;
	f->ptr = col_u64(st, 4);
	f->has_alloc = !col_null(st, 5);
	if (f->has_alloc) {
		f->alloc_ptr = col_u64(st, 5);
		f->alloc_size = col_u64(st, 6);
		f->alloc_has_stream = !col_null(st, 7);
		f->alloc_stream = col_u64(st, 7);
	}
	f->alloc_stack = frames_get(fr, a0, c0, &f->alloc_nstack);
	f->access.stream = col_u64(st, 9);
	f->access.seq = col_u64(st, 10);
	f->access.write = sqlite3_column_int(st, 11) != 0;
	f->access.op = col_text(st, 12);
	f->access.stack = frames_get(fr, c0, p0, &f->access.nstack);
	f->has_previous = !col_null(st, 14);
	if (f->has_previous) {
		f->previous.stream = col_u64(st, 14);
		f->previous.seq = col_u64(st, 15);
		f->previous.write = sqlite3_column_int(st, 16) != 0;
		f->previous.op = col_text(st, 17);
	}
	f->previous.stack = frames_get(fr, p0, end, &f->previous.nstack);
	f->count = col_u64(st, 19);
	f->first_ms = sqlite3_column_int64(st, 20);
	f->last_ms = sqlite3_column_int64(st, 21);
	return 1;
}

/* Calls cb for each row of the findings query `q`; *rows counts them. */
static int walk_findings(struct store *s, const struct query *q,
			 store_finding_cb cb, void *arg, size_t *rows)
{
	struct frames fr = { 0 };
	sqlite3_stmt *st = NULL;
	int rc, src = SQLITE_DONE;

	*rows = 0;
	pthread_mutex_lock(&s->rlock);
	rc = r_begin(s);
	if (rc == 0)
		rc = q_prepare(s, q, &st);
	while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_finding f;
		struct store_process p;

		rc = row_finding(s, st, &fr, &f);
		if (rc < 0)
			break;
		if (rc == 0 || row_process(st, FINDING_NCOLS, &p) < 0) {
			rc = 0; /* a row this daemon cannot express */
			continue;
		}
		(*rows)++;
		rc = cb(arg, &f, &p);
		if (rc > 0)
			rc = 0;
	}
	if (rc == 0 && src != SQLITE_DONE) {
		store_log(s, LOG_ERROR, "query: %s", sqlite3_errmsg(s->rdb));
		rc = -EIO;
	}
	sqlite3_finalize(st);
	r_end(s);
	pthread_mutex_unlock(&s->rlock);
	frames_free(&fr);
	return rc;
}

int store_findings(struct store *s, const struct store_filter *f,
		   store_finding_cb cb, void *arg)
{
	static const struct store_filter none;
	struct query q = { .len = 0 };
	size_t rows;

	if (f == NULL)
		f = &none;
	/* The newest `limit`, handed out oldest first. */
	if (f->limit != 0)
		q_add(&q, "SELECT * FROM (");
	q_add(&q, "SELECT " FINDING_COLS ", " PROCESS_COLS FINDING_FROM);
	q_process_filter(&q, f);
	if (f->has_kind) {
		if (finding_kind_name(f->kind) == NULL)
			return 0;
		q_text(&q, " AND f.kind = ?", finding_kind_name(f->kind));
	}
	if (f->since_ms != 0)
		q_int(&q, " AND f.last_ms >= ?", f->since_ms);
	if (f->after_id != 0)
		q_int(&q, " AND f.id > ?", f->after_id);
	if (f->limit != 0) {
		q_int(&q, " ORDER BY f.id DESC LIMIT ?", f->limit);
		q_add(&q, ") ORDER BY 1");
	} else {
		q_add(&q, " ORDER BY f.id");
	}
	return walk_findings(s, &q, cb, arg, &rows);
}

int store_finding_get(struct store *s, int64_t id,
		      const struct store_filter *f, store_finding_cb cb,
		      void *arg)
{
	struct query q = { .len = 0 };
	size_t rows;
	int rc;

	q_add(&q, "SELECT " FINDING_COLS ", " PROCESS_COLS FINDING_FROM);
	q_int(&q, " AND f.id = ?", id);
	if (f != NULL && f->has_uid)
		q_int(&q, " AND p.uid = ?", f->uid);
	rc = walk_findings(s, &q, cb, arg, &rows);
	return rc == 0 && rows == 0 ? -ENOENT : rc;
}

/* store_list()'s filters and order after "WHERE 1"; false when nothing
 * can match. */
static bool q_list(struct query *q, const struct store_filter *f)
{
	q_process_filter(q, f);
	/* A kind: the processes with a finding of that kind. */
	if (f->has_kind) {
		if (finding_kind_name(f->kind) == NULL)
			return false;
		q_text(q,
		       " AND EXISTS (SELECT 1 FROM findings f"
		       " WHERE f.process_id = p.id AND f.kind = ?)",
		       finding_kind_name(f->kind));
	}
	if (f->since_ms != 0)
		q_int(q, " AND p.last_ms >= ?", f->since_ms);
	q_add(q, " ORDER BY p.last_ms DESC, p.id DESC");
	if (f->limit != 0)
		q_int(q, " LIMIT ?", f->limit);
	return true;
}

int store_list(struct store *s, const struct store_filter *f,
	       store_process_cb cb, void *arg)
{
	static const struct store_filter none;
	struct query q = { .len = 0 };
	sqlite3_stmt *st = NULL;
	int rc, src = SQLITE_DONE;

	if (f == NULL)
		f = &none;
	q_add(&q, "SELECT " PROCESS_COLS " FROM processes p WHERE 1");
	if (!q_list(&q, f))
		return 0;

	pthread_mutex_lock(&s->rlock);
	rc = q_prepare(s, &q, &st);
	while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_process p;

		if (row_process(st, 0, &p) < 0)
			continue;
		rc = cb(arg, &p);
		if (rc > 0)
			rc = 0;
	}
	if (rc == 0 && src != SQLITE_DONE) {
		store_log(s, LOG_ERROR, "query: %s", sqlite3_errmsg(s->rdb));
		rc = -EIO;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

int store_list_ids(struct store *s, const struct store_filter *f,
		   size_t max, int64_t **ids, size_t *n)
{
	static const struct store_filter none;
	struct query q = { .len = 0 };
	sqlite3_stmt *st = NULL;
	int64_t *v = NULL;
	size_t k = 0, cap = 0;
	int rc, src = SQLITE_DONE;

	q_add(&q, "SELECT p.id FROM processes p WHERE 1");
	if (!q_list(&q, f != NULL ? f : &none)) {
		*ids = NULL;
		*n = 0;
		return 0;
	}
	pthread_mutex_lock(&s->rlock);
	rc = q_prepare(s, &q, &st);
	while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
		if (k == max) {
			rc = -E2BIG;
			break;
		}
		if (k == cap) {
			size_t c = cap ? 2 * cap : 256;
			int64_t *w = realloc(v, c * sizeof(*w));

			if (w == NULL) {
				rc = -ENOMEM;
				break;
			}
			v = w;
			cap = c;
		}
		v[k++] = sqlite3_column_int64(st, 0);
	}
	if (rc == 0 && src != SQLITE_DONE) {
		store_log(s, LOG_ERROR, "query: %s", sqlite3_errmsg(s->rdb));
		rc = -EIO;
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	if (rc < 0) {
		free(v);
		return rc;
	}
	*ids = v;
	*n = k;
	return 0;
}

int store_list_get(struct store *s, const int64_t *ids, size_t n,
		   store_process_cb cb, void *arg)
{
	sqlite3_stmt *st = NULL;
	int rc = 0, src;

	pthread_mutex_lock(&s->rlock);
	if (sqlite3_prepare_v2(s->rdb,
			       "SELECT " PROCESS_COLS
			       " FROM processes p WHERE p.id = ?",
			       -1, &st, NULL) != SQLITE_OK) {
		store_log(s, LOG_ERROR, "query: %s", sqlite3_errmsg(s->rdb));
		rc = -EIO;
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct store_process p;

		sqlite3_bind_int64(st, 1, ids[i]);
		src = sqlite3_step(st);
		if (src == SQLITE_ROW && row_process(st, 0, &p) == 0) {
			rc = cb(arg, &p);
			if (rc > 0)
				rc = 0;
		} else if (src != SQLITE_ROW && src != SQLITE_DONE) {
			store_log(s, LOG_ERROR, "query: %s",
				  sqlite3_errmsg(s->rdb));
			rc = -EIO;
		}
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

static uint64_t file_bytes(const char *path)
{
	struct stat sb;

	return stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
}

int store_stats(struct store *s, struct store_stats *out)
{
	struct store_stats r = { .findings = 0 };
	sqlite3_stmt *st = NULL;
	int rc = -EIO, src;

	pthread_mutex_lock(&s->rlock);
	if (r_begin(s) < 0)
		goto out;
	if (sqlite3_prepare_v2(s->rdb,
			       "SELECT state, count(*) FROM processes"
			       " GROUP BY state UNION ALL"
			       " SELECT NULL, count(*) FROM findings",
			       -1, &st, NULL) != SQLITE_OK)
		goto fail;
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		const char *state = col_text(st, 0);
		uint64_t n = col_u64(st, 1);

		if (state == NULL) {
			r.findings = n;
			continue;
		}
		for (int i = 0; i < STORE_STATE_COUNT; i++) {
			if (strcmp(state, store_state_names[i]) == 0)
				r.processes[i] = (uint32_t)n;
		}
	}
	if (src != SQLITE_DONE)
		goto fail;
	r.db_bytes = file_bytes(s->path) + file_bytes(s->wal_path);
	*out = r;
	rc = 0;
	goto out;
fail:
	store_log(s, LOG_ERROR, "stats: %s", sqlite3_errmsg(s->rdb));
out:
	sqlite3_finalize(st);
	r_end(s);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}
