/*
 * test_store.c - the daemon's SQLite store: schema and migrations, batched
 * writes, deduplication, queries, retention and durability.
 */
#include <check.h>
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "store.h"
#include "testutil.h"

/* store.c's test hook: the writer's next round sets max_page_count. */
int store__max_pages(struct store *s, unsigned pages);

#define DAY_MS INT64_C(86400000)
#define NOW_MS INT64_C(1700000000000)

static char *db_path(void)
{
	char *dir = tu_tmpdir(), *path;

	ck_assert_int_gt(asprintf(&path, "%s/npusan.db", dir), 0);
	free(dir);
	return path;
}

static struct store *open_store(const char *path, unsigned retain_days)
{
	struct store_opts o = { .path = path, .retain_days = retain_days };
	struct store *s = NULL;
	char *err = NULL;
	int rc = store_open(&o, &s, &err);

	ck_assert_msg(rc == 0, "store_open: %d %s", rc, err ? err : "");
	ck_assert_ptr_null(err);
	return s;
}

static struct store_process proc(uint32_t pid, const char *job,
				 uint32_t rank, uint32_t uid)
{
	struct store_process p = {
		.pid = pid,
		.start_time = 1000 + pid,
		.uid = uid,
		.host = "node1",
		.exe = "/usr/bin/python3",
		.job = job,
		.has_rank = true,
		.rank = rank,
		.has_world_size = true,
		.world_size = 8,
		.state = STORE_RUNNING,
		.first_ms = NOW_MS,
		.last_ms = NOW_MS,
	};
	return p;
}

/* Counters to update a process with; store_process_update() copies them. */
static const struct store_counters *cnt(uint64_t events, uint64_t lost)
{
	static _Thread_local struct store_counters c;

	c = (struct store_counters){ .events = events, .lost = lost };
	return &c;
}

static int64_t reg(struct store *s, const struct store_process *p)
{
	int64_t id = 0;

	ck_assert_int_eq(store_process_register(s, p, &id, NULL), 0);
	ck_assert_int_gt(id, 0);
	return id;
}

static const char *const stack_a[] = { "train.py:10 step", "train.py:3 main" };
static const char *const stack_b[] = { "model.py:7 forward", "train.py:10 step",
				       "train.py:3 main" };
static const char *const stack_c[] = { "alloc.py:1 empty" };

/* A data race of process `pid_id`: write on stream 1 against a read on 2. */
static struct store_finding race(int64_t process_id)
{
	struct store_finding f = {
		.process_id = process_id,
		.v = {
			.kind = "data_race",
			.detected_at = "launch",
			.ptr = 0x7f0000001000,
			.has_alloc = true,
			.alloc = { .ptr = 0x7f0000000000, .size = 1 << 20,
				   .has_stream = true, .stream = 0,
				   .stack = { stack_c, 1 } },
			.access = { .stream = 1, .seq = 7, .write = true,
				    .op = "aten::add_",
				    .stack = { stack_a, 2 } },
			.has_previous = true,
			.previous = { .stream = 2, .seq = 5, .write = false,
				      .op = "aten::mul",
				      .stack = { stack_b, 3 } },
			.count = 1,
			.first_ms = NOW_MS,
			.last_ms = NOW_MS,
		},
	};
	return f;
}

/* The findings a walk saw, each rendered to one line. */
struct seen {
	int64_t ids[256];
	struct store_finding f[256];
	uint32_t pids[256];
	char text[65536];
	size_t n, len;
	int stop_after; /* return -42 after this many; 0: never */
};

static void seen_add(struct seen *v, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void seen_add(struct seen *v, const char *fmt, ...)
{
	va_list ap;
	int n;

	/* Past the buffer (a test of many frames) the text stops. */
	if (v->len + 1 >= sizeof(v->text))
		return;
	va_start(ap, fmt);
	n = vsnprintf(v->text + v->len, sizeof(v->text) - v->len, fmt, ap);
	va_end(ap);
	ck_assert_int_ge(n, 0);
	v->len += (size_t)n;
	if (v->len >= sizeof(v->text))
		v->len = sizeof(v->text) - 1;
}

static void seen_stack(struct seen *v, const char *const *st, size_t n)
{
	seen_add(v, "[");
	for (size_t i = 0; i < n; i++)
		seen_add(v, "%s%s", i ? "|" : "", st[i]);
	seen_add(v, "]");
}

static void seen_access(struct seen *v, const char *name,
			const struct finding_view_access *a)
{
	seen_add(v, " %s=%" PRIu64 "/%" PRIu64 "/%c/%s", name, a->stream,
		 a->seq, a->write ? 'w' : 'r', a->op ? a->op : "-");
	seen_stack(v, a->stack.frames, a->stack.n);
	if (a->has_graph)
		seen_add(v, "@g%" PRIu64, a->graph);
}

static int seen_cb(void *arg, const struct store_finding *sf,
		   const struct store_process *p)
{
	const struct finding_view *f = &sf->v;
	struct seen *v = arg;

	ck_assert_uint_lt(v->n, 256);
	ck_assert_int_eq(sf->process_id, p->id);
	/* The view names its process as the process row does. */
	ck_assert(f->has_pid);
	ck_assert_uint_eq(f->pid, p->pid);
	ck_assert_int_eq(f->has_rank, p->has_rank);
	ck_assert(f->has_first && f->has_last);
	v->ids[v->n] = (int64_t)f->id;
	v->f[v->n] = *sf; /* scalars only stay valid */
	v->pids[v->n] = p->pid;
	v->n++;
	seen_add(v, "%s pid=%u job=%s count=%" PRIu64 " ptr=%" PRIx64 " at=%s",
		 f->kind, p->pid, p->job ? p->job : "-", f->count, f->ptr,
		 f->detected_at);
	if (f->has_alloc) {
		seen_add(v, " alloc=%" PRIx64 "+%" PRIu64 "@", f->alloc.ptr,
			 f->alloc.size);
		if (f->alloc.has_stream)
			seen_add(v, "%" PRIu64, f->alloc.stream);
		else
			seen_add(v, "-");
		seen_stack(v, f->alloc.stack.frames, f->alloc.stack.n);
	}
	seen_access(v, "acc", &f->access);
	if (f->has_previous)
		seen_access(v, "prev", &f->previous);
	seen_add(v, "\n");
	if (v->stop_after != 0 && (int)v->n == v->stop_after)
		return -42;
	return 0;
}

static void findings(struct store *s, const struct store_filter *f,
		     struct seen *v)
{
	memset(v, 0, sizeof(*v));
	ck_assert_int_eq(store_findings(s, f, seen_cb, v), 0);
}

struct procs {
	struct store_process p[64];
	char jobs[64][32];
	char runs[64][32];
	size_t n;
};

static int procs_cb(void *arg, const struct store_process *p)
{
	struct procs *v = arg;

	ck_assert_uint_lt(v->n, 64);
	v->p[v->n] = *p;
	v->p[v->n].host = v->p[v->n].exe = NULL;
	snprintf(v->jobs[v->n], sizeof(v->jobs[0]), "%s", p->job ? p->job : "-");
	v->p[v->n].job = v->jobs[v->n];
	snprintf(v->runs[v->n], sizeof(v->runs[0]), "%s", p->run ? p->run : "");
	v->p[v->n].run = p->run ? v->runs[v->n] : NULL;
	v->n++;
	return 0;
}

static void list(struct store *s, const struct store_filter *f,
		 struct procs *v)
{
	memset(v, 0, sizeof(*v));
	ck_assert_int_eq(store_list(s, f, procs_cb, v), 0);
}

/* One integer from the database through SQLite itself. */
static int64_t sql_int(const char *path, const char *sql)
{
	sqlite3 *db;
	sqlite3_stmt *st;
	int64_t v;

	ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE,
					 NULL), SQLITE_OK);
	ck_assert_msg(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK,
		      "%s: %s", sql, sqlite3_errmsg(db));
	ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

static void sql_exec(const char *path, const char *sql)
{
	sqlite3 *db;

	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK,
		      "%s: %s", sql, sqlite3_errmsg(db));
	sqlite3_close(db);
}

START_TEST(store_register_returns_same_row_again)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(100, "job1", 0, 1000);
	struct store_process q = proc(100, "job1", 0, 1000);
	struct procs v;
	int64_t a, b, c;

	a = reg(s, &p);
	ck_assert_int_eq(store_process_update(s, a, cnt(10, 1), NOW_MS + 5,
					      STORE_EXITED), 0);
	ck_assert_int_eq(store_flush(s), 0);
	p.last_ms = NOW_MS + 9;
	b = reg(s, &p);
	ck_assert_int_eq(a, b);
	/* Same pid, another start time: another process. */
	q.start_time++;
	c = reg(s, &q);
	ck_assert_int_ne(a, c);

	list(s, NULL, &v);
	ck_assert_uint_eq(v.n, 2);
	ck_assert_int_eq(v.p[0].id, a); /* the most recent first */
	ck_assert_int_eq(v.p[0].state, STORE_RUNNING);
	ck_assert_uint_eq(v.p[0].events, 10); /* counters kept */
	ck_assert_int_eq(v.p[0].last_ms, NOW_MS + 9);
	ck_assert_int_eq(v.p[1].id, c);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM processes"), 2);
	store_close(s);
	free(path);
}
END_TEST

/* Issue 12: a registration of another uid never takes a stored process
 * (and its findings) over. */
START_TEST(store_register_never_changes_owner)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(100, "job1", 0, 1000);
	struct store_process q = proc(100, "job1", 0, 2000);
	struct procs v;
	int64_t a, b = 0;

	a = reg(s, &p);
	ck_assert_int_eq(store_process_register(s, &q, &b, NULL), -EPERM);
	ck_assert_int_eq(b, 0);
	list(s, NULL, &v);
	ck_assert_uint_eq(v.n, 1);
	ck_assert_int_eq(v.p[0].id, a);
	ck_assert_uint_eq(v.p[0].uid, 1000);
	/* Its owner registers it again as before. */
	ck_assert_int_eq(reg(s, &p), a);
	store_close(s);
	free(path);
}
END_TEST

/* An update queued before a re-registration must not undo it. */
START_TEST(store_register_after_queued_update_stays_running)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(100, "job1", 0, 1000);
	struct procs v;
	int64_t a = reg(s, &p);

	ck_assert_int_eq(store_process_update(s, a, cnt(1, 0), NOW_MS,
					      STORE_EXITED), 0);
	ck_assert_int_eq(reg(s, &p), a);
	ck_assert_int_eq(store_flush(s), 0);
	list(s, NULL, &v);
	ck_assert_uint_eq(v.n, 1);
	ck_assert_int_eq(v.p[0].state, STORE_RUNNING);
	store_close(s);
	free(path);
}
END_TEST

START_TEST(store_update_visible_after_flush)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(7, NULL, 0, 0);
	struct procs v;
	int64_t id;

	p.has_rank = p.has_world_size = false;
	p.host = NULL;
	p.exe = NULL;
	id = reg(s, &p);
	ck_assert_int_eq(store_process_update(s, id, cnt(5, 0), NOW_MS + 1,
					      STORE_RUNNING), 0);
	ck_assert_int_eq(store_process_update(s, id, cnt(UINT64_MAX, 3),
					      NOW_MS + 2, STORE_EXITED), 0);
	/* last_ms never goes back. */
	ck_assert_int_eq(store_process_update(s, id, cnt(UINT64_MAX, 4),
					      NOW_MS + 1, STORE_EXITED), 0);
	ck_assert_int_eq(store_flush(s), 0);
	list(s, NULL, &v);
	ck_assert_uint_eq(v.n, 1);
	ck_assert_uint_eq(v.p[0].pid, 7);
	ck_assert_uint_eq(v.p[0].start_time, 1007);
	ck_assert(!v.p[0].has_rank && !v.p[0].has_local_rank &&
		  !v.p[0].has_world_size);
	ck_assert_str_eq(v.p[0].job, "-");
	ck_assert_uint_eq(v.p[0].events, UINT64_MAX);
	ck_assert_uint_eq(v.p[0].lost, 4);
	ck_assert_int_eq(v.p[0].state, STORE_EXITED);
	ck_assert_int_eq(v.p[0].first_ms, NOW_MS);
	ck_assert_int_eq(v.p[0].last_ms, NOW_MS + 2);
	ck_assert_int_eq(store_process_update(s, id, cnt(0, 0), 0,
					      STORE_STATE_COUNT), -EINVAL);
	store_close(s);
	free(path);
}
END_TEST

START_TEST(store_dedup_equal_keys_add_counts)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(1, "j", 0, 0);
	struct store_finding f, g;
	struct seen v;
	int64_t pid = reg(s, &p);

	f = race(pid);
	f.v.count = 2;
	f.v.first_ms = NOW_MS + 10;
	f.v.last_ms = NOW_MS + 20;
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	/* Not in the key: ptr, alloc, seqs, detected_at. */
	g = f;
	g.v.ptr = 0x1234;
	g.v.alloc.ptr = 0x1000;
	g.v.alloc.stack.frames = stack_a;
	g.v.access.seq = 99;
	g.v.previous.seq = 98;
	g.v.detected_at = detected_at_name(DETECTED_AT_FLUSH);
	g.v.count = 3;
	g.v.first_ms = NOW_MS + 5;
	g.v.last_ms = NOW_MS + 50;
	ck_assert_int_eq(store_finding_submit(s, &g), 0);
	g.v.count = 1;
	g.v.last_ms = NOW_MS + 30; /* an earlier last_ms does not win */
	ck_assert_int_eq(store_finding_submit(s, &g), 0);
	ck_assert_int_eq(store_flush(s), 0);

	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, 1);
	ck_assert_uint_eq(v.f[0].v.count, 6);
	ck_assert_int_eq(v.f[0].v.first_ms, NOW_MS + 5);
	ck_assert_int_eq(v.f[0].v.last_ms, NOW_MS + 50);
	/* The first row's details. */
	ck_assert_str_eq(v.text,
			 "data_race pid=1 job=j count=6 ptr=7f0000001000 "
			 "at=launch alloc=7f0000000000+1048576@0"
			 "[alloc.py:1 empty] "
			 "acc=1/7/w/aten::add_[train.py:10 step|train.py:3 main] "
			 "prev=2/5/r/aten::mul[model.py:7 forward|"
			 "train.py:10 step|train.py:3 main]\n");
	store_close(s);
	free(path);
}
END_TEST

/* Each part of the key, changed alone, makes a finding of its own. */
START_TEST(store_dedup_distinct_keys_stay_distinct)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(1, "j", 0, 0), q = proc(2, "j", 0, 0);
	struct store_finding f[14];
	struct seen v;
	int64_t a = reg(s, &p), b = reg(s, &q);
	size_t n = 0;

	f[n++] = race(a);
	f[n] = race(a), f[n].v.kind = finding_kind_name(FINDING_MISSING_RECORD_STREAM), n++;
	f[n] = race(a), f[n].v.access.stream = 3, n++;
	f[n] = race(a), f[n].v.access.op = "aten::sub", n++;
	f[n] = race(a), f[n].v.access.op = NULL, n++;
	f[n] = race(a), f[n].v.access.write = false, n++;
	f[n] = race(a), f[n].v.access.stack.frames = stack_b, f[n].v.access.stack.n = 3,
	n++;
	f[n] = race(a), f[n].v.access.stack.n = 0, n++;
	f[n] = race(a), f[n].v.previous.stream = 3, n++;
	f[n] = race(a), f[n].v.previous.op = "aten::add_", n++;
	f[n] = race(a), f[n].v.previous.write = true, n++;
	f[n] = race(a), f[n].v.previous.stack.n = 1, n++;
	f[n] = race(a), f[n].v.has_previous = false, n++;
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(store_finding_submit(s, &f[i]), 0);
	/* Another process: its own row. */
	f[n] = race(b);
	ck_assert_int_eq(store_finding_submit(s, &f[n]), 0);
	/* And all of it again: only counts change. */
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(store_finding_submit(s, &f[i]), 0);
	ck_assert_int_eq(store_flush(s), 0);

	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, n + 1);
	for (size_t i = 0; i < v.n; i++)
		ck_assert_uint_eq(v.f[i].v.count, v.pids[i] == 2 ? 1 : 2);
	ck_assert_ptr_nonnull(strstr(v.text, "acc=1/7/w/-[train.py"));
	ck_assert_ptr_nonnull(strstr(v.text, "acc=1/7/w/aten::add_[] prev"));
	ck_assert_ptr_nonnull(strstr(v.text, "main]\n"));
	store_close(s);
	free(path);
}
END_TEST

/* A missing record_stream's allocation side, its stream (known or not)
 * and its stack, is part of the engine's key, and so of the store's: two
 * allocations on streams 0 and 1 used on stream 2 are two rows. */
START_TEST(store_dedup_key_is_the_engines)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(1, "j", 0, 0);
	struct store_finding f[4];
	struct seen v;
	int64_t a = reg(s, &p);
	size_t n = 0;

	for (size_t i = 0; i < 4; i++) {
		f[i] = race(a);
		f[i].v.kind = finding_kind_name(FINDING_MISSING_RECORD_STREAM);
		f[i].v.detected_at = detected_at_name(DETECTED_AT_FREE);
		f[i].v.has_previous = false;
		f[i].v.access.stream = 2;
	}
	f[n++].v.alloc.stream = 0;
	f[n++].v.alloc.stream = 1;
	f[n++].v.alloc.has_stream = false;
	f[n++].v.alloc.stack.n = 0;
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(store_finding_submit(s, &f[i]), 0);
	ck_assert_int_eq(store_flush(s), 0);

	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, n);
	for (size_t i = 0; i < v.n; i++)
		ck_assert_uint_eq(v.f[i].v.count, 1);
	store_close(s);
	free(path);
}
END_TEST

START_TEST(store_strings_and_stacks_stored_once)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(1, "j", 0, 0);
	struct store_finding f;
	struct seen v;
	int64_t id = reg(s, &p);

	for (int i = 0; i < 10; i++) {
		f = race(id);
		f.v.access.stream = (uint64_t)i; /* ten rows */
		ck_assert_int_eq(store_finding_submit(s, &f), 0);
	}
	ck_assert_int_eq(store_flush(s), 0);
	/* Frames: 4 distinct texts; ops: 2; stacks: a, b, c. */
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM strings"), 6);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM stacks"), 3);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM findings"), 10);
	ck_assert_int_eq(sql_int(path, "SELECT count(DISTINCT acc_stack)"
				       " FROM findings"), 1);
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, 10);
	ck_assert_uint_eq(v.f[9].v.access.stream, 9);
	store_close(s);
	/* Another daemon (nothing in memory) finds them too. */
	s = open_store(path, 0);
	f = race(reg(s, &p));
	f.v.access.stream = 10;
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_flush(s), 0);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM strings"), 6);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM stacks"), 3);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM findings"), 11);
	store_close(s);
	free(path);
}
END_TEST

/* Values at the edges of their types come back as they went in. */
START_TEST(store_finding_roundtrips_extremes)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(UINT32_MAX, "j", UINT32_MAX, UINT32_MAX);
	struct store_finding f;
	struct seen v;
	struct procs w;
	int64_t id;

	p.start_time = UINT64_MAX;
	id = reg(s, &p);
	f = race(id);
	f.v.kind = finding_kind_name(FINDING_MISSING_RECORD_STREAM);
	f.v.detected_at = detected_at_name(DETECTED_AT_FREE);
	f.v.ptr = UINT64_MAX;
	f.v.alloc.has_stream = false;
	f.v.alloc.stack.n = 0;
	f.v.access.stream = UINT64_MAX;
	f.v.access.seq = UINT64_MAX;
	f.v.has_previous = false;
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_flush(s), 0);
	findings(s, NULL, &v);
	ck_assert_str_eq(v.text,
			 "missing_record_stream pid=4294967295 job=j count=1 "
			 "ptr=ffffffffffffffff at=free "
			 "alloc=7f0000000000+1048576@-[] "
			 "acc=18446744073709551615/18446744073709551615/w/"
			 "aten::add_[train.py:10 step|train.py:3 main]\n");
	ck_assert(!v.f[0].v.has_previous);
	list(s, NULL, &w);
	ck_assert_uint_eq(w.p[0].start_time, UINT64_MAX);
	ck_assert_uint_eq(w.p[0].rank, UINT32_MAX);
	ck_assert_uint_eq(w.p[0].uid, UINT32_MAX);
	ck_assert_uint_eq(w.p[0].findings, 1);
	f.v.kind = "no_such_kind";
	ck_assert_int_eq(store_finding_submit(s, &f), -EINVAL);
	f.v.kind = NULL;
	ck_assert_int_eq(store_finding_submit(s, &f), -EINVAL);
	store_close(s);
	free(path);
}
END_TEST

/* Three processes, two jobs, two users; findings 1..9 round-robin. */
static struct store *filter_fixture(char **path, int64_t ids[3])
{
	struct store *s;
	struct store_process p[3] = { proc(10, "jobA", 0, 1000),
				      proc(11, "jobA", 1, 1001),
				      proc(12, "jobB", 0, 1000) };

	*path = db_path();
	s = open_store(*path, 0);
	for (int i = 0; i < 3; i++) {
		p[i].last_ms = NOW_MS + i;
		ids[i] = reg(s, &p[i]);
	}
	for (int i = 0; i < 9; i++) {
		struct store_finding f = race(ids[i % 3]);

		f.v.access.stream = (uint64_t)i;
		f.v.kind = finding_kind_name(i == 4 ?
						     FINDING_MISSING_RECORD_STREAM :
						     FINDING_DATA_RACE);
		f.v.last_ms = NOW_MS + i;
		ck_assert_int_eq(store_finding_submit(s, &f), 0);
	}
	ck_assert_int_eq(store_flush(s), 0);
	return s;
}

static void ck_streams(const struct seen *v, const char *want)
{
	char got[256] = "";
	size_t len = 0;

	for (size_t i = 0; i < v->n; i++) {
		len += (size_t)snprintf(got + len, sizeof(got) - len, "%s%" PRIu64,
					i ? "," : "", v->f[i].v.access.stream);
		if (i > 0)
			ck_assert_int_gt(v->ids[i], v->ids[i - 1]);
	}
	ck_assert_str_eq(got, want);
}

START_TEST(store_findings_filters)
{
	struct store_filter f;
	struct seen v;
	int64_t ids[3];
	char *path;
	struct store *s = filter_fixture(&path, ids);

	findings(s, NULL, &v);
	ck_streams(&v, "0,1,2,3,4,5,6,7,8");
	f = (struct store_filter){ .job = "jobA" };
	findings(s, &f, &v);
	ck_streams(&v, "0,1,3,4,6,7");
	f = (struct store_filter){ .has_pid = true, .pid = 12 };
	findings(s, &f, &v);
	ck_streams(&v, "2,5,8");
	f = (struct store_filter){ .has_rank = true, .rank = 1 };
	findings(s, &f, &v);
	ck_streams(&v, "1,4,7");
	f = (struct store_filter){ .has_kind = true,
				   .kind = FINDING_MISSING_RECORD_STREAM };
	findings(s, &f, &v);
	ck_streams(&v, "4");
	f = (struct store_filter){ .since_ms = NOW_MS + 6 };
	findings(s, &f, &v);
	ck_streams(&v, "6,7,8");
	/* A follower's after_id. */
	findings(s, NULL, &v);
	f = (struct store_filter){ .after_id = v.ids[6] };
	findings(s, &f, &v);
	ck_streams(&v, "7,8");
	/* Everything together. */
	f = (struct store_filter){ .job = "jobA", .has_rank = true, .rank = 0,
				   .has_kind = true,
				   .kind = FINDING_DATA_RACE,
				   .since_ms = NOW_MS + 1 };
	findings(s, &f, &v);
	ck_streams(&v, "3,6");
	f = (struct store_filter){ .job = "nope" };
	findings(s, &f, &v);
	ck_assert_uint_eq(v.n, 0);
	store_close(s);
	free(path);
}
END_TEST

START_TEST(store_findings_limit_gives_newest_ascending)
{
	struct store_filter f;
	struct seen v;
	int64_t ids[3];
	char *path;
	struct store *s = filter_fixture(&path, ids);

	f = (struct store_filter){ .limit = 3 };
	findings(s, &f, &v);
	ck_streams(&v, "6,7,8");
	f = (struct store_filter){ .limit = 2, .job = "jobA" };
	findings(s, &f, &v);
	ck_streams(&v, "6,7");
	f = (struct store_filter){ .limit = 1 };
	findings(s, &f, &v);
	ck_streams(&v, "8");
	f = (struct store_filter){ .limit = 100 };
	findings(s, &f, &v);
	ck_streams(&v, "0,1,2,3,4,5,6,7,8");
	/* A callback's negative return stops the walk and is returned. */
	memset(&v, 0, sizeof(v));
	v.stop_after = 2;
	ck_assert_int_eq(store_findings(s, NULL, seen_cb, &v), -42);
	ck_assert_uint_eq(v.n, 2);
	store_close(s);
	free(path);
}
END_TEST

START_TEST(store_uid_filter_hides_other_users)
{
	struct store_filter f = { .has_uid = true, .uid = 1001 };
	struct procs w;
	struct seen v;
	int64_t ids[3];
	char *path;
	struct store *s = filter_fixture(&path, ids);

	findings(s, &f, &v);
	ck_streams(&v, "1,4,7");
	list(s, &f, &w);
	ck_assert_uint_eq(w.n, 1);
	ck_assert_uint_eq(w.p[0].uid, 1001);
	/* finding_get: another user's finding is not there. */
	findings(s, NULL, &v);
	memset(&v, 0, sizeof(v));
	f.uid = 1000;
	ck_assert_int_eq(store_finding_get(s, 4, &f, seen_cb, &v), 0);
	ck_assert_uint_eq(v.n, 1);
	ck_assert_int_eq(v.ids[0], 4);
	f.uid = 1001;
	ck_assert_int_eq(store_finding_get(s, 4, &f, seen_cb, &v), -ENOENT);
	ck_assert_int_eq(store_finding_get(s, 5, &f, seen_cb, &v), 0);
	ck_assert_uint_eq(v.n, 2);
	store_close(s);
	free(path);
}
END_TEST

START_TEST(store_finding_get_missing_is_enoent)
{
	struct seen v = { .n = 0 };
	int64_t ids[3];
	char *path;
	struct store *s = filter_fixture(&path, ids);

	ck_assert_int_eq(store_finding_get(s, 10, NULL, seen_cb, &v), -ENOENT);
	ck_assert_int_eq(store_finding_get(s, 0, NULL, seen_cb, &v), -ENOENT);
	ck_assert_int_eq(store_finding_get(s, INT64_MAX, NULL, seen_cb, &v),
			 -ENOENT);
	ck_assert_uint_eq(v.n, 0);
	ck_assert_int_eq(store_finding_get(s, 9, NULL, seen_cb, &v), 0);
	ck_assert_uint_eq(v.n, 1);
	ck_assert_uint_eq(v.f[0].v.access.stream, 8);
	store_close(s);
	free(path);
}
END_TEST

START_TEST(store_list_recent_first_and_filters)
{
	struct store_filter f;
	struct procs w;
	int64_t ids[3];
	char *path;
	struct store *s = filter_fixture(&path, ids);

	list(s, NULL, &w);
	ck_assert_uint_eq(w.n, 3);
	ck_assert_uint_eq(w.p[0].pid, 12);
	ck_assert_uint_eq(w.p[2].pid, 10);
	ck_assert_uint_eq(w.p[0].findings, 3);
	f = (struct store_filter){ .job = "jobA" };
	list(s, &f, &w);
	ck_assert_uint_eq(w.n, 2);
	ck_assert_uint_eq(w.p[0].pid, 11);
	f = (struct store_filter){ .has_kind = true,
				   .kind = FINDING_MISSING_RECORD_STREAM };
	list(s, &f, &w);
	ck_assert_uint_eq(w.n, 1);
	ck_assert_uint_eq(w.p[0].pid, 11);
	f = (struct store_filter){ .since_ms = NOW_MS + 1, .limit = 1 };
	list(s, &f, &w);
	ck_assert_uint_eq(w.n, 1);
	ck_assert_uint_eq(w.p[0].pid, 12);
	f = (struct store_filter){ .has_pid = true, .pid = 10,
				   .has_rank = true, .rank = 0 };
	list(s, &f, &w);
	ck_assert_uint_eq(w.n, 1);
	store_close(s);
	free(path);
}
END_TEST

/* A list answer walked a page at a time: the ids in store_list()'s order,
 * then the processes as they are when each page is read. */
START_TEST(store_list_ids_then_pages)
{
	struct store_filter f = { .job = "jobA" };
	struct procs all, w;
	int64_t ids[3], *got = NULL, gone = 999;
	size_t n = 0;
	char *path;
	struct store *s = filter_fixture(&path, ids);

	list(s, NULL, &all);
	ck_assert_int_eq(store_list_ids(s, NULL, 10, &got, &n), 0);
	ck_assert_uint_eq(n, all.n);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(got[i], all.p[i].id);
	/* Page by page, and an id no longer stored is passed over. */
	memset(&w, 0, sizeof(w));
	ck_assert_int_eq(store_list_get(s, got, 2, procs_cb, &w), 0);
	ck_assert_int_eq(store_list_get(s, &gone, 1, procs_cb, &w), 0);
	ck_assert_int_eq(store_list_get(s, got + 2, n - 2, procs_cb, &w), 0);
	ck_assert_uint_eq(w.n, n);
	for (size_t i = 0; i < n; i++)
		ck_assert_uint_eq(w.p[i].pid, all.p[i].pid);
	free(got);
	/* Filters as store_list(); more than `max` is refused. */
	ck_assert_int_eq(store_list_ids(s, &f, 10, &got, &n), 0);
	ck_assert_uint_eq(n, 2);
	free(got);
	got = NULL;
	ck_assert_int_eq(store_list_ids(s, NULL, 2, &got, &n), -E2BIG);
	ck_assert_ptr_null(got);
	store_close(s);
	free(path);
}
END_TEST

START_TEST(store_migrates_an_empty_file)
{
	char *path = db_path();
	struct store *s;
	FILE *fp = fopen(path, "w");

	ck_assert_ptr_nonnull(fp);
	fclose(fp);
	s = open_store(path, 0);
	store_close(s);
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), 4);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM sqlite_master"
				       " WHERE type = 'table' AND name IN"
				       " ('processes', 'findings', 'strings',"
				       " 'stacks')"), 4);
	/* Opening again migrates nothing. */
	s = open_store(path, 0);
	store_close(s);
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), 4);
	free(path);
}
END_TEST

/* A database of the first schema keeps its processes and gains the
 * counters of the second, at zero. */
START_TEST(store_migrates_version_1_keeping_rows)
{
	char *path = db_path();
	struct store_process p = proc(7, "j", 0, 1000);
	struct store *s = open_store(path, 0);
	struct procs v;

	reg(s, &p);
	store_close(s);
	sql_exec(path, "ALTER TABLE processes DROP COLUMN gaps;"
		       " ALTER TABLE processes DROP COLUMN ring_ops;"
		       " ALTER TABLE processes DROP COLUMN run;"
		       " ALTER TABLE findings DROP COLUMN acc_graph;"
		       " ALTER TABLE findings DROP COLUMN prev_graph;"
		       " PRAGMA user_version = 1");
	s = open_store(path, 0);
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), 4);
	list(s, NULL, &v);
	ck_assert_int_eq(v.n, 1);
	ck_assert_int_eq(v.p[0].pid, 7);
	ck_assert_int_eq(v.p[0].gaps, 0);
	ck_assert_ptr_null(v.p[0].run);
	ck_assert_int_eq(v.p[0].state, STORE_EXITED);
	store_close(s);
	free(path);
}
END_TEST

/* A database of schema 3 (before graphs) keeps its findings, whose
 * accesses gain no graph, and a repeat of one still merges into its row:
 * the key of a finding without graphs is what it was. */
START_TEST(store_migrates_version_3_findings_without_graphs)
{
	char *path = db_path();
	struct store_process p = proc(7, "j", 0, 1000);
	struct store *s = open_store(path, 0);
	struct store_finding f;
	int64_t id = reg(s, &p);
	struct seen v;

	f = race(id);
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	store_close(s);
	sql_exec(path, "ALTER TABLE findings DROP COLUMN acc_graph;"
		       " ALTER TABLE findings DROP COLUMN prev_graph;"
		       " PRAGMA user_version = 3");
	s = open_store(path, 0);
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), 4);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM findings"
				       " WHERE acc_graph IS NULL"
				       " AND prev_graph IS NULL"), 1);
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_flush(s), 0);
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, 1);
	ck_assert_uint_eq(v.f[0].v.count, 2);
	ck_assert(!v.f[0].v.access.has_graph);
	ck_assert(!v.f[0].v.previous.has_graph);
	store_close(s);
	free(path);
}
END_TEST

/* The engine's key of `f`'s shape, text ids all 1 (the race's are equal
 * between the findings compared). */
static void engine_key(const struct store_finding *f, struct finding_key *k)
{
	const struct finding_view *v = &f->v;
	struct finding e = { .has_alloc = v->has_alloc,
			     .has_previous = v->has_previous };
	const struct finding_text t = { 1, 1, 1, 1, 1 };

	ck_assert(finding_kind_of(v->kind, &e.kind));
	e.alloc.has_stream = v->alloc.has_stream;
	e.alloc.stream = v->alloc.stream;
	e.access = (struct finding_access){
		.stream = v->access.stream, .write = v->access.write,
		.has_graph = v->access.has_graph, .graph = v->access.graph };
	e.previous = (struct finding_access){
		.stream = v->previous.stream, .write = v->previous.write,
		.has_graph = v->previous.has_graph,
		.graph = v->previous.graph };
	finding_key(&e, &t, k);
}

/* Graph ids travel to the row and back, and the store merges two
 * findings exactly when the engine's key (finding_key()) merges them. */
START_TEST(store_keeps_graphs_and_merges_by_the_engines_key)
{
	char *path = db_path();
	struct store_process p = proc(7, "j", 0, 1000);
	struct store *s = open_store(path, 0);
	struct store_finding f[4];
	struct finding_key k[4];
	int64_t id = reg(s, &p);
	size_t rows = 0;
	struct seen v;

	for (size_t i = 0; i < 4; i++) {
		f[i] = race(id);
		f[i].v.detected_at = "replay";
	}
	f[0].v.access.has_graph = true, f[0].v.access.graph = 5;
	f[1].v.access.has_graph = true, f[1].v.access.graph = 6;
	f[2].v.access.has_graph = true, f[2].v.access.graph = 5;
	f[2].v.previous.has_graph = true, f[2].v.previous.graph = 5;
	/* f[3]: no graph at all */
	for (size_t i = 0; i < 4; i++) {
		bool seen_key = false;

		engine_key(&f[i], &k[i]);
		for (size_t j = 0; j < i; j++)
			seen_key |= memcmp(&k[i], &k[j], sizeof(k[i])) == 0;
		rows += !seen_key;
		ck_assert_int_eq(store_finding_submit(s, &f[i]), 0);
	}
	ck_assert_int_eq(store_flush(s), 0);
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, rows);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM findings"
				       " WHERE acc_graph = 5"), rows == 4 ? 2 : 1);
	ck_assert_ptr_nonnull(strstr(v.text, "acc=1/7/w/aten::add_"
					     "[train.py:10 step|train.py:3 "
					     "main]@g5"));
	if (rows == 4) /* a key with graphs, as graphs.md has it */
		ck_assert_ptr_nonnull(strstr(v.text, "prev=2/5/r/aten::mul"
						     "[model.py:7 forward|"
						     "train.py:10 step|"
						     "train.py:3 main]@g5"));
	store_close(s);
	free(path);
}
END_TEST

/* A process's run (NPUSAN_RUN) is kept, and a later registration of the
 * same process may name it. */
START_TEST(store_keeps_a_process_run)
{
	char *path = db_path();
	struct store_process p = proc(7, "j", 0, 1000);
	struct store_process q = proc(8, "j", 0, 1000);
	struct store *s = open_store(path, 0);
	struct procs v;

	p.run = "ci-41";
	reg(s, &p);
	reg(s, &q);
	list(s, NULL, &v);
	ck_assert_int_eq(v.n, 2);
	for (size_t i = 0; i < v.n; i++) {
		if (v.p[i].pid == 7)
			ck_assert_str_eq(v.p[i].run, "ci-41");
		else
			ck_assert_ptr_null(v.p[i].run);
	}
	store_close(s);
	free(path);
}
END_TEST

START_TEST(store_refuses_a_newer_schema)
{
	char *path = db_path();
	struct store_opts o = { .path = path };
	struct store *s = NULL;
	char *err = NULL;

	sql_exec(path, "CREATE TABLE future (x); PRAGMA user_version = 5");
	ck_assert_int_eq(store_open(&o, &s, &err), -EIO);
	ck_assert_ptr_null(s);
	ck_assert_ptr_nonnull(err);
	ck_assert_ptr_nonnull(strstr(err, path));
	ck_assert_ptr_nonnull(strstr(err, "newer"));
	free(err);
	/* Untouched. */
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), 5);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM sqlite_master"
				       " WHERE name = 'processes'"), 0);
	free(path);
}
END_TEST

START_TEST(store_refuses_what_is_not_a_database)
{
	char *path = db_path();
	struct store_opts o = { .path = path };
	struct store *s = NULL;
	char *err = NULL;
	FILE *fp = fopen(path, "w");

	ck_assert_ptr_nonnull(fp);
	fputs("this is not an SQLite database, it is a text file of some "
	      "length, longer than the header SQLite reads first.\n", fp);
	fclose(fp);
	ck_assert_int_eq(store_open(&o, &s, &err), -EIO);
	ck_assert_ptr_nonnull(err);
	ck_assert_ptr_nonnull(strstr(err, path));
	free(err);
	free(path);

	o.path = "/nonexistent-dir/npusan.db";
	ck_assert_int_eq(store_open(&o, &s, &err), -EIO);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent-dir/npusan.db"));
	free(err);
}
END_TEST

START_TEST(store_reopen_keeps_everything_committed)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(3, "j", 2, 0);
	struct store_finding f;
	struct procs w;
	struct seen v, v2;
	int64_t id = reg(s, &p);

	f = race(id);
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_process_update(s, id, cnt(42, 1), NOW_MS + 3,
					      STORE_RUNNING), 0);
	findings(s, NULL, &v); /* maybe not committed yet: no matter */
	/* No flush: close commits what is queued. */
	store_close(s);

	s = open_store(path, 0);
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, 1);
	list(s, NULL, &w);
	ck_assert_uint_eq(w.n, 1);
	ck_assert_uint_eq(w.p[0].events, 42);
	/* Left running by the previous daemon: exited now. */
	ck_assert_int_eq(w.p[0].state, STORE_EXITED);
	/* Registering again brings the same row back, running. */
	ck_assert_int_eq(reg(s, &p), id);
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_flush(s), 0);
	findings(s, NULL, &v2);
	ck_assert_uint_eq(v2.n, 1);
	ck_assert_uint_eq(v2.f[0].v.count, 2);
	ck_assert_int_eq(v2.ids[0], v.ids[0]);
	store_close(s);
	free(path);
}
END_TEST

/* A daemon SIGKILLed after store_flush() keeps what it flushed. */
START_TEST(store_flushed_data_survives_sigkill)
{
	char *path = db_path();
	struct store *s;
	struct seen v;
	struct procs w;
	int fds[2], status;
	char c;
	pid_t pid;

	ck_assert_int_eq(pipe(fds), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct store_opts o = { .path = path };
		struct store_process p = proc(5, "killed", 0, 0);
		struct store_finding f;
		int64_t id;
		char *err;

		if (store_open(&o, &s, &err) != 0 ||
		    store_process_register(s, &p, &id, NULL) != 0)
			_exit(1);
		for (int i = 0; i < 100; i++) {
			f = race(id);
			f.v.access.stream = (uint64_t)i;
			if (store_finding_submit(s, &f) != 0)
				_exit(1);
		}
		if (store_process_update(s, id, cnt(77, 0), NOW_MS + 1,
					 STORE_RUNNING) != 0 ||
		    store_flush(s) != 0 || write(fds[1], "k", 1) != 1)
			_exit(1);
		/* Keep queueing until killed: nothing of this is promised. */
		for (;;) {
			f = race(id);
			f.v.access.stream = 1000;
			store_finding_submit(s, &f);
			usleep(100);
		}
	}
	close(fds[1]);
	ck_assert_int_eq(read(fds[0], &c, 1), 1);
	close(fds[0]);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

	s = open_store(path, 0);
	list(s, NULL, &w);
	ck_assert_uint_eq(w.n, 1);
	ck_assert_uint_eq(w.p[0].events, 77);
	ck_assert_str_eq(w.p[0].job, "killed");
	findings(s, NULL, &v);
	ck_assert_uint_ge(v.n, 100);
	ck_assert_uint_le(v.n, 101);
	for (int i = 0; i < 100; i++)
		ck_assert_uint_eq(v.f[i].v.access.stream, (uint64_t)i);
	store_close(s);
	free(path);
}
END_TEST

START_TEST(store_prune_deletes_old_exited_processes)
{
	char *path = db_path();
	struct store *s = open_store(path, 7);
	struct store_process p[3] = { proc(1, "old", 0, 0),
				      proc(2, "recent", 0, 0),
				      proc(3, "running", 0, 0) };
	static const char *const only_old[] = { "old.py:1" };
	struct store_finding f;
	struct store_stats st;
	struct procs w;
	struct seen v;
	int64_t ids[3];

	for (int i = 0; i < 3; i++)
		ids[i] = reg(s, &p[i]);
	for (int i = 0; i < 3; i++) {
		f = race(ids[i]);
		ck_assert_int_eq(store_finding_submit(s, &f), 0);
	}
	/* The old one's own operator and stack. */
	f = race(ids[0]);
	f.v.access.op = "old::op";
	f.v.access.stack.frames = only_old;
	f.v.access.stack.n = 1;
	f.v.has_previous = false;
	f.v.has_alloc = false;
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	/* A finding of NULLs (no op, stacks, alloc or previous) stays: the
	 * NULLs must not keep the prune from deleting what nothing uses. */
	f = race(ids[1]);
	f.v.kind = finding_kind_name(FINDING_MISSING_RECORD_STREAM);
	f.v.access.op = NULL;
	f.v.access.stack.n = 0;
	f.v.has_previous = false;
	f.v.has_alloc = false;
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_process_update(s, ids[0], cnt(1, 0), NOW_MS,
					      STORE_EXITED), 0);
	ck_assert_int_eq(store_process_update(s, ids[1], cnt(1, 0), NOW_MS,
					      STORE_EXITED), 0);
	ck_assert_int_eq(store_flush(s), 0);
	/* last_ms never goes back through the store: age them here. */
	sql_exec(path, "UPDATE processes SET last_ms = CASE pid"
		       " WHEN 1 THEN 1700000000000 - 8 * 86400000"
		       " WHEN 2 THEN 1700000000000 - 6 * 86400000"
		       " ELSE 0 END");
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM strings"), 8);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM stacks"), 4);

	ck_assert_int_eq(store_prune(s, NOW_MS), 1);
	list(s, NULL, &w);
	ck_assert_uint_eq(w.n, 2);
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, 3);
	for (size_t i = 0; i < v.n; i++)
		ck_assert_uint_ne(v.pids[i], 1);
	/* old.py:1 and old::op, and the stack, went with it. */
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM strings"), 6);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM stacks"), 3);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM strings"
				       " WHERE text LIKE 'old%'"), 0);
	ck_assert_int_eq(store_prune(s, NOW_MS), 0);
	/* The texts that went can come back (no stale ids anywhere). */
	f = race(ids[2]);
	f.v.access.op = "old::op";
	f.v.access.stack.frames = only_old;
	f.v.access.stack.n = 1;
	f.v.has_previous = false;
	f.v.has_alloc = false;
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_flush(s), 0);
	findings(s, &(struct store_filter){ .has_pid = true, .pid = 3 }, &v);
	ck_assert_uint_eq(v.n, 2);
	ck_assert_ptr_nonnull(strstr(v.text, "acc=1/7/w/old::op[old.py:1]\n"));
	/* Six days later the recent one is old too. */
	ck_assert_int_eq(store_prune(s, NOW_MS + 2 * DAY_MS), 1);
	ck_assert_int_eq(store_stats(s, &st), 0);
	ck_assert_uint_eq(st.processes[STORE_RUNNING], 1);
	ck_assert_uint_eq(st.processes[STORE_EXITED], 0);
	ck_assert_uint_eq(st.findings, 2);
	/* What is left still reads back whole. */
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, 2);
	ck_assert_ptr_nonnull(strstr(v.text, "[model.py:7 forward|"));
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM strings"), 8);
	store_close(s);

	/* retain_days 0: never. */
	s = open_store(path, 0);
	ck_assert_int_eq(store_prune(s, INT64_MAX), 0);
	store_close(s);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM processes"), 1);
	free(path);
}
END_TEST

START_TEST(store_stats_counts)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(1, "j", 0, 0), q = proc(2, "j", 0, 0);
	struct store_finding f;
	struct store_stats st;
	int64_t a, b;

	ck_assert_int_eq(store_stats(s, &st), 0);
	ck_assert_uint_eq(st.processes[STORE_RUNNING], 0);
	ck_assert_uint_eq(st.findings, 0);
	ck_assert_uint_gt(st.db_bytes, 0);
	a = reg(s, &p);
	b = reg(s, &q);
	ck_assert_int_eq(store_process_update(s, b, cnt(0, 0), NOW_MS,
					      STORE_EXITED), 0);
	f = race(a);
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	f.v.access.stream = 9;
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_flush(s), 0);
	ck_assert_int_eq(store_stats(s, &st), 0);
	ck_assert_uint_eq(st.processes[STORE_RUNNING], 1);
	ck_assert_uint_eq(st.processes[STORE_EXITED], 1);
	ck_assert_uint_eq(st.findings, 2);
	/* The database file and its WAL, which holds what is new. */
	{
		struct stat db, wal;
		char *walpath;

		ck_assert_int_gt(asprintf(&walpath, "%s-wal", path), 0);
		ck_assert_int_eq(stat(path, &db), 0);
		ck_assert_int_eq(stat(walpath, &wal), 0);
		ck_assert_int_gt(wal.st_size, 0);
		ck_assert_uint_eq(st.db_bytes,
				  (uint64_t)db.st_size + (uint64_t)wal.st_size);
		free(walpath);
	}
	ck_assert_str_eq(store_state_name(STORE_EXITED), "exited");
	ck_assert_ptr_null(store_state_name(STORE_STATE_COUNT));
	store_close(s);
	free(path);
}
END_TEST

struct cb_count {
	atomic_int n;
	pthread_t caller;
	atomic_bool other_thread;
};

static void count_cb(void *arg)
{
	struct cb_count *c = arg;

	atomic_fetch_add(&c->n, 1);
	if (!pthread_equal(pthread_self(), c->caller))
		atomic_store(&c->other_thread, true);
}

START_TEST(store_commit_cb_called_after_commits)
{
	char *path = db_path();
	struct cb_count c = { .caller = pthread_self() };
	struct store_opts o = { .path = path, .commit_cb = count_cb,
				.commit_arg = &c };
	struct store_process p = proc(1, "j", 0, 0);
	struct store_finding f;
	struct store *s;
	char *err;
	int64_t id;
	int n;

	ck_assert_int_eq(store_open(&o, &s, &err), 0);
	ck_assert_int_eq(store_flush(s), 0);
	ck_assert_int_eq(atomic_load(&c.n), 0);
	ck_assert_int_eq(store_process_register(s, &p, &id, NULL), 0);
	n = atomic_load(&c.n);
	f = race(id);
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_flush(s), 0);
	/* The callback runs after the commit and before flush returns. */
	ck_assert_int_gt(atomic_load(&c.n), n);
	ck_assert(atomic_load(&c.other_thread));
	/* Without flush the timer commits, and calls it too. */
	n = atomic_load(&c.n);
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	for (int i = 0; i < 200 && atomic_load(&c.n) == n; i++)
		usleep(10000);
	ck_assert_int_gt(atomic_load(&c.n), n);
	store_close(s);
	free(path);
}
END_TEST

/* Past the batch size, flush still waits for all of it. */
START_TEST(store_flush_commits_everything_queued)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(1, "j", 0, 0);
	struct store_finding f;
	int64_t id = reg(s, &p);

	for (int i = 0; i < 5000; i++) {
		f = race(id);
		f.v.access.stream = (uint64_t)(i % 250);
		ck_assert_int_eq(store_finding_submit(s, &f), 0);
		ck_assert_int_eq(store_process_update(s, id, cnt((uint64_t)i, 0),
						      NOW_MS, STORE_RUNNING),
				 0);
	}
	ck_assert_int_eq(store_flush(s), 0);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM findings"), 250);
	ck_assert_int_eq(sql_int(path, "SELECT sum(count) FROM findings"),
			 5000);
	ck_assert_int_eq(sql_int(path, "SELECT events FROM processes"), 4999);
	ck_assert_int_eq(sql_int(path, "SELECT findings FROM processes"), 250);
	store_close(s);
	free(path);
}
END_TEST

START_TEST(store_uses_wal)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	sqlite3 *db;
	sqlite3_stmt *st;

	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &st,
					    NULL), SQLITE_OK);
	ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
	ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "wal");
	sqlite3_finalize(st);
	sqlite3_close(db);
	store_close(s);
	free(path);
}
END_TEST

/* Checks that each finding's access stack is the 200 frames in `arg`. */
static int stack_is_cb(void *arg, const struct store_finding *f,
		       const struct store_process *p)
{
	const char *const *want = arg;

	(void)p;
	ck_assert_uint_eq(f->v.access.stack.n, 200);
	for (size_t i = 0; i < 200; i++)
		ck_assert_str_eq(f->v.access.stack.frames[i], want[i]);
	return 0;
}

/* A full disk: the batch stays queued and goes in once there is room. */
START_TEST(store_full_disk_keeps_the_queue)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(1, "j", 0, 0);
	struct store_finding f;
	char frames[200][64];
	const char *stack[200];
	struct seen v;
	int64_t id = reg(s, &p);

	ck_assert_int_eq(store_flush(s), 0);
	store__max_pages(s, 1); /* no page more than it has */
	for (int i = 0; i < 200; i++) {
		snprintf(frames[i], sizeof(frames[i]),
			 "a/rather/long/path/to/some/module_%03d.py:%d", i, i);
		stack[i] = frames[i];
	}
	for (int i = 0; i < 50; i++) {
		f = race(id);
		f.v.access.stream = (uint64_t)i;
		f.v.access.stack.frames = stack;
		f.v.access.stack.n = 200;
		ck_assert_int_eq(store_finding_submit(s, &f), 0);
	}
	ck_assert_int_eq(store_flush(s), -EIO);
	ck_assert_int_eq(store_flush(s), -EIO);
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, 0);
	/* A registration in a failing round fails, not hangs. */
	p.pid = 2;
	{
		int64_t other;

		ck_assert_int_eq(store_process_register(s, &p, &other, NULL), -EIO);
	}
	store__max_pages(s, 1u << 30);
	ck_assert_int_eq(store_flush(s), 0);
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, 50);
	/* Frame by frame: ids the failed round saw were rolled back. */
	memset(&v, 0, sizeof(v));
	ck_assert_int_eq(store_findings(s, NULL, stack_is_cb, (void *)stack),
			 0);
	store_close(s);
	free(path);
}
END_TEST

/* Another program's connection holding the write lock on `path`. */
static sqlite3 *lock_db(const char *path)
{
	sqlite3 *db = NULL;

	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL),
			 SQLITE_OK);
	return db;
}

static void unlock_db(sqlite3 *db)
{
	ck_assert_int_eq(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
}

/* A registration while another program holds the write lock returns at
 * once with a provisional id; what is queued with it is stored under the
 * process's row once the lock is released. */
START_TEST(store_register_async_while_locked_stored_once_released)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(5, "locked", 2, 0);
	struct store_counters was;
	struct store_finding f;
	struct procs pv;
	struct seen v;
	sqlite3 *other = lock_db(path);
	int64_t ref = 0, id = 0;

	ck_assert_int_eq(store_process_register_async(s, &p, &ref), 0);
	ck_assert_int_lt(ref, 0);
	f = race(ref);
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_process_update(s, ref, cnt(29, 1), NOW_MS + 5,
					      STORE_EXITED), 0);
	tu_nap_ms(200); /* the writer tries, and waits for the lock */
	ck_assert_int_eq(store_process_registered(s, ref, &id, &was), 0);
	unlock_db(other);
	ck_assert_int_eq(store_flush(s), 0);
	ck_assert_int_eq(store_process_registered(s, ref, &id, &was), 1);
	ck_assert_int_gt(id, 0);
	ck_assert_uint_eq(was.events, 0);
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, 1);
	ck_assert_int_eq(v.f[0].process_id, id);
	list(s, NULL, &pv);
	ck_assert_uint_eq(pv.n, 1);
	ck_assert_int_eq(pv.p[0].id, id);
	ck_assert_str_eq(pv.p[0].job, "locked");
	ck_assert_uint_eq(pv.p[0].events, 29);
	ck_assert_uint_eq(pv.p[0].lost, 1);
	ck_assert_int_eq(pv.p[0].state, STORE_EXITED);
	store_process_forget(s, ref);
	ck_assert_int_eq(store_process_registered(s, ref, &id, NULL), -ENOENT);
	store_close(s);
	free(path);
}
END_TEST

/* A backlog far larger than the room the disk has left: what fits is
 * stored, a small round at a time, without waiting for room for all of
 * it; the rest goes in once there is room. */
START_TEST(store_full_disk_stores_what_fits)
{
	enum { N = 40, FRAMES = 300 };
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(1, "j", 0, 0);
	static char frames[N][FRAMES][80];
	const char *stack[N][FRAMES];
	struct store_finding f;
	struct seen v;
	int64_t id = reg(s, &p);
	sqlite3 *db;
	sqlite3_stmt *st;
	unsigned pages;

	ck_assert_int_eq(store_flush(s), 0);
	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA page_count", -1, &st,
					    NULL), SQLITE_OK);
	ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
	pages = (unsigned)sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	/* Room for about two of these findings (24 KiB of new frames each),
	 * not for forty. */
	store__max_pages(s, pages + 16);
	for (int i = 0; i < N; i++) {
		for (int j = 0; j < FRAMES; j++) {
			snprintf(frames[i][j], sizeof(frames[i][j]),
				 "finding_%02d/a/long/path/to/module_%03d.py:%d",
				 i, j, j);
			stack[i][j] = frames[i][j];
		}
		f = race(id);
		f.v.access.stream = (uint64_t)i + 10;
		f.v.access.stack.frames = stack[i];
		f.v.access.stack.n = FRAMES;
		ck_assert_int_eq(store_finding_submit(s, &f), 0);
	}
	memset(&v, 0, sizeof(v));
	for (int i = 0; i < 600 && v.n == 0; i++) {
		tu_nap_ms(50);
		findings(s, NULL, &v);
	}
	ck_assert_uint_gt(v.n, 0);
	ck_assert_uint_lt(v.n, N);
	store__max_pages(s, 1u << 30);
	ck_assert_int_eq(store_flush(s), 0);
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, N);
	store_close(s);
	free(path);
}
END_TEST

/* While the database takes no writes, findings wait up to the bound and
 * are refused and counted beyond it; a process's updates replace each
 * other rather than pile up; once the lock goes, what waited is stored. */
START_TEST(store_waiting_writes_are_bounded_and_counted)
{
	struct store_opts o = { .max_queue_bytes = 64 * 1024 };
	char *path = db_path();
	struct store *s = NULL;
	struct store_process p = proc(3, "j", 0, 0);
	struct store_health h;
	struct store_stats ss;
	struct store_finding f;
	struct procs pv;
	sqlite3 *other;
	int64_t id;
	int accepted = 0, refused = 0, rc;

	o.path = path;
	ck_assert_int_eq(store_open(&o, &s, NULL), 0);
	id = reg(s, &p);
	ck_assert_int_eq(store_flush(s), 0);
	other = lock_db(path);
	for (int i = 0; i < 2000; i++) {
		f = race(id);
		f.v.access.stream = (uint64_t)i;
		f.v.count = 3;
		rc = store_finding_submit(s, &f);
		ck_assert(rc == 0 || rc == -ENOBUFS);
		accepted += rc == 0;
		refused += rc == -ENOBUFS;
		ck_assert_int_eq(store_process_update(s, id, cnt((uint64_t)i, 0),
						      NOW_MS + i, STORE_RUNNING),
				 0);
	}
	for (int i = 2000; i < 3000; i++)
		ck_assert_int_eq(store_process_update(s, id, cnt((uint64_t)i, 0),
						      NOW_MS + i, STORE_RUNNING),
				 0);
	ck_assert_int_gt(accepted, 0);
	ck_assert_int_gt(refused, 0);
	store_get_health(s, &h);
	ck_assert_uint_eq(h.findings_dropped, 3 * (uint64_t)refused);
	/* The findings, an update after each (an update never overtakes its
	 * process's findings), and the last one (two while a round holds
	 * one): 3000 updates did not pile up. */
	ck_assert_uint_le(h.queued, 2 * (uint64_t)accepted + 2);
	unlock_db(other);
	ck_assert_int_eq(store_flush(s), 0);
	ck_assert_int_eq(store_stats(s, &ss), 0);
	ck_assert_uint_eq(ss.findings, (uint64_t)accepted);
	list(s, NULL, &pv);
	ck_assert_uint_eq(pv.p[0].events, 2999);
	ck_assert_int_eq(pv.p[0].last_ms, NOW_MS + 2999);
	store_get_health(s, &h);
	ck_assert(!h.failing);
	store_close(s);
	free(path);
}
END_TEST

static Suite *store_suite(void)
{
	Suite *s = suite_create("store");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, store_register_returns_same_row_again);
	tcase_add_test(tc, store_register_never_changes_owner);
	tcase_add_test(tc, store_register_after_queued_update_stays_running);
	tcase_add_test(tc, store_update_visible_after_flush);
	tcase_add_test(tc, store_dedup_equal_keys_add_counts);
	tcase_add_test(tc, store_dedup_distinct_keys_stay_distinct);
	tcase_add_test(tc, store_dedup_key_is_the_engines);
	tcase_add_test(tc, store_strings_and_stacks_stored_once);
	tcase_add_test(tc, store_finding_roundtrips_extremes);
	tcase_add_test(tc, store_findings_filters);
	tcase_add_test(tc, store_findings_limit_gives_newest_ascending);
	tcase_add_test(tc, store_uid_filter_hides_other_users);
	tcase_add_test(tc, store_finding_get_missing_is_enoent);
	tcase_add_test(tc, store_list_recent_first_and_filters);
	tcase_add_test(tc, store_list_ids_then_pages);
	tcase_add_test(tc, store_migrates_an_empty_file);
	tcase_add_test(tc, store_migrates_version_1_keeping_rows);
	tcase_add_test(tc, store_keeps_a_process_run);
	tcase_add_test(tc, store_migrates_version_3_findings_without_graphs);
	tcase_add_test(tc, store_keeps_graphs_and_merges_by_the_engines_key);
	tcase_add_test(tc, store_refuses_a_newer_schema);
	tcase_add_test(tc, store_refuses_what_is_not_a_database);
	tcase_add_test(tc, store_reopen_keeps_everything_committed);
	tcase_add_test(tc, store_flushed_data_survives_sigkill);
	tcase_add_test(tc, store_prune_deletes_old_exited_processes);
	tcase_add_test(tc, store_stats_counts);
	tcase_add_test(tc, store_commit_cb_called_after_commits);
	tcase_add_test(tc, store_flush_commits_everything_queued);
	tcase_add_test(tc, store_uses_wal);
	tcase_add_test(tc, store_full_disk_keeps_the_queue);
	tcase_add_test(tc, store_register_async_while_locked_stored_once_released);
	tcase_add_test(tc, store_full_disk_stores_what_fits);
	tcase_add_test(tc, store_waiting_writes_are_bounded_and_counted);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(store_suite());
}
