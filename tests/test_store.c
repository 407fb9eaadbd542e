/*
 * test_store.c - the daemon's SQLite store: schema and migrations, batched
 * writes, deduplication, queries, retention and durability.
 *
 * This file holds registration and deduplication, the suite and main();
 * the other tests live in test_store_*.c by theme (store_helpers.h).
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store.h"
#include "store_helpers.h"
#include "testutil.h"

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

/* A process's ranks come back as registered: each present with its
 * value, or absent (a process launched without them), never 0 for
 * absent. */
START_TEST(store_process_ranks_come_back_present_or_absent)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(100, "job1", 5, 1000);
	struct store_process q = proc(200, NULL, 0, 1000);
	struct procs v;
	int64_t a, b;

	p.has_local_rank = true;
	p.local_rank = 1;
	q.has_rank = q.has_world_size = false;
	q.last_ms = NOW_MS - 1; /* listed after p */
	a = reg(s, &p);
	b = reg(s, &q);
	list(s, NULL, &v);
	ck_assert_uint_eq(v.n, 2);
	ck_assert_int_eq(v.p[0].id, a);
	ck_assert(v.p[0].has_rank && v.p[0].rank == 5);
	ck_assert(v.p[0].has_local_rank && v.p[0].local_rank == 1);
	ck_assert(v.p[0].has_world_size && v.p[0].world_size == 8);
	ck_assert_int_eq(v.p[1].id, b);
	ck_assert(!v.p[1].has_rank);
	ck_assert(!v.p[1].has_local_rank);
	ck_assert(!v.p[1].has_world_size);
	store_close(s);
	free(path);
}
END_TEST

/* A process registering again (with a restarted daemon) gets back the
 * counters last stored for it, which the daemon then adds to (DESIGN 6);
 * a new process gets zeros. */
START_TEST(store_register_again_returns_stored_counters)
{
	char *path = db_path();
	struct store *s = open_store(path, 0);
	struct store_process p = proc(100, "job1", 0, 1000);
	struct store_counters c = { .events = 10, .lost = 3, .gaps = 2,
				    .ring_ops = 50 };
	struct store_counters was;
	int64_t a, b;

	memset(&was, 0xff, sizeof(was));
	ck_assert_int_eq(store_process_register(s, &p, &a, &was), 0);
	ck_assert_uint_eq(was.events, 0);
	ck_assert_uint_eq(was.lost, 0);
	ck_assert_uint_eq(was.gaps, 0);
	ck_assert_uint_eq(was.ring_ops, 0);
	ck_assert_int_eq(store_process_update(s, a, &c, NOW_MS + 5,
					      STORE_RUNNING), 0);
	ck_assert_int_eq(store_flush(s), 0);
	memset(&was, 0xff, sizeof(was));
	ck_assert_int_eq(store_process_register(s, &p, &b, &was), 0);
	ck_assert_int_eq(b, a);
	ck_assert_uint_eq(was.events, 10);
	ck_assert_uint_eq(was.lost, 3);
	ck_assert_uint_eq(was.gaps, 2);
	ck_assert_uint_eq(was.ring_ops, 50);
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

static Suite *store_suite(void)
{
	Suite *s = suite_create("store");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, store_register_returns_same_row_again);
	tcase_add_test(tc, store_register_never_changes_owner);
	tcase_add_test(tc, store_register_after_queued_update_stays_running);
	tcase_add_test(tc, store_process_ranks_come_back_present_or_absent);
	tcase_add_test(tc, store_register_again_returns_stored_counters);
	tcase_add_test(tc, store_update_visible_after_flush);
	tcase_add_test(tc, store_dedup_equal_keys_add_counts);
	tcase_add_test(tc, store_dedup_distinct_keys_stay_distinct);
	tcase_add_test(tc, store_dedup_key_is_the_engines);
	tcase_add_test(tc, store_strings_and_stacks_stored_once);
	tcase_add_test(tc, store_finding_roundtrips_extremes);
	store_query_add(tc);
	store_schema_add(tc);
	store_durability_add(tc);
	store_blocked_add(tc);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(store_suite());
}
