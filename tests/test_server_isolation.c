/*
 * test_server_isolation.c - the tests of `test_server isolation`, as root
 * and nobody: what one user may see, store and lock out of another's
 * daemon.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ring.h"
#include "server_helpers.h"
#include "testutil.h"

START_TEST(server_user_sees_only_its_own)
{
	Npusan__FindingsRequest fr = NPUSAN__FINDINGS_REQUEST__INIT;
	size_t frames;
	int64_t ids[2], first, last;
	struct td t;
	pid_t child;
	int status;

	td_init(&t);
	populate(t.db, ids);
	td_start(&t, NULL);
	/* Once it runs: the daemon refuses a database others could list. */
	ck_assert_int_eq(chmod(t.dir, 0755), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		/* As NOBODY: its process and findings, nothing of root's. */
		Npusan__Query q = NPUSAN__QUERY__INIT;
		Npusan__ShowRequest sr = NPUSAN__SHOW_REQUEST__INIT;
		Npusan__FromDaemon *m;
		int fd;

		if (setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
		    setresuid(NOBODY, NOBODY, NOBODY) < 0)
			_exit(3);
		fd = td_connect(&t); /* the system socket's mode: 0666 */
		if (read_findings(fd, &fr, &frames, &first, &last) != POP_FEW ||
		    read_list(fd) != 1)
			_exit(4);
		q.q_case = NPUSAN__QUERY__Q_SHOW;
		q.show = &sr;
		sr.has_id = 1;
		sr.id = 1; /* root's first finding */
		send_query(fd, 1, &q);
		m = recv_msg(fd);
		if (m == NULL || m->msg_case != NPUSAN__FROM_DAEMON__MSG_ERROR ||
		    m->error->code != ENOENT)
			_exit(5);
		npusan__from_daemon__free_unpacked(m, NULL);
		sr.id = last; /* its own */
		send_query(fd, 1, &q);
		m = recv_msg(fd);
		if (m == NULL || m->msg_case != NPUSAN__FROM_DAEMON__MSG_SHOW ||
		    m->show->process == NULL || m->show->process->uid != NOBODY)
			_exit(6);
		npusan__from_daemon__free_unpacked(m, NULL);
		close(fd);
		_exit(0);
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "nobody's view: status %d", status);
	td_stop(&t);
}
END_TEST

START_TEST(server_user_refuses_someone_elses_tmp_dir)
{
	/* Another user made /tmp/npusan-UID first, to catch our rings. */
	uid_t uid = 65534;
	char dir[64], state[80], env_state[112];
	const char *env[] = { env_state, NULL };
	struct td_how h = { .no_socket_arg = true, .env = env, .uid = uid };
	struct td t;
	char *log;

	snprintf(dir, sizeof(dir), "/tmp/npusan-%u", (unsigned)uid);
	ck_assert_int_eq(mkdir(dir, 0777), 0); /* root's, open to all */
	ck_assert_int_eq(chmod(dir, 0777), 0);
	td_init(&t);
	ck_assert_int_eq(chmod(t.dir, 0755), 0);
	snprintf(state, sizeof(state), "%s/state", t.dir);
	mkdir_for(state, uid);
	snprintf(env_state, sizeof(env_state), "XDG_STATE_HOME=%s", state);
	unsetenv("XDG_RUNTIME_DIR");
	td_spawn(&t, &h);
	ck_assert_int_eq(td_wait_exit(&t, 20000), 1);
	log = td_log(&t);
	rmdir(dir);
	ck_assert_msg(strstr(log, "is not a directory of yours"), "%s", log);
	free(log);
}
END_TEST

/* ---- isolation: root and nobody (test_server isolation) ------------------ */

/*
 * In a child: registers this process over a fresh connection and ring.
 * 0 when accepted; 1 when refused with `why` in the error; 2 otherwise.
 */
static int iso_register(const struct td *t, const char *why)
{
	struct ring *ring;
	Npusan__FromDaemon *m;
	int fd, rc = 2;

	if (ring_create(RING_MIN_CAPACITY, 0, 0, &ring) < 0)
		return 2;
	fd = td_connect(t);
	send_register(fd, (uint32_t)getpid(), ring_fd(ring), 0);
	m = recv_msg(fd);
	if (m != NULL && m->msg_case == NPUSAN__FROM_DAEMON__MSG_REGISTER_REPLY) {
		if (m->register_reply->accepted)
			rc = 0;
		else if (why != NULL && m->register_reply->error != NULL &&
			 strstr(m->register_reply->error, why) != NULL)
			rc = 1;
	}
	if (m != NULL)
		npusan__from_daemon__free_unpacked(m, NULL);
	close(fd);
	ring_destroy(ring);
	return rc;
}

/* The uid the daemon's list gives process `pid`; -1 when not listed. */
static int64_t iso_listed_uid(const struct td *t, pid_t pid)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__ListRequest lr = NPUSAN__LIST_REQUEST__INIT;
	Npusan__FromDaemon *m;
	int64_t uid = -1;
	int fd = td_connect(t);

	q.q_case = NPUSAN__QUERY__Q_LIST;
	q.list = &lr;
	send_query(fd, 1, &q);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_LIST);
	for (size_t i = 0; i < m->list->n_processes; i++)
		if (m->list->processes[i]->pid == (uint32_t)pid)
			uid = m->list->processes[i]->uid;
	npusan__from_daemon__free_unpacked(m, NULL);
	close(fd);
	return uid;
}

/*
 * Issue 12: a stored process never changes owner. Root's process registers,
 * becomes nobody (same pid, same start time) and registers again: refused,
 * and root still owns the process.
 */
START_TEST(isolation_stored_process_never_changes_owner)
{
	struct td t;
	pid_t child;
	int status;

	td_init(&t);
	td_start(&t, NULL);
	ck_assert_int_eq(chmod(t.dir, 0755), 0); /* nobody reaches the socket */
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		if (iso_register(&t, NULL) != 0)
			_exit(3);
		if (setgroups(0, NULL) < 0 ||
		    setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
		    setresuid(NOBODY, NOBODY, NOBODY) < 0)
			_exit(4);
		_exit(iso_register(&t, "another user") == 1 ? 0 : 5);
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "nobody's registration of root's process: status %d "
		      "(5: not refused)", status);
	ck_assert_int_eq(iso_listed_uid(&t, child), 0);
	td_stop(&t);
}
END_TEST

/*
 * How many of the `n` connections in `fds` the daemon refuses within
 * `wait_ms`: an Error (EMFILE) holding `why`, then the close. Closes and
 * marks (-1) those. In a child: -1 for any other answer.
 */
static int iso_refused(int *fds, int n, const char *why, int wait_ms)
{
	int refused = 0;

	for (int64_t until = now_ms() + wait_ms; now_ms() < until;) {
		struct pollfd p[128];

		for (int i = 0; i < n; i++)
			p[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
		if (poll(p, (nfds_t)n, 50) < 0)
			return -1;
		for (int i = 0; i < n; i++) {
			Npusan__FromDaemon *m;
			bool ok;

			if (fds[i] < 0 || p[i].revents == 0)
				continue;
			m = recv_msg(fds[i]);
			ok = m != NULL &&
			     m->msg_case == NPUSAN__FROM_DAEMON__MSG_ERROR &&
			     m->error->code == EMFILE &&
			     strstr(m->error->message, why) != NULL;
			if (m != NULL)
				npusan__from_daemon__free_unpacked(m, NULL);
			if (!ok)
				return -1;
			close(fds[i]);
			fds[i] = -1;
			refused++;
		}
	}
	return refused;
}

/* A StatsReply to a stats query on `fd`, in a child: whether it came. */
static bool iso_stats(int fd)
{
	Npusan__FromDaemon *m;
	bool ok;

	send_stats_query(fd);
	m = recv_msg(fd);
	ok = m != NULL && m->msg_case == NPUSAN__FROM_DAEMON__MSG_STATS;
	if (m != NULL)
		npusan__from_daemon__free_unpacked(m, NULL);
	return ok;
}

/* Becomes nobody, in a child. */
static void iso_become_nobody(void)
{
	if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
	    setresuid(NOBODY, NOBODY, NOBODY) < 0)
		_exit(2);
}

/*
 * Runs `fn` as nobody in a child that holds what it opened until the
 * parent, root, has run `check`; fn's exit status must be 0.
 */
static void iso_as_nobody(const struct td *t, int (*fn)(const struct td *),
			  void (*check)(const struct td *))
{
	int ready[2], done[2], status;
	char byte = 0;
	pid_t child;

	ck_assert_int_eq(pipe(ready), 0);
	ck_assert_int_eq(pipe(done), 0);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		int rc;

		iso_become_nobody();
		rc = fn(t);
		if (write(ready[1], "r", 1) != 1 || read(done[0], &byte, 1) != 1)
			_exit(9);
		_exit(rc);
	}
	ck_assert_int_eq(read(ready[0], &byte, 1), 1);
	check(t);
	ck_assert_int_eq(write(done[1], "d", 1), 1);
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "nobody's side: status %d", status);
	close(ready[0]);
	close(ready[1]);
	close(done[0]);
	close(done[1]);
}

/* Root is served, and the log names whom the daemon refused. */
static void iso_root_served(const struct td *t)
{
	char *log;

	expect_serving(t);
	log = td_log(t);
	ck_assert_msg(strstr(log, "refusing connections: pid") != NULL &&
			      strstr(log, "uid 65534") != NULL,
		      "%s", log);
	free(log);
}

/* Nobody, limited to 3 agents and 2 queries: 12 connections. */
static int iso_flood_per_user(const struct td *t)
{
	int fds[12], q;

	for (int i = 0; i < 12; i++)
		fds[i] = td_connect(t);
	/* 5 (3 + 2) held, the rest refused at once. */
	if (iso_refused(fds, 12, "connections of uid 65534", 1000) != 7)
		return 3;
	/* The first two that ask are query connections; a third is not. */
	for (q = 0; q < 12 && fds[q] < 0; q++)
		;
	if (!iso_stats(fds[q]) || !iso_stats(fds[q + 1]))
		return 4;
	send_stats_query(fds[q + 2]);
	if (iso_refused(&fds[q + 2], 1, "query connections of uid 65534",
			2000) != 1)
		return 5;
	return 0;
}

/*
 * Issue 12: one user's 4,200 connections locked everyone out. A user
 * other than root holds at most its own limits; root is still served.
 */
START_TEST(isolation_one_user_cannot_lock_out_others)
{
	static const char *const args[] = { "--max-agents-per-user", "3",
					     "--max-queries-per-user", "2",
					     NULL };
	struct td_how h = { .args = args };
	struct td t;

	td_init(&t);
	td_start(&t, &h);
	ck_assert_int_eq(chmod(t.dir, 0755), 0);
	iso_as_nobody(&t, iso_flood_per_user, iso_root_served);
	td_stop(&t);
}
END_TEST

/* Whether the daemon answers a registration on `fd` as `accepted` says,
 * and a refusal with `why`. */
static bool iso_registered(int fd, bool accepted, const char *why)
{
	Npusan__FromDaemon *m = recv_msg(fd);
	bool ok;

	ok = m != NULL &&
	     m->msg_case == NPUSAN__FROM_DAEMON__MSG_REGISTER_REPLY &&
	     m->register_reply->accepted == accepted &&
	     (accepted || (m->register_reply->error != NULL &&
			   strstr(m->register_reply->error, why) != NULL));
	if (m != NULL)
		npusan__from_daemon__free_unpacked(m, NULL);
	return ok;
}

/* Nobody, limited to 1 agent: a second registration is refused, saying
 * why, and its ring is not kept. */
static int iso_two_agents(const struct td *t)
{
	struct ring *ring;
	int first, second, rc = 0;

	if (ring_create(RING_MIN_CAPACITY, 0, 0, &ring) < 0)
		return 2;
	first = td_connect(t);
	send_register(first, (uint32_t)getpid(), ring_fd(ring), 0);
	if (!iso_registered(first, true, NULL))
		rc = 3;
	second = td_connect(t);
	send_register(second, (uint32_t)getpid(), ring_fd(ring), 0);
	if (rc == 0 && !iso_registered(second, false, "too many agents of "
				       "uid 65534: 1 connected"))
		rc = 4;
	close(second);
	ring_destroy(ring);
	return rc;
}

/* Agents count against a user's own limit (--max-agents-per-user). */
START_TEST(isolation_agents_per_user_capped)
{
	static const char *const args[] = { "--max-agents-per-user", "1",
					     NULL };
	struct td_how h = { .args = args };
	struct td t;

	td_init(&t);
	td_start(&t, &h);
	ck_assert_int_eq(chmod(t.dir, 0755), 0);
	iso_as_nobody(&t, iso_two_agents, iso_root_served);
	td_stop(&t);
}
END_TEST

/* Nobody takes every connection it may: 68 at most, 16 of them root's. */
static int iso_flood_all(const struct td *t)
{
	int fds[60];

	for (int i = 0; i < 60; i++)
		fds[i] = td_connect(t);
	return iso_refused(fds, 60, "kept for root", 1000) == 60 - 52 ? 0 : 3;
}

/* Root's reserve: a user may not take the last connections. */
START_TEST(isolation_root_keeps_a_reserve)
{
	/* 200 descriptors: (200 - 64) / 2 = 68 connections. */
	struct td_how h = { .nofile = 200 };
	struct td t;

	td_init(&t);
	td_start(&t, &h);
	ck_assert_int_eq(chmod(t.dir, 0755), 0);
	iso_as_nobody(&t, iso_flood_all, iso_root_served);
	td_stop(&t);
}
END_TEST

void server_isolation_add(TCase *tc)
{
	tcase_add_test(tc, server_user_sees_only_its_own);
	tcase_add_test(tc, isolation_stored_process_never_changes_owner);
	tcase_add_test(tc, isolation_one_user_cannot_lock_out_others);
	tcase_add_test(tc, isolation_agents_per_user_capped);
	tcase_add_test(tc, isolation_root_keeps_a_reserve);
	tcase_add_test(tc, server_user_refuses_someone_elses_tmp_dir);
}
