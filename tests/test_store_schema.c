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
	tcase_add_test(tc, store_refuses_a_newer_schema);
	tcase_add_test(tc, store_refuses_what_is_not_a_database);
	tcase_add_test(tc, store_failed_migration_leaves_the_file);
}
