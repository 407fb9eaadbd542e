/*
 * store.c - the daemon's database: processes and findings in SQLite. This
 * file opens it (the schema and its migrations), closes it, and holds the
 * SQL of the rows the writer writes; store_writer.c queues the writes and
 * commits them in batches on the store's own writer thread; store_query.c
 * answers the reads. Only these three files speak SQL or know SQLite's
 * codes; store_int.h is what they share.
 *
 * Ownership: the struct store that store_open() hands out owns both
 * connections, their statements, the queue, the provisional ids and the
 * writer thread; store_close() commits what it can, joins the writer and
 * frees all of it (store__free()). What callers pass in is copied.
 *
 * Who waits for the disk, and on which of npusand's threads:
 *  - Never: store_process_register_async(), store_process_registered(),
 *    store_process_forget(), store_process_update(),
 *    store_finding_submit(), store_prune_async() and store_get_health().
 *    They copy into the queue, or read it, under `lock`, which the writer
 *    never holds while SQLite works. The loop thread registers processes,
 *    asks for their ids and queues prunes this way; the drain threads
 *    queue findings and counters, however long the disk refuses them.
 *  - Until the writer's round is done: store_flush(),
 *    store_process_register() and store_prune(). A round waits up to
 *    STORE_BUSY_TIMEOUT_MS while another program holds the write lock,
 *    and a caller may wait for the round in progress before its own; a
 *    round that fails fails them with -EIO rather than keep them
 *    waiting for the disk to come back. In npusand the list
 *    query's job flushes, on libuv's thread pool, and ingest_free()
 *    flushes at shutdown after the loop stopped; the synchronous register
 *    and prune are left to the tests.
 *  - The queries (store_list(), store_list_ids(), store_list_get(),
 *    store_findings(), store_finding_get(), store_stats()) read the disk
 *    on their caller's thread, one at a time under `rlock` on the read
 *    connection; WAL lets them read while the writer commits, so they
 *    never wait for its lock. npusand runs them on libuv's thread pool
 *    (server.c's jobs and metrics.c's render), except the metrics render
 *    at start and at stop, which the loop runs itself.
 *  - store_open() migrates, and store_close() waits for the last rounds
 *    (STORE_CLOSE_TRIES of them when the disk refuses), on the main
 *    thread before the loop runs and after it ended.
 *
 * DESIGN
 *  1. The write connection belongs to the writer thread alone (after
 *     store_open() hands it over); the read connection is used only under
 *     `rlock`. Every write, the synchronous ones too (register, prune), is
 *     an item of the one queue, so writes reach the database in the order
 *     they were made: a process's update queued before it re-registers can
 *     never overwrite the `running` state its registration wrote.
 *  2. A round takes the first `batch_max` items of the queue (at most
 *     STORE_BATCH_MAX) and commits them in one transaction. Either all of
 *     them are stored or none: when the round fails (disk full, I/O error,
 *     a lock held too long by another program), the queued items go back
 *     to the front of the queue, unchanged, to be retried, and the
 *     synchronous ones, in the round or behind it, fail with -EIO. A
 *     failed round sets batch_max to half what it took (one at least)
 *     and the next try waits, the wait doubling up to
 *     STORE_RETRY_MAX_MS (store_writer.c); nothing else
 *     starts a round meanwhile but a flush, so a failing disk costs a
 *     small round a second, and a disk with a little room takes what fits
 *     at once. Each round that works doubles batch_max back. Only an item
 *     SQLite rejects by itself (a constraint it breaks, such as a finding
 *     of an unknown process) is dropped, with a log line, so that one bad
 *     item cannot stall every later one.
 *  3. Items are numbered as they are queued; every item numbered up to
 *     `committed_seq` is in the database (or was dropped or failed as in
 *     2). That is what store_flush() waits for.
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
 *     kind=... job=... rank=... pid=..." (daemon/README.md), which
 *     log_finding_line() formats, by the writer in the round, and which
 *     is written only once the round committed, so that a rolled-back
 *     and retried round never logs an id twice or an id that was not
 *     stored.
 * 10. A registration queued with store_process_register_async() gets a
 *     provisional process id, negative, at once; writes queued with it
 *     reach the writer after the registration (1), which looks the
 *     store's id up in `refs` as it writes them. A ref lives until it is
 *     forgotten and every item queued with it (last_seq) is settled.
 * 11. What waits for the disk is bounded: findings by max_bytes, beyond
 *     which they are refused and their occurrences counted (`dropped`);
 *     a process's counter update replaces its update still queued when
 *     nothing of that process was queued after it (the map `updates`),
 *     so that an update never overtakes its process's findings or
 *     registration, and updates are bounded by the findings queued plus
 *     the processes; registrations by the connections that make them.
 */
#include "store_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "hash.h"

/* Queued bytes of findings past which they are refused, e.g. while the
 * disk stays full (store_opts.max_queue_bytes' default). */
#define STORE_QUEUE_MAX_BYTES ((size_t)256 << 20)
#define STORE_BUSY_TIMEOUT_MS 5000
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
	/* 4: the graph of each access (trace format v2): NULL for an
	 * access no graph recorded or replayed, and for every older row. */
	"ALTER TABLE findings ADD COLUMN acc_graph INTEGER;"
	"ALTER TABLE findings ADD COLUMN prev_graph INTEGER;",
	/* 5: the name of npusand's suppression that matched a finding
	 * (NULL: none, and every older row), and how many of a process's
	 * findings are suppressed, kept by triggers as `findings` is. */
	"ALTER TABLE findings ADD COLUMN suppressed TEXT;"
	"ALTER TABLE processes ADD COLUMN suppressed INTEGER NOT NULL"
	" DEFAULT 0;"
	"CREATE TRIGGER findings_suppressed_added AFTER INSERT ON findings"
	" WHEN NEW.suppressed IS NOT NULL BEGIN"
	" UPDATE processes SET suppressed = suppressed + 1"
	"  WHERE id = NEW.process_id; END;"
	"CREATE TRIGGER findings_suppressed_removed AFTER DELETE ON findings"
	" WHEN OLD.suppressed IS NOT NULL BEGIN"
	" UPDATE processes SET suppressed = suppressed - 1"
	"  WHERE id = OLD.process_id; END;",
	/* 6: where a missing_record_stream's memory was freed, and the
	 * operator's argument of each access (strings.id). free_stack is
	 * NULL for a finding no free revealed (and every older row), 0 for
	 * a free that carried no stack, else stacks.id. */
	"ALTER TABLE findings ADD COLUMN free_stack INTEGER;"
	"ALTER TABLE findings ADD COLUMN acc_arg INTEGER;"
	"ALTER TABLE findings ADD COLUMN prev_arg INTEGER;",
};

#define STORE_SCHEMA_VERSION \
	((int)(sizeof(store_migrations) / sizeof(store_migrations[0])))

void store__log(const struct store *s, enum log_level level, const char *fmt,
		...)
{
	char line[512];
	va_list ap;

	if ((int)level > atomic_load_explicit(&log__level,
					      memory_order_relaxed))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	log_write(level, "store: %s: %s", s->path, line);
}

/* Steps a statement that returns no row and resets it: an SQLite code. */
static int store__step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static void store__bind_u64(sqlite3_stmt *st, int i, uint64_t v)
{
	sqlite3_bind_int64(st, i, (sqlite3_int64)v);
}

static void store__bind_opt_id(sqlite3_stmt *st, int i, int64_t id)
{
	if (id != 0)
		sqlite3_bind_int64(st, i, id);
	else
		sqlite3_bind_null(st, i);
}

static void store__bind_text(sqlite3_stmt *st, int i, const char *text)
{
	if (text != NULL)
		sqlite3_bind_text(st, i, text, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(st, i);
}

/* ---- opening ---- */

__attribute__((format(printf, 2, 3))) static void
store__set_errmsg(char **errmsg, const char *fmt, ...)
{
	va_list ap;

	if (errmsg == NULL || *errmsg != NULL)
		return;
	va_start(ap, fmt);
	if (vasprintf(errmsg, fmt, ap) < 0)
		*errmsg = NULL;
	va_end(ap);
}

static int store__db_fail(struct store *s, sqlite3 *db, const char *what,
			  char **errmsg)
{
	store__set_errmsg(errmsg, "%s: %s: %s", s->path, what,
			  db ? sqlite3_errmsg(db) : "out of memory");
	return -EIO;
}

static int store__db_exec(struct store *s, sqlite3 *db, const char *sql,
			  const char *what, char **errmsg)
{
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		return store__db_fail(s, db, what, errmsg);
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
static int store__db_open(struct store *s, bool reader, sqlite3 **out,
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
		rc = db == NULL ? -ENOMEM
				: store__db_fail(s, db, "open", errmsg);
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
			rc = store__db_fail(s, db, "set WAL mode", errmsg);
			goto err;
		}
		if (strcmp((const char *)sqlite3_column_text(st, 0), "wal") !=
		    0) {
			store__set_errmsg(errmsg,
					  "%s: cannot use WAL mode (%s)",
					  s->path,
					  sqlite3_column_text(st, 0));
			rc = -EIO;
			goto err;
		}
		sqlite3_finalize(st);
		st = NULL;
	}
	rc = store__db_exec(s, db,
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

static int store__user_version(sqlite3 *db, int *out)
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
static int store__migrate(struct store *s, char **errmsg)
{
	for (;;) {
		char sql[64];
		int v = 0;

		if (store__db_exec(s, s->wdb, "BEGIN IMMEDIATE", "migrate",
				   errmsg) < 0)
			return -EIO;
		if (store__user_version(s->wdb, &v) != SQLITE_OK)
			goto fail;
		if (v == STORE_SCHEMA_VERSION)
			break;
		if (v > STORE_SCHEMA_VERSION || v < 0) {
			sqlite3_exec(s->wdb, "ROLLBACK", NULL, NULL, NULL);
			store__set_errmsg(errmsg,
					  "%s: schema version %d is %s than "
					  "this npusand knows (%d): the "
					  "database was written by a newer "
					  "npusan, or not by npusan at all",
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
	return store__db_exec(s, s->wdb, "COMMIT", "migrate", errmsg);
fail:
	store__db_fail(s, s->wdb, "migrate", errmsg);
	sqlite3_exec(s->wdb, "ROLLBACK", NULL, NULL, NULL);
	return -EIO;
}

static int store__prepare(struct store *s, sqlite3 *db, const char *sql,
			  sqlite3_stmt **st, char **errmsg)
{
	if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, st,
			       NULL) != SQLITE_OK)
		return store__db_fail(s, db, "prepare", errmsg);
	return 0;
}

static int store__prepare_all(struct store *s, char **errmsg)
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
		  " prev_stack, count, first_ms, last_ms, acc_graph,"
		  " prev_graph, suppressed, free_stack, acc_arg, prev_arg)"
		  " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,"
		  " ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
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
		if (store__prepare(s, *stmts[i].db, stmts[i].sql, stmts[i].st,
				   errmsg) < 0)
			return -EIO;
	}
	return 0;
}


void store__free(struct store *s)
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
	while (s->ref_list != NULL) {
		struct store_ref *r = s->ref_list;

		s->ref_list = r->next;
		free(r);
	}
	u64map_fini(&s->refs);
	u64map_fini(&s->updates);
	free(s->kbuf);
	free(s->wbuf);
	free(s->wal_path);
	free(s->path);
	free(s);
}

static int store__sync_init(struct store *s)
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

/* A store of options `o`, its database not open yet; NULL without
 * memory. Release with store__free(). */
static struct store *store__new(const struct store_opts *o)
{
	struct store *s = calloc(1, sizeof(*s));

	if (s == NULL)
		return NULL;
	if (store__sync_init(s) < 0) {
		free(s);
		return NULL;
	}
	s->retain_days = o->retain_days;
	s->commit_cb = o->commit_cb;
	s->commit_arg = o->commit_arg;
	s->max_bytes = o->max_queue_bytes ? o->max_queue_bytes
					  : STORE_QUEUE_MAX_BYTES;
	s->batch_max = STORE_BATCH_MAX;
	s->tail = &s->head;
	s->path = strdup(o->path);
	s->cache = calloc(STORE_CACHE_SLOTS, sizeof(*s->cache));
	if (u64map_init(&s->refs) < 0 || u64map_init(&s->updates) < 0 ||
	    s->path == NULL || s->cache == NULL ||
	    asprintf(&s->wal_path, "%s-wal", o->path) < 0) {
		s->wal_path = NULL;
		store__free(s);
		return NULL;
	}
	return s;
}

/* Opens both connections, migrated and prepared. 0; -ENOMEM; -EIO with
 * the reason in *errmsg. */
static int store__open_db(struct store *s, char **errmsg)
{
	int rc;

	rc = store__db_open(s, false, &s->wdb, errmsg);
	if (rc < 0)
		return rc;
	rc = store__migrate(s, errmsg);
	if (rc < 0)
		return rc;
	/*
	 * No process is watched yet. Those a previous daemon left running
	 * are exited as far as anyone can tell; one still alive registers
	 * again with this daemon, which sets it running.
	 */
	rc = store__db_exec(s, s->wdb,
			    "UPDATE processes SET state = 'exited'"
			    " WHERE state IN ('running', 'dormant')",
			    "mark processes exited", errmsg);
	if (rc < 0)
		return rc;
	rc = store__db_open(s, true, &s->rdb, errmsg);
	if (rc < 0)
		return rc;
	return store__prepare_all(s, errmsg);
}

int store_open(const struct store_opts *o, struct store **out, char **errmsg)
{
	struct store *s;
	int rc;

	if (errmsg != NULL)
		*errmsg = NULL;
	s = store__new(o);
	if (s == NULL)
		return -ENOMEM;
	rc = store__open_db(s, errmsg);
	if (rc == 0)
		rc = store__writer_start(s);
	if (rc < 0) {
		if (rc == -ENOMEM && errmsg != NULL) {
			free(*errmsg);
			*errmsg = NULL;
		}
		store__free(s);
		return rc;
	}
	*out = s;
	return 0;
}

/* ---- the rows the writer writes ---- */

/* The id of the row whose unique text `get` looks up, added by `put`
 * when missing (strings and stacks); 0 for NULL. */
static int store__w_intern(struct store *s, sqlite3_stmt *get,
			   sqlite3_stmt *put,
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
	rc = store__step_done(put);
	if (rc == SQLITE_OK)
		*id = sqlite3_last_insert_rowid(s->wdb);
	return rc;
}

void store__cache_clear(struct store *s)
{
	for (size_t i = 0; i < STORE_CACHE_SLOTS; i++) {
		free(s->cache[i].key);
		s->cache[i].key = NULL;
	}
}

static struct store_cache_slot *store__cache_slot(struct store *s, char tag,
				     const char *key, size_t len,
				     uint64_t *hash)
{
	*hash = hash_bytes(key, len) ^ (uint64_t)(unsigned char)tag;
	return &s->cache[*hash & (STORE_CACHE_SLOTS - 1)];
}

static bool store__cache_hit(const struct store_cache_slot *c, char tag,
			     uint64_t hash,
			     const char *key, size_t len)
{
	return c->key != NULL && c->hash == hash && c->tag == tag &&
	       c->len == len && memcmp(c->key, key, len) == 0;
}

/* Remembers an id; without memory, simply does not. */
static void store__cache_put(struct store_cache_slot *c, char tag,
			     uint64_t hash,
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
static int store__w_string(struct store *s, const char *text, int64_t *id)
{
	struct store_cache_slot *c;
	size_t len;
	uint64_t h;
	int rc;

	if (text == NULL) {
		*id = 0;
		return SQLITE_OK;
	}
	len = strlen(text);
	c = store__cache_slot(s, 'S', text, len, &h);
	if (store__cache_hit(c, 'S', h, text, len)) {
		*id = c->id;
		return SQLITE_OK;
	}
	rc = store__w_intern(s, s->w_str_get, s->w_str_put, text, id);
	if (rc == SQLITE_OK)
		store__cache_put(c, 'S', h, text, len, *id);
	return rc;
}

/* Grows a writer buffer to hold `need` bytes: an SQLite code. */
static int store__buf_reserve(char **buf, size_t *cap, size_t need)
{
	void *b = *buf;

	if (grow_array(&b, cap, need, 1) < 0)
		return SQLITE_NOMEM;
	*buf = b;
	return SQLITE_OK;
}

/* The id of a stack, added when missing; 0 for an empty one. */
static int store__w_stack(struct store *s, const char *const *frames, size_t n,
			  int64_t *id)
{
	struct store_cache_slot *c;
	size_t len = 0, klen = 0;
	uint64_t h;
	int rc;

	if (n == 0) {
		*id = 0;
		return SQLITE_OK;
	}
	for (size_t i = 0; i < n; i++) {
		size_t flen = strlen(frames[i]) + 1;

		if (store__buf_reserve(&s->kbuf, &s->kbuf_cap, klen + flen) !=
		    SQLITE_OK)
			return SQLITE_NOMEM;
		memcpy(s->kbuf + klen, frames[i], flen);
		klen += flen;
	}
	c = store__cache_slot(s, 'K', s->kbuf, klen, &h);
	if (store__cache_hit(c, 'K', h, s->kbuf, klen)) {
		*id = c->id;
		return SQLITE_OK;
	}
	for (size_t i = 0; i < n; i++) {
		int64_t fid;

		rc = store__w_string(s, frames[i], &fid);
		if (rc != SQLITE_OK)
			return rc;
		/* ",%lld" at most 21 bytes, then "]" and a NUL. */
		if (store__buf_reserve(&s->wbuf, &s->wbuf_cap, len + 24) !=
		    SQLITE_OK)
			return SQLITE_NOMEM;
		len += (size_t)snprintf(s->wbuf + len, s->wbuf_cap - len,
					"%c%" PRId64, i == 0 ? '[' : ',', fid);
	}
	memcpy(s->wbuf + len, "]", 2);
	rc = store__w_intern(s, s->w_stack_get, s->w_stack_put, s->wbuf, id);
	if (rc == SQLITE_OK)
		store__cache_put(c, 'K', h, s->kbuf, klen, *id);
	return rc;
}

/* DESIGN 9: the log line of new finding `id`, into *out (caller frees);
 * *out stays NULL when info lines are off or memory is short. */
static void store__w_finding_line(struct store *s,
				  const struct store_finding *f, int64_t id,
				  char **out)
{
	sqlite3_stmt *st = s->w_proc;
	struct store_process p = { .id = f->process_id };
	bool found;

	if ((int)LOG_INFO >
	    atomic_load_explicit(&log__level, memory_order_relaxed))
		return;
	sqlite3_bind_int64(st, 1, f->process_id);
	found = sqlite3_step(st) == SQLITE_ROW;
	if (found) {
		p.pid = (uint32_t)sqlite3_column_int64(st, 0);
		p.job = (const char *)sqlite3_column_text(st, 1); /* or NULL */
		p.has_rank = sqlite3_column_type(st, 2) != SQLITE_NULL;
		p.rank = (uint32_t)sqlite3_column_int64(st, 2);
	}
	/* Before the reset, which frees the job's text. */
	(void)log_finding_line(id, &f->v, found ? &p : NULL, out);
	sqlite3_reset(st);
}

/* A finding's strings and stacks as this database's ids (DESIGN 5); 0
 * for none. */
struct store_finding_ids {
	int64_t aop, ast, pop, pst, alst;
	int64_t aarg, parg, fst;
};

/* The access part of a key's shape: what finding_key() reads of it. */
static struct finding_access store__key_access(const struct finding_view_access *a)
{
	return (struct finding_access){ .stream = a->stream,
					.write = a->write,
					.has_graph = a->has_graph,
					.graph = a->graph };
}

/* The engine's deduplication key of `f` as text, its strings and stacks
 * named by this database's ids (DESIGN 4), the graphs of its accesses
 * passed through so that the key is the engine's own. */
static void store__finding_key(const struct store_finding *f,
			       enum finding_kind kind,
			       const struct store_finding_ids *ids,
			       char key[FINDING_KEY_TEXT_MAX])
{
	const struct finding_view *v = &f->v;
	const struct finding shape = {
		.kind = kind,
		.has_alloc = v->has_alloc,
		.has_previous = v->has_previous,
		.alloc = { .has_stream = v->alloc.has_stream,
			   .stream = v->alloc.stream },
		.access = store__key_access(&v->access),
		.previous = v->has_previous ? store__key_access(&v->previous) :
					      (struct finding_access){ 0 },
	};
	const struct finding_text text = {
		(uint64_t)ids->aop, (uint64_t)ids->ast, (uint64_t)ids->pop,
		(uint64_t)ids->pst, (uint64_t)ids->alst,
	};
	struct finding_key k;

	finding_key(&shape, &text, &k);
	finding_key_text(&k, key);
}

/* The ids of f's strings and stacks, added when missing: an SQLite code. */
static int store__w_finding_ids(struct store *s,
				const struct store_finding *f,
				struct store_finding_ids *ids)
{
	int rc;

	const struct finding_view *v = &f->v;

	*ids = (struct store_finding_ids){ 0 };
	if ((rc = store__w_string(s, v->access.op, &ids->aop)) != SQLITE_OK ||
	    (rc = store__w_stack(s, v->access.stack.frames, v->access.stack.n,
				 &ids->ast)) != SQLITE_OK)
		return rc;
	if (v->has_previous &&
	    ((rc = store__w_string(s, v->previous.op, &ids->pop)) !=
		     SQLITE_OK ||
	     (rc = store__w_stack(s, v->previous.stack.frames,
				  v->previous.stack.n, &ids->pst)) !=
		     SQLITE_OK))
		return rc;
	if (v->has_alloc &&
	    (rc = store__w_stack(s, v->alloc.stack.frames, v->alloc.stack.n,
				 &ids->alst)) != SQLITE_OK)
		return rc;
	if (v->has_free &&
	    (rc = store__w_stack(s, v->free_stack.frames, v->free_stack.n,
				 &ids->fst)) != SQLITE_OK)
		return rc;
	if ((rc = store__w_string(s, v->access.arg, &ids->aarg)) !=
	    SQLITE_OK)
		return rc;
	if (v->has_previous)
		rc = store__w_string(s, v->previous.arg, &ids->parg);
	return rc;
}

/* Binds an optional 64-bit unsigned column. */
static void store__bind_opt_u64(sqlite3_stmt *st, int i, bool has, uint64_t v)
{
	if (has)
		store__bind_u64(st, i, v);
	else
		sqlite3_bind_null(st, i);
}

/* Binds the access columns from `i` on (stream, seq, write, op, stack). */
static void store__w_access_bind(sqlite3_stmt *st, int i,
				 const struct finding_view_access *a,
				 int64_t op, int64_t stack)
{
	store__bind_u64(st, i, a->stream);
	store__bind_u64(st, i + 1, a->seq);
	sqlite3_bind_int(st, i + 2, a->write);
	store__bind_opt_id(st, i + 3, op);
	store__bind_opt_id(st, i + 4, stack);
}

/* Binds the columns of a new finding row to w_finding. */
static void store__w_finding_bind(sqlite3_stmt *st,
				  const struct store_finding *f,
				  const char *key,
				  const struct store_finding_ids *ids)
{
	const struct finding_view *v = &f->v;

	sqlite3_bind_int64(st, 1, f->process_id);
	sqlite3_bind_text(st, 2, key, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, v->kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, v->detected_at, -1, SQLITE_STATIC);
	store__bind_u64(st, 5, v->ptr);
	store__bind_opt_u64(st, 6, v->has_alloc, v->alloc.ptr);
	store__bind_opt_u64(st, 7, v->has_alloc, v->alloc.size);
	store__bind_opt_u64(st, 8, v->has_alloc && v->alloc.has_stream,
			    v->alloc.stream);
	store__bind_opt_id(st, 9, v->has_alloc ? ids->alst : 0);
	store__w_access_bind(st, 10, &v->access, ids->aop, ids->ast);
	if (v->has_previous) {
		store__w_access_bind(st, 15, &v->previous, ids->pop, ids->pst);
	} else {
		for (int i = 15; i <= 19; i++)
			sqlite3_bind_null(st, i);
	}
	store__bind_u64(st, 20, v->count);
	sqlite3_bind_int64(st, 21, v->first_ms);
	sqlite3_bind_int64(st, 22, v->last_ms);
	store__bind_opt_u64(st, 23, v->access.has_graph, v->access.graph);
	store__bind_opt_u64(st, 24, v->has_previous && v->previous.has_graph,
			    v->previous.graph);
	store__bind_text(st, 25, v->suppressed);
	/* 0 is a free without a stack; NULL no free (migration 6). */
	if (v->has_free)
		sqlite3_bind_int64(st, 26, ids->fst);
	else
		sqlite3_bind_null(st, 26);
	store__bind_opt_id(st, 27, ids->aarg);
	store__bind_opt_id(st, 28, v->has_previous ? ids->parg : 0);
}

int store__w_finding(struct store *s, const struct store_finding *f,
		     char **line)
{
	struct store_finding_ids ids;
	char key[FINDING_KEY_TEXT_MAX];
	enum finding_kind kind;
	int rc;

	/* store_finding_submit() checked it. */
	if (!finding_kind_of(f->v.kind, &kind))
		return SQLITE_MISUSE;
	rc = store__w_finding_ids(s, f, &ids);
	if (rc != SQLITE_OK)
		return rc;
	store__finding_key(f, kind, &ids, key);

	/*
	 * A repeat first: the upsert below merges it as well, but a failed
	 * INSERT still takes an AUTOINCREMENT id, which would leave a gap
	 * in the finding ids for every repeat.
	 */
	sqlite3_bind_int64(s->w_repeat, 1, f->process_id);
	sqlite3_bind_text(s->w_repeat, 2, key, -1, SQLITE_STATIC);
	store__bind_u64(s->w_repeat, 3, f->v.count);
	sqlite3_bind_int64(s->w_repeat, 4, f->v.first_ms);
	sqlite3_bind_int64(s->w_repeat, 5, f->v.last_ms);
	rc = store__step_done(s->w_repeat);
	if (rc != SQLITE_OK || sqlite3_changes(s->wdb) > 0)
		return rc;

	store__w_finding_bind(s->w_finding, f, key, &ids);
	rc = store__step_done(s->w_finding);
	/* No repeat above, so this inserted a row (its trigger's UPDATE
	 * leaves last_insert_rowid alone). */
	if (rc == SQLITE_OK && sqlite3_changes(s->wdb) > 0)
		store__w_finding_line(s, f, sqlite3_last_insert_rowid(s->wdb),
				      line);
	return rc;
}

int store__w_register(struct store *s, const struct store_process *p,
		      int64_t *id, struct store_counters *was)
{
	sqlite3_stmt *st = s->w_register;
	int rc;

	store__bind_text(st, 1, p->host ? p->host : "");
	sqlite3_bind_int64(st, 2, p->pid);
	store__bind_u64(st, 3, p->start_time);
	sqlite3_bind_int64(st, 4, p->uid);
	store__bind_text(st, 5, p->exe);
	store__bind_text(st, 6, p->job);
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
	store__bind_text(st, 13, p->run);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*id = sqlite3_column_int64(st, 0);
		was->events = store__col_u64(st, 1);
		was->lost = store__col_u64(st, 2);
		was->gaps = store__col_u64(st, 3);
		was->ring_ops = store__col_u64(st, 4);
		rc = sqlite3_step(st);
	}
	sqlite3_reset(st);
	return rc == SQLITE_DONE ? SQLITE_OK : rc;
}

int store__w_update(struct store *s, const struct store_item *it, int64_t id)
{
	sqlite3_stmt *st = s->w_update;

	sqlite3_bind_int64(st, 1, id);
	store__bind_u64(st, 2, it->u.update.c.events);
	store__bind_u64(st, 3, it->u.update.c.lost);
	store__bind_u64(st, 4, it->u.update.c.gaps);
	store__bind_u64(st, 5, it->u.update.c.ring_ops);
	sqlite3_bind_int64(st, 6, it->u.update.last_ms);
	sqlite3_bind_text(st, 7, store_state_name(it->u.update.st), -1,
			  SQLITE_STATIC);
	return store__step_done(st);
}

/* Deletes what DESIGN 5's tables no longer need. The subqueries leave
 * NULLs out: `x NOT IN (..., NULL)` is never true. */
int store__w_prune(struct store *s, int64_t before_ms, int64_t *deleted)
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
	rc = store__step_done(st);
	sqlite3_finalize(st);
	if (rc != SQLITE_OK)
		return rc;
	*deleted = sqlite3_changes(s->wdb);
	if (*deleted == 0)
		return SQLITE_OK;
	store__cache_clear(s); /* DESIGN 7 */
	return sqlite3_exec(
		s->wdb,
		"DELETE FROM stacks WHERE id NOT IN ("
		" SELECT alloc_stack FROM findings WHERE alloc_stack NOT NULL"
		" UNION SELECT acc_stack FROM findings WHERE acc_stack NOT NULL"
		" UNION SELECT prev_stack FROM findings"
		"  WHERE prev_stack NOT NULL"
		" UNION SELECT free_stack FROM findings"
		"  WHERE free_stack NOT NULL);"
		"DELETE FROM strings WHERE id NOT IN ("
		" SELECT acc_op FROM findings WHERE acc_op NOT NULL"
		" UNION SELECT prev_op FROM findings WHERE prev_op NOT NULL"
		" UNION SELECT acc_arg FROM findings WHERE acc_arg NOT NULL"
		" UNION SELECT prev_arg FROM findings WHERE prev_arg NOT NULL"
		" UNION SELECT j.value FROM stacks, json_each(stacks.frames) j);",
		NULL, NULL, NULL);
}

void store_close(struct store *s)
{
	if (s == NULL)
		return;
	store__writer_stop(s);
	store__free(s);
}
