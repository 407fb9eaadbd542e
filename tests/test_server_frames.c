/*
 * test_server_frames.c - test_server's hostile frames: garbage, truncated,
 * oversized and unknown frames, a query of another version, and
 * registrations the daemon must refuse or close on.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "frame.h"
#include "ring.h"
#include "server_helpers.h"
#include "testutil.h"
#include "wire.h"

/* ---- hostile frames ------------------------------------------------------ */

START_TEST(server_garbage_frame_closes)
{
	static const uint8_t junk[8] = { 0xff, 0xff, 0xff, 0xff,
					 0xff, 0xff, 0xff, 0xff };
	struct td t;
	int fd;

	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	send_header(fd, sizeof(junk));
	send_all(fd, junk, sizeof(junk));
	expect_error_close(fd, EBADMSG);
	expect_serving(&t);
	/* Bytes that are not even a frame header, then EOF. */
	fd = td_connect(&t);
	send_all(fd, "GE", 2);
	shutdown(fd, SHUT_WR);
	expect_error_close(fd, EPROTO);
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

START_TEST(server_truncated_frame_closes)
{
	static const uint8_t part[10];
	struct td t;
	int fd;

	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	send_header(fd, 100);
	send_all(fd, part, sizeof(part));
	shutdown(fd, SHUT_WR);
	expect_error_close(fd, EPROTO);
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

START_TEST(server_oversized_frame_closes)
{
	const uint32_t sizes[] = { FRAME_MAX + 1, UINT32_MAX,
				   WIRE_RX_MAX + 1 };
	struct td t;

	td_init(&t);
	td_start(&t, NULL);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		int fd = td_connect(&t);

		send_header(fd, sizes[i]);
		expect_error_close(fd, EMSGSIZE);
		expect_serving(&t);
	}
	td_stop(&t);
}
END_TEST

START_TEST(server_unknown_message_closes)
{
	/* An envelope with field 15 (a varint): a message of some later
	 * protocol this daemon does not know. */
	static const uint8_t future[] = { 15 << 3, 1 };
	struct td t;
	int fd;

	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	send_header(fd, 0); /* an empty envelope */
	expect_error_close(fd, EPROTO);
	fd = td_connect(&t);
	send_header(fd, sizeof(future));
	send_all(fd, future, sizeof(future));
	expect_error_close(fd, EPROTO);
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

START_TEST(server_query_wrong_version_closes)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__StatsRequest sr = NPUSAN__STATS_REQUEST__INIT;
	Npusan__ToDaemon m = NPUSAN__TO_DAEMON__INIT;
	struct td t;
	int fd;

	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	q.q_case = NPUSAN__QUERY__Q_STATS;
	q.stats = &sr;
	send_query(fd, 2, &q);
	expect_error_close(fd, EPROTO);
	/* No version at all. */
	fd = td_connect(&t);
	m.msg_case = NPUSAN__TO_DAEMON__MSG_QUERY;
	q.has_protocol_version = 0;
	m.query = &q;
	send_env(fd, &m, -1);
	expect_error_close(fd, EPROTO);
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

START_TEST(server_register_of_another_pid_refused)
{
	struct td t;
	int fd, memfd = memfd_create("not-a-ring", MFD_CLOEXEC);

	ck_assert_int_ge(memfd, 0);
	td_init(&t);
	td_start(&t, NULL);
	/* The daemon's own pid: alive, and certainly not ours. */
	fd = td_connect(&t);
	send_register(fd, (uint32_t)t.pid, memfd, 0);
	expect_refused(fd, "not the sender's");
	expect_serving(&t);
	/* Our pid, but another process's start time: a pid reused. */
	fd = td_connect(&t);
	send_register(fd, (uint32_t)getpid(), memfd, 1);
	expect_refused(fd, "start time");
	expect_serving(&t);
	close(memfd);
	td_stop(&t);
}
END_TEST

START_TEST(server_register_without_ring_refused)
{
	struct td t;
	int fd;

	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	send_register(fd, (uint32_t)getpid(), -1, 0);
	expect_refused(fd, "no ring");
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

START_TEST(server_register_accepted_then_second_register_closes)
{
	struct ring *ring;
	struct td t;
	Npusan__FromDaemon *m;
	int fd;

	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 0, &ring), 0);
	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	send_register(fd, (uint32_t)getpid(), ring_fd(ring), 0);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_REGISTER_REPLY);
	ck_assert_msg(m->register_reply->accepted, "refused: %s",
		      m->register_reply->error ? m->register_reply->error
					       : "(no reason)");
	ck_assert_str_eq(m->register_reply->daemon_version, NPUSAN_VERSION);
	npusan__from_daemon__free_unpacked(m, NULL);
	/* A second Register on the same connection is a protocol error. */
	send_register(fd, (uint32_t)getpid(), ring_fd(ring), 0);
	expect_error_close(fd, EPROTO);
	expect_serving(&t);
	td_stop(&t);
	ring_destroy(ring);
}
END_TEST

START_TEST(server_register_on_a_query_connection_closes)
{
	struct td t;
	Npusan__FromDaemon *m;
	int fd;

	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	send_stats_query(fd);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_STATS);
	npusan__from_daemon__free_unpacked(m, NULL);
	send_register(fd, (uint32_t)getpid(), -1, 0);
	expect_error_close(fd, EPROTO);
	expect_serving(&t);
	td_stop(&t);
}
END_TEST

/* A Register of `pid` (0: none given) in protocol `version` (0: none). */
static void send_bare_register(int fd, uint32_t version, uint32_t pid,
			       int ring_fd)
{
	Npusan__ToDaemon m = NPUSAN__TO_DAEMON__INIT;
	Npusan__Register r = NPUSAN__REGISTER__INIT;

	r.has_protocol_version = version != 0;
	r.protocol_version = version;
	r.has_pid = pid != 0;
	r.pid = pid;
	m.msg_case = NPUSAN__TO_DAEMON__MSG_REGISTER;
	m.register_ = &r;
	send_env(fd, &m, ring_fd);
}

/* A registration that lacks what it must say is refused, saying what. */
START_TEST(server_register_malformed_refused)
{
	struct td t;
	int fd, memfd = memfd_create("not-a-ring", MFD_CLOEXEC);

	ck_assert_int_ge(memfd, 0);
	td_init(&t);
	td_start(&t, NULL);
	fd = td_connect(&t);
	send_bare_register(fd, 0, (uint32_t)getpid(), memfd);
	expect_refused(fd, "unsupported protocol version");
	fd = td_connect(&t);
	send_bare_register(fd, 2, (uint32_t)getpid(), memfd);
	expect_refused(fd, "unsupported protocol version");
	fd = td_connect(&t);
	send_bare_register(fd, 1, 0, memfd);
	expect_refused(fd, "no pid");
	expect_serving(&t);
	close(memfd);
	td_stop(&t);
}
END_TEST

void server_frames_add(TCase *tc)
{
	tcase_add_test(tc, server_garbage_frame_closes);
	tcase_add_test(tc, server_truncated_frame_closes);
	tcase_add_test(tc, server_oversized_frame_closes);
	tcase_add_test(tc, server_unknown_message_closes);
	tcase_add_test(tc, server_query_wrong_version_closes);
	tcase_add_test(tc, server_register_of_another_pid_refused);
	tcase_add_test(tc, server_register_without_ring_refused);
	tcase_add_test(tc, server_register_accepted_then_second_register_closes);
	tcase_add_test(tc, server_register_on_a_query_connection_closes);
	tcase_add_test(tc, server_register_malformed_refused);
}
