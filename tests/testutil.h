/*
 * testutil.h - helpers the Check suites share.
 *
 * Everything returned here is owned by the caller and freed with free() or
 * the matching *_free() function.
 */
#ifndef NPUSAN_TESTUTIL_H
#define NPUSAN_TESTUTIL_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <check.h>

#include "engine.h"
#include "symtab.h"

/* Runs a suite the Check way (a process per test); the exit status for
 * main(). */
int tu_main(Suite *s);

/*
 * Runs argv[0] (a path) with its arguments, `input` on its standard input
 * (NULL for none), and collects its standard output and error into *out and
 * *err (either may be NULL to discard). Returns the exit status, or 128 + the
 * signal number that killed it. Aborts the test on a spawn failure.
 */
int tu_run(const char *const argv[], const char *input, char **out,
	   char **err);

/* The path of a built program, e.g. tu_bin("npusanctl"). Static storage. */
const char *tu_bin(const char *name);

/*
 * A fresh directory under $TMPDIR (else /tmp), removed with everything in
 * it when the test process exits. Returns its path (caller frees).
 */
char *tu_tmpdir(void);

/* A fresh file under a private temporary directory holding `text`;
 * returns its path (caller frees). */
char *tu_write_file(const char *name, const char *text);

/* Sleeps `ms` milliseconds. */
void tu_nap_ms(long ms);

/* The number of lines of `text` that contain `needle` (0 for NULL). */
unsigned tu_count_lines(const char *text, const char *needle);

/*
 * The lines of `text` (JSON Lines) that contain `needle`, each without the
 * fields named in the NULL-terminated `strip` (whose values are numbers,
 * null or strings without quotes inside), joined (caller frees).
 */
char *tu_json_lines(const char *text, const char *needle,
		    const char *const *strip);

/* Whether something accepts connections on the Unix socket `path`. */
bool tu_sock_answers(const char *path);

/*
 * Whether user `uid` may run the program at `path` (every directory above
 * it searchable, the file executable): a build tree under /root is not,
 * and a test that runs a program as nobody then skips (77, from its suite's
 * main(), where this may be called before any test runs). Needs root
 * unless `uid` is ours.
 */
bool tu_runnable_by(uid_t uid, const char *path);

/* A daemon of the test's own, in a temporary directory. */
struct tu_daemon {
	char *dir;
	char sock[PATH_MAX];
	char db[PATH_MAX];
	char log[PATH_MAX]; /* its standard error */
	pid_t pid;
};

/*
 * Makes the temporary directory and names the socket, database and log in
 * it; points NPUSAN_SOCKET and NPUSAN_DB at them (for the agent, npusanctl
 * and any daemon npusanctl run starts) and unsets NPUSAN and NPUSAN_RECORD.
 */
void tu_daemon_init(struct tu_daemon *d);

/* Starts npusand on d's socket and database with the NULL-terminated
 * `extra` arguments (NULL for none); returns once it answers. */
void tu_daemon_start(struct tu_daemon *d, const char *const *extra);

/* Sends `sig` and reaps the daemon; its wait status. */
int tu_daemon_stop(struct tu_daemon *d, int sig);

/* The findings of one analysis, in detection order. */
struct tu_findings {
	struct finding *v;
	size_t n;
	struct symtab *syms;
	int err;          /* what the reader or engine returned last */
	char errmsg[512]; /* the reader's message when err < 0 */
};

/*
 * Reads the trace `text` and feeds every op to a fresh engine (deduplicating
 * when `dedup`). Stops at the first error, leaving it in out->err.
 */
void tu_analyze(const char *text, bool dedup, struct tu_findings *out);
void tu_findings_free(struct tu_findings *f);

/* The operator of finding `idx`'s access, or of its previous access. */
const char *tu_op(const struct tu_findings *f, unsigned idx, bool previous);

/* Number of findings of `kind`. */
size_t tu_count(const struct tu_findings *f, enum finding_kind kind);

#endif
