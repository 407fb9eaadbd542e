/*
 * server_helpers.c - test_server's shared helpers (server_helpers.h): a
 * daemon started, stopped and watched, frames sent and read, and the
 * databases the tests of answers start from.
 *
 * Every daemon is started with PR_SET_PDEATHSIG, so a failed test (Check
 * ends the test's process) never leaves one running.
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
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sqlite3.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "frame.h"
#include "ring.h"
#include "server_helpers.h"
#include "store.h"
#include "testutil.h"

extern char **environ;

const char *activate_bin(void)
{
	static const char *const paths[] = { "/usr/bin/systemd-socket-activate",
					     "/bin/systemd-socket-activate",
					     "/usr/local/bin/systemd-socket-activate" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	return NULL;
}

int64_t now_ms(void)
{
	return (int64_t)clock_mono_ms();
}

/* A datagram socket for NOTIFY_SOCKET, a path or an abstract name. */
void td_notify_socket(struct td *t, bool abstract)
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

void td_init(struct td *t)
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
char *td_log(const struct td *t)
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
/* A value no system call number or socket option name takes. */
#define TD_NEVER 0xffffffffu

/*
 * This process, and what it execs, as `h` says, through a seccomp filter:
 * with no_pidfd as on a kernel before pidfds (5.3), pidfd_open() failing
 * with ENOSYS and getsockopt(SO_PEERPIDFD) with ENOPROTOOPT; with
 * refuse_sockopt, getsockopt() of that name failing with EACCES. 0; -1
 * where seccomp refuses.
 */
static int td_filter(const struct td_how *h)
{
	uint32_t nopidfd = h->no_pidfd ? SYS_pidfd_open : TD_NEVER;
	uint32_t peerpidfd = h->no_pidfd ? SO_PEERPIDFD : TD_NEVER;
	uint32_t refused = h->refuse_sockopt ? (uint32_t)h->refuse_sockopt
					     : TD_NEVER;
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nopidfd, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_getsockopt, 0, 5),
		/* optname, the low word of the third argument (x86-64 and
		 * arm64 are little-endian) */
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
			 offsetof(struct seccomp_data, args[2])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, peerpidfd, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOPROTOOPT),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, refused, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
}

void td_spawn(struct td *t, const struct td_how *h)
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
		if ((h->no_pidfd || h->refuse_sockopt) && td_filter(h) < 0)
			_exit(125);
		execve(argv[0], (char *const *)argv, (char *const *)envp);
		_exit(127);
	}
	t->pid = pid;
}

/* Waits for one notification holding `what`; false on timeout. */
bool td_wait_notify(struct td *t, const char *what, int timeout_ms)
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
void td_start(struct td *t, const struct td_how *h)
{
	static const struct td_how plain;

	td_spawn(t, h ? h : &plain);
	if (!td_wait_notify(t, "READY=1", TD_READY_TIMEOUT_MS)) {
		char *log = td_log(t);

		ck_abort_msg("no READY=1 from npusand; its log:\n%s", log);
	}
}

/* The exit status (or 128 + signal) within `timeout_ms`; -1 if still up. */
int td_wait_exit(struct td *t, int timeout_ms)
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
void td_assert_clean_log(const struct td *t)
{
	char *log = td_log(t);

	ck_assert_msg(strstr(log, "AddressSanitizer") == NULL &&
			      strstr(log, "runtime error") == NULL &&
			      strstr(log, "LeakSanitizer") == NULL,
		      "sanitizer report in npusand's log:\n%s", log);
	free(log);
}

/* SIGTERM: exits 0, with a clean log. */
void td_stop(struct td *t)
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

int td_connect(const struct td *t)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(fd, 0);
	strcpy(sa.sun_path, t->sock);
	ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
		      "connect %s: %s", t->sock, strerror(errno));
	return fd;
}

void send_all(int fd, const void *p, size_t len)
{
	const uint8_t *b = p;

	while (len > 0) {
		ssize_t n = send(fd, b, len, MSG_NOSIGNAL);

		ck_assert_msg(n > 0, "send: %s", strerror(errno));
		b += n;
		len -= (size_t)n;
	}
}

void send_header(int fd, uint32_t len)
{
	uint8_t hdr[4] = { (uint8_t)len, (uint8_t)(len >> 8),
			   (uint8_t)(len >> 16), (uint8_t)(len >> 24) };

	send_all(fd, hdr, sizeof(hdr));
}

void send_env(int fd, const Npusan__ToDaemon *m, int ring_fd)
{
	size_t len = npusan__to_daemon__get_packed_size(m);
	uint8_t *buf = malloc(len + 1);

	ck_assert_ptr_nonnull(buf);
	npusan__to_daemon__pack(m, buf);
	ck_assert_int_eq(frame_send(fd, buf, len, ring_fd, 5000), 0);
	free(buf);
}

void send_query(int fd, uint32_t version, Npusan__Query *q)
{
	Npusan__ToDaemon m = NPUSAN__TO_DAEMON__INIT;

	q->has_protocol_version = 1;
	q->protocol_version = version;
	m.msg_case = NPUSAN__TO_DAEMON__MSG_QUERY;
	m.query = q;
	send_env(fd, &m, -1);
}

void send_stats_query(int fd)
{
	Npusan__Query q = NPUSAN__QUERY__INIT;
	Npusan__StatsRequest sr = NPUSAN__STATS_REQUEST__INIT;

	q.q_case = NPUSAN__QUERY__Q_STATS;
	q.stats = &sr;
	send_query(fd, 1, &q);
}

/* The next frame from the daemon, unpacked; NULL when the peer closed. */
Npusan__FromDaemon *recv_msg(int fd)
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
void expect_closed(int fd)
{
	Npusan__FromDaemon *m = recv_msg(fd);

	ck_assert_msg(m == NULL, "a frame (case %d) where a close was due",
		      m ? (int)m->msg_case : 0);
	close(fd);
}

/* An Error with `code`, then the connection closes. */
void expect_error_close(int fd, int code)
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
void expect_serving(const struct td *t)
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

/* A Register of process `pid` for ring `ring_fd` (-1: none). */
void send_register(int fd, uint32_t pid, int ring_fd,
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
void expect_refused_either(int fd, const char *why, const char *or_why)
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

void expect_refused(int fd, const char *why)
{
	expect_refused_either(fd, why, NULL);
}

/* A database with a process of root and one of NOBODY, with findings. */
void populate(const char *path, int64_t ids[2])
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
size_t read_findings(int fd, Npusan__FindingsRequest *fr,
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

size_t read_list(int fd)
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

/* A directory of `uid` under the test's directory. */
void mkdir_for(const char *path, uid_t uid)
{
	ck_assert_int_eq(mkdir(path, 0700), 0);
	ck_assert_int_eq(chown(path, uid, uid), 0);
}

/*
 * A database at `path` of `n` recent exited processes of `uid`, pids 1 to
 * n, each with a long path (a list answer of about 200 bytes a process),
 * their job the SQL expression `job` over the pid x.
 */
void populate_exited(const char *path, unsigned n, unsigned uid,
		     const char *job)
{
	struct store_opts o = { .path = path };
	struct store *st;
	char *err = NULL, sql[768];
	struct timespec now;
	sqlite3 *db;

	/* Recent: the daemon prunes what is older than --retain-days. */
	clock_gettime(CLOCK_REALTIME, &now);
	ck_assert_int_eq(store_open(&o, &st, &err), 0);
	store_close(st);
	ck_assert_int_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE,
					 NULL), SQLITE_OK);
	ck_assert_int_lt(snprintf(sql, sizeof(sql),
		 "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 "
		 "FROM c WHERE x < %u) INSERT INTO processes (host, pid, "
		 "start_time, uid, exe, job, state, first_ms, last_ms) "
		 "SELECT 'node', x, 7, %u, '/opt/a/rather/long/path/to/an/"
		 "interpreter/in/a/virtual/environment/of/some/project/with/"
		 "many/directories/bin/python3.11-' || x, %s, 'exited', "
		 "%lld + x, %lld + x FROM c", n, uid, job,
		 (long long)now.tv_sec * 1000, (long long)now.tv_sec * 1000),
		 (int)sizeof(sql));
	ck_assert_int_eq(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	ck_assert_int_eq(chmod(path, 0600), 0);
}
