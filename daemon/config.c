/*
 * config.c - npusand's option table and where its files live.
 *
 * One table (name, type, range, default, help) feeds parsing, defaults,
 * checks and --help. The paths' defaults are paths.h's, shared with
 * npusanctl and the agent; this file adds only what the daemon decides:
 * the system paths as root or with --system, and the directories it
 * creates. Nothing here allocates: struct config points into argv.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "server.h"

/* ---- the option table --------------------------------------------------- */

enum config_type { OPT_PATH, OPT_UINT, OPT_LEVEL, OPT_FLAG, OPT_ADDR };

/* One option: the table below feeds parsing, defaults, checks and --help. */
struct config_opt {
	const char *name;
	char short_name; /* 0: none */
	enum config_type type;
	const char *arg;      /* the argument's name in --help */
	unsigned min, max;    /* OPT_UINT */
	const char *def;      /* parsed like an argument; NULL: none */
	size_t off;           /* in struct config */
	const char *help;
};

/* A number's digits, for an option's default. */
#define CONFIG_STR_(x) #x
#define CONFIG_STR(x) CONFIG_STR_(x)

static const struct config_opt config_opts[] = {
	{ "socket", 0, OPT_PATH, "PATH", 0, 0, NULL,
	  offsetof(struct config, socket),
	  "the Unix socket to listen on, unless systemd passes one; "
	  "default $NPUSAN_SOCKET, else " PATHS_SYSTEM_SOCKET " as root or "
	  "with --system, else $XDG_RUNTIME_DIR/npusan/" PATHS_SOCKET_NAME
	  ", else /tmp/npusan-UID/" PATHS_SOCKET_NAME " (a directory of "
	  "mode 0700 that must be the user's)" },
	{ "db", 0, OPT_PATH, "PATH", 0, 0, NULL, offsetof(struct config, db),
	  "the SQLite database; default $NPUSAN_DB, else " PATHS_SYSTEM_DB
	  " as root or with --system, else $XDG_STATE_HOME/npusan/"
	  PATHS_DB_NAME ", else ~/.local/state/npusan/" PATHS_DB_NAME },
	{ "retain-days", 0, OPT_UINT, "N", 0, 36500, "30",
	  offsetof(struct config, retain_days),
	  "forget exited processes and their findings N days after their "
	  "last activity (checked at start and daily); 0 keeps them" },
	{ "threads", 0, OPT_UINT, "N", 0, 256, "0",
	  offsetof(struct config, threads),
	  "threads draining the agents' rings; 0: one per CPU up to 3 "
	  "CPUs, then one per two" },
	{ "log-level", 0, OPT_LEVEL, "LEVEL", 0, 0, "info",
	  offsetof(struct config, log_level),
	  "error, warn, info or debug" },
	{ "log-file", 0, OPT_PATH, "PATH", 0, 0, NULL,
	  offsetof(struct config, log_file),
	  "log to PATH, reopened on SIGHUP, instead of stderr" },
	{ "metrics-listen", 0, OPT_ADDR, "ADDR:PORT", 0, 0, NULL,
	  offsetof(struct config, metrics_listen),
	  "serve Prometheus metrics on http://ADDR:PORT/metrics, a numeric "
	  "address: 127.0.0.1:9464, or [::1]:9464 for IPv6" },
	{ "metrics-textfile", 0, OPT_PATH, "PATH", 0, 0, NULL,
	  offsetof(struct config, metrics_textfile),
	  "write the same metrics to PATH every few seconds and at exit, "
	  "atomically, for node_exporter's textfile collector (PATH should "
	  "end in .prom)" },
	{ "suppressions", 0, OPT_PATH, "FILE", 0, 0, NULL,
	  offsetof(struct config, suppressions),
	  "suppressions (docs/suppressions.md) for every process: the "
	  "findings they match are stored, marked suppressed and counted "
	  "apart (npusanctl list, report; "
	  "npusan_findings_suppressed_total); a file with a mistake stops "
	  "npusand with FILE:LINE and what is wrong" },
	{ "max-agents-per-user", 0, OPT_UINT, "N", 1, 1000000,
	  CONFIG_STR(SERVER_AGENTS_PER_UID),
	  offsetof(struct config, max_agents_per_user),
	  "agents (processes) one user other than root may have connected at "
	  "once; more are refused, and logged" },
	{ "max-queries-per-user", 0, OPT_UINT, "N", 1, 1000000,
	  CONFIG_STR(SERVER_QUERIES_PER_UID),
	  offsetof(struct config, max_queries_per_user),
	  "npusanctl connections one user other than root may have open at "
	  "once; more are refused, and logged" },
	{ "system", 0, OPT_FLAG, NULL, 0, 0, NULL,
	  offsetof(struct config, system),
	  "use the system service's default paths even when not root" },
	{ "version", 0, OPT_FLAG, NULL, 0, 0, NULL,
	  offsetof(struct config, version), "print the version and exit" },
	{ "help", 'h', OPT_FLAG, NULL, 0, 0, NULL,
	  offsetof(struct config, help), "print this help and exit" },
};

#define CONFIG_NOPTS (sizeof(config_opts) / sizeof(config_opts[0]))

/* Prints a usage error and the hint to --help. -EINVAL, always. */
static int config_usage(const char *fmt, ...)
	__attribute__((format(printf, 1, 2)));

static int config_usage(const char *fmt, ...)
{
	va_list ap;

	fputs("npusand: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nTry 'npusand --help'.\n", stderr);
	return -EINVAL;
}

static int config_set_uint(const struct config_opt *o, unsigned *field,
			   const char *v)
{
	unsigned long long n;
	char *end;

	errno = 0;
	n = strtoull(v, &end, 10);
	if (v[0] < '0' || v[0] > '9' || *end != '\0' || errno != 0 ||
	    n < o->min || n > o->max)
		return config_usage("--%s: '%s' is not a number from %u to %u",
				    o->name, v, o->min, o->max);
	*field = (unsigned)n;
	return 0;
}

/* Sets option `o` of `c` from `v` (an argument or the default). 0;
 * -EINVAL after the usage error. */
static int config_set(const struct config_opt *o, struct config *c,
		      const char *v)
{
	char *field = (char *)c + o->off;
	struct sockaddr_storage sa;
	socklen_t len;
	enum log_level l;

	switch (o->type) {
	case OPT_PATH:
		if (v[0] == '\0')
			return config_usage("--%s: an empty path", o->name);
		break;
	case OPT_UINT:
		return config_set_uint(o, (unsigned *)(void *)field, v);
	case OPT_LEVEL:
		if (log_level_parse(v, &l) < 0)
			return config_usage("--%s: '%s' is not error, warn, "
					    "info or debug", o->name, v);
		*(unsigned *)(void *)field = (unsigned)l;
		return 0;
	case OPT_FLAG:
		*(unsigned *)(void *)field = 1;
		return 0;
	case OPT_ADDR:
		if (metrics_parse_listen(v, &sa, &len) < 0)
			return config_usage("--%s: '%s' is not ADDR:PORT or "
					    "[ADDR6]:PORT with a numeric "
					    "address", o->name, v);
		break;
	}
	*(char **)(void *)field = (char *)v; /* OPT_PATH, OPT_ADDR */
	return 0;
}

/* ---- --help -------------------------------------------------------------- */

/* Prints `text` from column `col` on, in lines of at most `width`. */
static void config_print_wrapped(const char *text, int col, int width)
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

static void config_print_opt(const struct config_opt *o)
{
	char left[64], text[512];

	if (o->short_name)
		snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_name,
			 o->name, o->arg ? " " : "", o->arg ? o->arg : "");
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
	config_print_wrapped(text, 27, 79);
}

void config_print_help(void)
{
	printf("Usage: npusand [OPTION]...\n"
	       "The npusan daemon: registers the agents of the processes on "
	       "this host,\nanalyses their stream operations and keeps the "
	       "findings for npusanctl.\n\n");
	for (size_t i = 0; i < CONFIG_NOPTS; i++)
		config_print_opt(&config_opts[i]);
	printf("\nSignals: SIGTERM or SIGINT drain every ring, commit and exit;"
	       "\nSIGHUP reopens the log file.\n"
	       "\nThe system socket has mode 0666: any user may register its "
	       "own processes\nand query its own findings; the daemon checks "
	       "who is asking with SO_PEERCRED.\nA user's socket has mode "
	       "0600.\n"
	       "\nExit status: 0 after SIGTERM or SIGINT; %d when it cannot "
	       "start (the\nsocket is taken, the database is unusable); %d on "
	       "a usage error.\n", CONFIG_EXIT_START, CONFIG_EXIT_USAGE);
}

/* ---- the command line ---------------------------------------------------- */

/* getopt_long()'s tables from config_opts, and *c set to the defaults.
 * 0; -EINVAL when a default does not parse (after the usage error). */
static int config_defaults(struct config *c, struct option *lo,
			   char *shorts)
{
	size_t ns = 1;
	int err;

	memset(c, 0, sizeof(*c));
	shorts[0] = ':';
	for (size_t i = 0; i < CONFIG_NOPTS; i++) {
		const struct config_opt *o = &config_opts[i];

		lo[i] = (struct option){ o->name,
					 o->type == OPT_FLAG ?
						 no_argument : required_argument,
					 NULL, 256 + (int)i };
		if (o->short_name) {
			shorts[ns++] = o->short_name;
			if (o->type != OPT_FLAG)
				shorts[ns++] = ':';
		}
		if (o->def != NULL && (err = config_set(o, c, o->def)) < 0)
			return err;
	}
	shorts[ns] = '\0';
	memset(&lo[CONFIG_NOPTS], 0, sizeof(lo[CONFIG_NOPTS]));
	return 0;
}

/* The option getopt_long() returned as `ch`; NULL when unknown. */
static const struct config_opt *config_opt_of(int ch)
{
	if (ch >= 256 && ch < 256 + (int)CONFIG_NOPTS)
		return &config_opts[ch - 256];
	for (size_t i = 0; i < CONFIG_NOPTS && ch != '?'; i++)
		if (config_opts[i].short_name == ch)
			return &config_opts[i];
	return NULL;
}

int config_parse(int argc, char **argv, struct config *out)
{
	struct option lo[CONFIG_NOPTS + 1];
	char shorts[2 * CONFIG_NOPTS + 2];
	int ch, idx, err;

	err = config_defaults(out, lo, shorts);
	if (err < 0)
		return err;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, shorts, lo, &idx)) != -1) {
		const struct config_opt *o;

		if (ch == ':')
			return config_usage("%s needs an argument",
					    argv[optind - 1]);
		o = config_opt_of(ch);
		if (o == NULL)
			return config_usage("unknown option '%s'",
					    argv[optind - 1]);
		err = config_set(o, out, optarg);
		if (err < 0)
			return err;
	}
	if (optind < argc)
		return config_usage("unexpected argument '%s'", argv[optind]);
	return 0;
}

/* ---- paths --------------------------------------------------------------- */

/* Creates `dir` and its missing parents with `mode`. 0 or -errno. */
static int config_mkdir_p(const char *dir, mode_t mode)
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

/* config_mkdir_p() with the message. */
static int config_make_dir(const char *dir, mode_t mode)
{
	int err = config_mkdir_p(dir, mode);

	if (err < 0)
		fprintf(stderr, "npusand: cannot create %s: %s\n", dir,
			strerror(-err));
	return err;
}

/* The socket named by --socket or $NPUSAN_SOCKET; NULL when neither. */
static const char *config_named_socket(const struct config *c)
{
	const char *env = getenv("NPUSAN_SOCKET");

	if (c->socket != NULL)
		return c->socket;
	return env != NULL && env[0] != '\0' ? env : NULL;
}

/* The socket into p->socket. 0; a negative errno after a message. */
static int config_socket(const struct config *c, struct config_paths *p)
{
	const char *s = config_named_socket(c);

	if (s != NULL) {
		if (strlen(s) > PATHS_SOCKET_MAX) {
			fprintf(stderr, "npusand: socket path too long (at "
					"most %d bytes): %s\n",
				PATHS_SOCKET_MAX, s);
			return -ENAMETOOLONG;
		}
		strcpy(p->socket, s);
	} else if (p->system) {
		strcpy(p->socket, PATHS_SYSTEM_SOCKET);
	} else if (paths_user_socket(getenv("XDG_RUNTIME_DIR"),
				     (unsigned)getuid(), p->socket,
				     sizeof(p->socket)) < 0) {
		fprintf(stderr, "npusand: $XDG_RUNTIME_DIR is too long for a "
				"socket path; use --socket\n");
		return -ENAMETOOLONG;
	}
	return 0;
}

/* The socket's directory created: 0755 for the system service, else
 * 0700 and, when we chose it, private. 0; a negative errno after a
 * message. */
static int config_socket_dir(const struct config *c,
			     const struct config_paths *p)
{
	char dir[PATH_MAX];
	int err;

	paths_dir_of(p->socket, dir, sizeof(dir));
	err = config_make_dir(dir, p->system ? 0755 : 0700);
	if (err < 0)
		return err;
	if (!p->system && config_named_socket(c) == NULL &&
	    !paths_private_dir(dir, (unsigned)getuid())) {
		fprintf(stderr, "npusand: %s is not a directory of yours that "
				"only you may use; remove it or use --socket\n",
			dir);
		return -EPERM;
	}
	return 0;
}

/* The database into p->db. 0; a negative errno after a message. */
static int config_db(const struct config *c, struct config_paths *p)
{
	const char *db = c->db != NULL ? c->db : getenv("NPUSAN_DB");
	const char *home = getenv("HOME");
	struct passwd *pw;

	if (db != NULL && db[0] != '\0') {
		if (strlen(db) >= sizeof(p->db)) {
			fprintf(stderr, "npusand: database path too long\n");
			return -ENAMETOOLONG;
		}
		strcpy(p->db, db);
		return 0;
	}
	if (p->system) {
		strcpy(p->db, PATHS_SYSTEM_DB);
		return 0;
	}
	if ((home == NULL || home[0] != '/') &&
	    (pw = getpwuid(getuid())) != NULL)
		home = pw->pw_dir;
	if (paths_user_db(getenv("XDG_STATE_HOME"), home, p->db,
			  sizeof(p->db)) < 0) {
		fprintf(stderr, "npusand: no $XDG_STATE_HOME or home directory "
				"for the database; use --db\n");
		return -ENOENT;
	}
	return 0;
}

int config_resolve_paths(const struct config *c, bool activated,
			 struct config_paths *out)
{
	char dir[PATH_MAX];
	int err;

	out->system = c->system || geteuid() == 0;
	err = config_socket(c, out);
	/* With socket activation systemd made the socket and its directory. */
	if (err == 0 && !activated)
		err = config_socket_dir(c, out);
	if (err == 0)
		err = config_db(c, out);
	if (err < 0)
		return err;
	/* Private whoever runs it, whatever the umask (npusand's
	 * state_private()). */
	paths_dir_of(out->db, dir, sizeof(dir));
	return config_make_dir(dir, 0700);
}
