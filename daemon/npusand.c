/*
 * npusand.c - the npusan daemon: one per host (or per user), it registers
 * the agents of every training process, analyses what their rings carry,
 * and keeps the findings in SQLite for npusanctl.
 *
 * This file is the daemon's frame: the database's privacy and lock, the
 * listening socket it binds itself (config.c says where, sd.c takes
 * systemd's instead), the store, ingest and server, and signals as loop
 * events. Start-up is ordered so that READY=1 means what it says: the
 * socket is taken (a second daemon fails before it touches the database),
 * the database is locked and open, then the server listens.
 *
 * Ownership: everything the daemon holds lives in the one static `d`,
 * taken in npusand_start() and released, in reverse, by npusand_finish(),
 * which copes with a start that stopped half-way. Helpers return 0 (or a
 * descriptor) or a negative errno; main() turns those into exit statuses,
 * after the helper or main() has said on stderr what failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "config.h"
#include "ingest.h"
#include "log.h"
#include "metrics.h"
#include "paths.h"
#include "sd.h"
#include "server.h"
#include "store.h"
#include "suppress.h"

#ifndef NPUSAN_VERSION
#error "define NPUSAN_VERSION (the project version) when compiling npusand.c"
#endif

/* How often old exited processes are pruned (and once at start). */
#define PRUNE_PERIOD_MS (24u * 3600 * 1000)

/* ---- the database's privacy -------------------------------------------- */

/* Other users may create, rename or remove names in a directory of mode
 * `m`: write access without the sticky bit, which (as on /tmp) lets only
 * a file's owner rename or remove it. */
#define STATE_DIR_OPEN(m) \
	(((m) & (S_IWGRP | S_IWOTH)) != 0 && ((m) & S_ISVTX) == 0)

/*
 * Whether `path`, the database or a file SQLite or we keep beside it, is
 * private: missing, or a regular file of ours no other user may read or
 * write. 0; a negative errno after a message on stderr.
 */
static int npusand_state_file_private(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		fprintf(stderr, "npusand: cannot check %s: %s\n", path,
			strerror(errno));
		return -errno;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "npusand: %s is not a regular file\n", path);
		return -EINVAL;
	}
	if (st.st_uid != geteuid()) {
		fprintf(stderr, "npusand: %s belongs to uid %u, not to the "
				"daemon's (%u): another user could read or "
				"change every finding in it\n",
			path, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		fprintf(stderr, "npusand: other users may read or write %s "
				"(mode %04o), and with it every user's "
				"findings: chmod 600 it\n",
			path, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/* Whether the database's directory `dir` is ours (or root's) and no other
 * user may replace the files in it. 0; a negative errno after a message. */
static int npusand_state_dir_private(const char *dir)
{
	struct stat st;

	if (stat(dir, &st) < 0) {
		fprintf(stderr, "npusand: cannot check %s: %s\n", dir,
			strerror(errno));
		return -errno;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		fprintf(stderr, "npusand: the database's directory %s belongs "
				"to uid %u: it could replace the database; "
				"choose another --db\n",
			dir, (unsigned)st.st_uid);
		return -EPERM;
	}
	if (STATE_DIR_OPEN(st.st_mode)) {
		fprintf(stderr, "npusand: other users may write the "
				"database's directory %s (mode %04o) and "
				"replace its files: chmod 700 it, or choose "
				"another --db\n",
			dir, (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

/*
 * Refuses a database others could read or change (issue 12): the
 * database, its -wal, -shm and -journal and our .lock must be private
 * files of ours, and their directory ours (or root's) with no other user
 * able to replace them (not writable by others, or sticky as /tmp is). A
 * directory others may only list (a 0755 home) is fine: the names in it
 * say nothing, the files are closed. The daemon creates its own state
 * directory 0700 (config_resolve_paths()) and its files 0600
 * (npusand_state_open()), so this refuses only what someone else left.
 * 0; a negative errno after a message on stderr.
 */
static int npusand_state_private(const char *db)
{
	static const char *const beside[] = { "", "-wal", "-shm", "-journal",
					      ".lock" };
	char dir[PATH_MAX], path[PATH_MAX + 16];
	int err;

	paths_dir_of(db, dir, sizeof(dir));
	err = npusand_state_dir_private(dir);
	for (size_t i = 0; err == 0 && i < sizeof(beside) / sizeof(beside[0]);
	     i++) {
		snprintf(path, sizeof(path), "%s%s", db, beside[i]);
		err = npusand_state_file_private(path);
	}
	return err;
}

/*
 * store_open() with the umask closed to other users, whatever the
 * daemon's was: SQLite creates the database, its -wal and its -shm with
 * the process's umask (and later ones with the database's own mode).
 */
static int npusand_state_open(const struct store_opts *o, struct store **out,
			      char **errmsg)
{
	mode_t old = umask(0077);
	int err = store_open(o, out, errmsg);

	umask(old);
	return err;
}

/*
 * Takes `<db>.lock` for the daemon's lifetime: a second daemon on the same
 * database (through another socket) would mark the first one's processes
 * exited and write beside it. The fd (the caller closes it); a negative
 * errno after a message on stderr.
 */
static int npusand_lock_db(const char *db)
{
	char path[PATH_MAX + 8];
	int fd, err;

	snprintf(path, sizeof(path), "%s.lock", db);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		err = -errno;
		fprintf(stderr, "npusand: cannot open %s: %s\n", path,
			strerror(-err));
		return err;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		err = -errno;
		if (err == -EWOULDBLOCK)
			fprintf(stderr, "npusand: another npusand is using the "
					"database %s\n", db);
		else
			fprintf(stderr, "npusand: cannot lock %s: %s\n", path,
				strerror(-err));
		close(fd);
		return err;
	}
	return fd;
}

/* ---- the listening socket ---------------------------------------------- */

/*
 * Whether a daemon answers on `sa`: 1 when one does, 0 when the socket is
 * stale (nobody listens), a negative errno when we cannot tell.
 */
static int npusand_socket_live(const struct sockaddr_un *sa)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int r;

	if (fd < 0)
		return -errno;
	r = connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
	if (r == 0 || errno == EAGAIN || errno == EINPROGRESS)
		r = 1; /* EAGAIN: its backlog is full, but it is there */
	else if (errno == ECONNREFUSED || errno == ENOENT)
		r = 0;
	else
		r = -errno;
	close(fd);
	return r;
}

/*
 * Removes a stale socket at sa->sun_path, where nobody listens; refuses a
 * live one and anything not a socket. 0 (also when nothing is there); a
 * negative errno after a message on stderr.
 */
static int npusand_clear_stale(const struct sockaddr_un *sa)
{
	const char *path = sa->sun_path;
	struct stat st;
	int live;

	if (lstat(path, &st) < 0)
		return 0;
	if (!S_ISSOCK(st.st_mode)) {
		fprintf(stderr, "npusand: %s exists and is not a socket\n",
			path);
		return -EEXIST;
	}
	live = npusand_socket_live(sa);
	if (live > 0) {
		fprintf(stderr, "npusand: another npusand is already "
				"listening on %s\n", path);
		return -EADDRINUSE;
	}
	if (live < 0) {
		fprintf(stderr, "npusand: cannot tell whether a daemon listens "
				"on %s: %s\n", path, strerror(-live));
		return live;
	}
	if (unlink(path) < 0 && errno != ENOENT) {
		live = -errno;
		fprintf(stderr, "npusand: cannot remove the stale socket %s: "
				"%s\n", path, strerror(-live));
		return live;
	}
	return 0;
}

/* bind(2) with the socket born private: nobody connects before the
 * chmod in npusand_listen_bind() says so. 0; a negative errno after a
 * message. */
static int npusand_bind_private(int fd, const struct sockaddr_un *sa)
{
	mode_t old = umask(0177);
	int err = 0;

	if (bind(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0)
		err = -errno;
	umask(old);
	if (err == -EADDRINUSE)
		fprintf(stderr, "npusand: another npusand is already "
				"listening on %s\n", sa->sun_path);
	else if (err < 0)
		fprintf(stderr, "npusand: cannot bind %s: %s\n", sa->sun_path,
			strerror(-err));
	return err;
}

/*
 * Binds and listens on `path` with `mode`, replacing a stale socket. The
 * fd (the caller closes it) and the inode bound (*ino); a negative errno
 * after a message on stderr.
 */
static int npusand_listen_bind(const char *path, mode_t mode, ino_t *ino)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	int fd, err;

	memcpy(sa.sun_path, path, strlen(path) + 1);
	err = npusand_clear_stale(&sa);
	if (err < 0)
		return err;
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		err = -errno;
		fprintf(stderr, "npusand: socket: %s\n", strerror(-err));
		return err;
	}
	err = npusand_bind_private(fd, &sa);
	if (err < 0) {
		close(fd);
		return err;
	}
	if (chmod(path, mode) < 0 || listen(fd, SOMAXCONN) < 0 ||
	    lstat(path, &st) < 0) {
		err = -errno;
		fprintf(stderr, "npusand: cannot listen on %s: %s\n", path,
			strerror(-err));
		unlink(path);
		close(fd);
		return err;
	}
	*ino = st.st_ino;
	return fd;
}

/* ---- the daemon -------------------------------------------------------- */

static struct {
	struct config cfg;
	struct config_paths paths;
	struct suppress_set *supp; /* --suppressions; NULL: none */
	unsigned max_conns;  /* npusand_raise_nofile() */
	int listen_fd;       /* -1: none, or the server's now */
	bool bound;          /* we bound paths.socket (not systemd) */
	ino_t ino;           /* the socket's inode, when bound */
	int lock_fd;         /* <db>.lock, held; -1: none */
	uv_loop_t loop;
	bool loop_open;      /* uv_loop_init() done: close it */
	struct store *store;
	struct ingest *ingest;
	struct server *server;
	struct metrics *metrics;
	uv_async_t commit;
	uv_signal_t sigterm, sigint, sighup;
	uv_timer_t prune;
	bool stopping;
} d = { .listen_fd = -1, .lock_fd = -1 };

/* The store's writer thread committed (store_opts.commit_cb). */
static void npusand_commit_cb(void *arg)
{
	uv_async_send(arg);
}

static void npusand_commit_async_cb(uv_async_t *a)
{
	(void)a;
	server_on_commit(d.server);
}

static int64_t npusand_real_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void npusand_prune_cb(uv_timer_t *t)
{
	int n;

	(void)t;
	if (d.cfg.retain_days == 0)
		return;
	/* Queued: the loop never waits for the disk. The store logs what it
	 * pruned. */
	n = store_prune_async(d.store, npusand_real_ms());
	if (n < 0)
		log_warn("pruning failed: %s", strerror(-n));
}

static void npusand_stop(const char *why)
{
	if (d.stopping) {
		log_info("%s: already stopping", why);
		return;
	}
	d.stopping = true;
	log_info("%s: draining and stopping", why);
	sd_notify_send("STOPPING=1");
	server_stop(d.server);
	uv_timer_stop(&d.prune);
	/* The signal handles stay, unreferenced, until the very end: a second
	 * signal while ingest drains is noted, not fatal. */
	uv_unref((uv_handle_t *)&d.sigterm);
	uv_unref((uv_handle_t *)&d.sigint);
	uv_unref((uv_handle_t *)&d.sighup);
}

static void npusand_signal_cb(uv_signal_t *h, int signum)
{
	(void)h;
	if (signum == SIGHUP) {
		int err = log_reopen();

		if (err < 0)
			log_error("cannot reopen the log: %s", strerror(-err));
		else
			log_info("SIGHUP: log reopened");
		return;
	}
	npusand_stop(signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* Raises the soft descriptor limit to the hard one; the connection cap. */
static unsigned npusand_raise_nofile(void)
{
	struct rlimit rl;
	rlim_t n;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return SERVER_MAX_CONNS;
	if (rl.rlim_cur < rl.rlim_max) {
		rlim_t want = rl.rlim_max;

		rl.rlim_cur = want;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	/* A connection, and an agent's ring, take a descriptor each. */
	n = rl.rlim_cur > 128 ? (rl.rlim_cur - 64) / 2 : 32;
	return n < SERVER_MAX_CONNS ? (unsigned)n : SERVER_MAX_CONNS;
}

static void npusand_close_walk_cb(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

/* ---- start and finish --------------------------------------------------- */

/*
 * The listening socket into d.listen_fd: systemd's when it passed one,
 * else bound at the configured path (d.bound). d.paths resolved either
 * way. 0; a negative errno after a message on stderr.
 */
static int npusand_listen(void)
{
	char activated[PATHS_SOCKET_MAX + 1] = "";
	int fd = sd_listen_take(activated, sizeof(activated));
	int err;

	if (fd == -ENOTSOCK)
		fprintf(stderr, "npusand: the socket systemd passed is not a "
				"listening Unix stream socket\n");
	else if (fd < 0 && fd != -ENOENT)
		fprintf(stderr, "npusand: cannot use the socket systemd "
				"passed: %s\n", strerror(-fd));
	if (fd < 0 && fd != -ENOENT)
		return fd;
	d.listen_fd = fd >= 0 ? fd : -1;
	err = config_resolve_paths(&d.cfg, fd >= 0, &d.paths);
	if (err < 0)
		return err;
	if (activated[0] != '\0')
		snprintf(d.paths.socket, sizeof(d.paths.socket), "%s",
			 activated);
	if (fd >= 0)
		return 0;
	fd = npusand_listen_bind(d.paths.socket, d.paths.system ? 0666 : 0600,
				 &d.ino);
	if (fd < 0)
		return fd;
	d.listen_fd = fd;
	d.bound = true;
	return 0;
}

/*
 * The database checked, locked and open (d.lock_fd, d.store), with the
 * loop and its commit handle the store signals through. 0; a negative
 * errno after a message on stderr or in the log.
 */
static int npusand_open_state(void)
{
	struct store_opts so = { 0 };
	char *errmsg = NULL;
	int err = npusand_state_private(d.paths.db);

	if (err < 0)
		return err;
	err = npusand_lock_db(d.paths.db);
	if (err < 0)
		return err;
	d.lock_fd = err;
	err = uv_loop_init(&d.loop);
	if (err < 0) {
		fprintf(stderr, "npusand: cannot start the event loop\n");
		return err;
	}
	d.loop_open = true;
	uv_async_init(&d.loop, &d.commit, npusand_commit_async_cb);
	uv_unref((uv_handle_t *)&d.commit); /* it must not keep the loop up */
	so.path = d.paths.db;
	so.retain_days = d.cfg.retain_days;
	so.commit_cb = npusand_commit_cb;
	so.commit_arg = &d.commit;
	err = npusand_state_open(&so, &d.store, &errmsg);
	if (err < 0) {
		log_error("cannot open the database %s: %s", d.paths.db,
			  errmsg ? errmsg : strerror(-err));
		free(errmsg);
	}
	return err;
}

/* The metrics, when asked for. 0; a negative errno, logged by
 * metrics_start(). */
static int npusand_start_metrics(void)
{
	struct metrics_opts mo = { 0 };

	if (d.cfg.metrics_listen == NULL && d.cfg.metrics_textfile == NULL)
		return 0;
	mo.loop = &d.loop;
	mo.store = d.store;
	mo.ingest = d.ingest;
	mo.listen = d.cfg.metrics_listen;
	mo.textfile = d.cfg.metrics_textfile;
	mo.version = NPUSAN_VERSION;
	mo.start_ns = uv_hrtime();
	return metrics_start(&mo, &d.metrics);
}

/* The server, on d.listen_fd, which becomes its own. 0; a negative errno,
 * logged. */
static int npusand_start_server(void)
{
	struct server_opts sv = { 0 };
	int err;

	sv.loop = &d.loop;
	sv.listen_fd = d.listen_fd;
	sv.store = d.store;
	sv.ingest = d.ingest;
	sv.max_conns = d.max_conns;
	sv.max_agents_per_uid = d.cfg.max_agents_per_user;
	sv.max_queries_per_uid = d.cfg.max_queries_per_user;
	sv.start_ns = uv_hrtime();
	err = server_start(&sv, &d.server);
	if (err < 0) {
		log_error("cannot serve the socket: %s", uv_strerror(err));
		return err;
	}
	d.listen_fd = -1; /* the server's */
	return 0;
}

/* The prune timer and the signals, as loop events. */
static void npusand_arm_loop(void)
{
	uv_timer_init(&d.loop, &d.prune);
	uv_unref((uv_handle_t *)&d.prune);
	uv_timer_start(&d.prune, npusand_prune_cb, 0, PRUNE_PERIOD_MS);
	uv_signal_init(&d.loop, &d.sigterm);
	uv_signal_init(&d.loop, &d.sigint);
	uv_signal_init(&d.loop, &d.sighup);
	uv_signal_start(&d.sigterm, npusand_signal_cb, SIGTERM);
	uv_signal_start(&d.sigint, npusand_signal_cb, SIGINT);
	uv_signal_start(&d.sighup, npusand_signal_cb, SIGHUP);
}

/* One log line, and READY=1 to the service manager. */
static void npusand_announce(void)
{
	char status[PATHS_SOCKET_MAX + 64];
	int err;

	log_info("npusand %s listening on %s%s, database %s, up to %u "
		 "connections", NPUSAN_VERSION, d.paths.socket,
		 d.bound ? "" : " (from systemd)", d.paths.db, d.max_conns);
	snprintf(status, sizeof(status), "READY=1\nSTATUS=listening on %s\n"
		 "MAINPID=%d", d.paths.socket, (int)getpid());
	err = sd_notify_send(status);
	if (err < 0)
		log_warn("cannot notify the service manager: %s",
			 strerror(-err));
}

/*
 * Everything in order: socket, database, drain threads, metrics, server,
 * then READY=1. 0; a negative errno after a message (what was taken is
 * npusand_finish()'s to release).
 */
static int npusand_start(void)
{
	int err = npusand_listen();

	if (err == 0)
		err = npusand_open_state();
	if (err == 0) {
		struct ingest_opts io = { .store = d.store,
					  .threads = d.cfg.threads,
					  .supp = d.supp };

		err = ingest_new(&io, &d.ingest);
		if (err < 0)
			log_error("cannot start draining: %s", strerror(-err));
	}
	if (err == 0)
		err = npusand_start_metrics();
	if (err == 0)
		err = npusand_start_server();
	if (err < 0)
		return err;
	npusand_arm_loop();
	npusand_announce();
	return 0;
}

/* Releases what npusand_start() took, in reverse, however far it got. */
static void npusand_finish(void)
{
	/* The server's handles are closed; the rings drain, the store
	 * commits, and only then may the async handle go. */
	server_free(d.server);
	d.server = NULL;
	/* Its last textfile before ingest and the store go. */
	metrics_stop(d.metrics);
	d.metrics = NULL;
	ingest_free(d.ingest);
	store_close(d.store);
	if (d.loop_open) {
		uv_walk(&d.loop, npusand_close_walk_cb, NULL);
		uv_run(&d.loop, UV_RUN_DEFAULT);
		if (uv_loop_close(&d.loop) != 0)
			log_error("event loop closed with handles open");
	}
	if (d.lock_fd >= 0)
		close(d.lock_fd);
	if (d.listen_fd >= 0)
		close(d.listen_fd);
	if (d.bound) {
		struct stat st;

		/* Ours still (not a successor's): remove it. */
		if (lstat(d.paths.socket, &st) == 0 && st.st_ino == d.ino)
			unlink(d.paths.socket);
	}
}

/*
 * Reads --suppressions' file, before anything starts: a file with a
 * mistake in it stops the daemon, which would otherwise report what the
 * user meant to silence. 0; -EINVAL after saying what is wrong.
 */
static int npusand_load_suppressions(void)
{
	char why[SUPPRESS_ERR_MAX];

	if (d.cfg.suppressions == NULL)
		return 0;
	if (suppress_load(d.cfg.suppressions, &d.supp, why) < 0) {
		log_error("--suppressions: %s", why);
		return -EINVAL;
	}
	log_info("%zu suppression%s from %s", suppress_entries(d.supp),
		 suppress_entries(d.supp) == 1 ? "" : "s",
		 d.cfg.suppressions);
	return 0;
}

int main(int argc, char **argv)
{
	int err;

	/* Before any thread: a peer that goes away never kills us. */
	signal(SIGPIPE, SIG_IGN);
	if (config_parse(argc, argv, &d.cfg) < 0)
		return CONFIG_EXIT_USAGE;
	if (d.cfg.help) {
		config_print_help();
		return 0;
	}
	if (d.cfg.version) {
		printf("npusand %s\n", NPUSAN_VERSION);
		return 0;
	}
	err = log_open((enum log_level)d.cfg.log_level, d.cfg.log_file);
	if (err < 0) {
		fprintf(stderr, "npusand: cannot open the log %s: %s\n",
			d.cfg.log_file, strerror(-err));
		return CONFIG_EXIT_START;
	}
	if (npusand_load_suppressions() < 0) {
		log_close();
		return CONFIG_EXIT_USAGE;
	}
	sd_notify_init();
	d.max_conns = npusand_raise_nofile();
	err = npusand_start();
	if (err == 0)
		uv_run(&d.loop, UV_RUN_DEFAULT);
	npusand_finish();
	suppress_free(d.supp);
	if (err == 0)
		log_info("stopped");
	log_close();
	return err == 0 ? 0 : CONFIG_EXIT_START;
}
