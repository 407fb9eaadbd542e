/*
 * testutil.h - helpers the Check suites share.
 *
 * Everything returned here is owned by the caller and freed with free() or
 * the matching *_free() function.
 */
#ifndef NPUSAN_TESTUTIL_H
#define NPUSAN_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>

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
