/*
 * trace_helpers.h - what test_trace's files share: the header lines, the
 * rows of the bad- and good-input tables, reading a whole input into a
 * struct result that describes every op, and the symtab shortcuts the
 * writer tests use. Built into test_trace alone (trace_helpers.c).
 *
 * Each test_trace_*.c file adds its tests to the one TCase through its
 * test_trace_*_add(), in the order test_trace.c's suite calls them.
 */
#ifndef NPUSAN_TESTS_TRACE_HELPERS_H
#define NPUSAN_TESTS_TRACE_HELPERS_H

#include <check.h>
#include <stdint.h>

#include "trace.h"

#define H "npusan-trace 1\n"
#define H2 "npusan-trace 2\n"
#define NAME "t.trace"
#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* The outcome of reading a whole input. */
struct result {
	int rc;                 /* 0, or the first error */
	char name[256];         /* trace_reader_name() */
	char msg[1024];         /* trace_reader_error() */
	char torn[1024];        /* trace_reader_torn(), "" for NULL */
	char *ops;              /* every op described, "; " between */
	struct trace_process process;
	char job[64];
	char pname[64];
};

struct bad {
	const char *in;
	size_t len;
	unsigned long line;
	const char *msg;
};

#define BAD(in, line, msg) { in, sizeof(in) - 1, line, msg }

struct good {
	const char *in;
	size_t len;
	const char *ops; /* describe() of each op, "; " between */
};

#define GOOD(in, ops) { in, sizeof(in) - 1, ops }

/* Every field of `op` that is not zero, described; caller frees. */
char *describe_str(const struct symtab *s, const struct op *op);

/* Reads to the end or the first error from a reader over `syms`. */
void drain(struct trace_reader *r, const struct symtab *syms,
	   struct result *out);

/* Reads `len` bytes from a buffer of exactly that size, so that ASan sees
 * any read past the input. */
void read_text(const char *text, size_t len, struct result *out);

void read_str(const char *text, struct result *out);

void result_free(struct result *res);

/* Asserts that the message is "FILE:LINE: " followed by text holding
 * `want`. */
void assert_error(const struct result *res, unsigned long line,
		  const char *want);

/* Asserts that `row`'s input is refused on its line with its message. */
void check_bad(const struct bad *row);

/* The id of `s` (of the frames a, b; b may be NULL) in `syms`. */
uint32_t intern(struct symtab *syms, const char *s);
uint32_t stack_of(struct symtab *syms, const char *a, const char *b);

/* The tests of test_trace_reject.c, test_trace_write.c and
 * test_trace_v2.c, added to `tc`. */
void test_trace_reject_add(TCase *tc);
void test_trace_write_add(TCase *tc);
void test_trace_v2_add(TCase *tc);

#endif
