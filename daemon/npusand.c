/*
 * npusand.c - the npusan daemon: one per host (or per user), it registers
 * the agents of every training process, analyses what their rings carry,
 * and keeps the findings in SQLite for npusanctl.
 *
 * This file is the daemon's frame: the configuration table, where the
 * socket and the database live, the listening socket (systemd's or our
 * own), the store, ingest and server, signals as loop events and
 * sd_notify. Start-up is ordered so that READY=1 means what it says: the
 * socket is taken (a second daemon fails before it touches the database),
 * the database is locked and open, then the server listens.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
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

#include "ingest.h"
#include "log.h"
#include "metrics.h"
#include "paths.h"
#include "server.h"
#include "store.h"

#ifndef NPUSAN_VERSION
#error "define NPUSAN_VERSION (the project version) when compiling npusand.c"
#endif

/* Exit statuses, as --help documents them. */
#define EXIT_START 1 /* it could not start: socket, database, ... */
#define EXIT_USAGE 2

/* How often old exited processes are pruned (and once at start). */
#define PRUNE_PERIOD_MS (24u * 3600 * 1000)

/* The descriptor systemd passes first (sd_listen_fds(3)). */
#define LISTEN_FDS_START 3

/* ---- configuration ----------------------------------------------------- */

struct cfg {
	char *socket;
	char *db;
	unsigned retain_days;
	unsigned threads;
	unsigned log_level; /* enum log_level */
	char *log_file;
	char *metrics_listen;
	char *metrics_textfile;
	unsigned max_agents_per_user;
	unsigned max_queries_per_user;
	unsigned system;
	unsigned help;
	unsigned version;
};

enum opt_type { OPT_PATH, OPT_UINT, OPT_LEVEL, OPT_FLAG, OPT_ADDR };

/* One option: the table below feeds parsing, defaults, checks and --help. */
struct opt {
	const char *name;
	char short_name; /* 0: none */
	enum opt_type type;
	const char *arg;      /* the argument's name in --help */
	unsigned min, max;    /* OPT_UINT */
	const char *def;      /* parsed like an argument; NULL: none */
	size_t off;           /* in struct cfg */
	const char *help;
};

/* A number's digits, for an option's default. */
#define NPUSAN_STR_(x) #x
#define NPUSAN_STR(x) NPUSAN_STR_(x)

static const struct opt opts[] = {
	{ "socket", 0, OPT_PATH, "PATH", 0, 0, NULL, offsetof(struct cfg, socket),
	  "the Unix socket to listen on, unless systemd passes one; "
	  "default $NPUSAN_SOCKET, else " PATHS_SYSTEM_SOCKET " as root or "
	  "with --system, else $XDG_RUNTIME_DIR/npusan/" PATHS_SOCKET_NAME
	  ", else /tmp/npusan-UID/" PATHS_SOCKET_NAME " (a directory of "
	  "mode 0700 that must be the user's)" },
	{ "db", 0, OPT_PATH, "PATH", 0, 0, NULL, offsetof(struct cfg, db),
	  "the SQLite database; default $NPUSAN_DB, else " PATHS_SYSTEM_DB
	  " as root or with --system, else $XDG_STATE_HOME/npusan/"
	  PATHS_DB_NAME ", else ~/.local/state/npusan/" PATHS_DB_NAME },
	{ "retain-days", 0, OPT_UINT, "N", 0, 36500, "30",
	  offsetof(struct cfg, retain_days),
	  "forget exited processes and their findings N days after their "
	  "last activity (checked at start and daily); 0 keeps them" },
	{ "threads", 0, OPT_UINT, "N", 0, 256, "0", offsetof(struct cfg, threads),
	  "threads draining the agents' rings; 0: one per CPU up to 3 "
	  "CPUs, then one per two" },
	{ "log-level", 0, OPT_LEVEL, "LEVEL", 0, 0, "info",
	  offsetof(struct cfg, log_level),
	  "error, warn, info or debug" },
	{ "log-file", 0, OPT_PATH, "PATH", 0, 0, NULL,
	  offsetof(struct cfg, log_file),
	  "log to PATH, reopened on SIGHUP, instead of stderr" },
	{ "metrics-listen", 0, OPT_ADDR, "ADDR:PORT", 0, 0, NULL,
	  offsetof(struct cfg, metrics_listen),
	  "serve Prometheus metrics on http://ADDR:PORT/metrics, a numeric "
	  "address: 127.0.0.1:9464, or [::1]:9464 for IPv6" },
	{ "metrics-textfile", 0, OPT_PATH, "PATH", 0, 0, NULL,
	  offsetof(struct cfg, metrics_textfile),
	  "write the same metrics to PATH every few seconds and at exit, "
	  "atomically, for node_exporter's textfile collector (PATH should "
	  "end in .prom)" },
	{ "max-agents-per-user", 0, OPT_UINT, "N", 1, 1000000,
	  NPUSAN_STR(SERVER_AGENTS_PER_UID),
	  offsetof(struct cfg, max_agents_per_user),
	  "agents (processes) one user other than root may have connected at "
	  "once; more are refused, and logged" },
	{ "max-queries-per-user", 0, OPT_UINT, "N", 1, 1000000,
	  NPUSAN_STR(SERVER_QUERIES_PER_UID),
	  offsetof(struct cfg, max_queries_per_user),
	  "npusanctl connections one user other than root may have open at "
	  "once; more are refused, and logged" },
	{ "system", 0, OPT_FLAG, NULL, 0, 0, NULL, offsetof(struct cfg, system),
	  "use the system service's default paths even when not root" },
	{ "version", 0, OPT_FLAG, NULL, 0, 0, NULL,
	  offsetof(struct cfg, version), "print the version and exit" },
	{ "help", 'h', OPT_FLAG, NULL, 0, 0, NULL, offsetof(struct cfg, help),
	  "print this help and exit" },
};

#define NOPTS (sizeof(opts) / sizeof(opts[0]))

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("npusand: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'npusand --help'.\n", stderr);
	exit(EXIT_USAGE);
}

/* Sets option `o` of `c` from `v` (an argument or the default). */
static void opt_set(const struct opt *o, struct cfg *c, const char *v)
{
	char *field = (char *)c + o->off, *end;
	unsigned long long n;
	enum log_level l;

	switch (o->type) {
	case OPT_PATH:
		if (v[0] == '\0')
			usage_error("--%s: an empty path", o->name);
		*(char **)(void *)field = (char *)v;
		break;
	case OPT_UINT:
		errno = 0;
		n = strtoull(v, &end, 10);
		if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0 ||
		    n < o->min || n > o->max)
			usage_error("--%s: '%s' is not a number from %u to %u",
				    o->name, v, o->min, o->max);
		*(unsigned *)(void *)field = (unsigned)n;
		break;
	case OPT_LEVEL:
		if (log_level_parse(v, &l) < 0)
			usage_error("--%s: '%s' is not error, warn, info or "
				    "debug", o->name, v);
		*(unsigned *)(void *)field = (unsigned)l;
		break;
	case OPT_FLAG:
		*(unsigned *)(void *)field = 1;
		break;
	case OPT_ADDR: {
		struct sockaddr_storage sa;
		socklen_t len;

		if (metrics_parse_listen(v, &sa, &len) < 0)
			usage_error("--%s: '%s' is not ADDR:PORT or "
				    "[ADDR6]:PORT with a numeric address",
				    o->name, v);
		*(char **)(void *)field = (char *)v;
		break;
	}
	}
}

/* Prints `text` from column `col` on, in lines of at most `width`. */
static void print_wrapped(const char *text, int col, int width)
{
	const char *p = text;

	while (*p != '\0') {
		int room = width - col, n = (int)strlen(p);

		if (n > room) {
			n = room;
			while (n > 0 && p[n] != ' ')
				n--;
			if (n == 0)
				n = room;
		}
		printf(" %.*s\n", n, p);
		p += n;
		while (*p == ' ')
			p++;
		if (*p != '\0')
			printf("%*s", col - 1, "");
	}
}

static void print_help(void)
{
	printf("Usage: npusand [OPTION]...\n"
	       "The npusan daemon: registers the agents of the processes on "
	       "this host,\nanalyses their stream operations and keeps the "
	       "findings for npusanctl.\n\n");
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *o = &opts[i];
		char left[64], text[512];

		if (o->short_name)
			snprintf(left, sizeof(left), "-%c, --%s%s%s",
				 o->short_name, o->name, o->arg ? " " : "",
				 o->arg ? o->arg : "");
		else
			snprintf(left, sizeof(left), "    --%s%s%s", o->name,
				 o->arg ? " " : "", o->arg ? o->arg : "");
		snprintf(text, sizeof(text), "%s%s%s%s", o->help,
			 o->def != NULL ? " (default " : "",
			 o->def != NULL ? o->def : "", o->def != NULL ? ")" : "");
		if (strlen(left) > 24) /* its help on a line of its own */
			printf("  %s\n%26s", left, "");
		else
			printf("  %-24s", left);
		print_wrapped(text, 27, 79);
	}
	printf("\nSignals: SIGTERM or SIGINT drain every ring, commit and exit;"
	       "\nSIGHUP reopens the log file.\n"
	       "\nThe system socket has mode 0666: any user may register its "
	       "own processes\nand query its own findings; the daemon checks "
	       "who is asking with SO_PEERCRED.\nA user's socket has mode "
	       "0600.\n"
	       "\nExit status: 0 after SIGTERM or SIGINT; %d when it cannot "
	       "start (the\nsocket is taken, the database is unusable); %d on "
	       "a usage error.\n", EXIT_START, EXIT_USAGE);
}

static void parse_args(int argc, char **argv, struct cfg *c)
{
	struct option lo[NOPTS + 1];
	char shorts[2 * NOPTS + 2] = ":";
	size_t ns = 1;
	int ch, idx;

	memset(c, 0, sizeof(*c));
	for (size_t i = 0; i < NOPTS; i++) {
		lo[i] = (struct option){ opts[i].name,
					 opts[i].type == OPT_FLAG ?
						 no_argument : required_argument,
					 NULL, 256 + (int)i };
		if (opts[i].short_name) {
			shorts[ns++] = opts[i].short_name;
			if (opts[i].type != OPT_FLAG)
				shorts[ns++] = ':';
		}
		if (opts[i].def != NULL)
			opt_set(&opts[i], c, opts[i].def);
	}
	shorts[ns] = '\0';
	memset(&lo[NOPTS], 0, sizeof(lo[NOPTS]));
	opterr = 0;
	while ((ch = getopt_long(argc, argv, shorts, lo, &idx)) != -1) {
		const struct opt *o = NULL;

		if (ch >= 256 && ch < 256 + (int)NOPTS) {
			o = &opts[ch - 256];
		} else if (ch == ':') {
			usage_error("%s needs an argument", argv[optind - 1]);
		} else if (ch != '?') {
			for (size_t i = 0; i < NOPTS; i++)
				if (opts[i].short_name == ch)
					o = &opts[i];
		}
		if (o == NULL)
			usage_error("unknown option '%s'", argv[optind - 1]);
		opt_set(o, c, optarg);
	}
	if (optind < argc)
		usage_error("unexpected argument '%s'", argv[optind]);
}

/* ---- paths ------------------------------------------------------------- */

/* Creates `dir` and its missing parents with `mode`. 0 or -errno. */
static int mkdir_p(const char *dir, mode_t mode)
{
	char buf[PATH_MAX];
	size_t len = strlen(dir);

	if (len == 0 || len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, dir, len + 1);
	for (char *p = buf + 1; ; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char saved = *p;

		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = saved;
		if (saved == '\0')
			break;
	}
	return 0;
}

/* The directory part of `path` into `buf`. */
static void dir_of(const char *path, char *buf, size_t len)
{
	const char *slash = strrchr(path, '/');

	if (slash == NULL)
		snprintf(buf, len, ".");
	else if (slash == path)
		snprintf(buf, len, "/");
	else
		snprintf(buf, len, "%.*s", (int)(slash - path), path);
}

struct paths {
	bool system;
	char socket[PATHS_SOCKET_MAX + 1];
	char db[PATH_MAX];
};

/* The socket and the database (as --help says), their directories
 * created. 0, or a message on stderr and EXIT_START. */
static int resolve_paths(const struct cfg *c, bool activated, struct paths *p)
{
	const char *env = getenv("NPUSAN_SOCKET"), *db;
	unsigned uid = (unsigned)getuid();
	mode_t dmode;
	char dir[PATH_MAX];
	int err;

	p->system = c->system || geteuid() == 0;
	dmode = p->system ? 0755 : 0700;
	if (c->socket != NULL || (env != NULL && env[0] != '\0')) {
		const char *s = c->socket ? c->socket : env;

		if (strlen(s) > PATHS_SOCKET_MAX) {
			fprintf(stderr, "npusand: socket path too long (at "
					"most %d bytes): %s\n",
				PATHS_SOCKET_MAX, s);
			return EXIT_START;
		}
		strcpy(p->socket, s);
		dir_of(p->socket, dir, sizeof(dir));
	} else if (p->system) {
		strcpy(p->socket, PATHS_SYSTEM_SOCKET);
		strcpy(dir, PATHS_SYSTEM_RUN_DIR);
	} else {
		err = paths_user_run_dir(getenv("XDG_RUNTIME_DIR"), uid, dir,
					 sizeof(dir));
		if (err < 0) {
			fprintf(stderr, "npusand: $XDG_RUNTIME_DIR is too long "
					"for a socket path; use --socket\n");
			return EXIT_START;
		}
		/* paths_user_run_dir() checked that the socket fits. */
		if (strlen(dir) + sizeof("/" PATHS_SOCKET_NAME) >
		    sizeof(p->socket))
			return EXIT_START;
		strcpy(p->socket, dir);
		strcat(p->socket, "/" PATHS_SOCKET_NAME);
	}
	/* With socket activation systemd made the socket and its directory. */
	if (!activated) {
		err = mkdir_p(dir, dmode);
		if (err < 0) {
			fprintf(stderr, "npusand: cannot create %s: %s\n", dir,
				strerror(-err));
			return EXIT_START;
		}
		if (!p->system && c->socket == NULL &&
		    (env == NULL || env[0] == '\0') &&
		    !paths_private_dir(dir, uid)) {
			fprintf(stderr, "npusand: %s is not a directory of "
					"yours that only you may use; remove "
					"it or use --socket\n", dir);
			return EXIT_START;
		}
	}

	db = c->db != NULL ? c->db : getenv("NPUSAN_DB");
	if (db != NULL && db[0] != '\0') {
		if (strlen(db) >= sizeof(p->db)) {
			fprintf(stderr, "npusand: database path too long\n");
			return EXIT_START;
		}
		strcpy(p->db, db);
		dir_of(p->db, dir, sizeof(dir));
	} else if (p->system) {
		strcpy(p->db, PATHS_SYSTEM_DB);
		strcpy(dir, PATHS_SYSTEM_STATE_DIR);
	} else {
		const char *home = getenv("HOME");
		struct passwd *pw;

		if ((home == NULL || home[0] != '/') &&
		    (pw = getpwuid(getuid())) != NULL)
			home = pw->pw_dir;
		err = paths_user_state_dir(getenv("XDG_STATE_HOME"), home, dir,
					   sizeof(dir) - sizeof(PATHS_DB_NAME));
		if (err < 0) {
			fprintf(stderr, "npusand: no $XDG_STATE_HOME or home "
					"directory for the database; use "
					"--db\n");
			return EXIT_START;
		}
		/* Fits: dir left room for the name above. */
		if (snprintf(p->db, sizeof(p->db), "%s/%s", dir,
			     PATHS_DB_NAME) >= (int)sizeof(p->db))
			return EXIT_START;
	}
	/* Private whoever runs it, whatever the umask (state_private()). */
	err = mkdir_p(dir, 0700);
	if (err < 0) {
		fprintf(stderr, "npusand: cannot create %s: %s\n", dir,
			strerror(-err));
		return EXIT_START;
	}
	return 0;
}

/* ---- the database's privacy -------------------------------------------- */

/* Other users may create, rename or remove names in a directory of mode
 * `m`: write access without the sticky bit, which (as on /tmp) lets only
 * a file's owner rename or remove it. */
#define STATE_DIR_OPEN(m) \
	(((m) & (S_IWGRP | S_IWOTH)) != 0 && ((m) & S_ISVTX) == 0)

/*
 * Whether `path`, the database or a file SQLite or we keep beside it, is
 * private: missing, or a regular file of ours no other user may read or
 * write. 0, or a message on stderr and EXIT_START.
 */
static int state_file_private(const char *path)
{
	struct stat st;

	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return 0;
		fprintf(stderr, "npusand: cannot check %s: %s\n", path,
			strerror(errno));
		return EXIT_START;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "npusand: %s is not a regular file\n", path);
		return EXIT_START;
	}
	if (st.st_uid != geteuid()) {
		fprintf(stderr, "npusand: %s belongs to uid %u, not to the "
				"daemon's (%u): another user could read or "
				"change every finding in it\n",
			path, (unsigned)st.st_uid, (unsigned)geteuid());
		return EXIT_START;
	}
	if (st.st_mode & (S_IRWXG | S_IRWXO)) {
		fprintf(stderr, "npusand: other users may read or write %s "
				"(mode %04o), and with it every user's "
				"findings: chmod 600 it\n",
			path, (unsigned)(st.st_mode & 07777));
		return EXIT_START;
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
 * directory 0700 (resolve_paths()) and its files 0600 (state_open()), so
 * this refuses only what someone else left. 0, or a message and
 * EXIT_START.
 */
static int state_private(const char *db)
{
	static const char *const beside[] = { "", "-wal", "-shm", "-journal",
					      ".lock" };
	char dir[PATH_MAX], path[PATH_MAX + 16];
	struct stat st;
	int rc;

	dir_of(db, dir, sizeof(dir));
	if (stat(dir, &st) < 0) {
		fprintf(stderr, "npusand: cannot check %s: %s\n", dir,
			strerror(errno));
		return EXIT_START;
	}
	if (st.st_uid != geteuid() && st.st_uid != 0) {
		fprintf(stderr, "npusand: the database's directory %s belongs "
				"to uid %u: it could replace the database; "
				"choose another --db\n",
			dir, (unsigned)st.st_uid);
		return EXIT_START;
	}
	if (STATE_DIR_OPEN(st.st_mode)) {
		fprintf(stderr, "npusand: other users may write the "
				"database's directory %s (mode %04o) and "
				"replace its files: chmod 700 it, or choose "
				"another --db\n",
			dir, (unsigned)(st.st_mode & 07777));
		return EXIT_START;
	}
	for (size_t i = 0; i < sizeof(beside) / sizeof(beside[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", db, beside[i]);
		rc = state_file_private(path);
		if (rc != 0)
			return rc;
	}
	return 0;
}

/*
 * store_open() with the umask closed to other users, whatever the
 * daemon's was: SQLite creates the database, its -wal and its -shm with
 * the process's umask (and later ones with the database's own mode).
 */
static int state_open(const struct store_opts *o, struct store **out,
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
 * exited and write beside it. The fd, or -1 with a message on stderr.
 */
static int lock_db(const char *db)
{
	char path[PATH_MAX + 8];
	int fd;

	snprintf(path, sizeof(path), "%s.lock", db);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		fprintf(stderr, "npusand: cannot open %s: %s\n", path,
			strerror(errno));
		return -1;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		if (errno == EWOULDBLOCK)
			fprintf(stderr, "npusand: another npusand is using the "
					"database %s\n", db);
		else
			fprintf(stderr, "npusand: cannot lock %s: %s\n", path,
				strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* ---- the listening socket ---------------------------------------------- */

/*
 * The socket systemd passed (sd_listen_fds(3)): LISTEN_PID is ours and
 * LISTEN_FDS at least 1. The fd; -ENOENT when none was passed; -EINVAL
 * (with a message) when fd 3 is not a listening Unix stream socket.
 */
static int listen_activated(char *path, size_t path_len)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);
	int type = 0, acc = 0;
	socklen_t tl = sizeof(type), al = sizeof(acc);
	char *end;
	long n;

	if (pid == NULL || fds == NULL)
		return -ENOENT;
	errno = 0;
	if (strtol(pid, &end, 10) != (long)getpid() || *end != '\0')
		return -ENOENT; /* meant for another process */
	n = strtol(fds, &end, 10);
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	unsetenv("LISTEN_FDNAMES");
	if (*end != '\0' || n < 1 || n > 64)
		return -ENOENT;
	for (long i = 1; i < n; i++) {
		log_warn("ignoring socket %ld that systemd passed: npusand "
			 "listens on one", LISTEN_FDS_START + i);
		close((int)(LISTEN_FDS_START + i));
	}
	if (getsockopt(LISTEN_FDS_START, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 ||
	    getsockopt(LISTEN_FDS_START, SOL_SOCKET, SO_ACCEPTCONN, &acc,
		       &al) < 0 ||
	    getsockname(LISTEN_FDS_START, (struct sockaddr *)&sa, &len) < 0 ||
	    sa.sun_family != AF_UNIX || type != SOCK_STREAM || !acc) {
		fprintf(stderr, "npusand: the socket systemd passed is not a "
				"listening Unix stream socket\n");
		return -EINVAL;
	}
	if (len > offsetof(struct sockaddr_un, sun_path) && sa.sun_path[0])
		snprintf(path, path_len, "%.*s",
			 (int)(len - offsetof(struct sockaddr_un, sun_path)),
			 sa.sun_path);
	if (fcntl(LISTEN_FDS_START, F_SETFD, FD_CLOEXEC) < 0 ||
	    fcntl(LISTEN_FDS_START, F_SETFL,
		  fcntl(LISTEN_FDS_START, F_GETFL) | O_NONBLOCK) < 0)
		return -errno;
	return LISTEN_FDS_START;
}

/*
 * Whether a daemon answers on `path`: 1 when one does, 0 when the socket is
 * stale (nobody listens), -errno when we cannot tell.
 */
static int socket_live(const struct sockaddr_un *sa)
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
 * Binds and listens on `path` with `mode`, replacing a stale socket. The
 * fd and the inode bound (*ino), or -1 with a message on stderr.
 */
static int listen_bind(const char *path, mode_t mode, ino_t *ino)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct stat st;
	mode_t old;
	int fd, live;

	memcpy(sa.sun_path, path, strlen(path) + 1);
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			fprintf(stderr, "npusand: %s exists and is not a "
					"socket\n", path);
			return -1;
		}
		live = socket_live(&sa);
		if (live > 0) {
			fprintf(stderr, "npusand: another npusand is already "
					"listening on %s\n", path);
			return -1;
		}
		if (live < 0) {
			fprintf(stderr, "npusand: cannot tell whether a daemon "
					"listens on %s: %s\n", path,
				strerror(-live));
			return -1;
		}
		if (unlink(path) < 0 && errno != ENOENT) {
			fprintf(stderr, "npusand: cannot remove the stale "
					"socket %s: %s\n", path,
				strerror(errno));
			return -1;
		}
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		fprintf(stderr, "npusand: socket: %s\n", strerror(errno));
		return -1;
	}
	/* Born private: nobody connects before the chmod below says so. */
	old = umask(0177);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = errno;

		umask(old);
		if (e == EADDRINUSE)
			fprintf(stderr, "npusand: another npusand is already "
					"listening on %s\n", path);
		else
			fprintf(stderr, "npusand: cannot bind %s: %s\n", path,
				strerror(e));
		close(fd);
		return -1;
	}
	umask(old);
	if (chmod(path, mode) < 0 || listen(fd, SOMAXCONN) < 0 ||
	    lstat(path, &st) < 0) {
		fprintf(stderr, "npusand: cannot listen on %s: %s\n", path,
			strerror(errno));
		unlink(path);
		close(fd);
		return -1;
	}
	*ino = st.st_ino;
	return fd;
}

/* ---- sd_notify ---------------------------------------------------------- */

/* $NOTIFY_SOCKET, taken at start so that nothing else inherits it. */
static char notify_path[sizeof(((struct sockaddr_un *)0)->sun_path) + 1];

static void notify_init(void)
{
	const char *e = getenv("NOTIFY_SOCKET");

	if (e != NULL && strlen(e) < sizeof(notify_path))
		strcpy(notify_path, e);
	else if (e != NULL)
		log_warn("$NOTIFY_SOCKET too long; not notifying");
	unsetenv("NOTIFY_SOCKET");
}

/*
 * Sends `msg` to the service manager, as sd_notify(3) does: one datagram
 * to $NOTIFY_SOCKET, a path or an abstract name ('@' first). 0 (also when
 * there is none); -errno.
 */
static int notify(const char *msg)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	size_t len = strlen(notify_path);
	socklen_t salen;
	int fd, err = 0;

	if (len == 0)
		return 0;
	if (notify_path[0] != '/' && notify_path[0] != '@')
		return -EAFNOSUPPORT;
	if (len >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, notify_path, len);
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0';
	salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL,
		   (struct sockaddr *)&sa, salen) < 0)
		err = -errno;
	close(fd);
	return err;
}

/* ---- the daemon -------------------------------------------------------- */

static struct {
	uv_loop_t loop;
	struct cfg cfg;
	struct store *store;
	struct ingest *ingest;
	struct server *server;
	struct metrics *metrics;
	uv_async_t commit;
	uv_signal_t sigterm, sigint, sighup;
	uv_timer_t prune;
	bool stopping;
} d;

/* The store's writer thread committed (store_opts.commit_cb). */
static void commit_cb(void *arg)
{
	uv_async_send(arg);
}

static void commit_async_cb(uv_async_t *a)
{
	(void)a;
	server_on_commit(d.server);
}

static int64_t real_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void prune_cb(uv_timer_t *t)
{
	int n;

	(void)t;
	if (d.cfg.retain_days == 0)
		return;
	n = store_prune(d.store, real_ms());
	if (n > 0)
		log_info("pruned %d processes inactive for %u days", n,
			 d.cfg.retain_days);
	else if (n < 0)
		log_warn("pruning failed: %s", strerror(-n));
}

static void stop(const char *why)
{
	if (d.stopping) {
		log_info("%s: already stopping", why);
		return;
	}
	d.stopping = true;
	log_info("%s: draining and stopping", why);
	notify("STOPPING=1");
	server_stop(d.server);
	uv_timer_stop(&d.prune);
	/* The signal handles stay, unreferenced, until the very end: a second
	 * signal while ingest drains is noted, not fatal. */
	uv_unref((uv_handle_t *)&d.sigterm);
	uv_unref((uv_handle_t *)&d.sigint);
	uv_unref((uv_handle_t *)&d.sighup);
}

static void signal_cb(uv_signal_t *h, int signum)
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
	stop(signum == SIGTERM ? "SIGTERM" : "SIGINT");
}

/* Raises the soft descriptor limit to the hard one; the connection cap. */
static unsigned raise_nofile(void)
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

static void close_walk_cb(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

int main(int argc, char **argv)
{
	struct store_opts so = { 0 };
	struct ingest_opts io = { 0 };
	struct server_opts sv = { 0 };
	struct metrics_opts mo = { 0 };
	struct paths p;
	char *errmsg = NULL, status[PATHS_SOCKET_MAX + 64];
	char activated[PATHS_SOCKET_MAX + 1] = "";
	ino_t ino = 0;
	bool bound = false;
	int lfd, lockfd = -1, err, rc = EXIT_START;
	unsigned max_conns;

	/* Before any thread: a peer that goes away never kills us. */
	signal(SIGPIPE, SIG_IGN);
	parse_args(argc, argv, &d.cfg);
	if (d.cfg.help) {
		print_help();
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
		return EXIT_START;
	}
	notify_init();
	max_conns = raise_nofile();

	lfd = listen_activated(activated, sizeof(activated));
	if (lfd < 0 && lfd != -ENOENT)
		goto out_log;
	if (resolve_paths(&d.cfg, lfd >= 0, &p) != 0)
		goto out_listen;
	if (activated[0] != '\0')
		snprintf(p.socket, sizeof(p.socket), "%s", activated);
	if (lfd < 0) {
		lfd = listen_bind(p.socket, p.system ? 0666 : 0600, &ino);
		if (lfd < 0)
			goto out_log;
		bound = true;
	}
	if (state_private(p.db) != 0)
		goto out_listen;
	lockfd = lock_db(p.db);
	if (lockfd < 0)
		goto out_listen;

	if (uv_loop_init(&d.loop) < 0) {
		fprintf(stderr, "npusand: cannot start the event loop\n");
		goto out_lock;
	}
	uv_async_init(&d.loop, &d.commit, commit_async_cb);
	uv_unref((uv_handle_t *)&d.commit); /* it must not keep the loop up */
	so.path = p.db;
	so.retain_days = d.cfg.retain_days;
	so.commit_cb = commit_cb;
	so.commit_arg = &d.commit;
	err = state_open(&so, &d.store, &errmsg);
	if (err < 0) {
		log_error("cannot open the database %s: %s", p.db,
			  errmsg ? errmsg : strerror(-err));
		free(errmsg);
		goto out_loop;
	}
	io.store = d.store;
	io.threads = d.cfg.threads;
	err = ingest_new(&io, &d.ingest);
	if (err < 0) {
		log_error("cannot start draining: %s", strerror(-err));
		goto out_store;
	}
	if (d.cfg.metrics_listen != NULL || d.cfg.metrics_textfile != NULL) {
		mo.loop = &d.loop;
		mo.store = d.store;
		mo.ingest = d.ingest;
		mo.listen = d.cfg.metrics_listen;
		mo.textfile = d.cfg.metrics_textfile;
		mo.version = NPUSAN_VERSION;
		mo.start_ns = uv_hrtime();
		if (metrics_start(&mo, &d.metrics) < 0)
			goto out_ingest; /* metrics_start() said why */
	}
	sv.loop = &d.loop;
	sv.listen_fd = lfd;
	sv.store = d.store;
	sv.ingest = d.ingest;
	sv.max_conns = max_conns;
	sv.max_agents_per_uid = d.cfg.max_agents_per_user;
	sv.max_queries_per_uid = d.cfg.max_queries_per_user;
	sv.start_ns = uv_hrtime();
	err = server_start(&sv, &d.server);
	if (err < 0) {
		log_error("cannot serve the socket: %s", uv_strerror(err));
		goto out_metrics;
	}
	lfd = -1; /* the server's */

	uv_timer_init(&d.loop, &d.prune);
	uv_unref((uv_handle_t *)&d.prune);
	uv_timer_start(&d.prune, prune_cb, 0, PRUNE_PERIOD_MS);
	uv_signal_init(&d.loop, &d.sigterm);
	uv_signal_init(&d.loop, &d.sigint);
	uv_signal_init(&d.loop, &d.sighup);
	uv_signal_start(&d.sigterm, signal_cb, SIGTERM);
	uv_signal_start(&d.sigint, signal_cb, SIGINT);
	uv_signal_start(&d.sighup, signal_cb, SIGHUP);

	log_info("npusand %s listening on %s%s, database %s, up to %u "
		 "connections", NPUSAN_VERSION, p.socket,
		 bound ? "" : " (from systemd)", p.db, max_conns);
	snprintf(status, sizeof(status), "READY=1\nSTATUS=listening on %s\n"
		 "MAINPID=%d", p.socket, (int)getpid());
	err = notify(status);
	if (err < 0)
		log_warn("cannot notify the service manager: %s",
			 strerror(-err));

	uv_run(&d.loop, UV_RUN_DEFAULT);
	rc = 0;

	/* The server's handles are closed; the rings drain, the store
	 * commits, and only then may the async handle go. */
	server_free(d.server);
	d.server = NULL;
out_metrics:
	/* Its last textfile before ingest and the store go. */
	metrics_stop(d.metrics);
	d.metrics = NULL;
out_ingest:
	ingest_free(d.ingest);
out_store:
	store_close(d.store);
out_loop:
	uv_walk(&d.loop, close_walk_cb, NULL);
	uv_run(&d.loop, UV_RUN_DEFAULT);
	if (uv_loop_close(&d.loop) != 0)
		log_error("event loop closed with handles open");
out_lock:
	if (lockfd >= 0)
		close(lockfd);
out_listen:
	if (lfd >= 0)
		close(lfd);
	if (bound) {
		struct stat st;

		/* Ours still (not a successor's): remove it. */
		if (lstat(p.socket, &st) == 0 && st.st_ino == ino)
			unlink(p.socket);
	}
	if (rc == 0)
		log_info("stopped");
out_log:
	log_close();
	return rc;
}
