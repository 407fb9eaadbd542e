/*
 * run.c - `npusanctl run -- CMD ARGS...`: runs a job under npusan and
 * reports what it found, for CI and for trying npusan on a job.
 *
 * It makes sure a daemon answers, starting a private one when none does
 * (and stopping it afterwards); runs CMD with the agent preloaded, enabled
 * and the job named; forwards SIGINT and SIGTERM that are sent to it; waits
 * for CMD and everything CMD started (a launcher that forks its ranks is
 * the normal case: npusanctl is their subreaper); waits until the daemon
 * has drained and stored each process of the job; then prints the job's
 * findings and exits with CMD's failure, or --error-exitcode when CMD
 * succeeded with findings.
 *
 * DESIGN
 * 1. The private daemon is started before npusanctl becomes a subreaper,
 *    by a double fork, so that it is nobody's child here: waiting for "no
 *    children left" then means the job is over. Its pid comes back through
 *    a pipe and its readiness through $NOTIFY_SOCKET, the same READY=1 that
 *    systemd waits for, so "ready" means its store is open and its socket
 *    listens.
 * 2. A signal the terminal sends reaches the whole foreground process
 *    group, CMD included, on its own; only a signal sent to npusanctl alone
 *    (kill, a scheduler, a CI runner's timeout) is passed on to CMD, so
 *    that Ctrl-C is not delivered twice.
 * 3. CMD's exec failure comes back through a close-on-exec pipe, so that
 *    a command that does not exist is told apart from one that exits 127.
 * 4. SIGINT and SIGTERM are caught from the start: one that comes while
 *    the daemon starts means CMD is not started, and the private daemon is
 *    stopped rather than left behind. Both are blocked across the fork, so
 *    one sent the moment CMD exists waits until its pid is known, and is
 *    then passed on rather than lost; CMD gets them back as they were.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "client.h"
#include "jobreport.h"
#include "paths.h"
#include "report.h"
#include "settle.h"

#define RUN_CMD "npusanctl run"
/* How long a private daemon may take to say READY=1. */
#define RUN_DAEMON_START_MS 15000
/* How long a stopped private daemon may take to drain and exit. */
#define RUN_DAEMON_STOP_MS 15000
/* How long the daemon may take to finish the job's processes. */
#define RUN_SETTLE_MS 30000

#ifndef NPUSAN_SANITIZED
#define NPUSAN_SANITIZED 0
#endif

static const char run_usage[] =
	"Usage: npusanctl run [OPTIONS] -- CMD [ARGS...]\n"
	"\n"
	"Runs CMD under npusan and reports what it found. Makes sure a daemon\n"
	"answers (starting a private one for this user when none does, and\n"
	"stopping it afterwards), runs CMD with the agent preloaded\n"
	"(LD_PRELOAD) and enabled (NPUSAN=1; NPUSAN=dormant is kept), its job\n"
	"named (NPUSAN_JOB), and the npusan Python package on PYTHONPATH with\n"
	"its start-up hook, which turns npusan.torch on in every Python\n"
	"process of the job as it imports torch (NPUSAN_TORCH=1; set it to 0\n"
	"to keep it off);\n"
	"waits for CMD and every process it started; then prints the job's\n"
	"findings, each in full, and a verdict line.\n"
	"\n"
	"Options:\n"
	"  --job NAME           the job's name (default: $NPUSAN_JOB, else\n"
	"                       CMD's name and npusanctl's pid)\n"
	"  --json               the findings as JSON Lines (docs/\n"
	"                       findings.md) on standard output; the verdict\n"
	"                       goes to standard error\n"
	"  --error-exitcode N   exit with N (0-255) when CMD succeeded but\n"
	"                       there are findings (default 1)\n"
	"  --allow-incomplete   exit 0, not 5, when operations were lost and\n"
	"                       nothing was found\n"
	CLI_OUTPUT_HELP
	"                       CMD's own output stays where it was\n"
	CLI_PRINT_LIMIT_HELP
	CLI_FILTER_HELP
	CLI_SUPPRESS_HELP
	CLI_GEN_SUPPRESSIONS_HELP
	CLIENT_OPTIONS_HELP
	"\n"
	"SIGINT and SIGTERM sent to npusanctl are passed on to CMD; the\n"
	"findings are still printed. A full ring makes CMD wait for the\n"
	"daemon (NPUSAN_RING_FULL=block) unless NPUSAN_RING_FULL is set.\n"
	"\n"
	"Exit status: CMD's own when it failed (128+N when signal N killed it);\n"
	"else 1 (or --error-exitcode N) when there are findings; 4 when\n"
	"npusan analysed no operation of the job (the verdict says why); 5\n"
	"when operations were lost and nothing was found (0 with\n"
	"--allow-incomplete); else 0. 127: CMD was not found (126: not\n"
	"executable); 2: usage error (or the --output file cannot be\n"
	"created: CMD is then not run); 3: no daemon could be reached or\n"
	"started, or it did not answer (the --output file, a verdict never\n"
	"reached, is removed). Findings left out by --op or\n"
	"--exclude-op count as none; the verdict line still counts them.\n"
	"Suppressed findings count as none, and the verdict says how many.\n";

struct run {
	const char *job;
	char jobbuf[128];
	const char *run; /* NPUSAN_RUN: this run of the job */
	char runbuf[64];
	int error_exitcode;
	bool json;
	bool allow_incomplete;
	/* --op, --exclude-op, --print-limit, --output, --suppressions,
	 * --gen-suppressions */
	struct cli_print pr;
	int output_fd;	     /* --output's file until CMD is over, or -1 */
	char **argv; /* CMD and its arguments */
	char socket[PATHS_SOCKET_MAX + 1];
	bool default_socket; /* no --socket nor NPUSAN_SOCKET */
	char lib[PATH_MAX];  /* libnpusan.so */
	char daemon[PATH_MAX];
	char pydir[PATH_MAX];
	char pystartup[PATH_MAX + 32]; /* npusan's sitecustomize, in pydir */
	pid_t daemon_pid; /* the private daemon, or 0 */
	pid_t child;
	int64_t start_ms;
};

/* CMD's pid while it runs; 0 before it starts, -1 once it has exited. */
static volatile sig_atomic_t run_child_pid;
/* The SIGINT or SIGTERM that came before CMD started: CMD is not started. */
static volatile sig_atomic_t run_stop_sig;

static void run_nap_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- where things are ---------------------------------------------------- */

static bool run_exists(const char *path, int mode)
{
	return path[0] != '\0' && access(path, mode) == 0;
}

/* `file` (or, when "", the directory itself) in install directory `dir`:
 * absolute, or relative to `exedir`, where npusanctl was installed; the
 * directory made canonical (no "bin/..") when it exists. `out` has
 * PATH_MAX bytes; a path that does not fit leaves it empty, which
 * run_locate() reports as not found. */
static void run_install_path(char *out, const char *exedir, const char *dir,
			     const char *file)
{
	char path[PATH_MAX], real[PATH_MAX];
	int n;

	out[0] = '\0';
	n = snprintf(path, sizeof(path), "%s%s%s",
		     dir[0] == '/' ? "" : exedir, dir[0] == '/' ? "" : "/",
		     dir);
	if (n < 0 || (size_t)n >= sizeof(path))
		return;
	n = snprintf(out, PATH_MAX, "%s%s%s",
		     realpath(path, real) != NULL ? real : path,
		     file[0] ? "/" : "", file);
	if (n < 0 || n >= PATH_MAX)
		out[0] = '\0';
}

/* Whether `exe` is the npusanctl of the build tree it was built in. */
static bool run_in_build_tree(const char *exe)
{
	char built[PATH_MAX];

	return realpath(NPUSAN_BINARY_DIR "/npusanctl", built) != NULL &&
	       strcmp(built, exe) == 0;
}

/*
 * The agent, the daemon and the Python package: beside npusanctl in the
 * build tree, else where `cmake --install` put them, found from
 * npusanctl's own directory (NPUSAN_INSTALL_* are relative to it), so that
 * an installed tree works under any prefix and once moved.
 * $NPUSAN_LIBRARY names the agent explicitly.
 */
static int run_locate(struct run *r)
{
	const char *lib = getenv("NPUSAN_LIBRARY");
	char exe[PATH_MAX], *exedir;

	if (realpath("/proc/self/exe", exe) == NULL) {
		fprintf(stderr, RUN_CMD ": cannot find my own executable: %s\n",
			strerror(errno));
		return CLI_USAGE;
	}
	if (run_in_build_tree(exe)) {
		snprintf(r->lib, sizeof(r->lib), "%s",
			 NPUSAN_BINARY_DIR "/agent/libnpusan.so");
		snprintf(r->daemon, sizeof(r->daemon), "%s",
			 NPUSAN_BINARY_DIR "/daemon/npusand");
		snprintf(r->pydir, sizeof(r->pydir), "%s",
			 NPUSAN_SOURCE_DIR "/agent/python");
	} else {
		exedir = dirname(exe);
		run_install_path(r->lib, exedir, NPUSAN_INSTALL_LIBDIR,
				 "libnpusan.so.0");
		snprintf(r->daemon, sizeof(r->daemon), "%s/npusand", exedir);
		run_install_path(r->pydir, exedir, NPUSAN_INSTALL_PYDIR, "");
	}
	if (lib != NULL && lib[0] != '\0')
		snprintf(r->lib, sizeof(r->lib), "%s", lib);
	snprintf(r->pystartup, sizeof(r->pystartup), "%s/npusan/_startup",
		 r->pydir);
	if (r->lib[0] != '/' || !run_exists(r->lib, R_OK)) {
		fprintf(stderr, RUN_CMD ": cannot find the agent library "
				"(looked for %s); name it with "
				"NPUSAN_LIBRARY=/path/to/libnpusan.so\n",
			r->lib);
		return CLI_USAGE;
	}
	return CLI_OK;
}

/* ---- the daemon ---------------------------------------------------------- */

/* The socket a private daemon of ours binds when none was named: where
 * npusand binds by default (daemon/npusand.c), so that its own checks of
 * the directory apply. */
static int run_private_socket(struct run *r)
{
	if (geteuid() == 0) {
		snprintf(r->socket, sizeof(r->socket), "%s",
			 PATHS_SYSTEM_SOCKET);
		return 0;
	}
	return paths_user_socket(getenv("XDG_RUNTIME_DIR"), (unsigned)getuid(),
				 r->socket, sizeof(r->socket));
}

/* A datagram socket for READY=1 under an abstract name, into *fd and
 * `name` (the $NOTIFY_SOCKET value). 0 or -errno. */
static int run_notify_socket(int *fd, char *name, size_t len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int n;

	if (s < 0)
		return -errno;
	n = snprintf(name, len, "@npusan-run-%d-%lld", (int)getpid(),
		     (long long)client_mono_ms());
	memcpy(sa.sun_path + 1, name + 1, (size_t)n - 1);
	if (bind(s, (struct sockaddr *)&sa,
		 (socklen_t)(offsetof(struct sockaddr_un, sun_path) +
			     (size_t)n)) < 0) {
		n = -errno;
		close(s);
		return n;
	}
	*fd = s;
	return 0;
}

/* In the grandchild: becomes the daemon (DESIGN 1). Never returns. */
static void run_exec_daemon(const struct run *r, const char *notify)
{
	char *argv[6] = { (char *)"npusand", (char *)"--log-level",
			  (char *)"warn", NULL, NULL, NULL };
	int null = open("/dev/null", O_RDWR | O_CLOEXEC);

	setsid();
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
	}
	if (!r->default_socket) {
		argv[3] = (char *)"--socket";
		argv[4] = (char *)r->socket;
	}
	setenv("NOTIFY_SOCKET", notify, 1);
	unsetenv("NPUSAN_SOCKET");
	execv(r->daemon, argv);
	fprintf(stderr, RUN_CMD ": cannot run %s: %s\n", r->daemon,
		strerror(errno));
	_exit(127);
}

/* Starts the daemon twice removed, its pid into r->daemon_pid. 0 or -errno. */
static int run_spawn_daemon(struct run *r, const char *notify)
{
	int p[2], status;
	pid_t mid, pid = 0;
	ssize_t n;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	mid = fork();
	if (mid < 0) {
		close(p[0]);
		close(p[1]);
		return -errno;
	}
	if (mid == 0) {
		pid = fork();
		if (pid == 0)
			run_exec_daemon(r, notify);
		n = write(p[1], &pid, sizeof(pid));
		_exit(n == sizeof(pid) && pid > 0 ? 0 : 1);
	}
	close(p[1]);
	while (waitpid(mid, &status, 0) < 0 && errno == EINTR)
		;
	n = read(p[0], &pid, sizeof(pid));
	close(p[0]);
	if (n != sizeof(pid) || pid <= 0)
		return -ECHILD;
	r->daemon_pid = pid;
	return 0;
}

/* Whether process `pid`, no child of ours, is gone (or a zombie). */
static bool run_gone(pid_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	if (kill(pid, 0) < 0 && errno == ESRCH)
		return true;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p != NULL && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* Waits for READY=1 from the daemon, or its death. 0; -ETIMEDOUT; -ESRCH. */
static int run_wait_ready(const struct run *r, int nfd)
{
	int64_t deadline = client_mono_ms() + RUN_DAEMON_START_MS;
	char buf[256];

	while (client_mono_ms() < deadline) {
		struct pollfd p = { .fd = nfd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 50) > 0) {
			n = recv(nfd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
			if (n > 0) {
				buf[n] = '\0';
				if (strstr(buf, "READY=1") != NULL)
					return 0;
			}
			continue;
		}
		if (run_gone(r->daemon_pid))
			return -ESRCH;
	}
	return -ETIMEDOUT;
}

/* Sends SIGTERM to our daemon and waits until it has drained and exited. */
static void run_stop_daemon(struct run *r)
{
	int64_t deadline = client_mono_ms() + RUN_DAEMON_STOP_MS;

	if (r->daemon_pid <= 0)
		return;
	kill(r->daemon_pid, SIGTERM);
	while (!run_gone(r->daemon_pid) && client_mono_ms() < deadline)
		run_nap_ms(10);
	if (!run_gone(r->daemon_pid))
		fprintf(stderr, RUN_CMD ": the daemon (pid %d) did not stop "
				"within %d s; it is left running\n",
			(int)r->daemon_pid, RUN_DAEMON_STOP_MS / 1000);
	r->daemon_pid = 0;
}

/* Makes sure a daemon answers on r->socket, starting ours. A status. */
static int run_ensure_daemon(struct run *r)
{
	char notify[64];
	int nfd = -1, err;

	if (client_probe(r->socket, 1000) == 0)
		return CLI_OK;
	if (r->default_socket && run_private_socket(r) < 0) {
		fprintf(stderr, RUN_CMD ": $XDG_RUNTIME_DIR is too long for a "
				"socket path; use --socket\n");
		return CLI_USAGE;
	}
	if (r->default_socket && client_probe(r->socket, 1000) == 0)
		return CLI_OK;
	if (!run_exists(r->daemon, X_OK)) {
		fprintf(stderr, RUN_CMD ": no daemon answers on %s, and there "
				"is no npusand to start (looked for %s)\n",
			r->socket, r->daemon);
		return CLI_DAEMON;
	}
	err = run_notify_socket(&nfd, notify, sizeof(notify));
	if (err == 0) {
		err = run_spawn_daemon(r, notify);
		if (err == 0)
			err = run_wait_ready(r, nfd);
		close(nfd);
	}
	if (err == 0)
		return CLI_OK;
	fprintf(stderr, RUN_CMD ": cannot start a daemon on %s: %s\n",
		r->socket, err == -ESRCH ? "it exited (see its message above)" :
		err == -ETIMEDOUT ? "it did not become ready in time" :
				    strerror(-err));
	if (err == -ETIMEDOUT)
		run_stop_daemon(r);
	r->daemon_pid = 0;
	return CLI_DAEMON;
}

/* ---- the job ------------------------------------------------------------- */

/* The sanitizer runtime this npusanctl runs with, for a sanitized agent:
 * it must be first in a program's initial libraries. */
static int run_find_asan_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	if (info->dlpi_name != NULL && strstr(info->dlpi_name, "libasan.so")) {
		snprintf(arg, PATH_MAX, "%s", info->dlpi_name);
		return 1;
	}
	return 0;
}

/* `var` = `first` `sep` old value (or `first` alone). 0 or -ENOMEM. */
static int run_prepend(const char *var, const char *first, char sep)
{
	const char *old = getenv(var);
	char *v;
	int err;

	if (old == NULL || old[0] == '\0')
		return setenv(var, first, 1) < 0 ? -errno : 0;
	if (asprintf(&v, "%s%c%s", first, sep, old) < 0)
		return -ENOMEM;
	err = setenv(var, v, 1) < 0 ? -errno : 0;
	free(v);
	return err;
}

/* The environment CMD runs in; in the child. 0 or -errno. */
static int run_environment(const struct run *r)
{
	const char *mode = getenv("NPUSAN");
	char asan[PATH_MAX] = "";
	int err = 0;

	/* A ring that fills waits for the daemon rather than dropping: a CI
	 * verdict with operations lost is one that cannot be trusted, and the
	 * daemon is known to be there. The user's own choice stands. */
	if (setenv("NPUSAN_JOB", r->job, 1) < 0 ||
	    setenv("NPUSAN_RUN", r->run, 1) < 0 ||
	    setenv("NPUSAN_RING_FULL", "block", 0) < 0 ||
	    setenv("NPUSAN_SOCKET", r->socket, 1) < 0 ||
	    setenv("NPUSAN_LIBRARY", r->lib, 1) < 0 ||
	    setenv("NPUSAN", mode != NULL && strcmp(mode, "dormant") == 0 ?
				     "dormant" : "1", 1) < 0)
		return -errno;
	err = run_prepend("LD_PRELOAD", r->lib, ' ');
	if (err == 0 && NPUSAN_SANITIZED &&
	    dl_iterate_phdr(run_find_asan_cb, asan) != 0)
		err = run_prepend("LD_PRELOAD", asan, ' ');
	if (err == 0 && run_exists(r->pydir, R_OK))
		err = run_prepend("PYTHONPATH", r->pydir, ':');
	if (err == 0 && run_exists(r->pystartup, R_OK))
		err = run_prepend("PYTHONPATH", r->pystartup, ':');
	/* With the start-up hook, every Python process of the job turns
	 * npusan.torch on as it imports torch (NPUSAN_TORCH=0 keeps it off). */
	if (err == 0 && setenv("NPUSAN_TORCH", "1", 0) < 0)
		err = -errno;
	return err;
}

/* In the child: CMD, or its exec error through `errfd` (DESIGN 3). */
static void run_exec_cmd(const struct run *r, int errfd)
{
	int err = run_environment(r);
	ssize_t n;

	if (err == 0) {
		execvp(r->argv[0], r->argv);
		err = -errno;
	}
	n = write(errfd, &err, sizeof(err));
	(void)n;
	_exit(err == -ENOENT ? 127 : 126);
}

/*
 * DESIGN 2: only what was sent to us alone is passed on. One that comes
 * while the daemon starts means CMD is not to run at all (DESIGN 4).
 */
static void run_forward_cb(int sig, siginfo_t *si, void *ctx)
{
	(void)ctx;
	if (run_child_pid > 0 && si->si_code != SI_KERNEL)
		kill((pid_t)run_child_pid, sig);
	else if (run_child_pid == 0)
		run_stop_sig = sig;
}

/* How SIGINT and SIGTERM are taken: by run_forward_cb, or as they were. */
static void run_set_signals(bool catch)
{
	struct sigaction sa = { .sa_sigaction = run_forward_cb,
				.sa_flags = SA_SIGINFO | SA_RESTART };

	if (!catch) {
		sa.sa_handler = SIG_DFL;
		sa.sa_flags = 0;
	}
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* CMD's wait status as an exit status. */
static int run_exit_status(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 1;
}

/* Fork's or pipe's failure: says so, undoes what was set up. A status. */
static int run_cannot_start(const struct run *r, const sigset_t *old,
			    const int *pipefd)
{
	int err = errno;

	if (pipefd != NULL) {
		close(pipefd[0]);
		close(pipefd[1]);
	}
	sigprocmask(SIG_SETMASK, old, NULL);
	fprintf(stderr, RUN_CMD ": cannot start %s: %s\n", r->argv[0],
		strerror(err));
	return CLI_DAEMON;
}

/*
 * Runs CMD and waits for it and every process it left (DESIGN 1). Its exit
 * status into *cmd_status; CLI_OK, or the status to exit with when CMD
 * could not be run (a message said why).
 */
static int run_job(struct run *r, int *cmd_status)
{
	int p[2], err = 0, status = 0;
	sigset_t stop, old;
	ssize_t n;
	pid_t w;

	if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
		fprintf(stderr, RUN_CMD ": cannot become a subreaper (%s): "
				"processes CMD leaves behind are not waited "
				"for\n",
			strerror(errno));
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &stop, &old);
	if (run_stop_sig != 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		fprintf(stderr, RUN_CMD ": %s came before %s started; it was "
				"not started\n",
			strsignal(run_stop_sig), r->argv[0]);
		return 128 + run_stop_sig;
	}
	if (pipe2(p, O_CLOEXEC) < 0)
		return run_cannot_start(r, &old, NULL);
	r->child = fork();
	if (r->child < 0)
		return run_cannot_start(r, &old, p);
	if (r->child == 0) {
		run_set_signals(false);
		sigprocmask(SIG_SETMASK, &old, NULL);
		run_exec_cmd(r, p[1]);
	}
	run_child_pid = r->child;
	sigprocmask(SIG_SETMASK, &old, NULL);
	close(p[1]);
	n = read(p[0], &err, sizeof(err));
	close(p[0]);
	while ((w = waitpid(-1, &status, 0)) != -1 || errno == EINTR) {
		if (w == r->child) {
			*cmd_status = status;
			run_child_pid = -1;
		}
	}
	if (n == sizeof(err) && err < 0) {
		fprintf(stderr, RUN_CMD ": cannot run '%s': %s\n", r->argv[0],
			strerror(-err));
		return err == -ENOENT ? 127 : 126;
	}
	return CLI_OK;
}

/* ---- the findings -------------------------------------------------------- */

/* Counts the processes of other jobs not exited yet, and the operations
 * this run's processes lost. */
struct run_count {
	const char *job;
	const char *run;
	size_t busy;
	uint64_t lost; /* operations the processes of this run lost */
};

static int run_count_cb(void *arg, Npusan__FromDaemon *m)
{
	struct run_count *c = arg;
	const Npusan__ListReply *lr = m->list;
	bool done;

	if (m->msg_case != NPUSAN__FROM_DAEMON__MSG_LIST) {
		npusan__from_daemon__free_unpacked(m, NULL);
		return -EBADMSG;
	}
	for (size_t i = 0; i < lr->n_processes; i++) {
		const Npusan__Process *p = lr->processes[i];
		bool ours = p->job != NULL && strcmp(p->job, c->job) == 0;

		if (p->state != NULL && strcmp(p->state, "exited") != 0 &&
		    !ours)
			c->busy++;
		if (ours && p->run != NULL && c->run != NULL &&
		    strcmp(p->run, c->run) == 0 && p->has_lost)
			c->lost += p->lost;
	}
	done = lr->has_done && lr->done;
	npusan__from_daemon__free_unpacked(m, NULL);
	return done ? CLIENT_DONE : CLIENT_MORE;
}

/* Asks the daemon for c->busy and c->lost. A status. */
static int run_count(const struct client_opts *co, struct run_count *c)
{
	Npusan__ListRequest req = NPUSAN__LIST_REQUEST__INIT;
	Npusan__Query q = NPUSAN__QUERY__INIT;

	q.q_case = NPUSAN__QUERY__Q_LIST;
	q.list = &req;
	c->busy = 0;
	c->lost = 0;
	return client_query(co, RUN_CMD, &q, run_count_cb, c);
}

/* Stops the daemon we started, unless other jobs use it by now. */
static void run_release_daemon(struct run *r, const struct client_opts *co)
{
	struct run_count c = { .job = r->job };

	if (r->daemon_pid <= 0)
		return;
	if (run_count(co, &c) == CLI_OK && c.busy > 0) {
		fprintf(stderr, RUN_CMD ": the daemon started for this job "
				"(pid %d, %s) now watches other jobs too; it "
				"is left running\n",
			(int)r->daemon_pid, r->socket);
		return;
	}
	run_stop_daemon(r);
}

/* ---- the command --------------------------------------------------------- */

static int parse_opts(int argc, char **argv, struct client_opts *co,
		      struct run *r)
{
	static const struct option longopts[] = {
		CLI_LONGOPT_JOB,
		CLI_LONGOPT_OUTPUT,
		CLI_LONGOPT_PRINT_LIMIT,
		CLI_LONGOPT_OP,
		CLI_LONGOPT_EXCLUDE_OP,
		CLI_LONGOPT_SUPPRESSIONS,
		CLI_LONGOPT_GEN_SUPPRESSIONS,
		{ "json", no_argument, NULL, CLIENT_OPT_JSON },
		{ "error-exitcode", required_argument, NULL, 'x' },
		{ "allow-incomplete", no_argument, NULL, 'I' },
		CLIENT_LONGOPTS,
		{ NULL, 0, NULL, 0 },
	};
	struct cli_target t = { 0 };
	int c, status;

	opterr = 0;
	optind = 1;
	/* '+': CMD's own options are not ours. */
	while ((c = getopt_long(argc, argv, "+:h", longopts, NULL)) != -1) {
		switch (c) {
		case CLI_OPT_JOB:
			status = cli_target_option(RUN_CMD, c, optarg,
						   CLI_TARGET_NAMED, &t);
			if (status >= 0)
				return status;
			r->job = t.job;
			break;
		case CLIENT_OPT_JSON:
			r->json = true;
			break;
		case 'I':
			r->allow_incomplete = true;
			break;
		case 'x':
			status = client_parse_exitcode(RUN_CMD, optarg,
						       &r->error_exitcode);
			if (status >= 0)
				return status;
			break;
		case CLI_OPT_OUTPUT:
		case CLI_OPT_PRINT_LIMIT:
		case CLI_OPT_OP:
		case CLI_OPT_EXCLUDE_OP:
		case CLI_OPT_SUPPRESSIONS:
		case CLI_OPT_GEN_SUPPRESSIONS:
			status = cli_print_option(RUN_CMD, c, optarg, &r->pr);
			if (status >= 0)
				return status;
			break;
		default:
			status = client_option(RUN_CMD, c, run_usage, argv, co);
			if (status >= 0)
				return status;
		}
	}
	if (optind == argc) {
		fprintf(stderr, RUN_CMD ": what should run? Give -- CMD "
					"[ARGS...]\nTry '" RUN_CMD
					" --help'.\n");
		return CLI_USAGE;
	}
	r->argv = argv + optind;
	return -1;
}

/* The job's name: --job, else $NPUSAN_JOB, else CMD's and our pid. */
static void run_name_job(struct run *r)
{
	const char *env = getenv("NPUSAN_JOB");
	const char *base;

	if (r->job != NULL)
		return;
	if (env != NULL && env[0] != '\0') {
		r->job = env;
		return;
	}
	base = strrchr(r->argv[0], '/');
	base = base != NULL ? base + 1 : r->argv[0];
	snprintf(r->jobbuf, sizeof(r->jobbuf), "%.100s-%d", base,
		 (int)getpid());
	r->job = r->jobbuf;
}

/*
 * This run's id: $NPUSAN_RUN (a CI build's number, say), else when it
 * started (UTC) and npusanctl's pid. It tells this run's processes from
 * those of earlier runs under the same job name.
 */
static void run_name_run(struct run *r)
{
	const char *env = getenv("NPUSAN_RUN");
	time_t now = (time_t)(r->start_ms / 1000);
	struct tm tm;
	char when[32] = "";

	if (env != NULL && env[0] != '\0') {
		r->run = env;
		return;
	}
	if (gmtime_r(&now, &tm) != NULL)
		strftime(when, sizeof(when), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(r->runbuf, sizeof(r->runbuf), "%s-%d", when, (int)getpid());
	r->run = r->runbuf;
}

/*
 * The job's report, as jobreport_findings() prints it, on --output's file
 * when given, through --op, --exclude-op and --print-limit. When the
 * filters left out every finding, *verdict is what it would be without
 * them: incomplete when the run's processes lost operations or were not
 * stored, else clean. A status.
 */
static int run_report(struct run *r, const struct client_opts *co,
		      size_t unstored, enum jobreport_verdict *verdict)
{
	struct run_count c = { .job = r->job, .run = r->run };
	int status;

	status = jobreport_findings(co, RUN_CMD, r->job, r->run, r->start_ms,
				    unstored, r->json, &r->pr, verdict);
	cli_print_say(&r->pr);
	if (status != CLI_OK || *verdict != JOBREPORT_FINDINGS ||
	    r->pr.kept > 0)
		return status;
	status = run_count(co, &c);
	if (status == CLI_OK)
		*verdict = c.lost > 0 || unstored > 0 ? JOBREPORT_INCOMPLETE :
							JOBREPORT_CLEAN;
	return status;
}

static int run_main(struct run *r, struct client_opts *co)
{
	enum jobreport_verdict verdict = JOBREPORT_CLEAN;
	int status, cmd_status = 0, job_status;
	size_t unstored = 0;
	const char *env = getenv("NPUSAN_SOCKET");

	status = run_locate(r);
	if (status != CLI_OK)
		return status;
	run_set_signals(true);
	r->default_socket = co->socket == NULL && (env == NULL || !env[0]);
	status = client_socket_path(co, RUN_CMD, r->socket);
	if (status == CLI_OK)
		status = run_ensure_daemon(r);
	if (status != CLI_OK)
		return status;
	co->socket = r->socket;
	run_name_job(r);
	r->start_ms = client_now_ms();
	run_name_run(r);
	job_status = run_job(r, &cmd_status);
	/* CMD is over: its output stayed where it was, the report goes to
	 * --output's file. */
	status = cli_output_to(RUN_CMD, r->output_fd);
	r->output_fd = -1;
	if (job_status == CLI_OK && status >= 0)
		job_status = status;
	status = CLI_OK;
	/* Every process of the job is gone by now: wait until the daemon
	 * has stored each, so that its findings are all there. */
	if (job_status == CLI_OK)
		status = settle_wait(co, RUN_CMD, r->job, 0, r->start_ms,
				     RUN_SETTLE_MS, &unstored);
	if (job_status == CLI_OK && status == CLI_OK)
		status = run_report(r, co, unstored, &verdict);
	run_release_daemon(r, co);
	if (job_status != CLI_OK)
		return job_status;
	if (status != CLI_OK)
		return status;
	if (run_exit_status(cmd_status) != 0)
		return run_exit_status(cmd_status);
	return jobreport_status(verdict, r->error_exitcode,
				r->allow_incomplete);
}

int cli_run(int argc, char **argv)
{
	struct client_opts co;
	struct run r = { .error_exitcode = CLI_FINDINGS, .output_fd = -1 };
	int status;

	client_opts_init(&co);
	status = parse_opts(argc, argv, &co, &r);
	/* Before anything starts: a file that cannot be made or read stops
	 * here. */
	if (status < 0)
		status = cli_print_load(RUN_CMD, &r.pr);
	if (status < 0)
		status = cli_output_open(RUN_CMD, &r.pr, &r.output_fd);
	if (status >= 0) {
		cli_print_free(&r.pr);
		return status;
	}
	status = run_main(&r, &co);
	if (r.output_fd >= 0)
		close(r.output_fd);
	if (status == CLI_DAEMON)
		cli_output_discard(RUN_CMD, &r.pr);
	cli_print_free(&r.pr);
	return client_end_output(RUN_CMD, status);
}
