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

/* A fresh file under a private temporary directory holding `text`;
 * returns its path (caller frees). */
char *tu_write_file(const char *name, const char *text);

#endif
