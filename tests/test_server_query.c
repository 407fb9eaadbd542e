/*
 * test_server_query.c - test_server's queries: an empty database, queries
 * answered off the loop and in order, follow, and an attach of nothing.
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

#include "server_helpers.h"
#include "testutil.h"

/* ---- queries ------------------------------------------------------------- */

START_TEST(server_queries_on_an_empty_database)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__ListRequest lr = NPUSAN__LIST_REQUEST__INIT;
	Npusan__FindingsRequest fr = NPUSAN__FINDINGS_REQUEST__INIT;
	Npusan__ShowRequest sr = NPUSAN__SHOW_REQUEST__INIT;
	Npusan__FromDaemon *m;
	struct td t;
	int fd;

	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	/* Several requests, one after another, on one connection. */
	q.q_case = NPUSAN__QUERY__Q_LIST;
	q.list = &lr;
	send_query(fd, 1, &q);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_LIST);
	ck_assert(m->list->has_done && m->list->done);
	ck_assert_uint_eq(m->list->n_processes, 0);
	npusan__from_daemon__free_unpacked(m, NULL);

	q.q_case = NPUSAN__QUERY__Q_FINDINGS;
	q.findings = &fr;
	send_query(fd, 1, &q);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_FINDINGS);
	ck_assert(m->findings->has_done && m->findings->done);
	ck_assert_uint_eq(m->findings->n_findings, 0);
	npusan__from_daemon__free_unpacked(m, NULL);

	/* Requests the daemon understands but cannot serve: an Error, and
	 * the connection stays. */
	fr.kind = (char *)"data_racer";
	send_query(fd, 1, &q);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_ERROR);
	ck_assert_int_eq(m->error->code, EINVAL);
	npusan__from_daemon__free_unpacked(m, NULL);

	q.q_case = NPUSAN__QUERY__Q_SHOW;
	q.show = &sr;
	sr.has_id = 1;
	sr.id = 12345;
	send_query(fd, 1, &q);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_ERROR);
	ck_assert_int_eq(m->error->code, ENOENT);
	npusan__from_daemon__free_unpacked(m, NULL);

	send_stats_query(fd);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_STATS);
	ck_assert_uint_eq(m->stats->findings, 0);
	ck_assert_uint_gt(m->stats->db_bytes, 0);
	npusan__from_daemon__free_unpacked(m, NULL);
	close(fd);
	td_stop(&t);
}
END_TEST

/* Stats and show run off the loop (server.c, DESIGN 7): requests sent
 * back to back are answered in order, and a daemon stopped while many
 * are in flight, their clients gone, exits 0 with a clean log. */
START_TEST(server_queries_off_the_loop_in_order_and_stop_clean)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__ShowRequest sr = NPUSAN__SHOW_REQUEST__INIT;
	Npusan__FromDaemon *m;
	struct td t;
	int fds[64], fd;

	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	q.q_case = NPUSAN__QUERY__Q_SHOW;
	q.show = &sr;
	sr.has_id = 1;
	sr.id = 7;
	send_stats_query(fd);
	send_query(fd, 1, &q);
	send_stats_query(fd);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_STATS);
	npusan__from_daemon__free_unpacked(m, NULL);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_ERROR);
	ck_assert_int_eq(m->error->code, ENOENT);
	npusan__from_daemon__free_unpacked(m, NULL);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_STATS);
	npusan__from_daemon__free_unpacked(m, NULL);
	close(fd);
	for (int i = 0; i < 64; i++) {
		fds[i] = td_connect(&t);
		send_stats_query(fds[i]);
		send_query(fds[i], 1, &q);
	}
	for (int i = 0; i < 64; i += 2)
		close(fds[i]);
	td_stop(&t);
	for (int i = 1; i < 64; i += 2)
		close(fds[i]);
}
END_TEST

START_TEST(server_follow_answers_then_waits)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__FindingsRequest fr = NPUSAN__FINDINGS_REQUEST__INIT;
	Npusan__FromDaemon *m;
	struct pollfd p;
	struct td t;
	int fd;

	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	q.q_case = NPUSAN__QUERY__Q_FINDINGS;
	q.findings = &fr;
	fr.has_follow = fr.follow = 1;
	send_query(fd, 1, &q);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_FINDINGS);
	ck_assert(m->findings->done);
	npusan__from_daemon__free_unpacked(m, NULL);
	/* Nothing new: the follower hears nothing, and stays connected. */
	p = (struct pollfd){ .fd = fd, .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 300), 0);
	/* A request while following is refused and ends the follow. */
	send_stats_query(fd);
	expect_error_close(fd, EBUSY);
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

START_TEST(server_follow_pushes_new_findings)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__FindingsRequest fr = NPUSAN__FINDINGS_REQUEST__INIT;
	char trace[PATH_MAX], *rep = strdup(tu_bin("agent/npusan-replay"));
	const char *argv[] = { rep, trace, NULL };
	bool kinds[2] = { false, false };
	Npusan__FromDaemon *m;
	int64_t last = 0;
	struct td t;
	int fd;

	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	q.q_case = NPUSAN__QUERY__Q_FINDINGS;
	q.findings = &fr;
	fr.has_follow = fr.follow = 1;
	send_query(fd, 1, &q);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert(m->findings->done);
	ck_assert_uint_eq(m->findings->n_findings, 0);
	npusan__from_daemon__free_unpacked(m, NULL);
	/* A process with one finding of each kind, through the real agent. */
	snprintf(trace, sizeof(trace), "%s/examples/demo.trace",
		 NPUSAN_SOURCE_DIR);
	setenv("NPUSAN_SOCKET", t.sock, 1);
	unsetenv("NPUSAN_RECORD");
	ck_assert_int_eq(tu_run(argv, NULL, NULL, NULL), 0);
	free(rep);
	while (!kinds[0] || !kinds[1]) {
		m = recv_msg(fd);
		ck_assert_msg(m != NULL, "the follow ended");
		ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_FINDINGS);
		ck_assert(m->findings->done);
		ck_assert_uint_gt(m->findings->n_findings, 0);
		for (size_t i = 0; i < m->findings->n_findings; i++) {
			Npusan__Finding *f = m->findings->findings[i];

			ck_assert_int_gt(f->id, last); /* each pushed once */
			last = f->id;
			kinds[strcmp(f->kind, "data_race") == 0 ? 0 : 1] = true;
		}
		npusan__from_daemon__free_unpacked(m, NULL);
	}
	close(fd);
	td_stop(&t);
}
END_TEST

/* An attach that names neither pids nor a job gets an Error saying what it
 * needs, and the connection stays: the next request is answered. */
START_TEST(server_attach_of_nothing_is_said)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__AttachRequest ar = NPUSAN__ATTACH_REQUEST__INIT;
	Npusan__FromDaemon *m;
	struct td t;
	int fd;

	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	q.q_case = NPUSAN__QUERY__Q_ATTACH;
	q.attach = &ar;
	send_query(fd, 1, &q);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_ERROR);
	ck_assert_int_eq(m->error->code, EINVAL);
	ck_assert_str_eq(m->error->message, "attach needs pids or a job");
	npusan__from_daemon__free_unpacked(m, NULL);
	send_stats_query(fd);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_STATS);
	npusan__from_daemon__free_unpacked(m, NULL);
	close(fd);
	td_stop(&t);
}
END_TEST

void server_query_add(TCase *tc)
{
	tcase_add_test(tc, server_queries_on_an_empty_database);
	tcase_add_test(tc, server_queries_off_the_loop_in_order_and_stop_clean);
	tcase_add_test(tc, server_follow_answers_then_waits);
	tcase_add_test(tc, server_follow_pushes_new_findings);
	tcase_add_test(tc, server_attach_of_nothing_is_said);
}
