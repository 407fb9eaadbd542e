/*
 * test_server_hostile.c - issue 12's hostile peers that need no second uid
 * (test_server's TCase hostile): a registration handed over by a dead
 * connector, and the modes of what the daemon makes.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frame.h"
#include "ring.h"
#include "server_helpers.h"
#include "testutil.h"

/*
 * Issue 12: a process connects, hands its connection to another and exits;
 * a registration of that pid, with a start time of its choosing, must not
 * be believed: the process is the one the kernel showed at accept, with
 * the start time /proc gave then, whatever the message says.
 */
/* When the process that connects exits, against the daemon's accept(). */
enum exit_at {
	EXIT_AFTER_ACCEPT, /* accepted alive, gone at its Register */
	EXIT_ZOMBIE,       /* accepted as a zombie: /proc there, pidfd says gone */
	EXIT_REAPED,       /* accepted after it was reaped: /proc gone too */
};

/* A Register from a process that connected and exited (`when`) is refused,
 * and the daemon goes on serving. The daemon is stopped (SIGSTOP) while
 * the connector exits before it may accept. */
static void expect_dead_connector_refused(struct td *t, enum exit_at when)
{
	int sv[2], fd = -1;
	struct ring *ring;
	uint8_t byte;
	size_t len;
	pid_t child;
	int status;

	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 0, &ring), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				    sv), 0);
	if (when != EXIT_AFTER_ACCEPT)
		ck_assert_int_eq(kill(t->pid, SIGSTOP), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		int c = td_connect(t);
		int rc = frame_send(sv[1], "c", 1, c, 5000) == 0 ? 0 : 3;

		if (when == EXIT_AFTER_ACCEPT)
			usleep(300 * 1000); /* accepted alive */
		_exit(rc);
	}
	ck_assert_int_eq(frame_recv(sv[0], &byte, 1, &len, &fd, 5000), 0);
	ck_assert_int_ge(fd, 0);
	if (when == EXIT_ZOMBIE) {
		usleep(100 * 1000); /* exited, not reaped */
		ck_assert_int_eq(kill(t->pid, SIGCONT), 0);
		usleep(300 * 1000); /* accepted */
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	if (when == EXIT_REAPED)
		ck_assert_int_eq(kill(t->pid, SIGCONT), 0);
	/* The connector is gone: its pid, any start time. */
	send_register(fd, (uint32_t)child, ring_fd(ring), 4242);
	/* Gone before the daemon accepted it, or its start time not ours. */
	expect_refused_either(fd, "start time does not match", "has exited");
	expect_serving(t);
	close(sv[0]);
	close(sv[1]);
	ring_destroy(ring);
}

START_TEST(server_register_from_a_dead_connector_refused)
{
	struct td t;

	td_init(&t);
	td_start(&t, NULL);
	expect_dead_connector_refused(&t, EXIT_AFTER_ACCEPT);
	expect_dead_connector_refused(&t, EXIT_ZOMBIE);
	expect_dead_connector_refused(&t, EXIT_REAPED);
	td_stop(&t);
}
END_TEST

/*
 * On a kernel without pidfds (before 5.3) the daemon vouches for a sender
 * by its start time alone, read at accept and again at registration: a
 * live process registers, another start time and a process gone are
 * refused.
 */
START_TEST(server_without_pidfds_still_verifies_senders)
{
	struct td_how how = { .no_pidfd = true };
	struct ring *ring;
	Npusan__FromDaemon *m;
	struct td t;
	int fd;

	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 0, &ring), 0);
	td_init(&t);
	td_start(&t, &how);
	fd = td_connect(&t);
	send_register(fd, (uint32_t)getpid(), ring_fd(ring), 0);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_REGISTER_REPLY);
	ck_assert_msg(m->register_reply->accepted, "refused: %s",
		      m->register_reply->error ? m->register_reply->error
					       : "(no reason)");
	npusan__from_daemon__free_unpacked(m, NULL);
	close(fd);
	fd = td_connect(&t);
	send_register(fd, (uint32_t)getpid(), ring_fd(ring), 1);
	expect_refused(fd, "start time");
	expect_dead_connector_refused(&t, EXIT_AFTER_ACCEPT);
	expect_dead_connector_refused(&t, EXIT_ZOMBIE);
	expect_dead_connector_refused(&t, EXIT_REAPED);
	td_stop(&t);
	/* A kernel that has SO_PEERPIDFD but refuses it: the same. */
	how.refuse_sockopt = SO_PEERPIDFD;
	how.no_pidfd = false;
	td_init(&t);
	td_start(&t, &how);
	fd = td_connect(&t);
	send_register(fd, (uint32_t)getpid(), ring_fd(ring), 0);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_msg(m->register_reply != NULL &&
		      m->register_reply->accepted, "refused");
	npusan__from_daemon__free_unpacked(m, NULL);
	close(fd);
	td_stop(&t);
	ring_destroy(ring);
}
END_TEST

/* A connection whose peer the kernel will not name (SO_PEERCRED fails)
 * is closed, said in the log, and the daemon goes on. */
START_TEST(server_unnamed_peer_closed)
{
	const struct td_how how = { .refuse_sockopt = SO_PEERCRED };
	struct td t;
	char *log;

	td_init(&t);
	td_start(&t, &how);
	expect_closed(td_connect(&t));
	expect_closed(td_connect(&t));
	ck_assert_int_eq(kill(t.pid, 0), 0);
	td_stop(&t);
	log = td_log(&t);
	ck_assert_msg(strstr(log, "SO_PEERCRED") != NULL, "%s", log);
	free(log);
}
END_TEST

/* The modes of the files and directory the daemon made. */
static void expect_private(const char *path, unsigned mode)
{
	struct stat st;

	ck_assert_msg(lstat(path, &st) == 0, "%s: %s", path, strerror(errno));
	ck_assert_msg((st.st_mode & 0777) == mode, "%s has mode %04o, not %04o",
		      path, (unsigned)(st.st_mode & 0777), mode);
}

/*
 * Issue 12: `npusand --system` outside systemd, under umask 022, made its
 * database world-readable. Whatever the umask, what it creates is its own.
 */
START_TEST(server_state_private_under_umask_022)
{
	static const char *const args[] = { "--system", NULL };
	struct td_how h = { .args = args };
	char dir[96], path[PATH_MAX + 8];
	mode_t old = umask(022);
	struct td t;

	td_init(&t);
	snprintf(dir, sizeof(dir), "%s/state", t.dir);
	snprintf(t.db, sizeof(t.db), "%s/npusan.db", dir);
	td_start(&t, &h);
	umask(old);
	expect_serving(&t); /* the WAL is open */
	expect_private(dir, 0700);
	expect_private(t.db, 0600);
	snprintf(path, sizeof(path), "%s-wal", t.db);
	expect_private(path, 0600);
	snprintf(path, sizeof(path), "%s-shm", t.db);
	expect_private(path, 0600);
	snprintf(path, sizeof(path), "%s.lock", t.db);
	expect_private(path, 0600);
	td_stop(&t);
}
END_TEST

/* A database others could read or write, or a directory in which they
 * could replace it: the daemon does not start, and says which and why. */
START_TEST(server_refuses_a_database_others_can_read)
{
	char dir[PATH_MAX], *log;
	struct td t;
	int fd;

	td_init(&t);
	fd = open(t.db, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	close(fd);
	ck_assert_int_eq(chmod(t.db, 0644), 0);
	td_spawn(&t, &(struct td_how){ 0 });
	ck_assert_int_eq(td_wait_exit(&t, 20000), 1);
	log = td_log(&t);
	ck_assert_msg(strstr(log, "other users may read or write") &&
			      strstr(log, t.db) && strstr(log, "0644"),
		      "%s", log);
	free(log);
	/* A private database in a directory others may list and write. */
	ck_assert_int_eq(chmod(t.db, 0600), 0);
	snprintf(dir, sizeof(dir), "%s", t.dir);
	ck_assert_int_eq(chmod(dir, 0777), 0);
	ck_assert_int_eq(truncate(t.log, 0), 0);
	td_spawn(&t, &(struct td_how){ 0 });
	ck_assert_int_eq(td_wait_exit(&t, 20000), 1);
	log = td_log(&t);
	ck_assert_msg(strstr(log, "database's directory") &&
			      strstr(log, "0777"), "%s", log);
	free(log);
	/* One others may only list, or a sticky one as /tmp is, holds a
	 * private database safely. */
	ck_assert_int_eq(chmod(dir, 0755), 0);
	td_start(&t, NULL);
	td_stop(&t);
	ck_assert_int_eq(chmod(dir, 01777), 0);
	td_start(&t, NULL);
	td_stop(&t);
	ck_assert_int_eq(chmod(dir, 0700), 0);
}
END_TEST

#define HOGS 30

/*
 * A daemon out of descriptors (40: connections each hold a socket and a
 * pidfd until their first frame) stops accepting for a while rather than
 * spin on its listener; a client that connects then waits in the backlog,
 * and is answered once descriptors are free again.
 */
START_TEST(server_accept_waits_for_free_descriptors)
{
	struct td_how h = { .nofile = 40 };
	int hogs[HOGS], waiting;
	Npusan__FromDaemon *m;
	bool paused = false;
	struct td t;
	char *log;

	td_init(&t);
	td_start(&t, &h);
	for (size_t i = 0; i < HOGS; i++)
		hogs[i] = td_connect(&t);
	for (int64_t until = now_ms() + 10000; !paused && now_ms() < until;) {
		log = td_log(&t);
		paused = strstr(log, "accept: Too many open files; pausing") !=
			 NULL;
		free(log);
		if (!paused)
			tu_nap_ms(50);
	}
	ck_assert_msg(paused, "%d connections did not use up 40 descriptors",
		      HOGS);
	waiting = td_connect(&t);
	send_stats_query(waiting);
	for (size_t i = 0; i < HOGS; i++)
		close(hogs[i]);
	m = recv_msg(waiting);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_STATS);
	npusan__from_daemon__free_unpacked(m, NULL);
	close(waiting);
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

void server_hostile_add(TCase *tc)
{
	tcase_add_test(tc, server_register_from_a_dead_connector_refused);
	tcase_add_test(tc, server_without_pidfds_still_verifies_senders);
	tcase_add_test(tc, server_unnamed_peer_closed);
	tcase_add_test(tc, server_state_private_under_umask_022);
	tcase_add_test(tc, server_refuses_a_database_others_can_read);
	tcase_add_test(tc, server_accept_waits_for_free_descriptors);
}
