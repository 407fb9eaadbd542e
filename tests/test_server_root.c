/*
 * test_server_root.c - the tests of `test_server root`: what root reads of
 * every user's data, in answers that span frames or are never read, and the
 * connections the daemon caps.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "ring.h"
#include "server_helpers.h"
#include "store.h"
#include "testutil.h"

/* The daemon's resident memory, in KiB. */
static long daemon_rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

#define UNREAD_PROCS 40000 /* about 10 MiB of list answer */

static const char *const unread_env[] = {
	"ASAN_OPTIONS=quarantine_size_mb=1:detect_leaks=1", NULL
};
#define UNREAD_CONNS 20

/*
 * Issue 12: clients that sent `list` and read nothing took the daemon from
 * 335 to 643 MiB. An answer stops at a small bound until its client reads;
 * one that reads gets every process.
 */
START_TEST(server_unread_list_answers_stay_small)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__ListRequest lr = NPUSAN__LIST_REQUEST__INIT;
	int fds[UNREAD_CONNS], fd;
	long before, after;
	size_t n = 0;
	bool done = false;
	struct td t;

	td_init(&t);
	populate_exited(t.db, UNREAD_PROCS, 0, "'job-' || (x % 50)");
	/* What the daemon holds, not what AddressSanitizer keeps of what it
	 * freed: its quarantine would count every SQLite sort of the 20
	 * answers' ids as resident. */
	td_start(&t, &(struct td_how){ .env = unread_env });
	expect_serving(&t);
	before = daemon_rss_kib(t.pid);
	q.q_case = NPUSAN__QUERY__Q_LIST;
	q.list = &lr;
	for (int i = 0; i < UNREAD_CONNS; i++) {
		fds[i] = td_connect(&t);
		send_query(fds[i], 1, &q);
	}
	expect_serving(&t); /* they were all taken up */
	tu_nap_ms(1000);
	after = daemon_rss_kib(t.pid);
	ck_assert_msg(after - before < 64 * 1024, "%d unread list answers "
		      "took %ld KiB", UNREAD_CONNS, after - before);
	/* A client that reads gets them all, in frames. */
	fd = td_connect(&t);
	send_query(fd, 1, &q);
	while (!done) {
		Npusan__FromDaemon *m = recv_msg(fd);

		ck_assert_ptr_nonnull(m);
		ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_LIST);
		for (size_t i = 0; i < m->list->n_processes; i++)
			ck_assert_uint_eq(m->list->processes[i]->pid,
					  UNREAD_PROCS - n++);
		done = m->list->done;
		npusan__from_daemon__free_unpacked(m, NULL);
	}
	ck_assert_uint_eq(n, UNREAD_PROCS);
	close(fd);
	for (int i = 0; i < UNREAD_CONNS; i++)
		close(fds[i]);
	td_stop(&t);
}
END_TEST

START_TEST(server_findings_answer_spans_frames)
{
	Npusan__FindingsRequest fr = NPUSAN__FINDINGS_REQUEST__INIT;
	size_t frames, n;
	int64_t ids[2], first, last;
	struct td t;
	int fd;

	td_init(&t);
	populate(t.db, ids);
	td_start(&t, NULL);
	fd = td_connect(&t);
	/* Everything, as root: several frames, done on the last only. */
	n = read_findings(fd, &fr, &frames, &first, &last);
	ck_assert_uint_eq(n, POP_MANY + POP_FEW);
	ck_assert_uint_gt(frames, 2);
	/* The newest 10, and the newest 2000, which span frames too. */
	fr.has_limit = 1;
	fr.limit = 10;
	n = read_findings(fd, &fr, &frames, &first, &last);
	ck_assert_uint_eq(n, 10);
	ck_assert_int_eq(last - first, 9);
	fr.limit = 2000;
	n = read_findings(fd, &fr, &frames, &first, &last);
	ck_assert_uint_eq(n, 2000);
	ck_assert_uint_gt(frames, 1);
	ck_assert_int_eq(last - first, 1999);
	/* A filter: one job. */
	fr.has_limit = 0;
	fr.job = (char *)"theirs";
	n = read_findings(fd, &fr, &frames, &first, &last);
	ck_assert_uint_eq(n, POP_FEW);
	ck_assert_uint_eq(read_list(fd), 2);
	close(fd);
	td_stop(&t);
}
END_TEST

/* ---- limits -------------------------------------------------------------- */

START_TEST(server_connections_capped)
{
	/* 200 descriptors: the daemon caps connections at (200 - 64) / 2. */
	struct td_how h = { .nofile = 200 };
	int fds[80], refused = 0;
	struct td t;
	char *log;

	td_init(&t);
	td_start(&t, &h);
	for (size_t i = 0; i < 80; i++)
		fds[i] = td_connect(&t);
	/* The refused ones get an Error and a close; the others wait. */
	for (int64_t until = now_ms() + 10000;
	     refused < 80 - (200 - 64) / 2 && now_ms() < until;) {
		struct pollfd p[80];

		for (size_t i = 0; i < 80; i++)
			p[i] = (struct pollfd){ .fd = fds[i], .events = POLLIN };
		ck_assert_int_ge(poll(p, 80, 100), 0);
		for (size_t i = 0; i < 80; i++) {
			if (fds[i] < 0 || p[i].revents == 0)
				continue;
			expect_error_close(fds[i], EMFILE);
			fds[i] = -1;
			refused++;
		}
	}
	/* And no more than those. */
	usleep(300000);
	for (size_t i = 0; i < 80; i++) {
		struct pollfd p = { .fd = fds[i], .events = POLLIN };

		ck_assert(fds[i] < 0 || poll(&p, 1, 0) == 0);
	}
	ck_assert_int_eq(refused, 80 - (200 - 64) / 2);
	for (size_t i = 0; i < 80; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	/* The daemon noticed the closes and serves again. */
	usleep(200000);
	expect_serving(&t);
	log = td_log(&t);
	ck_assert_ptr_nonnull(strstr(log, "refusing connections"));
	free(log);
	td_stop(&t);
}
END_TEST

/*
 * Without pidfds, a process that connected and exited, whose pid then went
 * to another process before its Register arrived, is refused: the start
 * time read at accept is not the new process's. Root makes the pid go
 * round at once (/proc/sys/kernel/ns_last_pid).
 */
START_TEST(server_without_pidfds_refuses_a_reused_pid)
{
	const struct td_how how = { .no_pidfd = true };
	int sv[2], fd = -1, status;
	struct ring *ring;
	uint8_t byte;
	size_t len;
	pid_t a, b = -1;
	struct td t;

	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 0, &ring), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				    sv), 0);
	td_init(&t);
	td_start(&t, &how);
	a = fork();
	ck_assert_int_ge(a, 0);
	if (a == 0) {
		int c = td_connect(&t);
		int rc = frame_send(sv[1], "c", 1, c, 5000) == 0 ? 0 : 3;

		usleep(300 * 1000); /* accepted alive */
		_exit(rc);
	}
	ck_assert_int_eq(waitpid(a, &status, 0), a);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(frame_recv(sv[0], &byte, 1, &len, &fd, 5000), 0);
	for (int i = 0; i < 20 && b != a; i++) {
		FILE *f;

		if (b > 0) {
			kill(b, SIGKILL);
			waitpid(b, NULL, 0);
		}
		f = fopen("/proc/sys/kernel/ns_last_pid", "w");
		ck_assert_ptr_nonnull(f);
		fprintf(f, "%d", (int)a - 1);
		fclose(f);
		b = fork();
		ck_assert_int_ge(b, 0);
		if (b == 0) {
			pause();
			_exit(0);
		}
	}
	ck_assert_int_eq(b, a);
	send_register(fd, (uint32_t)a, ring_fd(ring), 0);
	expect_refused(fd, "has exited");
	kill(b, SIGKILL);
	waitpid(b, NULL, 0);
	expect_serving(&t);
	close(sv[0]);
	close(sv[1]);
	td_stop(&t);
	ring_destroy(ring);
}
END_TEST

void server_root_add(TCase *tc)
{
	tcase_add_test(tc, server_findings_answer_spans_frames);
	tcase_add_test(tc, server_connections_capped);
	tcase_add_test(tc, server_unread_list_answers_stay_small);
	tcase_add_test(tc, server_without_pidfds_refuses_a_reused_pid);
}
