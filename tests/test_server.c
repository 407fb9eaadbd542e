/*
 * test_server.c - npusand as a service manager and its clients see it: the
 * real binary on a socket in a temporary directory, READY=1 on a test
 * NOTIFY_SOCKET, socket activation, hostile frames, signals, a second
 * daemon; and the wire code (daemon/wire.c) the daemon frames with.
 *
 * This file holds start-up and signals, the suites and main(); the other
 * tests live in test_server_*.c by theme (server_helpers.h), the groups'
 * (isolation, users, root) each in a file of its own.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "paths.h"
#include "server_helpers.h"
#include "testutil.h"
#include "wire.h"

/* ---- start-up ------------------------------------------------------------ */

START_TEST(server_ready_after_listen)
{
	struct td t;
	struct stat st;

	td_init(&t);
	td_start(&t, NULL);
	/* READY=1 came: the database is open, the socket there. */
	ck_assert_int_eq(lstat(t.db, &st), 0);
	ck_assert_int_eq(lstat(t.sock, &st), 0);
	ck_assert(S_ISSOCK(st.st_mode));
	/* As root the daemon serves every user (0666); a user's, only them. */
	ck_assert_int_eq(st.st_mode & 0777, geteuid() == 0 ? 0666 : 0600);
	expect_serving(&t);
	td_stop(&t);
	/* Its own socket goes with it; the database stays. */
	ck_assert_int_ne(lstat(t.sock, &st), 0);
	ck_assert_int_eq(lstat(t.db, &st), 0);
}
END_TEST

START_TEST(server_ready_on_abstract_notify_socket)
{
	struct td t;
	struct td_how h = { .abstract_notify = true };

	td_init(&t);
	td_start(&t, &h);
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

START_TEST(server_socket_activation)
{
	struct td t;
	struct td_how h = { .activate = true };
	struct stat st;
	char *log;
	int fd;

	td_init(&t);
	td_spawn(&t, &h);
	/* systemd-socket-activate binds, then starts the daemon on the first
	 * connection. */
	for (int i = 0; i < 1000 && lstat(t.sock, &st) != 0; i++)
		usleep(10000);
	ck_assert_int_eq(lstat(t.sock, &st), 0);
	/* It binds before it listens: the file alone does not take a
	 * connection yet. */
	for (int i = 0; i < 1000 && !tu_sock_answers(t.sock); i++)
		usleep(10000);
	fd = td_connect(&t);
	send_stats_query(fd);
	{
		Npusan__FromDaemon *m = recv_msg(fd);

		ck_assert_ptr_nonnull(m);
		ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_STATS);
		npusan__from_daemon__free_unpacked(m, NULL);
	}
	close(fd);
	ck_assert(td_wait_notify(&t, "READY=1", TD_READY_TIMEOUT_MS));
	expect_serving(&t);
	log = td_log(&t);
	ck_assert_msg(strstr(log, "(from systemd)") != NULL,
		      "the daemon bound its own socket:\n%s", log);
	free(log);
	td_stop(&t);
	/* The socket was systemd's: the daemon leaves it alone. */
	ck_assert_int_eq(lstat(t.sock, &st), 0);
}
END_TEST

START_TEST(server_stale_socket_replaced)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct td t;
	int fd;

	td_init(&t);
	/* A socket file nobody listens on, as a killed daemon leaves. */
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	strcpy(sa.sun_path, t.sock);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	close(fd);
	td_start(&t, NULL);
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

START_TEST(server_second_daemon_refused)
{
	struct td t;
	char *out, *err, db2[96], sock2[PATHS_SOCKET_MAX + 1];
	const char *argv[] = { tu_bin("daemon/npusand"), "--socket", NULL,
			       "--db", NULL, NULL };

	td_init(&t);
	td_start(&t, NULL);
	/* The same socket, another database. */
	snprintf(db2, sizeof(db2), "%s/other.db", t.dir);
	argv[2] = t.sock;
	argv[4] = db2;
	ck_assert_int_eq(tu_run(argv, NULL, &out, &err), 1);
	ck_assert_msg(strstr(err, "another npusand is already listening on") &&
			      strstr(err, t.sock),
		      "unclear refusal: %s", err);
	free(out);
	free(err);
	/* The same database, another socket. */
	snprintf(sock2, sizeof(sock2), "%s/other.sock", t.dir);
	argv[2] = sock2;
	argv[4] = t.db;
	ck_assert_int_eq(tu_run(argv, NULL, &out, &err), 1);
	ck_assert_msg(strstr(err, "another npusand is using the database"),
		      "unclear refusal: %s", err);
	free(out);
	free(err);
	/* The first one is untouched. */
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

START_TEST(server_refuses_a_file_that_is_not_a_socket)
{
	struct td t;
	char *out, *err;
	const char *argv[] = { tu_bin("daemon/npusand"), "--socket", NULL,
			       "--db", NULL, NULL };
	struct stat st;
	FILE *f;

	td_init(&t);
	f = fopen(t.sock, "w");
	ck_assert_ptr_nonnull(f);
	fputs("precious", f);
	fclose(f);
	argv[2] = t.sock;
	argv[4] = t.db;
	ck_assert_int_eq(tu_run(argv, NULL, &out, &err), 1);
	ck_assert_ptr_nonnull(strstr(err, "is not a socket"));
	ck_assert_int_eq(stat(t.sock, &st), 0);
	ck_assert_int_eq(st.st_size, 8);
	free(out);
	free(err);
}
END_TEST

START_TEST(server_help_lists_every_option)
{
	static const char *const options[] = {
		"--socket PATH", "--db PATH", "--retain-days N",
		"--threads N", "--log-level LEVEL", "--log-file PATH",
		"--system", "--version", "--help",
	};
	const char *argv[] = { tu_bin("daemon/npusand"), "--help", NULL };
	char *out, *err;

	ck_assert_int_eq(tu_run(argv, NULL, &out, &err), 0);
	for (size_t i = 0; i < sizeof(options) / sizeof(options[0]); i++)
		ck_assert_msg(strstr(out, options[i]) != NULL,
			      "--help lacks %s:\n%s", options[i], out);
	ck_assert_ptr_nonnull(strstr(out, "(default 30)"));
	ck_assert_ptr_nonnull(strstr(out, "0666"));
	ck_assert_str_eq(err, "");
	free(out);
	free(err);
	argv[1] = "--version";
	ck_assert_int_eq(tu_run(argv, NULL, &out, &err), 0);
	ck_assert_str_eq(out, "npusand " NPUSAN_VERSION "\n");
	free(out);
	free(err);
}
END_TEST

START_TEST(server_rejects_bad_options)
{
	static const char *const bad[][3] = {
		{ "--retain-days", "36501", "from 0 to 36500" },
		{ "--retain-days", "-1", "from 0 to 36500" },
		{ "--threads", "many", "not a number" },
		{ "--log-level", "loud", "not error, warn, info or debug" },
		{ "--socket", "", "empty path" },
		{ "--frobnicate", NULL, "unknown option" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *argv[] = { tu_bin("daemon/npusand"), bad[i][0],
				       bad[i][1], NULL };
		char *out, *err;

		ck_assert_int_eq(tu_run(argv, NULL, &out, &err), 2);
		ck_assert_msg(strstr(err, bad[i][2]) != NULL,
			      "%s %s: %s", bad[i][0], bad[i][1], err);
		free(out);
		free(err);
	}
}
END_TEST

/* ---- signals ------------------------------------------------------------- */

START_TEST(server_sigterm_exits_zero_db_consistent)
{
	struct td t;
	sqlite3 *db;
	sqlite3_stmt *st;
	int signals[] = { SIGTERM, SIGINT };

	for (size_t i = 0; i < 2; i++) {
		int rc;

		td_init(&t);
		td_start(&t, NULL);
		expect_serving(&t);
		ck_assert_int_eq(kill(t.pid, signals[i]), 0);
		rc = td_wait_exit(&t, 60000);
		ck_assert_int_eq(rc, 0);
		td_assert_clean_log(&t);
		close(t.notify_fd);
		ck_assert_int_eq(sqlite3_open_v2(t.db, &db, SQLITE_OPEN_READONLY,
						 NULL),
				 SQLITE_OK);
		ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA integrity_check",
						    -1, &st, NULL),
				 SQLITE_OK);
		ck_assert_int_eq(sqlite3_step(st), SQLITE_ROW);
		ck_assert_str_eq((const char *)sqlite3_column_text(st, 0), "ok");
		sqlite3_finalize(st);
		sqlite3_close(db);
	}
}
END_TEST

START_TEST(server_notifies_stopping)
{
	struct td t;

	td_init(&t);
	td_start(&t, NULL);
	ck_assert_int_eq(kill(t.pid, SIGTERM), 0);
	ck_assert(td_wait_notify(&t, "STOPPING=1", 30000));
	ck_assert_int_eq(td_wait_exit(&t, 60000), 0);
}
END_TEST

START_TEST(server_sighup_reopens_log)
{
	struct td t;
	char file[96], moved[104];
	const char *args[] = { "--log-file", file, NULL };
	struct td_how h = { .args = args };
	bool found = false;

	td_init(&t);
	snprintf(file, sizeof(file), "%s/npusand.log", t.dir);
	snprintf(moved, sizeof(moved), "%s.1", file);
	td_start(&t, &h);
	ck_assert_int_eq(rename(file, moved), 0);
	ck_assert_int_eq(kill(t.pid, SIGHUP), 0);
	for (int i = 0; i < 500 && !found; i++) {
		FILE *f = fopen(file, "r");
		char line[1024];

		while (f != NULL && fgets(line, sizeof(line), f) != NULL)
			found |= strstr(line, "log reopened") != NULL;
		if (f != NULL)
			fclose(f);
		if (!found)
			usleep(10000);
	}
	ck_assert_msg(found, "no 'log reopened' in a new %s", file);
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

/*
 * The tests of a user without $XDG_RUNTIME_DIR need /tmp/npusan-65534
 * (65534: nobody, whom root runs them as); their groups skip when it exists
 * (users_missing()). Check ends a failed test with _exit(), past any
 * cleanup of its own: this fixture, run by the runner after the test case,
 * removes what a failed test left.
 */
static void tmp_fallback_teardown(void)
{
	unlink("/tmp/npusan-65534/npusand.sock");
	rmdir("/tmp/npusan-65534");
}

static Suite *server_suite(void)
{
	Suite *s = suite_create("server");
	TCase *tc = tcase_create("daemon");
	TCase *tw = tcase_create("wire");
	TCase *th = tcase_create("hostile");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, server_ready_after_listen);
	tcase_add_test(tc, server_ready_on_abstract_notify_socket);
	tcase_add_test(tc, server_stale_socket_replaced);
	tcase_add_test(tc, server_second_daemon_refused);
	tcase_add_test(tc, server_refuses_a_file_that_is_not_a_socket);
	tcase_add_test(tc, server_help_lists_every_option);
	tcase_add_test(tc, server_rejects_bad_options);
	server_frames_add(tc);
	server_query_add(tc);
	tcase_add_test(tc, server_sigterm_exits_zero_db_consistent);
	tcase_add_test(tc, server_notifies_stopping);
	tcase_add_test(tc, server_sighup_reopens_log);
	suite_add_tcase(s, tc);
	server_wire_add(tw);
	suite_add_tcase(s, tw);
	/* Issue 12's hostile peers that need no second uid. */
	tcase_set_timeout(th, 120);
	server_hostile_add(th);
	suite_add_tcase(s, th);
	return s;
}

/* npusand started by systemd-socket-activate, as its socket unit does. */
static Suite *activation_suite(void)
{
	Suite *s = suite_create("activation");
	TCase *tc = tcase_create("activation");

	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, server_socket_activation);
	suite_add_tcase(s, tc);
	return s;
}

/* The default paths of a user's daemon, as nobody when root runs them and
 * as oneself otherwise. */
static Suite *users_suite(void)
{
	Suite *s = suite_create("users");
	TCase *tc = tcase_create("users");

	tcase_set_timeout(tc, 120);
	tcase_add_unchecked_fixture(tc, NULL, tmp_fallback_teardown);
	server_users_add(tc);
	suite_add_tcase(s, tc);
	return s;
}

/* The tests that read what every user stored and count root's reserved
 * connections: root's view, which no other user has. */
static Suite *root_suite(void)
{
	Suite *s = suite_create("root");
	TCase *tc = tcase_create("root");

	tcase_set_timeout(tc, 120);
	server_root_add(tc);
	suite_add_tcase(s, tc);
	return s;
}

/* The sweep's timeouts, waited out: over a minute. */
static Suite *sweep_suite(void)
{
	Suite *s = suite_create("sweep");
	TCase *tc = tcase_create("sweep");

	tcase_set_timeout(tc, 180);
	server_sweep_add(tc);
	suite_add_tcase(s, tc);
	return s;
}

/* The tests that need root, to be root and nobody. */
static Suite *isolation_suite(void)
{
	Suite *s = suite_create("isolation");
	TCase *tc = tcase_create("isolation");

	tcase_set_timeout(tc, 120);
	tcase_add_unchecked_fixture(tc, NULL, tmp_fallback_teardown);
	server_isolation_add(tc);
	suite_add_tcase(s, tc);
	return s;
}

/* Why `uid`'s daemon cannot run its tests here, or NULL: it must be able to
 * run npusand, and /tmp/npusan-UID, where it falls back to without
 * $XDG_RUNTIME_DIR, must be free for the tests to make. */
static const char *users_missing(uid_t uid)
{
	static char why[160];
	struct stat st;

	if (!tu_runnable_by(uid, tu_bin("daemon/npusand"))) {
		snprintf(why, sizeof(why), "user %u cannot run %s",
			 (unsigned)uid, tu_bin("daemon/npusand"));
		return why;
	}
	snprintf(why, sizeof(why), "/tmp/npusan-%u", (unsigned)uid);
	if (lstat(why, &st) == 0) {
		strcat(why, " exists");
		return why;
	}
	return NULL;
}

/* Why each group cannot run here, or NULL. */
static const char *activation_missing(void)
{
	return activate_bin() == NULL ? "no systemd-socket-activate" : NULL;
}

static const char *users_group_missing(void)
{
	return users_missing(geteuid() == 0 ? 65534 : geteuid());
}

static const char *sweep_missing(void)
{
	return NULL;
}

static const char *root_missing(void)
{
	return geteuid() != 0 ? "needs root, whose view it checks" : NULL;
}

static const char *isolation_missing(void)
{
	if (geteuid() != 0)
		return "needs root, to become nobody";
	return users_missing(65534);
}

/*
 * `test_server` runs the tests any machine can run; `test_server GROUP`
 * runs those that need what a machine may lack (tests/CMakeLists.txt gives
 * each group its CTest entry), and exits 77, CTest's skip, saying what is
 * missing: never a pass.
 */
int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		Suite *(*suite)(void);
		const char *(*missing)(void);
	} groups[] = {
		{ "activation", activation_suite, activation_missing },
		{ "users", users_suite, users_group_missing },
		{ "root", root_suite, root_missing },
		{ "isolation", isolation_suite, isolation_missing },
		{ "sweep", sweep_suite, sweep_missing },
	};
	const char *why;

	if (argc < 2)
		return tu_main(server_suite());
	for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
		if (strcmp(argv[1], groups[i].name) != 0)
			continue;
		why = groups[i].missing();
		if (why != NULL) {
			fprintf(stderr, "test_server %s: skipped, %s\n",
				argv[1], why);
			return 77;
		}
		return tu_main(groups[i].suite());
	}
	fprintf(stderr, "test_server: no group %s\n", argv[1]);
	return 2;
}
