/*
 * test_dbwait.c - npusand while its database takes no writes: another
 * program holds the write lock, or the disk is full. Registrations are
 * accepted, processes analysed, queries answered, and what was found is
 * stored once the database takes writes again.
 *
 * The full-disk test needs root (it mounts a small tmpfs, in a mount
 * namespace of its own); run as `test_dbwait fulldisk` it exits 77 where
 * it cannot mount one.
 */
#include <check.h>
#include <errno.h>
#include <sched.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static const char *const DAEMON_ARGS[] = { "--log-level", "debug", NULL };

/* `npusanctl ARGS...` (NULL-terminated after a3); its stdout in *out. */
static int ctl(char **out, const char *a0, const char *a1, const char *a2,
	       const char *a3)
{
	char *bin = strdup(tu_bin("npusanctl")), *err = NULL;
	const char *argv[] = { bin, a0, a1, a2, a3, NULL };
	int st = tu_run(argv, NULL, out, &err);

	if (st != 0)
		fprintf(stderr, "npusanctl %s: exit %d: %s", a0, st,
			err ? err : "");
	free(err);
	free(bin);
	return st;
}

/* demo.trace (rank 0: a data race and a missing record_stream). */
static const char *demo_trace(void)
{
	static char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/examples/demo.trace",
		 NPUSAN_SOURCE_DIR);
	return path;
}

/* Polls `npusanctl findings --json` until it holds `want` findings, for
 * at most about 20 s. */
static char *wait_findings(unsigned want)
{
	char *out = NULL;

	for (int i = 0; i < 1000; i++) {
		free(out);
		out = NULL;
		ctl(&out, "findings", "--json", NULL, NULL);
		if (out != NULL && tu_count_lines(out, "\"kind\"") >= want)
			break;
		tu_nap_ms(20);
	}
	return out;
}

/* Polls `npusanctl list --json` until `want` appears, as wait_findings(). */
static char *wait_list(const char *want)
{
	char *out = NULL;

	for (int i = 0; i < 1000; i++) {
		free(out);
		out = NULL;
		ctl(&out, "list", "--json", NULL, NULL);
		if (out != NULL && strstr(out, want) != NULL)
			break;
		tu_nap_ms(20);
	}
	return out;
}

/* The daemon's log so far (caller frees). */
static char *read_log(const struct tu_daemon *d)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = fopen(d->log, "r");
	FILE *m = open_memstream(&text, &len);
	int c;

	ck_assert_ptr_nonnull(m);
	if (f != NULL) {
		while ((c = fgetc(f)) != EOF)
			fputc(c, m);
		fclose(f);
	}
	fclose(m);
	return text;
}

/* Waits, for at most `ms`, until the daemon's log holds `needle`. */
static bool log_shows(const struct tu_daemon *d, const char *needle, int ms)
{
	for (int waited = 0;; waited += 20) {
		char *text = read_log(d);
		bool found = strstr(text, needle) != NULL;

		free(text);
		if (found || waited >= ms)
			return found;
		tu_nap_ms(20);
	}
}

/* Another program holding the write lock on the daemon's database. */
static sqlite3 *lock_db(const char *path)
{
	sqlite3 *db = NULL;

	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	sqlite3_busy_timeout(db, 10000); /* the daemon may be committing */
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

/* npusan-replay `trace`, not waited for; its output goes to `log`. */
static pid_t replay_start(const char *trace, const char *log)
{
	const char *bin = tu_bin("agent/npusan-replay");
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execl(bin, bin, trace, (char *)NULL);
		_exit(127);
	}
	return pid;
}

static int replay(const char *trace)
{
	char *bin = strdup(tu_bin("agent/npusan-replay"));
	const char *argv[] = { bin, trace, NULL };
	int st = tu_run(argv, NULL, NULL, NULL);

	free(bin);
	return st;
}

/* The findings, once stored, are what the process's analysis found; it
 * is listed exited with every operation analysed and none lost. */
static void check_stored(void)
{
	char *out = wait_findings(2), *list;

	ck_assert_msg(tu_count_lines(out, "\"kind\"") == 2, "%s", out);
	ck_assert_uint_eq(tu_count_lines(out, "\"data_race\""), 1);
	ck_assert_uint_eq(tu_count_lines(out, "\"missing_record_stream\""), 1);
	list = wait_list("\"exited\"");
	ck_assert_msg(tu_count_lines(list, "\"exited\"") == 1, "%s", list);
	ck_assert_msg(tu_count_lines(list, "\"events\":29,") == 1, "%s", list);
	ck_assert_msg(tu_count_lines(list, "\"lost\":0,") == 1, "%s", list);
	free(list);
	free(out);
}

/* A process that registers while another program holds the database's
 * write lock is accepted and analysed; its findings and row are stored
 * once the lock is released. */
START_TEST(dbwait_locked_registration_analysed_and_stored_once_released)
{
	struct tu_daemon d;
	char *stats = NULL;
	sqlite3 *other;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	/* Its socket answers before its database is open. */
	ck_assert(log_shows(&d, " listening on ", 10000));
	other = lock_db(d.db);
	ck_assert_int_eq(replay(demo_trace()), 0);
	ck_assert(!log_shows(&d, "refused registration", 0));
	/* Analysed while the lock is held: every operation counted. */
	for (int i = 0; i < 500; i++) {
		free(stats);
		stats = NULL;
		ck_assert_int_eq(ctl(&stats, "stats", "--json", NULL, NULL), 0);
		if (strstr(stats, "\"events\":29,") != NULL)
			break;
		tu_nap_ms(20);
	}
	ck_assert_msg(strstr(stats, "\"events\":29,") != NULL, "%s", stats);
	ck_assert_msg(strstr(stats, "\"findings\":0,") != NULL, "%s", stats);
	unlock_db(other);
	check_stored();
	ck_assert_int_eq(WEXITSTATUS(tu_daemon_stop(&d, SIGTERM)), 0);
	free(stats);
	free(d.dir);
}
END_TEST

/* While a registration waits for the database (another program holds the
 * write lock longer than SQLite's busy timeout would allow a wait), a
 * `stats` is answered: the loop never waits for SQLite. */
START_TEST(dbwait_stats_answered_while_a_registration_waits)
{
	struct tu_daemon d;
	char *stats = NULL, log[PATH_MAX];
	sqlite3 *other;
	pid_t pid;
	int st;

	tu_daemon_init(&d);
	tu_daemon_start(&d, DAEMON_ARGS);
	/* Its socket answers before its database is open. */
	ck_assert(log_shows(&d, " listening on ", 10000));
	other = lock_db(d.db);
	snprintf(log, sizeof(log), "%s/replay.log", d.dir);
	pid = replay_start(demo_trace(), log);
	/* Its registration is in: the daemon says so at once, or (a loop
	 * that waits on the database) only after its busy timeout. */
	log_shows(&d, "registered pid", 1500);
	/* Far below that timeout: an answer from a loop that waits on the
	 * database would come too late. */
	ck_assert_int_eq(ctl(&stats, "stats", "--timeout", "2", NULL), 0);
	ck_assert_ptr_nonnull(strstr(stats, "uptime"));
	unlock_db(other);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	check_stored();
	ck_assert_int_eq(WEXITSTATUS(tu_daemon_stop(&d, SIGTERM)), 0);
	free(stats);
	free(d.dir);
}
END_TEST

/* A mount namespace of this process's own (the daemon it starts shares
 * it), its mounts private: a tmpfs mounted there goes with the last of
 * them, however the test ends, and is never seen outside. */
static bool private_mounts(void)
{
	return unshare(CLONE_NEWNS) == 0 &&
	       mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0;
}

/* Fills the file system at `dir` with a file of its own; returns its path
 * (caller frees). */
static char *fill_disk(const char *dir)
{
	static char block[64 * 1024];
	char *path;
	int fd;

	ck_assert_int_gt(asprintf(&path, "%s/filler", dir), 0);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_ge(fd, 0);
	for (;;) {
		ssize_t n = write(fd, block, sizeof(block));

		if (n < 0 && errno == ENOSPC)
			break;
		ck_assert_int_gt(n, 0);
	}
	/* The last partial block too. */
	while (write(fd, block, 512) > 0)
		;
	close(fd);
	return path;
}

/* The daemon's database on a small file system that fills up: agents are
 * registered and analysed, queries answered, the log says why nothing is
 * stored, and everything is stored once there is room again. */
START_TEST(dbwait_full_disk_analysed_and_stored_once_room_returns)
{
	struct tu_daemon d;
	char fs[PATH_MAX], *filler, *stats = NULL, *text;

	tu_daemon_init(&d);
	snprintf(fs, sizeof(fs), "%s/fs", d.dir);
	ck_assert_int_eq(mkdir(fs, 0700), 0);
	ck_assert(private_mounts());
	ck_assert_int_eq(mount("tmpfs", fs, "tmpfs", 0, "size=4m"), 0);
	ck_assert_int_lt(snprintf(d.db, sizeof(d.db), "%.*s/npusan.db",
				  (int)(sizeof(d.db) - 16), fs),
			 (int)sizeof(d.db));
	setenv("NPUSAN_DB", d.db, 1);
	tu_daemon_start(&d, DAEMON_ARGS);
	ck_assert(log_shows(&d, " listening on ", 10000));
	filler = fill_disk(fs);
	ck_assert_int_eq(replay(demo_trace()), 0);
	ck_assert_msg(!log_shows(&d, "refused registration", 0), "refused");
	ck_assert(log_shows(&d, "database or disk is full", 10000));
	text = read_log(&d);
	ck_assert_ptr_nonnull(strstr(text, "registrations, analysis and "
					   "queries go on"));
	free(text);
	for (int i = 0; i < 500; i++) {
		free(stats);
		stats = NULL;
		ck_assert_int_eq(ctl(&stats, "stats", "--json", NULL, NULL), 0);
		if (strstr(stats, "\"events\":29,") != NULL)
			break;
		tu_nap_ms(20);
	}
	ck_assert_msg(strstr(stats, "\"events\":29,") != NULL, "%s", stats);
	ck_assert_int_eq(unlink(filler), 0);
	check_stored();
	ck_assert(log_shows(&d, "commits work again", 0));
	ck_assert_int_eq(WEXITSTATUS(tu_daemon_stop(&d, SIGTERM)), 0);
	umount2(fs, MNT_DETACH); /* so that the directory can be removed */
	free(stats);
	free(filler);
	free(d.dir);
}
END_TEST

/* Whether a test may mount a tmpfs in a namespace of its own (root, and
 * allowed to): tried in a child, which takes the namespace with it. */
static bool can_mount(void)
{
	pid_t pid;
	int st;

	if (geteuid() != 0)
		return false;
	pid = fork();
	if (pid == 0)
		_exit(private_mounts() &&
			      mount("tmpfs", "/tmp", "tmpfs", 0, "size=64k") == 0
		      ? 0
		      : 1);
	return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) &&
	       WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv)
{
	bool fulldisk = argc > 1 && strcmp(argv[1], "fulldisk") == 0;
	Suite *s;
	TCase *tc;

	/* Before the suite exists: a skip must leak nothing, or
	 * LeakSanitizer turns it into a failure. */
	if (fulldisk && !can_mount()) {
		fprintf(stderr, "test_dbwait fulldisk: skipped, cannot mount a "
				"tmpfs here (needs root)\n");
		return 77;
	}
	s = suite_create("dbwait");
	tc = tcase_create("core");
	if (fulldisk) {
		tcase_add_test(tc, dbwait_full_disk_analysed_and_stored_once_room_returns);
	} else {
		tcase_add_test(tc, dbwait_locked_registration_analysed_and_stored_once_released);
		tcase_add_test(tc, dbwait_stats_answered_while_a_registration_waits);
	}
	suite_add_tcase(s, tc);
	return tu_main(s);
}
