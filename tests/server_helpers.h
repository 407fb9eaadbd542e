/*
 * server_helpers.h - what test_server's files share: a daemon under test
 * (struct td), started as a service manager would (struct td_how) and
 * stopped; frames sent and answers read; the registrations it refuses;
 * the databases of root's and nobody's findings the answers come from.
 * Built into test_server alone (server_helpers.c).
 *
 * Each test_server_*.c file adds its tests to a TCase through its
 * server_*_add(), which test_server.c's suites call in their order.
 */
#ifndef NPUSAN_TESTS_SERVER_HELPERS_H
#define NPUSAN_TESTS_SERVER_HELPERS_H

#include <check.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "npusan.pb-c.h"
#include "paths.h"

/* Linux's, for a libc that predates it (the daemon and the tests agree). */
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

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
	bool no_pidfd;             /* as on a kernel before 5.3 (seccomp) */
	int refuse_sockopt;        /* a getsockopt() name failing EACCES */
};

#define POP_MANY 3000 /* root's process: several frames of findings */
#define POP_FEW 5     /* nobody's process */
#define NOBODY 65534

/* systemd-socket-activate's path, or NULL where it is missing. */
const char *activate_bin(void);

/* clock_mono_ms() as the signed milliseconds the deadlines count in. */
int64_t now_ms(void);

/* A datagram socket for NOTIFY_SOCKET, a path or an abstract name. */
void td_notify_socket(struct td *t, bool abstract);

/* A fresh directory for `t`, and its socket, database and log named in it. */
void td_init(struct td *t);

/* Everything the daemon wrote to stderr (caller frees). */
char *td_log(const struct td *t);

/* Starts the daemon of `t` as `h` says; does not wait for READY. */
void td_spawn(struct td *t, const struct td_how *h);

/* Waits for one notification holding `what`; false on timeout. */
bool td_wait_notify(struct td *t, const char *what, int timeout_ms);

/* Starts the daemon and waits for READY=1. */
void td_start(struct td *t, const struct td_how *h);

/* The exit status (or 128 + signal) within `timeout_ms`; -1 if still up. */
int td_wait_exit(struct td *t, int timeout_ms);

/* No sanitizer report in the daemon's log. */
void td_assert_clean_log(const struct td *t);

/* SIGTERM: exits 0, with a clean log. */
void td_stop(struct td *t);

/* A connection to the daemon of `t`. */
int td_connect(const struct td *t);

/* Raw bytes: every one of them, or the test fails. */
void send_all(int fd, const void *p, size_t len);

/* A frame header announcing `len` bytes. */
void send_header(int fd, uint32_t len);

/* `m` in one frame, with `ring_fd` (-1: none) passed along. */
void send_env(int fd, const Npusan__ToDaemon *m, int ring_fd);

/* `q` as protocol `version` says it. */
void send_query(int fd, uint32_t version, Npusan__Query *q);

void send_stats_query(int fd);

/* The next frame from the daemon, unpacked; NULL when the peer closed. */
Npusan__FromDaemon *recv_msg(int fd);

/* The connection ends: EOF (or a reset) within the reply timeout. */
void expect_closed(int fd);

/* An Error with `code`, then the connection closes. */
void expect_error_close(int fd, int code);

/* A fresh connection gets a StatsReply: the daemon still serves. */
void expect_serving(const struct td *t);

/* A Register of process `pid` for ring `ring_fd` (-1: none). */
void send_register(int fd, uint32_t pid, int ring_fd,
		   uint64_t start_time);

/* A RegisterReply refusing, with `why` (or `or_why`, when not NULL) in
 * its error; then the close. */
void expect_refused_either(int fd, const char *why, const char *or_why);

void expect_refused(int fd, const char *why);

/* A database with a process of root and one of NOBODY, with findings. */
void populate(const char *path, int64_t ids[2]);

/*
 * Sends a findings request and reads its answer to the frame with done:
 * the number of findings, frames into *frames, ids strictly increasing.
 * Findings of another job than `job` (when not NULL) fail the test.
 */
size_t read_findings(int fd, Npusan__FindingsRequest *fr,
		     size_t *frames, int64_t *first, int64_t *last);

/* A list query: the number of processes its answer holds. */
size_t read_list(int fd);

/* A directory of `uid` under the test's directory. */
void mkdir_for(const char *path, uid_t uid);

/* A database at `path` of `n` recent exited processes of `uid`, each
 * with a long path, their job the SQL expression `job` over the pid x. */
void populate_exited(const char *path, unsigned n, unsigned uid,
		     const char *job);

/* The tests of each test_server_*.c file, added to `tc`. */
void server_frames_add(TCase *tc);
void server_query_add(TCase *tc);
void server_wire_add(TCase *tc);
void server_hostile_add(TCase *tc);
void server_root_add(TCase *tc);
void server_users_add(TCase *tc);
void server_isolation_add(TCase *tc);
void server_sweep_add(TCase *tc);

#endif
