/*
 * test_store_durability.c - test_store's durability: what a reopen or a
 * SIGKILL keeps, retention's pruning, the counters, commit callbacks, flush
 * and WAL.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "store.h"
#include "store_helpers.h"
#include "testutil.h"

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

void store_durability_add(TCase *tc)
{
	tcase_add_test(tc, store_reopen_keeps_everything_committed);
	tcase_add_test(tc, store_flushed_data_survives_sigkill);
	tcase_add_test(tc, store_prune_deletes_old_exited_processes);
	tcase_add_test(tc, store_stats_counts);
	tcase_add_test(tc, store_commit_cb_called_after_commits);
	tcase_add_test(tc, store_flush_commits_everything_queued);
	tcase_add_test(tc, store_uses_wal);
}
