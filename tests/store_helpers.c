/*
 * store_helpers.c - test_store's shared helpers (store_helpers.h): stores
 * opened on fresh databases, the processes and findings the tests put in
 * them, and what the store's walks give back, rendered to text.
 */
#include <check.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "store_helpers.h"
#include "testutil.h"

char *db_path(void)
{
	char *dir = tu_tmpdir(), *path;

	ck_assert_int_gt(asprintf(&path, "%s/npusan.db", dir), 0);
	free(dir);
	return path;
}

struct store *open_store(const char *path, unsigned retain_days)
{
	struct store_opts o = { .path = path, .retain_days = retain_days };
	struct store *s = NULL;
	char *err = NULL;
	int rc = store_open(&o, &s, &err);

	ck_assert_msg(rc == 0, "store_open: %d %s", rc, err ? err : "");
	ck_assert_ptr_null(err);
	return s;
}

struct store_process proc(uint32_t pid, const char *job,
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
const struct store_counters *cnt(uint64_t events, uint64_t lost)
{
	static _Thread_local struct store_counters c;

	c = (struct store_counters){ .events = events, .lost = lost };
	return &c;
}

int64_t reg(struct store *s, const struct store_process *p)
{
	int64_t id = 0;

	ck_assert_int_eq(store_process_register(s, p, &id, NULL), 0);
	ck_assert_int_gt(id, 0);
	return id;
}

const char *const stack_a[2] = { "train.py:10 step", "train.py:3 main" };
const char *const stack_b[3] = { "model.py:7 forward", "train.py:10 step",
				"train.py:3 main" };
const char *const stack_c[1] = { "alloc.py:1 empty" };

/* A data race of process `pid_id`: write on stream 1 against a read on 2. */
struct store_finding race(int64_t process_id)
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
	if (a->arg != NULL)
		seen_add(v, "#%s", a->arg);
}

int seen_cb(void *arg, const struct store_finding *sf,
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
	if (f->has_free) {
		seen_add(v, " free=");
		seen_stack(v, f->free_stack.frames, f->free_stack.n);
	}
	seen_add(v, "\n");
	if (v->stop_after != 0 && (int)v->n == v->stop_after)
		return -42;
	return 0;
}

void findings(struct store *s, const struct store_filter *f,
	      struct seen *v)
{
	memset(v, 0, sizeof(*v));
	ck_assert_int_eq(store_findings(s, f, seen_cb, v), 0);
}

int procs_cb(void *arg, const struct store_process *p)
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

void list(struct store *s, const struct store_filter *f,
	  struct procs *v)
{
	memset(v, 0, sizeof(*v));
	ck_assert_int_eq(store_list(s, f, procs_cb, v), 0);
}

/* One integer from the database through SQLite itself. */
int64_t sql_int(const char *path, const char *sql)
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

void sql_exec(const char *path, const char *sql)
{
	sqlite3 *db;

	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	ck_assert_msg(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK,
		      "%s: %s", sql, sqlite3_errmsg(db));
	sqlite3_close(db);
}
