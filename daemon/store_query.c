/*
 * store_query.c - the store's reads: processes and findings as queries
 * ask for them, and the store's statistics. Every read runs on the read
 * connection, one at a time under `rlock`, on its caller's thread, and
 * sees what the writer has committed (store.c says who waits for what).
 *
 * Ownership: what a callback is handed lives in SQLite's rows and in a
 * walk's struct store_frames, valid during the call only; the walk frees
 * them. store_list_ids() hands its array to the caller.
 */
#include "store_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "grow.h"

/* A query's SQL and arguments, built from the filter's set fields. */
struct store_query {
	char sql[2048];
	size_t len;
	int nargs;
	struct {
		const char *text; /* NULL: an integer */
		int64_t i;
	} args[16];
};


static void store__q_add(struct store_query *q, const char *sql)
{
	size_t n = strlen(sql);

	/* Our own fixed fragments, a bounded number of them. */
	if (q->len + n >= sizeof(q->sql))
		abort();
	memcpy(q->sql + q->len, sql, n + 1);
	q->len += n;
}

static void store__q_int(struct store_query *q, const char *sql, int64_t v)
{
	if (q->nargs == (int)(sizeof(q->args) / sizeof(q->args[0])))
		abort();
	store__q_add(q, sql);
	q->args[q->nargs].text = NULL;
	q->args[q->nargs++].i = v;
}

static void store__q_text(struct store_query *q, const char *sql, const char *v)
{
	store__q_int(q, sql, 0);
	q->args[q->nargs - 1].text = v;
}

/* The filters on the process, `p` in the query. */
static void store__q_process_filter(struct store_query *q,
				    const struct store_filter *f)
{
	if (f->job != NULL)
		store__q_text(q, " AND p.job = ?", f->job);
	if (f->has_pid)
		store__q_int(q, " AND p.pid = ?", f->pid);
	if (f->has_rank)
		store__q_int(q, " AND p.rank = ?", f->rank);
	if (f->has_uid)
		store__q_int(q, " AND p.uid = ?", f->uid);
}

/* A callback's return: its negative errno stops a walk, anything else
 * goes on. */
static int store__cb_rc(int rc)
{
	return rc < 0 ? rc : 0;
}

/* A read failed: logs SQLite's reason. Holds rlock. -EIO. */
static int store__r_fail(struct store *s)
{
	store__log(s, LOG_ERROR, "query: %s", sqlite3_errmsg(s->rdb));
	return -EIO;
}

/* Prepares `q` on the read connection. Holds rlock. 0; -EIO. */
static int store__q_prepare(struct store *s, const struct store_query *q,
			    sqlite3_stmt **out)
{
	sqlite3_stmt *st;

	if (sqlite3_prepare_v2(s->rdb, q->sql, (int)q->len + 1, &st, NULL) !=
	    SQLITE_OK)
		return store__r_fail(s);
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
static int store__r_begin(struct store *s)
{
	if (sqlite3_exec(s->rdb, "BEGIN", NULL, NULL, NULL) != SQLITE_OK)
		return store__r_fail(s);
	return 0;
}

static void store__r_end(struct store *s)
{
	if (!sqlite3_get_autocommit(s->rdb))
		sqlite3_exec(s->rdb, "COMMIT", NULL, NULL, NULL);
}

static const char *store__col_text(sqlite3_stmt *st, int c)
{
	return (const char *)sqlite3_column_text(st, c);
}

static bool store__col_null(sqlite3_stmt *st, int c)
{
	return sqlite3_column_type(st, c) == SQLITE_NULL;
}

#define PROCESS_COLS                                                      \
	"p.id, p.host, p.pid, p.start_time, p.uid, p.exe, p.job, p.rank," \
	" p.local_rank, p.world_size, p.state, p.events, p.lost,"         \
	" p.findings, p.first_ms, p.last_ms, p.gaps, p.run, p.suppressed"

/* The process of the row's columns from `c`: 0; -1 for a state this
 * daemon does not know. */
static int store__row_process(sqlite3_stmt *st, int c, struct store_process *p)
{
	const char *state = store__col_text(st, c + 10);
	int i;

	memset(p, 0, sizeof(*p));
	for (i = 0; i < STORE_STATE_COUNT; i++) {
		if (state != NULL &&
		    strcmp(state, store_state_name((enum store_state)i)) == 0)
			break;
	}
	if (i == STORE_STATE_COUNT)
		return -1;
	p->state = (enum store_state)i;
	p->id = sqlite3_column_int64(st, c);
	p->host = store__col_text(st, c + 1);
	if (p->host != NULL && p->host[0] == '\0')
		p->host = NULL;
	p->pid = (uint32_t)sqlite3_column_int64(st, c + 2);
	p->start_time = store__col_u64(st, c + 3);
	p->uid = (uint32_t)sqlite3_column_int64(st, c + 4);
	p->exe = store__col_text(st, c + 5);
	p->job = store__col_text(st, c + 6);
	p->has_rank = !store__col_null(st, c + 7);
	p->rank = (uint32_t)sqlite3_column_int64(st, c + 7);
	p->has_local_rank = !store__col_null(st, c + 8);
	p->local_rank = (uint32_t)sqlite3_column_int64(st, c + 8);
	p->has_world_size = !store__col_null(st, c + 9);
	p->world_size = (uint32_t)sqlite3_column_int64(st, c + 9);
	p->events = store__col_u64(st, c + 11);
	p->lost = store__col_u64(st, c + 12);
	p->findings = store__col_u64(st, c + 13);
	p->first_ms = sqlite3_column_int64(st, c + 14);
	p->last_ms = sqlite3_column_int64(st, c + 15);
	p->gaps = store__col_u64(st, c + 16);
	p->run = store__col_text(st, c + 17);
	p->suppressed = store__col_u64(st, c + 18);
	return 0;
}

#define FINDING_COLS                                                        \
	"f.id, f.process_id, f.kind, f.detected_at, f.ptr, f.alloc_ptr,"    \
	" f.alloc_size, f.alloc_stream, f.alloc_stack, f.acc_stream,"       \
	" f.acc_seq, f.acc_write, ao.text, f.acc_stack, f.prev_stream,"     \
	" f.prev_seq, f.prev_write, po.text, f.prev_stack, f.count,"        \
	" f.first_ms, f.last_ms, f.acc_graph, f.prev_graph, f.suppressed,"  \
	" f.free_stack, aa.text, pa.text"
#define FINDING_NCOLS 28
#define FINDING_FROM                                              \
	" FROM findings f JOIN processes p ON p.id = f.process_id" \
	" LEFT JOIN strings ao ON ao.id = f.acc_op"                \
	" LEFT JOIN strings po ON po.id = f.prev_op"               \
	" LEFT JOIN strings aa ON aa.id = f.acc_arg"               \
	" LEFT JOIN strings pa ON pa.id = f.prev_arg WHERE 1"

/* The frame texts of one row's stacks, valid until the next row. */
struct store_frames {
	char *buf; /* NUL-terminated texts, one after another */
	size_t len, cap;
	size_t *off; /* each text's offset in buf */
	size_t cap_off;
	const char **ptr;
	size_t cap_ptr;
	size_t n;
};

static const char *const no_frames[1] = { NULL };

static int store__frames_add(struct store_frames *fr, const char *text,
			     size_t len)
{
	void *off = fr->off, *ptr = fr->ptr, *buf = fr->buf;
	int err;

	err = grow_array(&off, &fr->cap_off, fr->n + 1, sizeof(*fr->off));
	fr->off = off;
	if (err == 0)
		err = grow_array(&ptr, &fr->cap_ptr, fr->n + 1,
				 sizeof(*fr->ptr));
	fr->ptr = ptr;
	if (err == 0)
		err = grow_array(&buf, &fr->cap, fr->len + len + 1, 1);
	fr->buf = buf;
	if (err < 0)
		return err;
	memcpy(fr->buf + fr->len, text, len);
	fr->buf[fr->len + len] = '\0';
	fr->off[fr->n++] = fr->len;
	fr->len += len + 1;
	return 0;
}

/* Loads the stack whose id is column `c` of `row` (NULL: empty); its
 * frames are fr->n - *first from *first on. 0; -ENOMEM; -EIO. */
static int store__frames_load(struct store *s, struct store_frames *fr,
			      sqlite3_stmt *row,
			      int c, size_t *first)
{
	sqlite3_stmt *st = s->r_stack;
	int rc = 0, src;

	*first = fr->n;
	if (store__col_null(row, c))
		return 0;
	sqlite3_bind_int64(st, 1, sqlite3_column_int64(row, c));
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		const char *t = store__col_text(st, 0);

		rc = store__frames_add(fr, t ? t : "",
				       (size_t)sqlite3_column_bytes(st, 0));
		if (rc < 0)
			break;
	}
	if (rc == 0 && src != SQLITE_DONE)
		rc = store__r_fail(s);
	sqlite3_reset(st);
	return rc;
}

static const char *const *store__frames_get(struct store_frames *fr,
					    size_t first,
					    size_t end, size_t *n)
{
	*n = end - first;
	return *n ? fr->ptr + first : no_frames;
}

static void store__frames_free(struct store_frames *fr)
{
	free(fr->buf);
	free(fr->off);
	free(fr->ptr);
}

/* The access in columns c (stream) to c + 4 (seq, write, op text, stack),
 * graph column g and argument text column g + 3 of the row; its frames
 * from `first` to `end`. */
static void store__row_access(sqlite3_stmt *st, int c, int g,
			      struct store_frames *fr, size_t first,
			      size_t end, struct finding_view_access *a)
{
	a->stream = store__col_u64(st, c);
	a->seq = store__col_u64(st, c + 1);
	a->write = sqlite3_column_int(st, c + 2) != 0;
	a->op = store__col_text(st, c + 3);
	a->stack.frames = store__frames_get(fr, first, end, &a->stack.n);
	a->has_graph = !store__col_null(st, g);
	a->graph = store__col_u64(st, g);
	a->arg = store__col_text(st, g + 4); /* past suppressed, free_stack */
}

/*
 * The finding of the row. 1; 0 for a row this daemon cannot express (a
 * kind added by a later npusan); -ENOMEM; -EIO.
 */
static int store__row_finding(struct store *s, sqlite3_stmt *st,
			      struct store_frames *fr,
			      struct store_finding *f)
{
	struct finding_view *v = &f->v;
	enum finding_kind kind;
	enum detected_at at;
	size_t a0, c0, p0, f0, end;
	int rc;

	memset(f, 0, sizeof(*f));
	if (!finding_kind_of(store__col_text(st, 2), &kind) ||
	    !detected_at_of(store__col_text(st, 3), &at))
		return 0;
	fr->n = fr->len = 0;
	if ((rc = store__frames_load(s, fr, st, 8, &a0)) < 0 ||
	    (rc = store__frames_load(s, fr, st, 13, &c0)) < 0 ||
	    (rc = store__frames_load(s, fr, st, 18, &p0)) < 0 ||
	    (rc = store__frames_load(s, fr, st, 25, &f0)) < 0)
		return rc;
	end = fr->n;
	for (size_t i = 0; i < fr->n; i++)
		fr->ptr[i] = fr->buf + fr->off[i];

	v->id = (uint64_t)sqlite3_column_int64(st, 0);
	f->process_id = sqlite3_column_int64(st, 1);
	v->kind = finding_kind_name(kind);
	v->detected_at = detected_at_name(at);
	v->ptr = store__col_u64(st, 4);
	v->has_alloc = !store__col_null(st, 5);
	if (v->has_alloc) {
		v->alloc.ptr = store__col_u64(st, 5);
		v->alloc.size = store__col_u64(st, 6);
		v->alloc.has_stream = !store__col_null(st, 7);
		v->alloc.stream = store__col_u64(st, 7);
	}
	v->alloc.stack.frames = store__frames_get(fr, a0, c0,
						  &v->alloc.stack.n);
	store__row_access(st, 9, 22, fr, c0, p0, &v->access);
	v->has_previous = !store__col_null(st, 14);
	if (v->has_previous)
		store__row_access(st, 14, 23, fr, p0, f0, &v->previous);
	else
		v->previous.stack.frames = store__frames_get(fr, p0, f0,
							     &v->previous.stack.n);
	v->has_free = !store__col_null(st, 25);
	v->free_stack.frames = store__frames_get(fr, f0, end,
						 &v->free_stack.n);
	v->count = store__col_u64(st, 19);
	v->has_first = v->has_last = true;
	v->first_ms = sqlite3_column_int64(st, 20);
	v->last_ms = sqlite3_column_int64(st, 21);
	v->suppressed = store__col_text(st, 24);
	return 1;
}

/* The process's identity in `v`, as findings.md shows it. */
static void store__view_process(const struct store_process *p,
				struct finding_view *v)
{
	v->has_pid = true;
	v->pid = p->pid;
	v->job = p->job;
	v->has_rank = p->has_rank;
	v->rank = p->rank;
}

/* Calls cb for each row of the findings query `q`; *rows counts them. */
static int store__walk_findings(struct store *s, const struct store_query *q,
				store_finding_cb cb, void *arg, size_t *rows)
{
	struct store_frames fr = { 0 };
	sqlite3_stmt *st = NULL;
	int rc, src = SQLITE_DONE;

	*rows = 0;
	pthread_mutex_lock(&s->rlock);
	rc = store__r_begin(s);
	if (rc == 0)
		rc = store__q_prepare(s, q, &st);
	while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_finding f;
		struct store_process p;

		rc = store__row_finding(s, st, &fr, &f);
		if (rc < 0)
			break;
		if (rc == 0 || store__row_process(st, FINDING_NCOLS, &p) < 0) {
			rc = 0; /* a row this daemon cannot express */
			continue;
		}
		store__view_process(&p, &f.v);
		(*rows)++;
		rc = store__cb_rc(cb(arg, &f, &p));
	}
	if (rc == 0 && src != SQLITE_DONE)
		rc = store__r_fail(s);
	sqlite3_finalize(st);
	store__r_end(s);
	pthread_mutex_unlock(&s->rlock);
	store__frames_free(&fr);
	return rc;
}

int store_findings(struct store *s, const struct store_filter *f,
		   store_finding_cb cb, void *arg)
{
	static const struct store_filter none;
	struct store_query q = { .len = 0 };
	size_t rows;

	if (f == NULL)
		f = &none;
	/* The newest `limit`, handed out oldest first. */
	if (f->limit != 0)
		store__q_add(&q, "SELECT * FROM (");
	store__q_add(&q, "SELECT " FINDING_COLS ", " PROCESS_COLS FINDING_FROM);
	store__q_process_filter(&q, f);
	if (f->has_kind) {
		if (finding_kind_name(f->kind) == NULL)
			return 0;
		store__q_text(&q, " AND f.kind = ?",
			      finding_kind_name(f->kind));
	}
	if (f->since_ms != 0)
		store__q_int(&q, " AND f.last_ms >= ?", f->since_ms);
	if (f->after_id != 0)
		store__q_int(&q, " AND f.id > ?", f->after_id);
	if (f->limit != 0) {
		store__q_int(&q, " ORDER BY f.id DESC LIMIT ?", f->limit);
		store__q_add(&q, ") ORDER BY 1");
	} else {
		store__q_add(&q, " ORDER BY f.id");
	}
	return store__walk_findings(s, &q, cb, arg, &rows);
}

int store_finding_get(struct store *s, int64_t id,
		      const struct store_filter *f, store_finding_cb cb,
		      void *arg)
{
	struct store_query q = { .len = 0 };
	size_t rows;
	int rc;

	store__q_add(&q, "SELECT " FINDING_COLS ", " PROCESS_COLS FINDING_FROM);
	store__q_int(&q, " AND f.id = ?", id);
	if (f != NULL && f->has_uid)
		store__q_int(&q, " AND p.uid = ?", f->uid);
	rc = store__walk_findings(s, &q, cb, arg, &rows);
	return rc == 0 && rows == 0 ? -ENOENT : rc;
}

/* store_list()'s filters and order after "WHERE 1"; false when nothing
 * can match. */
static bool store__q_list(struct store_query *q, const struct store_filter *f)
{
	store__q_process_filter(q, f);
	/* A kind: the processes with a finding of that kind. */
	if (f->has_kind) {
		if (finding_kind_name(f->kind) == NULL)
			return false;
		store__q_text(q,
			      " AND EXISTS (SELECT 1 FROM findings f"
			      " WHERE f.process_id = p.id AND f.kind = ?)",
			      finding_kind_name(f->kind));
	}
	if (f->since_ms != 0)
		store__q_int(q, " AND p.last_ms >= ?", f->since_ms);
	store__q_add(q, " ORDER BY p.last_ms DESC, p.id DESC");
	if (f->limit != 0)
		store__q_int(q, " LIMIT ?", f->limit);
	return true;
}

int store_list(struct store *s, const struct store_filter *f,
	       store_process_cb cb, void *arg)
{
	static const struct store_filter none;
	struct store_query q = { .len = 0 };
	sqlite3_stmt *st = NULL;
	int rc, src = SQLITE_DONE;

	if (f == NULL)
		f = &none;
	store__q_add(&q, "SELECT " PROCESS_COLS " FROM processes p WHERE 1");
	if (!store__q_list(&q, f))
		return 0;

	pthread_mutex_lock(&s->rlock);
	rc = store__q_prepare(s, &q, &st);
	while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_process p;

		if (store__row_process(st, 0, &p) < 0)
			continue;
		rc = store__cb_rc(cb(arg, &p));
	}
	if (rc == 0 && src != SQLITE_DONE)
		rc = store__r_fail(s);
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

int store_list_ids(struct store *s, const struct store_filter *f,
		   size_t max, int64_t **ids, size_t *n)
{
	static const struct store_filter none;
	struct store_query q = { .len = 0 };
	sqlite3_stmt *st = NULL;
	int64_t *v = NULL;
	void *buf = NULL; /* v, as grow_array() takes it */
	size_t k = 0, cap = 0;
	int rc, src = SQLITE_DONE;

	store__q_add(&q, "SELECT p.id FROM processes p WHERE 1");
	if (!store__q_list(&q, f != NULL ? f : &none)) {
		*ids = NULL;
		*n = 0;
		return 0;
	}
	pthread_mutex_lock(&s->rlock);
	rc = store__q_prepare(s, &q, &st);
	while (rc == 0 && (src = sqlite3_step(st)) == SQLITE_ROW) {
		if (k == max) {
			rc = -E2BIG;
			break;
		}
		rc = grow_array(&buf, &cap, k + 1, sizeof(*v));
		v = buf;
		if (rc < 0)
			break;
		v[k++] = sqlite3_column_int64(st, 0);
	}
	if (rc == 0 && src != SQLITE_DONE)
		rc = store__r_fail(s);
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
			       -1, &st, NULL) != SQLITE_OK)
		rc = store__r_fail(s);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct store_process p;

		sqlite3_bind_int64(st, 1, ids[i]);
		src = sqlite3_step(st);
		if (src == SQLITE_ROW && store__row_process(st, 0, &p) == 0) {
			rc = store__cb_rc(cb(arg, &p));
		} else if (src != SQLITE_ROW && src != SQLITE_DONE) {
			rc = store__r_fail(s);
		}
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}

static uint64_t store__file_bytes(const char *path)
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
	if (store__r_begin(s) < 0)
		goto out;
	if (sqlite3_prepare_v2(s->rdb,
			       "SELECT state, count(*) FROM processes"
			       " GROUP BY state UNION ALL"
			       " SELECT NULL, count(*) FROM findings",
			       -1, &st, NULL) != SQLITE_OK)
		goto fail;
	while ((src = sqlite3_step(st)) == SQLITE_ROW) {
		const char *state = store__col_text(st, 0);
		uint64_t n = store__col_u64(st, 1);

		if (state == NULL) {
			r.findings = n;
			continue;
		}
		for (int i = 0; i < STORE_STATE_COUNT; i++) {
			if (strcmp(state,
				   store_state_name((enum store_state)i)) == 0)
				r.processes[i] = (uint32_t)n;
		}
	}
	if (src != SQLITE_DONE)
		goto fail;
	r.db_bytes = store__file_bytes(s->path) +
		     store__file_bytes(s->wal_path);
	*out = r;
	rc = 0;
	goto out;
fail:
	store__log(s, LOG_ERROR, "stats: %s", sqlite3_errmsg(s->rdb));
out:
	sqlite3_finalize(st);
	store__r_end(s);
	pthread_mutex_unlock(&s->rlock);
	return rc;
}
