/*
 * test_store_schema.c - test_store's schema: migrations from every older
 * version keeping their rows, graphs and runs kept, and the files the store
 * refuses to open.
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

/* The schema's version now (daemon/store.c's migrations). */
#define SCHEMA_NOW 6
/* Undoes migration 5 (suppressions), triggers before their column. */
#define SCHEMA_UNDO_5                                                      \
	"DROP TRIGGER findings_suppressed_added;"                          \
	" DROP TRIGGER findings_suppressed_removed;"                       \
	" ALTER TABLE findings DROP COLUMN suppressed;"                    \
	" ALTER TABLE processes DROP COLUMN suppressed;"
/* Undoes migration 6 (free stacks, argument names). */
#define SCHEMA_UNDO_6                                                      \
	"ALTER TABLE findings DROP COLUMN free_stack;"                     \
	" ALTER TABLE findings DROP COLUMN acc_arg;"                       \
	" ALTER TABLE findings DROP COLUMN prev_arg;"

START_TEST(store_migrates_an_empty_file)
{
	char *path = db_path();
	struct store *s;
	FILE *fp = fopen(path, "w");

	ck_assert_ptr_nonnull(fp);
	fclose(fp);
	s = open_store(path, 0);
	store_close(s);
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), SCHEMA_NOW);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM sqlite_master"
				       " WHERE type = 'table' AND name IN"
				       " ('processes', 'findings', 'strings',"
				       " 'stacks')"), 4);
	/* Opening again migrates nothing. */
	s = open_store(path, 0);
	store_close(s);
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), SCHEMA_NOW);
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
	sql_exec(path, SCHEMA_UNDO_5
		       " ALTER TABLE processes DROP COLUMN gaps;"
		       " ALTER TABLE processes DROP COLUMN ring_ops;"
		       " ALTER TABLE processes DROP COLUMN run;"
		       " ALTER TABLE findings DROP COLUMN acc_graph;"
		       " ALTER TABLE findings DROP COLUMN prev_graph;"
		       " ALTER TABLE findings DROP COLUMN free_stack;"
		       " ALTER TABLE findings DROP COLUMN acc_arg;"
		       " ALTER TABLE findings DROP COLUMN prev_arg;"
		       " PRAGMA user_version = 1");
	s = open_store(path, 0);
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), SCHEMA_NOW);
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
	sql_exec(path, SCHEMA_UNDO_5
		       " ALTER TABLE findings DROP COLUMN acc_graph;"
		       " ALTER TABLE findings DROP COLUMN prev_graph;"
		       " ALTER TABLE findings DROP COLUMN free_stack;"
		       " ALTER TABLE findings DROP COLUMN acc_arg;"
		       " ALTER TABLE findings DROP COLUMN prev_arg;"
		       " PRAGMA user_version = 3");
	s = open_store(path, 0);
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), SCHEMA_NOW);
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

/*
 * A finding's suppression is stored with its row, and counted per process
 * as rows come and go; a database of schema 4 gains both, none
 * suppressed.
 */
START_TEST(store_keeps_suppressed_and_migrates_version_4)
{
	char *path = db_path();
	struct store_process p = proc(7, "j", 0, 1000);
	struct store *s = open_store(path, 0);
	int64_t id = reg(s, &p);
	struct store_finding f = race(id), g = race(id);
	struct procs v;

	g.v.access.op = "aten::other";
	g.v.suppressed = "known-race";
	ck_assert_int_eq(store_finding_submit(s, &f), 0);
	ck_assert_int_eq(store_finding_submit(s, &g), 0);
	/* a repeat keeps its row's mark */
	ck_assert_int_eq(store_finding_submit(s, &g), 0);
	ck_assert_int_eq(store_flush(s), 0);
	list(s, NULL, &v);
	ck_assert_uint_eq(v.p[0].findings, 2);
	ck_assert_uint_eq(v.p[0].suppressed, 1);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM findings WHERE"
				       " suppressed = 'known-race'"
				       " AND count = 2"), 1);
	store_close(s);
	sql_exec(path, "DELETE FROM findings WHERE suppressed IS NOT NULL");
	ck_assert_int_eq(sql_int(path, "SELECT suppressed FROM processes"), 0);
	sql_exec(path, SCHEMA_UNDO_6 SCHEMA_UNDO_5 " PRAGMA user_version = 4");
	s = open_store(path, 0);
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), SCHEMA_NOW);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM findings"
				       " WHERE suppressed IS NULL"), 1);
	list(s, NULL, &v);
	ck_assert_uint_eq(v.p[0].findings, 1);
	ck_assert_uint_eq(v.p[0].suppressed, 0);
	store_close(s);
	free(path);
}
END_TEST

/* A missing record_stream found at a free keeps that free's stack, a
 * free without one an empty stack, a flush none; the accesses keep their
 * arguments. None of them is part of the key: a repeat that differs only
 * there merges into the first row, which keeps the first's. */
START_TEST(store_keeps_free_stacks_and_arguments)
{
	static const char *const freed[] = { "train.py:40 cleanup",
					     "train.py:3 main" };
	char *path = db_path();
	struct store_process p = proc(7, "j", 0, 1000);
	struct store *s = open_store(path, 0);
	struct store_finding f[4];
	int64_t id = reg(s, &p);
	struct seen v;

	for (size_t i = 0; i < 3; i++) {
		f[i] = race(id);
		f[i].v.kind = "missing_record_stream";
		f[i].v.has_previous = false;
		f[i].v.access.stream = 1 + i; /* three keys */
	}
	f[0].v.detected_at = "free";
	f[0].v.has_free = true;
	f[0].v.free_stack = (struct finding_stack){ freed, 2 };
	f[0].v.access.arg = "self";
	f[1].v.detected_at = "free";
	f[1].v.has_free = true; /* a free with no stack */
	f[2].v.detected_at = "flush";
	f[3] = race(id);
	f[3].v.access.arg = "out";
	f[3].v.previous.arg = "other";
	for (size_t i = 0; i < 4; i++)
		ck_assert_int_eq(store_finding_submit(s, &f[i]), 0);
	f[3].v.access.arg = "self"; /* a repeat of the race */
	ck_assert_int_eq(store_finding_submit(s, &f[3]), 0);
	ck_assert_int_eq(store_flush(s), 0);
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, 4);
	ck_assert_msg(strstr(v.text, "at=free alloc=7f0000000000+1048576@0"
				     "[alloc.py:1 empty] acc=1/7/w/aten::add_"
				     "[train.py:10 step|train.py:3 main]#self"
				     " free=[train.py:40 cleanup|train.py:3 "
				     "main]\n") != NULL,
		      "%s", v.text);
	ck_assert_ptr_nonnull(strstr(v.text, "acc=2/7/w/aten::add_[train.py:10"
					     " step|train.py:3 main] free=[]\n"));
	ck_assert_ptr_nonnull(strstr(v.text, "at=flush alloc="));
	ck_assert_ptr_null(strstr(v.text, "at=flush alloc=7f0000000000+1048576"
					  "@0[alloc.py:1 empty] acc=3/7/w/"
					  "aten::add_[train.py:10 step|"
					  "train.py:3 main] free"));
	ck_assert_msg(strstr(v.text, "data_race pid=7 job=j count=2") != NULL,
		      "%s", v.text);
	ck_assert_ptr_nonnull(strstr(v.text, "main]#out prev="));
	ck_assert_ptr_nonnull(strstr(v.text, "main]#other\n"));
	store_close(s);
	free(path);
}
END_TEST

/* A database of schema 5 (before free stacks and arguments) keeps its
 * findings, which name neither. */
START_TEST(store_migrates_version_5_findings_without_free_or_args)
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
	sql_exec(path, SCHEMA_UNDO_6 " PRAGMA user_version = 5");
	s = open_store(path, 0);
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), SCHEMA_NOW);
	findings(s, NULL, &v);
	ck_assert_uint_eq(v.n, 1);
	ck_assert(!v.f[0].v.has_free);
	ck_assert_ptr_null(strstr(v.text, "#"));
	ck_assert_ptr_null(strstr(v.text, "free="));
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

	sql_exec(path, "CREATE TABLE future (x); PRAGMA user_version = 99");
	ck_assert_int_eq(store_open(&o, &s, &err), -EIO);
	ck_assert_ptr_null(s);
	ck_assert_ptr_nonnull(err);
	ck_assert_ptr_nonnull(strstr(err, path));
	ck_assert_ptr_nonnull(strstr(err, "newer"));
	free(err);
	/* Untouched. */
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), 99);
	ck_assert_int_eq(sql_int(path, "SELECT count(*) FROM sqlite_master"
				       " WHERE name = 'processes'"), 0);
	free(path);
}
END_TEST

/* A migration the database refuses (here schema 4's columns are there
 * already) fails the open, saying where and why, and leaves the file at
 * the version it had: nothing half migrated. */
START_TEST(store_failed_migration_leaves_the_file)
{
	char *path = db_path();
	struct store_opts o = { .path = path };
	struct store *s = open_store(path, 0);
	char *err = NULL;

	store_close(s);
	s = NULL;
	sql_exec(path, "PRAGMA user_version = 3");
	ck_assert_int_eq(store_open(&o, &s, &err), -EIO);
	ck_assert_ptr_null(s);
	ck_assert_ptr_nonnull(err);
	ck_assert_ptr_nonnull(strstr(err, path));
	ck_assert_msg(strstr(err, "migrate") != NULL &&
		      strstr(err, "duplicate column") != NULL, "%s", err);
	free(err);
	ck_assert_int_eq(sql_int(path, "PRAGMA user_version"), 3);
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
	/* The error says what is wrong with the file. */
	ck_assert_msg(strstr(err, "not a database") != NULL, "%s", err);
	free(err);
	free(path);

	o.path = "/nonexistent-dir/npusan.db";
	ck_assert_int_eq(store_open(&o, &s, &err), -EIO);
	ck_assert_ptr_nonnull(strstr(err, "/nonexistent-dir/npusan.db"));
	free(err);
}
END_TEST

void store_schema_add(TCase *tc)
{
	tcase_add_test(tc, store_migrates_an_empty_file);
	tcase_add_test(tc, store_migrates_version_1_keeping_rows);
	tcase_add_test(tc, store_keeps_a_process_run);
	tcase_add_test(tc, store_migrates_version_3_findings_without_graphs);
	tcase_add_test(tc, store_keeps_graphs_and_merges_by_the_engines_key);
	tcase_add_test(tc, store_keeps_suppressed_and_migrates_version_4);
	tcase_add_test(tc, store_keeps_free_stacks_and_arguments);
	tcase_add_test(tc, store_migrates_version_5_findings_without_free_or_args);
	tcase_add_test(tc, store_refuses_a_newer_schema);
	tcase_add_test(tc, store_refuses_what_is_not_a_database);
	tcase_add_test(tc, store_failed_migration_leaves_the_file);
}
