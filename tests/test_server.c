/*
 * test_server.c - npusand as a service manager and its clients see it: the
 * real binary on a socket in a temporary directory, READY=1 on a test
 * NOTIFY_SOCKET, socket activation, hostile frames, signals, a second
 * daemon; and the wire code (daemon/wire.c) the daemon frames with.
 *
 * Every daemon is started with PR_SET_PDEATHSIG, so a failed test (Check
 * ends the test's process) never leaves one running.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "npusan.pb-c.h"
#include "paths.h"
#include "ring.h"
#include "store.h"
#include "testutil.h"
#include "wire.h"

extern char **environ;

#define TD_READY_TIMEOUT_MS 20000
#define TD_REPLY_TIMEOUT_MS 10000

/* A daemon under test. */
struct td {
	char dir[64];
	char sock[PATHS_SOCKET_MAX + 1];
	char db[PATH_MAX];
	char log[128];
	char notify[PATHS_SOCKET_MAX + 1]; /* as in $NOTIFY_SOCKET */
	int notify_fd;
	pid_t pid;
};

/* How to start one. */
struct td_how {
	const char *const *args;   /* more arguments, NULL-terminated */
	const char *const *env;    /* more NAME=VALUE, NULL-terminated */
	bool activate;             /* under systemd-socket-activate */
	bool abstract_notify;      /* NOTIFY_SOCKET=@name */
	bool no_socket_arg;        /* no --socket/--db: the defaults */
	uid_t uid;                 /* with setuid, when not 0 */
	rlim_t nofile;             /* RLIMIT_NOFILE, when not 0 */
};

static const char *activate_bin(void)
{
	static const char *const paths[] = { "/usr/bin/systemd-socket-activate",
					     "/bin/systemd-socket-activate",
					     "/usr/local/bin/systemd-socket-activate" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	return NULL;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A datagram socket for NOTIFY_SOCKET, a path or an abstract name. */
static void td_notify_socket(struct td *t, bool abstract)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len;

	t->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(t->notify_fd, 0);
	if (abstract) {
		snprintf(t->notify, sizeof(t->notify), "@npusan-test-%d-%lld",
			 (int)getpid(), (long long)now_ms());
		memcpy(sa.sun_path, t->notify, strlen(t->notify));
		sa.sun_path[0] = '\0';
		len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
				  strlen(t->notify));
	} else {
		snprintf(t->notify, sizeof(t->notify), "%s/notify", t->dir);
		strcpy(sa.sun_path, t->notify);
		len = sizeof(sa);
	}
	ck_assert_int_eq(bind(t->notify_fd, (struct sockaddr *)&sa, len), 0);
	/* A daemon running as another user must be able to send to it. */
	if (!abstract)
		ck_assert_int_eq(chmod(t->notify, 0666), 0);
}

static void td_init(struct td *t)
{
	char *dir = tu_tmpdir();

	memset(t, 0, sizeof(*t));
	ck_assert_uint_lt(strlen(dir), sizeof(t->dir)); /* sockets fit */
	strcpy(t->dir, dir);
	free(dir);
	t->pid = -1;
	t->notify_fd = -1;
	snprintf(t->sock, sizeof(t->sock), "%s/npusand.sock", t->dir);
	snprintf(t->db, sizeof(t->db), "%s/npusan.db", t->dir);
	snprintf(t->log, sizeof(t->log), "%s/daemon.log", t->dir);
}

/* Everything the daemon wrote to stderr (caller frees). */
static char *td_log(const struct td *t)
{
	FILE *f = fopen(t->log, "r");
	char *buf = calloc(1, 1 << 20);
	size_t n;

	ck_assert_ptr_nonnull(buf);
	if (f == NULL)
		return buf;
	n = fread(buf, 1, (1 << 20) - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* Starts the daemon of `t` as `h` says; does not wait for READY. */
static void td_spawn(struct td *t, const struct td_how *h)
{
	const char *argv[64], *envp[256];
	char notify_env[PATHS_SOCKET_MAX + 32];
	size_t a = 0, e = 0;
	pid_t pid;

	if (t->notify_fd < 0)
		td_notify_socket(t, h->abstract_notify);
	if (h->activate) {
		argv[a++] = activate_bin();
		argv[a++] = "-l";
		argv[a++] = t->sock;
		argv[a++] = "-E";
		argv[a++] = "NOTIFY_SOCKET";
		argv[a++] = "-E";
		argv[a++] = "ASAN_OPTIONS";
		argv[a++] = "-E";
		argv[a++] = "UBSAN_OPTIONS";
	}
	argv[a++] = tu_bin("daemon/npusand");
	if (!h->no_socket_arg) {
		argv[a++] = "--socket";
		argv[a++] = t->sock;
		argv[a++] = "--db";
		argv[a++] = t->db;
	}
	argv[a++] = "--log-level";
	argv[a++] = "debug";
	for (size_t i = 0; h->args != NULL && h->args[i] != NULL; i++)
		argv[a++] = h->args[i];
	argv[a] = NULL;
	snprintf(notify_env, sizeof(notify_env), "NOTIFY_SOCKET=%s",
		 t->notify);
	for (char **p = environ; *p != NULL && e < 200; p++)
		if (strncmp(*p, "NOTIFY_SOCKET=", 14) != 0 &&
		    strncmp(*p, "NPUSAN_SOCKET=", 14) != 0 &&
		    strncmp(*p, "LISTEN_", 7) != 0)
			envp[e++] = *p;
	envp[e++] = notify_env;
	for (size_t i = 0; h->env != NULL && h->env[i] != NULL; i++)
		envp[e++] = h->env[i];
	envp[e] = NULL;

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(t->log, O_WRONLY | O_CREAT | O_APPEND, 0644);

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (fd >= 0) {
			dup2(fd, STDOUT_FILENO);
			dup2(fd, STDERR_FILENO);
		}
		if (h->nofile) {
			struct rlimit rl = { h->nofile, h->nofile };

			setrlimit(RLIMIT_NOFILE, &rl);
		}
		if (h->uid != 0 && (setgroups(0, NULL) < 0 ||
				    setresgid(h->uid, h->uid, h->uid) < 0 ||
				    setresuid(h->uid, h->uid, h->uid) < 0))
			_exit(126);
		execve(argv[0], (char *const *)argv, (char *const *)envp);
		_exit(127);
	}
	t->pid = pid;
}

/* Waits for one notification holding `what`; false on timeout. */
static bool td_wait_notify(struct td *t, const char *what, int timeout_ms)
{
	int64_t until = now_ms() + timeout_ms;

	for (;;) {
		struct pollfd p = { .fd = t->notify_fd, .events = POLLIN };
		int64_t left = until - now_ms();
		char buf[512];
		ssize_t n;

		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return false;
		n = recv(t->notify_fd, buf, sizeof(buf) - 1, 0);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		if (strstr(buf, what) != NULL)
			return true;
	}
}

/* Starts the daemon and waits for READY=1. */
static void td_start(struct td *t, const struct td_how *h)
{
	static const struct td_how plain;

	td_spawn(t, h ? h : &plain);
	if (!td_wait_notify(t, "READY=1", TD_READY_TIMEOUT_MS)) {
		char *log = td_log(t);

		ck_abort_msg("no READY=1 from npusand; its log:\n%s", log);
	}
}

/* The exit status (or 128 + signal) within `timeout_ms`; -1 if still up. */
static int td_wait_exit(struct td *t, int timeout_ms)
{
	int64_t until = now_ms() + timeout_ms;
	int status;

	while (now_ms() < until) {
		pid_t r = waitpid(t->pid, &status, WNOHANG);

		ck_assert_int_ge(r, 0);
		if (r == t->pid) {
			t->pid = -1;
			return WIFEXITED(status) ? WEXITSTATUS(status) :
						   128 + WTERMSIG(status);
		}
		usleep(10000);
	}
	return -1;
}

/* No sanitizer report in the daemon's log. */
static void td_assert_clean_log(const struct td *t)
{
	char *log = td_log(t);

	ck_assert_msg(strstr(log, "AddressSanitizer") == NULL &&
			      strstr(log, "runtime error") == NULL &&
			      strstr(log, "LeakSanitizer") == NULL,
		      "sanitizer report in npusand's log:\n%s", log);
	free(log);
}

/* SIGTERM: exits 0, with a clean log. */
static void td_stop(struct td *t)
{
	int rc;

	ck_assert_int_eq(kill(t->pid, SIGTERM), 0);
	rc = td_wait_exit(t, 60000);
	if (rc != 0) {
		char *log = td_log(t);

		ck_abort_msg("npusand exited %d after SIGTERM; its log:\n%s",
			     rc, log);
	}
	td_assert_clean_log(t);
	close(t->notify_fd);
	t->notify_fd = -1;
	if (t->notify[0] != '@') /* so that a next start can bind it again */
		unlink(t->notify);
}

static int td_connect(const struct td *t)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	strcpy(sa.sun_path, t->sock);
	ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
		      "connect %s: %s", t->sock, strerror(errno));
	return fd;
}

static void send_all(int fd, const void *p, size_t len)
{
	const uint8_t *b = p;

	while (len > 0) {
		ssize_t n = send(fd, b, len, MSG_NOSIGNAL);

		ck_assert_msg(n > 0, "send: %s", strerror(errno));
		b += n;
		len -= (size_t)n;
	}
}

static void send_header(int fd, uint32_t len)
{
	uint8_t hdr[4] = { (uint8_t)len, (uint8_t)(len >> 8),
			   (uint8_t)(len >> 16), (uint8_t)(len >> 24) };

	send_all(fd, hdr, sizeof(hdr));
}

static void send_env(int fd, const Npusan__ToDaemon *m, int ring_fd)
{
	size_t len = npusan__to_daemon__get_packed_size(m);
	uint8_t *buf = malloc(len + 1);

	ck_assert_ptr_nonnull(buf);
	npusan__to_daemon__pack(m, buf);
	ck_assert_int_eq(frame_send(fd, buf, len, ring_fd, 5000), 0);
	free(buf);
}

static void send_query(int fd, uint32_t version, Npusan__Query *q)
{
	Npusan__ToDaemon m = NPUSAN__TO_DAEMON__INIT;

	q->has_protocol_version = 1;
	q->protocol_version = version;
	m.msg_case = NPUSAN__TO_DAEMON__MSG_QUERY;
	m.query = q;
	send_env(fd, &m, -1);
}

static void send_stats_query(int fd)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__StatsRequest sr = NPUSAN__STATS_REQUEST__INIT;

	q.q_case = NPUSAN__QUERY__Q_STATS;
	q.stats = &sr;
	send_query(fd, 1, &q);
}

/* The next frame from the daemon, unpacked; NULL when the peer closed. */
static Npusan__FromDaemon *recv_msg(int fd)
{
	static uint8_t buf[FRAME_MAX];
	size_t len;
	int err = frame_recv(fd, buf, sizeof(buf), &len, NULL,
			     TD_REPLY_TIMEOUT_MS);
	Npusan__FromDaemon *m;

	if (err == -ECONNRESET)
		return NULL;
	ck_assert_msg(err == 0, "frame_recv: %s", strerror(-err));
	m = npusan__from_daemon__unpack(NULL, len, buf);
	ck_assert_ptr_nonnull(m);
	return m;
}

/* The connection ends: EOF (or a reset) within the reply timeout. */
static void expect_closed(int fd)
{
	Npusan__FromDaemon *m = recv_msg(fd);

	ck_assert_msg(m == NULL, "a frame (case %d) where a close was due",
		      m ? (int)m->msg_case : 0);
	close(fd);
}

/* An Error with `code`, then the connection closes. */
static void expect_error_close(int fd, int code)
{
	Npusan__FromDaemon *m = recv_msg(fd);

	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_ERROR);
	ck_assert_int_eq(m->error->code, code);
	ck_assert_ptr_nonnull(m->error->message);
	npusan__from_daemon__free_unpacked(m, NULL);
	expect_closed(fd);
}

/* A fresh connection gets a StatsReply: the daemon still serves. */
static void expect_serving(const struct td *t)
{
	int fd = td_connect(t);
	Npusan__FromDaemon *m;

	send_stats_query(fd);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_STATS);
	ck_assert_str_eq(m->stats->daemon_version, NPUSAN_VERSION);
	ck_assert(m->stats->has_uptime_ms);
	npusan__from_daemon__free_unpacked(m, NULL);
	close(fd);
}

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

/* A Register of process `pid` for ring `ring_fd` (-1: none). */
static void send_register(int fd, uint32_t pid, int ring_fd,
			  uint64_t start_time)
{
	Npusan__ToDaemon m = NPUSAN__TO_DAEMON__INIT;
	Npusan__Register r = NPUSAN__REGISTER__INIT;

	r.has_protocol_version = 1;
	r.protocol_version = 1;
	r.has_pid = 1;
	r.pid = pid;
	r.has_start_time = start_time != 0;
	r.start_time = start_time;
	r.hostname = (char *)"test\x01host\xff";
	r.job = (char *)"job-\x1b[31mred";
	r.has_rank = 1;
	r.rank = 3;
	r.has_ring_size = r.has_ring_header_size = r.has_ring_flags = 1;
	r.ring_size = RING_MIN_CAPACITY;
	r.ring_header_size = RING_HEADER_SIZE;
	r.ring_flags = 0;
	m.msg_case = NPUSAN__TO_DAEMON__MSG_REGISTER;
	m.register_ = &r;
	send_env(fd, &m, ring_fd);
}

/* A RegisterReply refusing, with `why` (or `or_why`, when not NULL) in
 * its error; then the close. */
static void expect_refused_either(int fd, const char *why, const char *or_why)
{
	Npusan__FromDaemon *m = recv_msg(fd);
	const char *err;

	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_REGISTER_REPLY);
	ck_assert(m->register_reply->has_accepted);
	ck_assert(!m->register_reply->accepted);
	ck_assert_ptr_nonnull(err = m->register_reply->error);
	ck_assert_msg(strstr(err, why) != NULL ||
			      (or_why != NULL && strstr(err, or_why) != NULL),
		      "refused for '%s', not '%s'", err, why);
	npusan__from_daemon__free_unpacked(m, NULL);
	expect_closed(fd);
}

static void expect_refused(int fd, const char *why)
{
	expect_refused_either(fd, why, NULL);
}

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

/* A database of `n` exited processes of root's, each with a long path. */
static void populate_many(const char *path, unsigned n)
{
	struct store_opts o = { .path = path };
	struct store *st;
	char *err = NULL, sql[640];
	struct timespec now;
	sqlite3 *db;

	/* Recent: the daemon prunes what is older than --retain-days. */
	clock_gettime(CLOCK_REALTIME, &now);
	ck_assert_int_eq(store_open(&o, &st, &err), 0);
	store_close(st);
	ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE,
					 NULL), SQLITE_OK);
	snprintf(sql, sizeof(sql),
		 "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
		 "FROM c WHERE x < %u) INSERT INTO processes (host, pid, "
		 "start_time, uid, exe, job, state, first_ms, last_ms) "
		 "SELECT 'node', x, 7, 0, '/opt/a/rather/long/path/to/an/"
		 "interpreter/in/a/virtual/environment/of/some/project/with/"
		 "many/directories/bin/python3.11-' || x, 'job-' || (x %% 50),"
		 " 'exited', %lld + x, %lld + x FROM c", n,
		 (long long)now.tv_sec * 1000, (long long)now.tv_sec * 1000);
	ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	ck_assert_int_eq(chmod(path, 0600), 0);
}

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
	populate_many(t.db, UNREAD_PROCS);
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

/*
 * Issue 12: a process connects, hands its connection to another and exits;
 * a registration of that pid, with a start time of its choosing, must not
 * be believed: the process is the one the kernel showed at accept, with
 * the start time /proc gave then, whatever the message says.
 */
START_TEST(server_register_from_a_dead_connector_refused)
{
	int sv[2], fd = -1;
	struct ring *ring;
	uint8_t byte;
	size_t len;
	pid_t child;
	struct td t;
	int status;

	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 0, &ring), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				    sv), 0);
	td_init(&t);
	td_start(&t, NULL);
	child = fork();
	ck_assert_int_ge(child, 0);
	if (child == 0) {
		int c = td_connect(&t);

		_exit(frame_send(sv[1], "c", 1, c, 5000) == 0 ? 0 : 3);
	}
	ck_assert_int_eq(waitpid(child, &status, 0), child);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(frame_recv(sv[0], &byte, 1, &len, &fd, 5000), 0);
	ck_assert_int_ge(fd, 0);
	/* The connector is gone: its pid, any start time. */
	send_register(fd, (uint32_t)child, ring_fd(ring), 4242);
	/* Gone before the daemon accepted it, or its start time not ours. */
	expect_refused_either(fd, "start time does not match", "has exited");
	expect_serving(&t);
	close(sv[0]);
	close(sv[1]);
	td_stop(&t);
	ring_destroy(ring);
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

/* ---- answers from a populated database ------------------------------------- */

#define POP_MANY 3000 /* root's process: several frames of findings */
#define POP_FEW 5     /* nobody's process */
#define NOBODY 65534

/* A database with a process of root and one of NOBODY, with findings. */
static void populate(const char *path, int64_t ids[2])
{
	struct store_opts o = { .path = path };
	struct store *st;
	char *err = NULL, op[32], frames[16][48];
	const char *stack[16];
	struct timespec now;
	int64_t ms;

	/* Recent: the daemon prunes what is older than --retain-days. */
	clock_gettime(CLOCK_REALTIME, &now);
	ms = (int64_t)now.tv_sec * 1000;
	for (size_t i = 0; i < 16; i++) {
		snprintf(frames[i], sizeof(frames[i]),
			 "frame_%02zu_of_a_long_python_stack.py:123", i);
		stack[i] = frames[i];
	}
	ck_assert_int_eq(store_open(&o, &st, &err), 0);
	for (unsigned k = 0; k < 2; k++) {
		struct store_process p = {
			.pid = 100 + k, .start_time = 7, .uid = k ? NOBODY : 0,
			.host = "node", .job = k ? "theirs" : "ours",
			.state = STORE_RUNNING, .first_ms = ms, .last_ms = ms,
		};

		ck_assert_int_eq(store_process_register(st, &p, &ids[k], NULL), 0);
		for (unsigned i = 0; i < (k ? POP_FEW : POP_MANY); i++) {
			struct store_finding f = {
				.process_id = ids[k],
				.v = { .kind = "data_race",
				       .detected_at = "launch", .count = 1,
				       .first_ms = ms, .last_ms = ms },
			};

			/* A distinct operator: no two deduplicate. */
			snprintf(op, sizeof(op), "op_%u_%u", k, i);
			f.v.access.op = op;
			f.v.access.stack.frames = stack;
			f.v.access.stack.n = 16;
			/* Every other one made by a replay of graph i. */
			f.v.access.has_graph = i % 2 == 1;
			f.v.access.graph = i;
			ck_assert_int_eq(store_finding_submit(st, &f), 0);
		}
	}
	ck_assert_int_eq(store_flush(st), 0);
	store_close(st);
	/* As the daemon makes its own: others may not read it. */
	ck_assert_int_eq(chmod(path, 0600), 0);
}

/*
 * Sends a findings request and reads its answer to the frame with done:
 * the number of findings, frames into *frames, ids strictly increasing.
 * Findings of another job than `job` (when not NULL) fail the test.
 */
static size_t read_findings(int fd, Npusan__FindingsRequest *fr,
			    size_t *frames, int64_t *first, int64_t *last)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	size_t n = 0;
	bool done = false;
	unsigned k, op;

	q.q_case = NPUSAN__QUERY__Q_FINDINGS;
	q.findings = fr;
	send_query(fd, 1, &q);
	*frames = 0;
	*first = *last = 0;
	while (!done) {
		Npusan__FromDaemon *m = recv_msg(fd);

		ck_assert_ptr_nonnull(m);
		ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_FINDINGS);
		ck_assert(m->findings->has_done);
		done = m->findings->done;
		for (size_t i = 0; i < m->findings->n_findings; i++) {
			Npusan__Finding *f = m->findings->findings[i];

			ck_assert_int_gt(f->id, *last);
			if (n == 0)
				*first = f->id;
			*last = f->id;
			ck_assert_str_eq(f->kind, "data_race");
			ck_assert_uint_eq(f->access->n_stack, 16);
			/* The graph travels from the row to the wire. */
			ck_assert_int_eq(sscanf(f->access->op, "op_%u_%u", &k,
						&op), 2);
			ck_assert_int_eq(f->access->has_graph, op % 2 == 1);
			if (f->access->has_graph)
				ck_assert_uint_eq(f->access->graph, op);
			n++;
		}
		(*frames)++;
		npusan__from_daemon__free_unpacked(m, NULL);
	}
	return n;
}

static size_t read_list(int fd)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__ListRequest lr = NPUSAN__LIST_REQUEST__INIT;
	Npusan__FromDaemon *m;
	size_t n;

	q.q_case = NPUSAN__QUERY__Q_LIST;
	q.list = &lr;
	send_query(fd, 1, &q);
	m = recv_msg(fd);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_LIST);
	ck_assert(m->list->done);
	n = m->list->n_processes;
	npusan__from_daemon__free_unpacked(m, NULL);
	return n;
}

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

/* ---- default paths ------------------------------------------------------- */

/* A directory of `uid` under the test's directory. */
static void mkdir_for(const char *path, uid_t uid)
{
	ck_assert_int_eq(mkdir(path, 0700), 0);
	ck_assert_int_eq(chown(path, uid, uid), 0);
}

START_TEST(server_user_defaults_match_the_clients)
{
	uid_t uid = geteuid() == 0 ? 65534 : geteuid();
	char run[80], state[80], home[80];
	char env_run[112], env_state[112], env_home[96];
	const char *env[] = { env_run, env_state, env_home, NULL };
	struct td_how h = { .no_socket_arg = true, .env = env,
			    .uid = geteuid() == 0 ? uid : 0 };
	char client[PATHS_SOCKET_MAX + 1];
	struct stat st;
	struct td t;

	td_init(&t);
	ck_assert_int_eq(chmod(t.dir, 0755), 0);
	snprintf(run, sizeof(run), "%s/run", t.dir);
	snprintf(state, sizeof(state), "%s/state", t.dir);
	snprintf(home, sizeof(home), "%s/home", t.dir);
	mkdir_for(run, uid);
	mkdir_for(state, uid);
	mkdir_for(home, uid);
	snprintf(env_run, sizeof(env_run), "XDG_RUNTIME_DIR=%s", run);
	snprintf(env_state, sizeof(env_state), "XDG_STATE_HOME=%s", state);
	snprintf(env_home, sizeof(env_home), "HOME=%s", home);
	ck_assert_int_lt(snprintf(t.sock, sizeof(t.sock),
				  "%s/npusan/npusand.sock", run),
			 (int)sizeof(t.sock));
	ck_assert_int_lt(snprintf(t.db, sizeof(t.db), "%s/npusan/npusan.db",
				  state),
			 (int)sizeof(t.db));
	td_start(&t, &h);
	/* Where an agent or npusanctl of that user looks, by default. */
	ck_assert_int_eq(paths_socket_from(NULL, run, client, sizeof(client)),
			 0);
	ck_assert_str_eq(client, t.sock);
	ck_assert_int_eq(lstat(t.sock, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0600);
	ck_assert_int_eq(st.st_uid, uid);
	ck_assert_int_lt(snprintf(client, sizeof(client), "%s/npusan", run),
			 (int)sizeof(client));
	ck_assert_int_eq(lstat(client, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	ck_assert_int_eq(lstat(t.db, &st), 0);
	if (geteuid() == 0)
		expect_serving(&t); /* root may connect to a user's 0600 */
	td_stop(&t);
}
END_TEST

START_TEST(server_user_socket_in_tmp_without_runtime_dir)
{
	/* A user without $XDG_RUNTIME_DIR: /tmp/npusan-UID, private. */
	uid_t uid = geteuid() == 0 ? 65534 : geteuid();
	char dir[64], state[80], env_state[112];
	char client[PATHS_SOCKET_MAX + 1];
	const char *env[] = { env_state, NULL };
	struct td_how h = { .no_socket_arg = true, .env = env,
			    .uid = geteuid() == 0 ? uid : 0 };
	struct stat st;
	struct td t;

	snprintf(dir, sizeof(dir), "/tmp/npusan-%u", (unsigned)uid);
	td_init(&t);
	ck_assert_int_eq(chmod(t.dir, 0755), 0);
	snprintf(state, sizeof(state), "%s/state", t.dir);
	mkdir_for(state, uid);
	snprintf(env_state, sizeof(env_state), "XDG_STATE_HOME=%s", state);
	unsetenv("XDG_RUNTIME_DIR");
	snprintf(t.sock, sizeof(t.sock), "%s/npusand.sock", dir);
	td_start(&t, &h);
	ck_assert_int_eq(lstat(dir, &st), 0);
	ck_assert_int_eq(st.st_mode & 0777, 0700);
	ck_assert_int_eq(st.st_uid, uid);
	td_stop(&t);
	/* What that user's clients resolve (the socket is gone, the
	 * directory stays); as root we check the rule with its uid. */
	if (geteuid() != 0) {
		ck_assert_int_eq(paths_socket_from(NULL, NULL, client,
						   sizeof(client)), 0);
		ck_assert_str_eq(client, t.sock);
	} else {
		ck_assert(paths_private_dir(dir, uid));
	}
	rmdir(dir);
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

/* ---- wire ---------------------------------------------------------------- */

/* Names are kept as the trace format carries them (text.h): tab, newline,
 * DEL and C1 stay, for displays to clean; what no trace can hold does not. */
START_TEST(wire_clean_keeps_what_traces_carry)
{
	char out[16];

	ck_assert_ptr_null(wire_clean(NULL, out, sizeof(out)));
	ck_assert_ptr_null(wire_clean("", out, sizeof(out)));
	ck_assert_str_eq(wire_clean("a\tb\x7f" "c\n", out, sizeof(out)),
			 "a\tb\x7f" "c\n");
	ck_assert_str_eq(wire_clean("a\rb\x1b", out, sizeof(out)), "a?b?");
	/* Invalid UTF-8, an overlong '/', a C1 control, a surrogate. */
	ck_assert_str_eq(wire_clean("\xff" "x\xc0\xaf" "\xc2\x85"
				    "\xed\xa0\x80", out, sizeof(out)),
			 "?x??\xc2\x85???");
	/* Valid UTF-8 stays; a cut never splits a character. */
	ck_assert_str_eq(wire_clean("\xc3\xa9t\xc3\xa9", out, sizeof(out)),
			 "\xc3\xa9t\xc3\xa9");
	ck_assert_str_eq(wire_clean("ab\xe2\x82\xac", out, 5), "ab");
	ck_assert_str_eq(wire_clean("abcdef", out, 4), "abc");
}
END_TEST

START_TEST(wire_batch_splits_under_frame_max)
{
	static char frame[64];
	char *stack[64];
	struct wire_batch b = { 0 };
	size_t added = 0, got = 0, frames = 0;
	Npusan__Finding f;
	Npusan__Access acc;

	for (size_t i = 0; i < 64; i++)
		stack[i] = frame;
	memset(frame, 'f', sizeof(frame) - 1);
	npusan__finding__init(&f);
	npusan__access__init(&acc);
	acc.n_stack = 64;
	acc.stack = stack;
	acc.op = (char *)"aten::add";
	f.access = &acc;
	f.kind = (char *)"data_race";
	f.has_id = 1;
	/* About 4 KiB a finding: 1000 of them take several frames. */
	while (added < 1000 || b.n > 0) {
		uint8_t *fr;
		size_t len;
		uint32_t plen;
		Npusan__FromDaemon *m;
		int err = -E2BIG;

		if (added < 1000) {
			f.id = (int64_t)added + 1;
			err = wire_batch_add(&b, 1, &f.base);
		}
		if (err == 0) {
			added++;
			continue;
		}
		ck_assert_int_eq(err, -E2BIG);
		ck_assert_int_eq(wire_batch_frame(&b, 4, 2, added == 1000, &fr,
						  &len),
				 0);
		ck_assert_int_eq(frame_header_decode(fr, &plen), 0);
		ck_assert_uint_eq(plen + FRAME_HEADER_SIZE, len);
		ck_assert_uint_le(plen, FRAME_MAX);
		m = npusan__from_daemon__unpack(NULL, plen,
						fr + FRAME_HEADER_SIZE);
		ck_assert_ptr_nonnull(m);
		ck_assert_int_eq(m->msg_case, NPUSAN__FROM_DAEMON__MSG_FINDINGS);
		ck_assert(m->findings->has_done);
		ck_assert_int_eq(m->findings->done, added == 1000);
		for (size_t i = 0; i < m->findings->n_findings; i++)
			ck_assert_int_eq(m->findings->findings[i]->id,
					 (int64_t)(got + i + 1));
		got += m->findings->n_findings;
		frames++;
		npusan__from_daemon__free_unpacked(m, NULL);
		free(fr);
	}
	ck_assert_uint_eq(got, 1000);
	ck_assert_uint_gt(frames, 2);
	wire_batch_free(&b);
}
END_TEST

START_TEST(wire_rx_reassembles_byte_by_byte)
{
	static const uint8_t stream[] = { 3, 0, 0, 0, 'a', 'b', 'c',
					  0, 0, 0, 0 };
	struct wire_rx rx = { 0 };
	size_t off = 0, frames = 0;

	while (off < sizeof(stream)) {
		uint8_t *p;
		size_t n, len;
		int r;

		wire_rx_next(&rx, &p, &n);
		ck_assert_uint_gt(n, 0);
		*p = stream[off++];
		r = wire_rx_advance(&rx, 1);
		ck_assert_int_ge(r, 0);
		if (r == 1) {
			const uint8_t *pl = wire_rx_payload(&rx, &len);

			ck_assert_uint_eq(len, frames == 0 ? 3 : 0);
			if (len > 0)
				ck_assert_int_eq(memcmp(pl, "abc", 3), 0);
			frames++;
			wire_rx_reset(&rx);
		}
	}
	ck_assert_uint_eq(frames, 2);
	ck_assert(wire_rx_idle(&rx));
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
	tcase_add_test(tc, server_garbage_frame_closes);
	tcase_add_test(tc, server_truncated_frame_closes);
	tcase_add_test(tc, server_oversized_frame_closes);
	tcase_add_test(tc, server_unknown_message_closes);
	tcase_add_test(tc, server_query_wrong_version_closes);
	tcase_add_test(tc, server_register_of_another_pid_refused);
	tcase_add_test(tc, server_register_without_ring_refused);
	tcase_add_test(tc, server_register_accepted_then_second_register_closes);
	tcase_add_test(tc, server_register_on_a_query_connection_closes);
	tcase_add_test(tc, server_queries_on_an_empty_database);
	tcase_add_test(tc, server_queries_off_the_loop_in_order_and_stop_clean);
	tcase_add_test(tc, server_follow_answers_then_waits);
	tcase_add_test(tc, server_follow_pushes_new_findings);
	tcase_add_test(tc, server_sigterm_exits_zero_db_consistent);
	tcase_add_test(tc, server_notifies_stopping);
	tcase_add_test(tc, server_sighup_reopens_log);
	suite_add_tcase(s, tc);
	tcase_add_test(tw, wire_clean_keeps_what_traces_carry);
	tcase_add_test(tw, wire_batch_splits_under_frame_max);
	tcase_add_test(tw, wire_rx_reassembles_byte_by_byte);
	suite_add_tcase(s, tw);
	/* Issue 12's hostile peers that need no second uid. */
	tcase_set_timeout(th, 120);
	tcase_add_test(th, server_register_from_a_dead_connector_refused);
	tcase_add_test(th, server_state_private_under_umask_022);
	tcase_add_test(th, server_refuses_a_database_others_can_read);
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
	tcase_add_test(tc, server_user_defaults_match_the_clients);
	tcase_add_test(tc, server_user_socket_in_tmp_without_runtime_dir);
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
	tcase_add_test(tc, server_findings_answer_spans_frames);
	tcase_add_test(tc, server_connections_capped);
	tcase_add_test(tc, server_unread_list_answers_stay_small);
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
	tcase_add_test(tc, server_user_sees_only_its_own);
	tcase_add_test(tc, isolation_stored_process_never_changes_owner);
	tcase_add_test(tc, isolation_one_user_cannot_lock_out_others);
	tcase_add_test(tc, isolation_root_keeps_a_reserve);
	tcase_add_test(tc, server_user_refuses_someone_elses_tmp_dir);
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
