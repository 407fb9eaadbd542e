/*
 * config.h - npusand's configuration: the option table (command line and
 * the environment's defaults), --help, and where the socket and the
 * database live (paths.h's defaults, with the daemon's own checks).
 *
 * Ownership: a struct config points into argv and at string literals,
 * never at memory of its own: there is nothing to free. A struct
 * config_paths holds its paths by value.
 */
#ifndef NPUSAN_CONFIG_H
#define NPUSAN_CONFIG_H

#include <limits.h>
#include <stdbool.h>

#include "paths.h"

/* Exit statuses, as --help documents them. */
#define CONFIG_EXIT_START 1 /* it could not start: socket, database, ... */
#define CONFIG_EXIT_USAGE 2

struct config {
	char *socket;           /* NULL: config_resolve_paths() chooses */
	char *db;               /* NULL: likewise */
	unsigned retain_days;
	unsigned threads;
	unsigned log_level;     /* enum log_level */
	char *log_file;         /* NULL: stderr */
	char *metrics_listen;   /* NULL: no HTTP metrics */
	char *metrics_textfile; /* NULL: no textfile */
	char *suppressions;     /* NULL: none */
	unsigned max_agents_per_user;
	unsigned max_queries_per_user;
	unsigned system;
	unsigned help;
	unsigned version;
};

/*
 * Fills *out from the defaults and `argv`. 0; -EINVAL after printing
 * the usage error on stderr (main exits with CONFIG_EXIT_USAGE). Uses
 * getopt_long(), so once per process.
 */
int config_parse(int argc, char **argv, struct config *out);

/* Prints --help on stdout, from the option table. */
void config_print_help(void);

struct config_paths {
	bool system; /* the system service's paths and modes */
	char socket[PATHS_SOCKET_MAX + 1];
	char db[PATH_MAX];
};

/*
 * The socket and the database, as --help says, into *out; their
 * directories created (the socket's only when not `activated`: systemd
 * made it). 0; a negative errno after a message on stderr.
 */
int config_resolve_paths(const struct config *c, bool activated,
			 struct config_paths *out);

#endif
