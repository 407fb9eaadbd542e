/*
 * test_server_sweep.c - the tests of `test_server sweep`: the connections
 * npusand closes because they dawdle (server.c's sweep: a first frame or a
 * frame that never comes, a query connection idle for a minute, a client
 * that does not read its answers, a closing one that does not take its
 * last frames). A group of its own because it waits out the daemon's
 * minute-long timeouts, which CTest then runs beside the other suites.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "server_helpers.h"
#include "store.h"
#include "testutil.h"

/* As daemon/server.c's SERVER_*_TIMEOUT_MS and SERVER_LINGER_MS. */
#define FIRST_S 10
#define IDLE_S 60
#define LINGER_S 5
/* What the sweep may take beyond them on a loaded machine. */
#define SLACK_S 15

/* Whether the daemon has closed its end of `fd`: a hang-up, seen also
 * while answers it sent lie unread. */
static bool hung_up(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	ck_assert_int_ge(poll(&p, 1, 0), 0);
	return (p.revents & (POLLHUP | POLLERR)) != 0;
}

/* Waits until the daemon closes `fd`, at most until `until`. */
static bool hung_up_by(int fd, int64_t until)
{
	while (!hung_up(fd) && now_ms() < until)
		tu_nap_ms(50);
	return hung_up(fd);
}

/* Sends a list query for the processes of `job` (NULL: all). */
static void send_list_query(int fd, const char *job)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__ListRequest lr = NPUSAN__LIST_REQUEST__INIT;

	lr.job = (char *)job;
	q.q_case = NPUSAN__QUERY__Q_LIST;
	q.list = &lr;
	send_query(fd, 1, &q);
}

/*
 * A connection that sends nothing is closed after FIRST_S; one whose frame
 * stops halfway gets "frame timed out" and the close; one that did so while
 * its answer lay unread is closed LINGER_S later still, its Error never
 * taken. A query connection that asked and was answered stays open until
 * it has been idle for IDLE_S; so does one that does not read its answer,
 * which is then closed for that. The daemon serves throughout.
 */
START_TEST(server_sweep_closes_what_dawdles)
{
	int silent, partial, lingering, idle, unread;
	int64_t start, first_due;
	Npusan__FromDaemon *m;
	struct td t;
	char *log;

	td_init(&t);
	/* Answers of about 1.2 MiB, which fill the socket and the daemon's
	 * queue of answers (SERVER_OUT_HIGH), and of 300 KiB, which the
	 * daemon makes whole but the socket cannot take. */
	populate_exited(t.db, 6000, (unsigned)geteuid(),
			"CASE WHEN x <= 1500 THEN 'mid' ELSE 'big' END");
	td_start(&t, NULL);
	start = now_ms();
	silent = td_connect(&t);
	partial = td_connect(&t);
	send_header(partial, 100);
	send_all(partial, "0123456789", 10);
	idle = td_connect(&t);
	send_stats_query(idle);
	m = recv_msg(idle);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_STATS);
	npusan__from_daemon__free_unpacked(m, NULL);
	unread = td_connect(&t);
	send_list_query(unread, NULL);
	lingering = td_connect(&t);
	send_list_query(lingering, "mid");
	/* Its answer fills the socket; then a frame begun and never ended. */
	tu_nap_ms(500);
	send_header(lingering, 100);
	send_all(lingering, "01234", 5);

	first_due = start + (FIRST_S + SLACK_S) * 1000;
	ck_assert_msg(hung_up_by(silent, first_due),
		      "a connection that sent nothing is still open");
	ck_assert_msg(hung_up_by(partial, first_due),
		      "a connection with half a frame is still open");
	expect_error_close(partial, ETIMEDOUT);
	close(silent);
	ck_assert_msg(hung_up_by(lingering, first_due + LINGER_S * 1000),
		      "a closing connection that takes nothing stays open");
	close(lingering);
	/* Not yet a minute: what asked stays, read or not. */
	ck_assert_msg(now_ms() - start < IDLE_S * 1000, "the machine is too "
		      "slow for this test's timing");
	ck_assert_msg(!hung_up(idle), "an idle query connection was closed "
		      "within %d s", FIRST_S + SLACK_S);
	ck_assert_msg(!hung_up(unread), "a connection with an unread answer "
		      "was closed within %d s", FIRST_S + SLACK_S);
	expect_serving(&t);

	ck_assert_msg(hung_up_by(idle, start + (IDLE_S + SLACK_S) * 1000),
		      "an idle query connection is still open after %d s",
		      IDLE_S + SLACK_S);
	expect_closed(idle);
	ck_assert_msg(hung_up_by(unread, start + (IDLE_S + SLACK_S) * 1000),
		      "a connection that reads nothing is still open after "
		      "%d s", IDLE_S + SLACK_S);
	close(unread);
	expect_serving(&t);
	log = td_log(&t);
	ck_assert_msg(strstr(log, "does not read its answers; closing") != NULL,
		      "%s", log);
	ck_assert_ptr_nonnull(strstr(log, "sent nothing; closing"));
	free(log);
	td_stop(&t);
}
END_TEST

void server_sweep_add(TCase *tc)
{
	tcase_add_test(tc, server_sweep_closes_what_dawdles);
}
