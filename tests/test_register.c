/*
 * test_register.c - the agent's registration with a fake daemon, the
 * resolution of the daemon's socket, and the framing on that socket.
 *
 * The fake daemon is a listening Unix socket in a private temporary
 * directory that the test drives by hand: it accepts, reads a Register
 * with its memfd, and answers (or closes, or says nothing) when the test
 * says so.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "frame.h"
#include "npusan.pb-c.h"
#include "paths.h"
#include "register.h"
#include "testutil.h"

#define RING_SIZE 65536
#define RING_HEADER 4096
#define RING_FLAGS 3u

static const char *const identity_vars[] = {
	"NPUSAN_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
	"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK",
	"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK",
	"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE",
	"NPUSAN_LOG", "NPUSAN_SOCKET", "XDG_RUNTIME_DIR", NULL
};

/* Each test starts from an environment without any variable we read. */
static void setup(void)
{
	for (const char *const *v = identity_vars; *v != NULL; v++)
		unsetenv(*v);
	signal(SIGPIPE, SIG_DFL);
}

static void teardown(void)
{
	register_stop();
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the fake daemon --------------------------------------------------- */

struct fake {
	char dir[64];
	char path[128];
	int lfd;
};

/* A fresh directory for the socket, NPUSAN_SOCKET naming it; no listener. */
static void fake_init(struct fake *f)
{
	strcpy(f->dir, "/tmp/npusan-reg-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/npusand.sock", f->dir);
	ck_assert_int_eq(setenv("NPUSAN_SOCKET", f->path, 1), 0);
	f->lfd = -1;
}

static void fake_listen(struct fake *f)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	strcpy(sa.sun_path, f->path);
	unlink(f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(f->lfd, 0);
	ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f->lfd, 16), 0);
}

static void fake_start(struct fake *f)
{
	fake_init(f);
	fake_listen(f);
}

/* The daemon goes away: no listener, no socket file. */
static void fake_stop(struct fake *f)
{
	if (f->lfd >= 0)
		close(f->lfd);
	f->lfd = -1;
	unlink(f->path);
}

static void fake_fini(struct fake *f)
{
	fake_stop(f);
	rmdir(f->dir);
}

/* Whether a connection waits to be accepted within `ms`. */
static bool fake_pending(struct fake *f, int ms)
{
	struct pollfd p = { .fd = f->lfd, .events = POLLIN };

	return poll(&p, 1, ms) == 1;
}

static int fake_accept(struct fake *f, int ms)
{
	int c;

	ck_assert_msg(fake_pending(f, ms), "no agent connected in %d ms", ms);
	c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(c, 0);
	return c;
}

/* The next Register on `conn`; caller frees with
 * npusan__to_daemon__free_unpacked() and closes *fd. */
static Npusan__ToDaemon *fake_recv(int conn, int *fd)
{
	static uint8_t buf[FRAME_MAX];
	Npusan__ToDaemon *m;
	size_t len;

	ck_assert_int_eq(frame_recv(conn, buf, sizeof(buf), &len, fd, 5000),
			 0);
	m = npusan__to_daemon__unpack(NULL, len, buf);
	ck_assert_ptr_nonnull(m);
	ck_assert_int_eq(m->msg_case, NPUSAN__TO_DAEMON__MSG_REGISTER);
	return m;
}

static void fake_reply(int conn, bool accepted, const char *error)
{
	Npusan__RegisterReply rr = NPUSAN__REGISTER_REPLY__INIT;
	Npusan__FromDaemon m = NPUSAN__FROM_DAEMON__INIT;
	uint8_t buf[1024];
	size_t len;

	rr.has_accepted = 1;
	rr.accepted = accepted;
	rr.error = (char *)error;
	rr.daemon_version = (char *)"test";
	m.msg_case = NPUSAN__FROM_DAEMON__MSG_REGISTER_REPLY;
	m.register_reply = &rr;
	len = npusan__from_daemon__pack(&m, buf);
	ck_assert_int_eq(frame_send(conn, buf, len, -1, 1000), 0);
}

/* Accepts an agent, takes its Register and accepts it; the connection. */
static int fake_register(struct fake *f, Npusan__ToDaemon **out,
			 int *fd)
{
	int conn = fake_accept(f, 10000);

	*out = fake_recv(conn, fd);
	fake_reply(conn, true, NULL);
	return conn;
}

/* ---- the agent's side -------------------------------------------------- */

static int make_memfd(off_t size)
{
	int fd = memfd_create("npusan-test-ring", MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, size), 0);
	return fd;
}

static int agent_start(int memfd)
{
	struct register_cfg cfg = {
		.memfd = memfd,
		.ring_size = RING_SIZE,
		.ring_header_size = RING_HEADER,
		.ring_flags = RING_FLAGS,
	};

	return register_start(&cfg);
}

static bool wait_connected(bool want, int ms)
{
	int64_t end = now_ms() + ms;

	while (register_connected() != want && now_ms() < end)
		usleep(2000);
	return register_connected() == want;
}

/* The received descriptor is the same memfd, with its size. */
static void check_same_memfd(int got, int sent, off_t size)
{
	struct stat a, b;
	char link[64], target[256];
	ssize_t n;

	ck_assert_int_ge(got, 0);
	ck_assert_int_eq(fstat(got, &a), 0);
	ck_assert_int_eq(fstat(sent, &b), 0);
	ck_assert_int_eq(a.st_size, size);
	ck_assert_uint_eq(a.st_ino, b.st_ino);
	snprintf(link, sizeof(link), "/proc/self/fd/%d", got);
	n = readlink(link, target, sizeof(target) - 1);
	ck_assert_int_gt(n, 0);
	target[n] = '\0';
	ck_assert_msg(strncmp(target, "/memfd:npusan-test-ring", 23) == 0,
		      "not a memfd: %s", target);
	ck_assert_int_ne(fcntl(got, F_GETFD) & FD_CLOEXEC, 0);
}

/* Field 22 of /proc/self/stat, parsed here another way than the agent. */
static unsigned long long proc_start_time(void)
{
	char buf[2048];
	unsigned long long t = 0;
	FILE *f = fopen("/proc/self/stat", "r");
	size_t n;

	ck_assert_ptr_nonnull(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	ck_assert_int_eq(sscanf(strrchr(buf, ')') + 2,
				"%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
				"%*u %*u %*d %*d %*d %*d %*d %*d %llu", &t), 1);
	return t;
}

/* Starts the agent, takes its Register, accepts it and stops the agent. */
static Npusan__ToDaemon *register_once(void)
{
	struct fake f;
	Npusan__ToDaemon *m;
	int memfd = make_memfd(RING_SIZE), fd, conn;

	fake_start(&f);
	ck_assert_int_eq(agent_start(memfd), 0);
	conn = fake_register(&f, &m, &fd);
	ck_assert(wait_connected(true, 5000));
	register_stop();
	close(fd);
	close(conn);
	close(memfd);
	fake_fini(&f);
	return m;
}

START_TEST(register_delivers_identity)
{
	Npusan__ToDaemon *m;
	Npusan__Register *r;
	struct fake f;
	char host[256], exe[PATH_MAX];
	int memfd = make_memfd(RING_SIZE), fd, conn;
	ssize_t n;

	setenv("NPUSAN_JOB", "job-42", 1);
	setenv("RANK", "3", 1);
	setenv("LOCAL_RANK", "1", 1);
	setenv("WORLD_SIZE", "8", 1);
	/* Lower in precedence: must not win. */
	setenv("TORCHELASTIC_RUN_ID", "te", 1);
	setenv("SLURM_JOB_ID", "77", 1);
	setenv("SLURM_PROCID", "5", 1);
	setenv("SLURM_LOCALID", "2", 1);
	setenv("SLURM_NTASKS", "16", 1);
	fake_start(&f);
	ck_assert_int_eq(agent_start(memfd), 0);
	conn = fake_register(&f, &m, &fd);
	ck_assert(wait_connected(true, 5000));

	r = m->register_;
	ck_assert(r->has_protocol_version);
	ck_assert_uint_eq(r->protocol_version, 1);
	ck_assert_str_eq(r->agent_version, NPUSAN_VERSION);
	ck_assert(r->has_pid);
	ck_assert_uint_eq(r->pid, (uint32_t)getpid());
	ck_assert(r->has_start_time);
	ck_assert_uint_eq(r->start_time, proc_start_time());
	ck_assert(r->has_uid);
	ck_assert_uint_eq(r->uid, getuid());
	ck_assert_int_eq(gethostname(host, sizeof(host)), 0);
	ck_assert_str_eq(r->hostname, host);
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	ck_assert_int_gt(n, 0);
	exe[n] = '\0';
	ck_assert_str_eq(r->executable, exe);
	ck_assert_str_eq(r->job, "job-42");
	ck_assert(r->has_rank && r->has_local_rank && r->has_world_size);
	ck_assert_uint_eq(r->rank, 3);
	ck_assert_uint_eq(r->local_rank, 1);
	ck_assert_uint_eq(r->world_size, 8);
	ck_assert(r->has_ring_size && r->has_ring_header_size &&
		  r->has_ring_flags);
	ck_assert_uint_eq(r->ring_size, RING_SIZE);
	ck_assert_uint_eq(r->ring_header_size, RING_HEADER);
	ck_assert_uint_eq(r->ring_flags, RING_FLAGS);
	check_same_memfd(fd, memfd, RING_SIZE);

	npusan__to_daemon__free_unpacked(m, NULL);
	register_stop();
	close(fd);
	close(conn);
	close(memfd);
	fake_fini(&f);
}
END_TEST

START_TEST(register_identity_falls_back)
{
	Npusan__ToDaemon *m;
	Npusan__Register *r;

	/* Torch elastic's job id, then Slurm's. */
	setenv("TORCHELASTIC_RUN_ID", "te-run", 1);
	setenv("SLURM_JOB_ID", "77", 1);
	setenv("SLURM_PROCID", "5", 1);
	setenv("SLURM_LOCALID", "2", 1);
	setenv("SLURM_NTASKS", "16", 1);
	setenv("OMPI_COMM_WORLD_RANK", "9", 1);
	setenv("NPUSAN_JOB", "", 1); /* empty counts as unset */
	m = register_once();
	r = m->register_;
	ck_assert_str_eq(r->job, "te-run");
	ck_assert(r->has_rank && r->has_local_rank && r->has_world_size);
	ck_assert_uint_eq(r->rank, 5);
	ck_assert_uint_eq(r->local_rank, 2);
	ck_assert_uint_eq(r->world_size, 16);
	npusan__to_daemon__free_unpacked(m, NULL);

	/* Slurm's job id; Open MPI's ranks. */
	setup();
	setenv("SLURM_JOB_ID", "77", 1);
	setenv("OMPI_COMM_WORLD_RANK", "9", 1);
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "4", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "12", 1);
	m = register_once();
	r = m->register_;
	ck_assert_str_eq(r->job, "77");
	ck_assert_uint_eq(r->rank, 9);
	ck_assert_uint_eq(r->local_rank, 4);
	ck_assert_uint_eq(r->world_size, 12);
	npusan__to_daemon__free_unpacked(m, NULL);

	/* Nothing known, or nothing numeric: absent, not zero. */
	setup();
	setenv("RANK", "three", 1);
	setenv("LOCAL_RANK", "4294967296", 1);
	setenv("SLURM_PROCID", "5", 1);
	m = register_once();
	r = m->register_;
	ck_assert_ptr_null(r->job);
	ck_assert(!r->has_rank);
	ck_assert(!r->has_local_rank);
	ck_assert(!r->has_world_size);
	npusan__to_daemon__free_unpacked(m, NULL);
}
END_TEST

/* A daemon in its own thread that answers after 100 ms. */
struct quick_daemon {
	struct fake *f;
	int conn;
	int fd;
	Npusan__ToDaemon *m;
};

static void *quick_daemon_run(void *arg)
{
	struct quick_daemon *q = arg;

	q->conn = fake_accept(q->f, 5000);
	q->m = fake_recv(q->conn, &q->fd);
	usleep(100 * 1000);
	fake_reply(q->conn, true, NULL);
	return NULL;
}

START_TEST(register_start_registers_synchronously)
{
	struct quick_daemon q = { 0 };
	struct register_cfg cfg = {
		.memfd = make_memfd(RING_SIZE),
		.ring_size = RING_SIZE,
		.sync_timeout_ms = 5000,
	};
	struct fake f;
	pthread_t t;

	fake_start(&f);
	q.f = &f;
	ck_assert_int_eq(pthread_create(&t, NULL, quick_daemon_run, &q), 0);
	ck_assert_int_eq(register_start(&cfg), 0);
	/* Accepted before register_start() returned, not later in the
	 * thread: register_start() waited for the reply. */
	ck_assert(register_connected());
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	check_same_memfd(q.fd, cfg.memfd, RING_SIZE);

	npusan__to_daemon__free_unpacked(q.m, NULL);
	register_stop();
	close(q.fd);
	close(q.conn);
	close(cfg.memfd);
	fake_fini(&f);
}
END_TEST

START_TEST(register_start_bounded_without_daemon)
{
	Npusan__ToDaemon *m;
	struct fake f;
	int memfd = make_memfd(RING_SIZE), fd, conn;
	int64_t t0;

	fake_init(&f);
	t0 = now_ms();
	ck_assert_int_eq(agent_start(memfd), 0);
	ck_assert_int_lt(now_ms() - t0, 1000);
	ck_assert(!register_connected());

	/* The daemon comes up later: the thread finds it. */
	usleep(300 * 1000);
	fake_listen(&f);
	conn = fake_register(&f, &m, &fd);
	ck_assert_uint_eq(m->register_->pid, (uint32_t)getpid());
	check_same_memfd(fd, memfd, RING_SIZE);
	ck_assert(wait_connected(true, 5000));

	npusan__to_daemon__free_unpacked(m, NULL);
	register_stop();
	close(fd);
	close(conn);
	close(memfd);
	fake_fini(&f);
}
END_TEST

START_TEST(register_start_bounded_when_daemon_silent)
{
	Npusan__ToDaemon *m;
	struct fake f;
	int memfd = make_memfd(RING_SIZE), fd, conn;
	int64_t t0;

	/* The daemon listens but neither accepts nor answers in time. */
	fake_start(&f);
	t0 = now_ms();
	ck_assert_int_eq(agent_start(memfd), 0);
	ck_assert_int_lt(now_ms() - t0, 1000);
	ck_assert(!register_connected());

	/* The reply comes late: the thread is still waiting for it. */
	usleep(200 * 1000);
	conn = fake_register(&f, &m, &fd);
	ck_assert(wait_connected(true, 5000));
	ck_assert(!fake_pending(&f, 0));

	npusan__to_daemon__free_unpacked(m, NULL);
	t0 = now_ms();
	register_stop();
	ck_assert_int_lt(now_ms() - t0, 1000);
	close(fd);
	close(conn);
	close(memfd);
	fake_fini(&f);
}
END_TEST

START_TEST(register_reregisters_after_daemon_restart)
{
	Npusan__ToDaemon *m;
	struct fake f;
	int memfd = make_memfd(RING_SIZE), fd, conn;

	fake_start(&f);
	ck_assert_int_eq(agent_start(memfd), 0);
	conn = fake_register(&f, &m, &fd);
	ck_assert(wait_connected(true, 5000));
	npusan__to_daemon__free_unpacked(m, NULL);
	close(fd);

	/* The daemon dies, and comes back a little later. */
	close(conn);
	fake_stop(&f);
	ck_assert(wait_connected(false, 5000));
	usleep(200 * 1000);
	fake_listen(&f);
	conn = fake_register(&f, &m, &fd);
	ck_assert_uint_eq(m->register_->pid, (uint32_t)getpid());
	check_same_memfd(fd, memfd, RING_SIZE);
	ck_assert(wait_connected(true, 5000));

	npusan__to_daemon__free_unpacked(m, NULL);
	register_stop();
	close(fd);
	close(conn);
	close(memfd);
	fake_fini(&f);
}
END_TEST

START_TEST(register_refused_stops_retrying)
{
	Npusan__ToDaemon *m;
	struct fake f;
	int memfd = make_memfd(RING_SIZE), fd, conn;
	struct pollfd p;
	char c;

	FILE *err = tmpfile();
	int saved = dup(STDERR_FILENO);
	char said[512] = "";

	/* What the agent says goes to `err`. */
	ck_assert(err != NULL && saved >= 0);
	ck_assert_int_ge(dup2(fileno(err), STDERR_FILENO), 0);
	fake_start(&f);
	ck_assert_int_eq(agent_start(memfd), 0);
	conn = fake_accept(&f, 5000);
	p = (struct pollfd){ .fd = conn, .events = POLLIN };
	m = fake_recv(conn, &fd);
	fake_reply(conn, false, "not your pid\n\x1b[31m");
	/* The agent hangs up and never comes back. */
	ck_assert_int_eq(poll(&p, 1, 5000), 1);
	ck_assert_int_eq(read(conn, &c, 1), 0);
	ck_assert(!register_connected());
	/* It said so in one line, NPUSAN_LOG unset, the reason made safe to
	 * print. */
	ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
	close(saved);
	rewind(err);
	said[fread(said, 1, sizeof(said) - 1, err)] = '\0';
	fclose(err);
	ck_assert_msg(strstr(said, "registration refused by ") != NULL &&
			      strstr(said, "not your pid") != NULL &&
			      strchr(said, '\x1b') == NULL &&
			      strchr(said, '\n') == strrchr(said, '\n'),
		      "%s", said);
	ck_assert(!fake_pending(&f, 700));
	ck_assert(!register_connected());

	npusan__to_daemon__free_unpacked(m, NULL);
	register_stop();
	close(fd);
	close(conn);
	close(memfd);
	fake_fini(&f);
}
END_TEST

/* The child: its own ring and registration; waits for `go` to exit. */
static void __attribute__((noreturn)) forked_child(const int go[2])
{
	int memfd, ok;
	char c;

	register_atfork_child();
	close(go[1]);
	memfd = memfd_create("npusan-test-ring", MFD_CLOEXEC);
	if (memfd < 0 || ftruncate(memfd, 8192) < 0 || agent_start(memfd) < 0)
		_exit(2);
	ok = wait_connected(true, 10000);
	if (read(go[0], &c, 1) != 1)
		_exit(3);
	register_stop();
	_exit(ok ? 0 : 4);
}

START_TEST(register_forked_child_registers_itself)
{
	Npusan__ToDaemon *m;
	struct fake f;
	int memfd = make_memfd(RING_SIZE), fd, cfd, conn, cconn, go[2];
	struct pollfd p;
	struct stat st;
	int status;
	pid_t pid;
	char c;

	fake_start(&f);
	ck_assert_int_eq(agent_start(memfd), 0);
	conn = fake_register(&f, &m, &fd);
	ck_assert(wait_connected(true, 5000));
	/* Freed before fork(), so that the child leaks nothing of ours. */
	ck_assert_uint_eq(m->register_->pid, (uint32_t)getpid());
	npusan__to_daemon__free_unpacked(m, NULL);
	ck_assert_int_eq(pipe2(go, O_CLOEXEC), 0);

	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0)
		forked_child(go);
	cconn = fake_register(&f, &m, &cfd);
	ck_assert_uint_eq(m->register_->pid, (uint32_t)pid);
	npusan__to_daemon__free_unpacked(m, NULL);
	/* The child's own ring, not the one it inherited. */
	ck_assert_int_eq(fstat(cfd, &st), 0);
	ck_assert_int_eq(st.st_size, 8192);

	/* The child closed its copy of our socket without cutting ours. */
	p = (struct pollfd){ .fd = conn, .events = POLLIN };
	ck_assert_int_eq(poll(&p, 1, 300), 0);
	ck_assert(register_connected());
	/* ...and kept no copy: our hang-up reaches the daemon at once. */
	register_stop();
	ck_assert_int_eq(poll(&p, 1, 2000), 1);
	ck_assert_int_eq(read(conn, &c, 1), 0);

	ck_assert_int_eq(write(go[1], "x", 1), 1);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		      "child status %#x", status);
	close(go[0]);
	close(go[1]);
	close(fd);
	close(cfd);
	close(conn);
	close(cconn);
	close(memfd);
	fake_fini(&f);
}
END_TEST

/* The blocked-signal mask (SigBlk) of thread `tid`. */
static unsigned long long thread_sigblk(const char *tid)
{
	char path[300], line[256];
	unsigned long long blk = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%s/status", tid);
	f = fopen(path, "r");
	ck_assert_ptr_nonnull(f);
	while (fgets(line, sizeof(line), f) != NULL)
		sscanf(line, "SigBlk: %llx", &blk);
	fclose(f);
	return blk;
}

/* Every thread but the main one blocks every signal that can be blocked. */
static void check_threads_block_signals(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	int found = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)) != NULL) {
		unsigned long long blk;

		if (e->d_name[0] == '.' || atoi(e->d_name) == getpid())
			continue;
		blk = thread_sigblk(e->d_name);
		found++;
		for (int sig = 1; sig < 32; sig++) {
			if (sig != SIGKILL && sig != SIGSTOP)
				ck_assert_msg(blk & (1ull << (sig - 1)),
					      "thread %s takes signal %d",
					      e->d_name, sig);
		}
	}
	closedir(d);
	ck_assert_int_ge(found, 1);
}

START_TEST(register_thread_blocks_signals)
{
	Npusan__ToDaemon *m;
	struct fake f;
	int memfd = make_memfd(RING_SIZE), fd, conn;

	/* The reply reaches the agent after register_start() returned, so
	 * once connected the thread runs its loop: pthread_create() keeps
	 * every signal blocked only until then, whatever the caller asked. */
	fake_start(&f);
	ck_assert_int_eq(agent_start(memfd), 0);
	conn = fake_register(&f, &m, &fd);
	ck_assert(wait_connected(true, 5000));
	check_threads_block_signals();
	npusan__to_daemon__free_unpacked(m, NULL);
	register_stop();
	close(fd);
	close(conn);
	close(memfd);
	fake_fini(&f);
}
END_TEST

/* The bytes written to `fd` (a memfd), as a string the caller frees. */
static char *slurp(int fd)
{
	off_t size = lseek(fd, 0, SEEK_END);
	char *s = calloc(1, (size_t)size + 1);

	ck_assert_ptr_nonnull(s);
	ck_assert_int_eq(pread(fd, s, (size_t)size, 0), size);
	return s;
}

/* Registers once with NPUSAN_LOG=`level`; what went to stdout and stderr,
 * and the socket it used. */
static void register_logged(const char *level, char **out, char **err,
			    char path[128])
{
	Npusan__ToDaemon *m;
	int o = memfd_create("out", 0), e = memfd_create("err", 0);
	int saved_o = dup(1), saved_e = dup(2);
	int memfd = make_memfd(RING_SIZE), fd, conn;
	struct fake f;

	setenv("NPUSAN_LOG", level, 1);
	fake_start(&f);
	fflush(stdout);
	ck_assert_int_ge(dup2(o, 1), 0);
	ck_assert_int_ge(dup2(e, 2), 0);
	ck_assert_int_eq(agent_start(memfd), 0);
	conn = fake_register(&f, &m, &fd);
	ck_assert(wait_connected(true, 5000));
	register_stop();
	dup2(saved_o, 1);
	dup2(saved_e, 2);
	*out = slurp(o);
	*err = slurp(e);
	strcpy(path, f.path);

	npusan__to_daemon__free_unpacked(m, NULL);
	close(saved_o);
	close(saved_e);
	close(o);
	close(e);
	close(fd);
	close(conn);
	close(memfd);
	fake_fini(&f);
}

START_TEST(register_logs_only_to_stderr)
{
	char *out, *err, path[128], want[256], *line;
	int lines = 0;

	register_logged("", &out, &err, path);
	ck_assert_str_eq(out, "");
	ck_assert_str_eq(err, "");
	free(out);
	free(err);

	register_logged("info", &out, &err, path);
	snprintf(want, sizeof(want), "npusan: registered with %s\n", path);
	ck_assert_str_eq(out, "");
	ck_assert_str_eq(err, want);
	free(out);
	free(err);

	register_logged("debug", &out, &err, path);
	snprintf(want, sizeof(want), "npusan: registered with %s\n", path);
	ck_assert_str_eq(out, "");
	ck_assert_ptr_nonnull(strstr(err, want));
	for (line = err; *line != '\0'; line = strchr(line, '\n') + 1) {
		ck_assert_msg(strncmp(line, "npusan: ", 8) == 0,
			      "debug: [%s]", err);
		ck_assert_ptr_nonnull(strchr(line, '\n'));
		lines++;
	}
	ck_assert_int_ge(lines, 2);
	free(out);
	free(err);
}
END_TEST

START_TEST(register_start_rejects_bad_cfg)
{
	struct register_cfg cfg = { .memfd = -1 };
	char longpath[200];
	struct fake f;
	int memfd = make_memfd(RING_SIZE);

	ck_assert_int_eq(register_start(NULL), -EINVAL);
	ck_assert_int_eq(register_start(&cfg), -EINVAL);

	memset(longpath, 'a', sizeof(longpath) - 1);
	longpath[0] = '/';
	longpath[sizeof(longpath) - 1] = '\0';
	setenv("NPUSAN_SOCKET", longpath, 1);
	ck_assert_int_eq(agent_start(memfd), -ENAMETOOLONG);

	fake_init(&f);
	ck_assert_int_eq(agent_start(memfd), 0);
	ck_assert_int_eq(agent_start(memfd), -EALREADY);
	register_stop();
	register_stop();
	ck_assert_int_eq(agent_start(memfd), 0);
	register_stop();
	close(memfd);
	fake_fini(&f);
}
END_TEST

/* ---- paths ------------------------------------------------------------- */

START_TEST(paths_socket_resolution_order)
{
	char dir[] = "/tmp/npusan-xdg-XXXXXX", sub[64], buf[128];

	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sub, sizeof(sub), "%s/npusan", dir);

	ck_assert_int_eq(paths_socket(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/run/npusan/npusand.sock");

	/* $XDG_RUNTIME_DIR alone is every login session: not enough. */
	setenv("XDG_RUNTIME_DIR", dir, 1);
	ck_assert_int_eq(paths_socket(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/run/npusan/npusand.sock");

	ck_assert_int_eq(mkdir(sub, 0700), 0);
	ck_assert_int_eq(paths_socket(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf + strlen(dir), "/npusan/npusand.sock");
	ck_assert_int_eq(strncmp(buf, dir, strlen(dir)), 0);

	setenv("NPUSAN_SOCKET", "", 1);
	ck_assert_int_eq(paths_socket(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf + strlen(dir), "/npusan/npusand.sock");

	setenv("NPUSAN_SOCKET", "/elsewhere/d.sock", 1);
	ck_assert_int_eq(paths_socket(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/elsewhere/d.sock");

	/* Only an absolute $XDG_RUNTIME_DIR counts. */
	unsetenv("NPUSAN_SOCKET");
	ck_assert_int_eq(chdir("/tmp"), 0);
	setenv("XDG_RUNTIME_DIR", dir + 5, 1);
	ck_assert_int_eq(paths_socket(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, "/run/npusan/npusand.sock");

	rmdir(sub);
	rmdir(dir);
}
END_TEST

START_TEST(paths_socket_too_long)
{
	char path[PATHS_SOCKET_MAX + 2], buf[256], dir[] =
		"/tmp/npusan-xdg-XXXXXX", deep[256];

	memset(path, 'a', sizeof(path) - 1);
	path[0] = '/';
	path[PATHS_SOCKET_MAX] = '\0'; /* exactly 107 bytes: fits */
	setenv("NPUSAN_SOCKET", path, 1);
	ck_assert_int_eq(paths_socket(buf, sizeof(buf)), 0);
	ck_assert_str_eq(buf, path);
	ck_assert_int_eq(paths_socket(buf, PATHS_SOCKET_MAX), -ENAMETOOLONG);
	ck_assert_str_eq(buf, "");
	ck_assert_int_eq(paths_socket(buf, 0), -ENAMETOOLONG);

	path[PATHS_SOCKET_MAX] = 'a'; /* 108 */
	path[PATHS_SOCKET_MAX + 1] = '\0';
	setenv("NPUSAN_SOCKET", path, 1);
	ck_assert_int_eq(paths_socket(buf, sizeof(buf)), -ENAMETOOLONG);

	/* A long $XDG_RUNTIME_DIR with its npusan directory. */
	unsetenv("NPUSAN_SOCKET");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(deep, sizeof(deep), "%s/%090d", dir, 0);
	ck_assert_int_eq(mkdir(deep, 0700), 0);
	setenv("XDG_RUNTIME_DIR", deep, 1);
	strcat(deep, "/npusan");
	ck_assert_int_eq(mkdir(deep, 0700), 0);
	ck_assert_int_eq(paths_socket(buf, sizeof(buf)), -ENAMETOOLONG);
	rmdir(deep);
	*strrchr(deep, '/') = '\0';
	rmdir(deep);
	rmdir(dir);
}
END_TEST

/* ---- frames ------------------------------------------------------------ */

static void pair(int sv[2])
{
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0,
				    sv), 0);
}

static int count_fds(void)
{
	char path[32];
	int n = 0;

	for (int fd = 0; fd < 1024; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n += access(path, F_OK) == 0;
	}
	return n;
}

START_TEST(frame_header_is_little_endian)
{
	uint8_t h[FRAME_HEADER_SIZE];
	uint32_t len;

	ck_assert_int_eq(frame_header_encode(0x0a0b0c, h), 0);
	ck_assert_uint_eq(h[0], 0x0c);
	ck_assert_uint_eq(h[1], 0x0b);
	ck_assert_uint_eq(h[2], 0x0a);
	ck_assert_uint_eq(h[3], 0);
	ck_assert_int_eq(frame_header_decode(h, &len), 0);
	ck_assert_uint_eq(len, 0x0a0b0c);
	ck_assert_int_eq(frame_header_encode(FRAME_MAX, h), 0);
	ck_assert_int_eq(frame_header_decode(h, &len), 0);
	ck_assert_uint_eq(len, FRAME_MAX);
	ck_assert_int_eq(frame_header_encode(FRAME_MAX + 1, h), -EMSGSIZE);
	h[0] = 1, h[1] = 0, h[2] = 0x10, h[3] = 0; /* FRAME_MAX + 1 */
	len = 7;
	ck_assert_int_eq(frame_header_decode(h, &len), -EMSGSIZE);
	ck_assert_uint_eq(len, 7);
}
END_TEST

START_TEST(frame_roundtrip_with_fd)
{
	static uint8_t big[FRAME_MAX], got[FRAME_MAX];
	int sv[2], memfd = make_memfd(4096), fd = -2;
	size_t len = 1;

	pair(sv);
	ck_assert_int_eq(frame_send(sv[0], "hello", 5, memfd, 1000), 0);
	ck_assert_int_eq(frame_recv(sv[1], got, 5, &len, &fd, 1000), 0);
	ck_assert_uint_eq(len, 5);
	ck_assert_int_eq(memcmp(got, "hello", 5), 0);
	check_same_memfd(fd, memfd, 4096);
	close(fd);

	/* An empty frame, and one of exactly FRAME_MAX sent through a socket
	 * buffer far smaller: partial writes and reads on both sides. */
	ck_assert_int_eq(frame_send(sv[0], NULL, 0, -1, 1000), 0);
	ck_assert_int_eq(frame_recv(sv[1], got, 0, &len, &fd, 1000), 0);
	ck_assert_uint_eq(len, 0);
	ck_assert_int_eq(fd, -1);
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7);
	if (fork() == 0) {
		_exit(frame_send(sv[0], big, sizeof(big), memfd, 5000) ? 1 : 0);
	}
	ck_assert_int_eq(frame_recv(sv[1], got, sizeof(got), &len, &fd, 5000),
			 0);
	ck_assert_uint_eq(len, FRAME_MAX);
	ck_assert_int_eq(memcmp(got, big, len), 0);
	check_same_memfd(fd, memfd, 4096);
	ck_assert_int_eq(frame_send(sv[0], big, FRAME_MAX + 1, -1, 0),
			 -EMSGSIZE);
	wait(NULL);
	close(fd);
	close(sv[0]);
	close(sv[1]);
	close(memfd);
}
END_TEST

/* frame_recv() on what `bytes` (`n` of them) leave in the stream, the
 * writer hanging up when `eof`. */
static int recv_after(const void *bytes, size_t n, bool eof, size_t cap)
{
	uint8_t buf[64];
	int sv[2], err, fd = -2;
	size_t len = 99;

	pair(sv);
	ck_assert_int_eq(write(sv[0], bytes, n), (ssize_t)n);
	if (eof)
		shutdown(sv[0], SHUT_WR);
	err = frame_recv(sv[1], buf, cap, &len, &fd, 100);
	if (err < 0) {
		ck_assert_uint_eq(len, 99);
		ck_assert_int_eq(fd, -2);
	}
	close(sv[0]);
	close(sv[1]);
	return err;
}

START_TEST(frame_recv_errors_are_distinct)
{
	const uint8_t whole[] = { 3, 0, 0, 0, 'a', 'b', 'c' };
	const uint8_t huge[] = { 1, 0, 0x10, 0 }; /* FRAME_MAX + 1 */

	ck_assert_int_eq(recv_after(whole, 7, true, 64), 0);
	ck_assert_int_eq(recv_after(whole, 0, true, 64), -ECONNRESET);
	ck_assert_int_eq(recv_after(whole, 2, true, 64), -EPROTO);
	ck_assert_int_eq(recv_after(whole, 5, true, 64), -EBADMSG);
	ck_assert_int_eq(recv_after(huge, 4, false, 64), -EMSGSIZE);
	ck_assert_int_eq(recv_after(whole, 7, false, 2), -EMSGSIZE);
	ck_assert_int_eq(recv_after(whole, 0, false, 64), -EAGAIN);
	ck_assert_int_eq(recv_after(whole, 2, false, 64), -ETIMEDOUT);
	ck_assert_int_eq(recv_after(whole, 5, false, 64), -ETIMEDOUT);
}
END_TEST

/* Sends a 1-byte frame with `nfds` copies of `fd`, by hand. */
static void send_with_fds(int sock, int fd, int nfds)
{
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} ctl;
	uint8_t frame[] = { 1, 0, 0, 0, 'x' };
	struct iovec iov = { .iov_base = frame, .iov_len = sizeof(frame) };
	struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1,
			      .msg_control = ctl.buf,
			      .msg_controllen = CMSG_SPACE(nfds * sizeof(int)) };
	struct cmsghdr *c;

	memset(&ctl, 0, sizeof(ctl));
	c = CMSG_FIRSTHDR(&msg);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
	for (int i = 0; i < nfds; i++)
		memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof(int));
	ck_assert_int_eq(sendmsg(sock, &msg, 0), (ssize_t)sizeof(frame));
}

START_TEST(frame_recv_closes_unwanted_fds)
{
	int sv[2], memfd = make_memfd(4096), fd, before;
	uint8_t buf[8];
	size_t len;

	pair(sv);
	before = count_fds();
	send_with_fds(sv[0], memfd, 3);
	ck_assert_int_eq(frame_recv(sv[1], buf, sizeof(buf), &len, &fd, 1000),
			 0);
	ck_assert_int_eq(count_fds(), before + 1);
	check_same_memfd(fd, memfd, 4096);
	close(fd);

	send_with_fds(sv[0], memfd, 2);
	ck_assert_int_eq(frame_recv(sv[1], buf, sizeof(buf), &len, NULL, 1000),
			 0);
	ck_assert_int_eq(count_fds(), before);

	/* An error after the descriptor came leaves nothing open. */
	send_with_fds(sv[0], memfd, 1);
	ck_assert_int_eq(frame_recv(sv[1], buf, 0, &len, &fd, 1000),
			 -EMSGSIZE);
	ck_assert_int_eq(count_fds(), before);
	close(sv[0]);
	close(sv[1]);
	close(memfd);
}
END_TEST

START_TEST(frame_send_to_closed_peer_raises_no_sigpipe)
{
	int sv[2];

	signal(SIGPIPE, SIG_DFL);
	pair(sv);
	close(sv[1]);
	ck_assert_int_eq(frame_send(sv[0], "x", 1, -1, 1000), -EPIPE);
	close(sv[0]);
}
END_TEST

static Suite *register_suite(void)
{
	Suite *s = suite_create("register");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, register_delivers_identity);
	tcase_add_test(tc, register_identity_falls_back);
	tcase_add_test(tc, register_start_registers_synchronously);
	tcase_add_test(tc, register_start_bounded_without_daemon);
	tcase_add_test(tc, register_start_bounded_when_daemon_silent);
	tcase_add_test(tc, register_reregisters_after_daemon_restart);
	tcase_add_test(tc, register_refused_stops_retrying);
	tcase_add_test(tc, register_forked_child_registers_itself);
	tcase_add_test(tc, register_thread_blocks_signals);
	tcase_add_test(tc, register_logs_only_to_stderr);
	tcase_add_test(tc, register_start_rejects_bad_cfg);
	tcase_add_test(tc, paths_socket_resolution_order);
	tcase_add_test(tc, paths_socket_too_long);
	tcase_add_test(tc, frame_header_is_little_endian);
	tcase_add_test(tc, frame_roundtrip_with_fd);
	tcase_add_test(tc, frame_recv_errors_are_distinct);
	tcase_add_test(tc, frame_recv_closes_unwanted_fds);
	tcase_add_test(tc, frame_send_to_closed_peer_raises_no_sigpipe);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(register_suite());
}
