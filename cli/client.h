/*
 * client.h - npusanctl's side of the query protocol (proto/npusan.proto).
 *
 * A query command opens one connection to npusand, sends one Query in a
 * ToDaemon frame and reads FromDaemon frames until its answer is complete
 * (a long answer comes in several frames, `done` on the last); with follow
 * it then reads what the daemon pushes until SIGINT or SIGTERM. Everything
 * the daemon sends is untrusted: a reply that is unreadable, of the wrong
 * kind or missing what the command needs ends the command with CLI_DAEMON.
 *
 * Also here: the options every query command takes (--socket, --timeout,
 * --help), the conversion of a proto Finding into the struct report.c
 * formats, and the human units the tables print.
 */
#ifndef NPUSAN_CLIENT_H
#define NPUSAN_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "npusan.pb-c.h"
#include "paths.h"
#include "report.h"
#include "text.h" /* text_put(): the daemon's text on a terminal */

#define CLIENT_PROTOCOL_VERSION 1
#define CLIENT_TIMEOUT_MS 10000

struct client_opts {
	const char *socket; /* --socket; NULL: NPUSAN_SOCKET, else the default */
	int timeout_ms;     /* the longest wait for each reply frame */
};

/* What a reply callback wants next. */
enum client_next {
	CLIENT_DONE = 0, /* the answer is complete: close */
	CLIENT_MORE = 1, /* another frame is due within the timeout */
};

/*
 * Called with each reply but an Error, which client_query() reports
 * itself. The callback owns `m`: it frees it with
 * npusan__from_daemon__free_unpacked(m, NULL), now or later. Returns an
 * enum client_next; -EBADMSG when `m` is not the reply the query asks for
 * or lacks what the command needs; -ENOMEM (client_query() says which).
 */
typedef int (*client_reply_cb)(void *arg, Npusan__FromDaemon *m);

/*
 * Connects to the daemon's socket (o->socket, else NPUSAN_SOCKET, else
 * paths_socket()'s default), sends `q` with protocol_version set, and hands
 * each reply to `cb` until it returns CLIENT_DONE. Standard output is
 * flushed after each reply, so that followed findings show at once.
 * Returns the exit status: CLI_OK; CLI_DAEMON after printing one line on
 * standard error, led by `cmd` ("npusanctl list"), that says what went
 * wrong: no daemon listens (and how to start one), no answer within
 * o->timeout_ms, the connection closed early, a malformed reply, or the
 * daemon's Error; CLI_USAGE after printing the daemon's Error when it says
 * that what was asked for does not exist (ENOENT: no such finding).
 */
int client_query(const struct client_opts *o, const char *cmd,
		 Npusan__Query *q, client_reply_cb cb, void *arg);

/* Readies `q` for the next poll of client_follow() (a later since_ms). */
typedef void (*client_again_cb)(void *arg, Npusan__Query *q);

/*
 * Follows: client_query(), then every second again (after `again`), on a
 * fresh connection each time, until SIGINT or SIGTERM. A daemon that goes
 * away is waited for, with a line on standard error when it goes and one
 * when it answers again, trying at most every 5 s. Returns the first
 * query's status when it fails (nothing is followed); else CLI_OK once
 * stopped by the signal.
 */
int client_follow(const struct client_opts *o, const char *cmd,
		  Npusan__Query *q, client_again_cb again, client_reply_cb cb,
		  void *arg);

/*
 * The socket a query goes to (o->socket, else NPUSAN_SOCKET, else
 * paths_socket()'s default) into `path`. CLI_OK; CLI_USAGE after saying
 * that it is too long.
 */
int client_socket_path(const struct client_opts *o, const char *cmd,
		       char path[PATHS_SOCKET_MAX + 1]);

/* Whether something accepts connections on `path` within `timeout_ms`:
 * 0, or the negative errno of connect(2) (-ECONNREFUSED, -ENOENT, ...). */
int client_probe(const char *path, int timeout_ms);

/* ---- options ------------------------------------------------------------ */

enum {
	CLIENT_OPT_SOCKET = 0x100,
	CLIENT_OPT_TIMEOUT,
	CLIENT_OPT_JSON, /* for the commands' own tables */
};

/* The getopt_long entries of the options every query command takes. */
#define CLIENT_LONGOPTS                                                  \
	{ "socket", required_argument, NULL, CLIENT_OPT_SOCKET },        \
	{ "timeout", required_argument, NULL, CLIENT_OPT_TIMEOUT },      \
	{ "help", no_argument, NULL, 'h' }

/* Their --help lines. */
#define CLIENT_OPTIONS_HELP                                                  \
	"  --socket PATH        the daemon's socket (default: $NPUSAN_SOCKET,\n" \
	"                       else a user daemon's when one has run, else\n"  \
	"                       /run/npusan/npusand.sock)\n"                     \
	"  --timeout SECONDS    how long to wait for each reply (default 10)\n"  \
	"  -h, --help           show this help\n"

/* Exit statuses of the query commands, for --help. */
#define CLIENT_EXIT_HELP                                                     \
	"Exit status: 0 ok, 2 usage error, 3 no daemon answered or it refused\n" \
	"the request.\n"

/* Initialises *o to the defaults. */
void client_opts_init(struct client_opts *o);

/*
 * Handles option `c` from getopt_long() ("h", a CLIENT_OPT_*, or one of
 * getopt's ':' and '?', with opterr 0): -1 to go on parsing; else the exit
 * status to return now (CLI_OK after printing `usage` for --help,
 * CLI_USAGE after saying what is wrong).
 */
int client_option(const char *cmd, int c, const char *usage, char **argv,
		  struct client_opts *o);

/*
 * `s` as a decimal integer from `min` to `max`, into *out. 0; -EINVAL.
 */
int client_parse_u64(const char *s, uint64_t min, uint64_t max,
		     uint64_t *out);

/*
 * --error-exitcode's argument `s` (0 to 255) into *code, for `cmd`: -1 to
 * go on parsing, else CLI_USAGE after saying what is wrong.
 */
int client_parse_exitcode(const char *cmd, const char *s, int *code);

/*
 * Finishes standard output: CLI_USAGE after saying why when writing it
 * failed (as `analyze` does), else `status`.
 */
int client_end_output(const char *cmd, int status);

/* ---- replies ------------------------------------------------------------ */

/* Replies kept whole, for the views into them that outlive their
 * callback (client_finding(), a list's processes). */
struct client_replies {
	Npusan__FromDaemon **v;
	size_t n, cap;
};

/* Keeps `m`, which `rs` frees from now on. 0; -ENOMEM, `m` then still
 * the caller's. */
int client_replies_keep(struct client_replies *rs, Npusan__FromDaemon *m);

/* Frees every reply kept; *rs is empty, ready to keep more. */
void client_replies_free(struct client_replies *rs);

/*
 * A view of `f` for report_text() and report_json(), valid as long as `f`.
 * 0; -EBADMSG when it lacks an id, kind, access or detected_at.
 */
int client_finding(const Npusan__Finding *f, struct finding_view *out);

/* ---- human units -------------------------------------------------------- */

/* The time now, Unix ms. */
int64_t client_now_ms(void);

/* A monotonic clock, ms: for deadlines. */
int64_t client_mono_ms(void);

/* A time span in one unit, rounded down: "45s", "12m", "5h", "3d". */
void client_age(int64_t ms, char *buf, size_t len);

/* A longer span in two units: "3d 4h", "2h 5m", "5m 3s", "12s". */
void client_span(int64_t ms, char *buf, size_t len);

/* A size: "512 B", "1.5 KiB", "12.3 MiB"... */
void client_bytes(uint64_t n, char *buf, size_t len);


#endif
