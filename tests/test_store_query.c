/*
 * test_store_query.c - test_store's queries: the findings' filters and
 * limit, what one user sees of another's, a finding by id, and the process
 * list, recent first and in pages.
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

void store_query_add(TCase *tc)
{
	tcase_add_test(tc, store_findings_filters);
	tcase_add_test(tc, store_findings_limit_gives_newest_ascending);
	tcase_add_test(tc, store_uid_filter_hides_other_users);
	tcase_add_test(tc, store_finding_get_missing_is_enoent);
	tcase_add_test(tc, store_list_recent_first_and_filters);
	tcase_add_test(tc, store_list_ids_then_pages);
}
