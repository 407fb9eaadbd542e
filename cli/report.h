/*
 * report.h - findings as people and programs read them.
 *
 * The text report reads like PyTorch's CUDA Sanitizer's: the two accesses
 * (or the allocation and its last use) with their streams, sequence
 * numbers, operators and stacks, and for a missing record_stream the two
 * ways to fix it. The JSON form is one line per finding, exactly as
 * docs/findings.md defines it.
 *
 * Both formatters take a struct report_finding, whose strings are already
 * resolved, so that every command prints a finding the same way: `analyze`
 * converts the engine's findings with report_from_engine(), `findings` and
 * `show` convert the daemon's replies (cli/client.c).
 */
#ifndef NPUSAN_REPORT_H
#define NPUSAN_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine.h"
#include "symtab.h"
#include "trace.h"

/* A stack: `n` frames, innermost first; the strings are borrowed. */
struct report_stack {
	const char *const *frames;
	size_t n;
};

/* One access; `op` is NULL when unknown. */
struct report_access {
	uint64_t stream;
	uint64_t seq;
	bool write;
	const char *op;
	struct report_stack stack;
};

/*
 * A finding with every string resolved, as findings.md defines it. Every
 * pointer is borrowed: the struct is a view of the caller's data and valid
 * as long as that is.
 */
struct report_finding {
	uint64_t id;
	const char *kind;        /* a kind of findings.md, maybe a newer one */
	const char *detected_at; /* "launch", "free" or "flush" */
	bool has_pid, has_rank;
	uint64_t pid, rank;
	const char *job; /* NULL: none */
	uint64_t ptr;
	bool has_alloc;
	struct {
		uint64_t ptr;
		uint64_t size;
		bool has_stream;
		uint64_t stream;
		struct report_stack stack;
	} alloc;
	struct report_access access;
	bool has_previous;
	struct report_access previous;
	uint64_t count;
	/* The daemon's first_seen and last_seen (Unix ms), absent offline. */
	bool has_first, has_last;
	int64_t first_ms, last_ms;
};

/* The full human report of `f`, ending in a blank line. */
void report_text(FILE *out, bool color, const struct report_finding *f);

/*
 * `f` as one JSON object on one line, newline included; with first_seen and
 * last_seen when it has either (null for the other).
 */
void report_json(FILE *out, const struct report_finding *f);

/*
 * `s` (len bytes) as a JSON string with its quotes. The characters that
 * text_shown() (common/text.h) refuses are escaped: control characters as
 * \n, \t or \uXXXX, a byte that is not part of valid UTF-8 as U+FFFD, so
 * that the output is always JSON and never acts on a terminal.
 */
void report_json_string(FILE *out, const char *s, size_t len);

/*
 * `ms` (Unix ms) as an RFC 3339 UTC timestamp with milliseconds, e.g.
 * "2024-05-01T10:00:00.000Z", into `buf`. 0; -ERANGE when its year is not
 * 0000-9999 (`buf` then holds "?").
 */
#define REPORT_TIME_MAX 32
int report_time(int64_t ms, char buf[REPORT_TIME_MAX]);

/* Whether to colour output on `f`: a terminal, and NO_COLOR unset. */
bool report_want_color(FILE *f);

/* ---- findings from the engine (`analyze`) ------------------------------- */

/* What an engine finding's ids mean: its process's symtab and identity. */
struct report_ctx {
	const struct symtab *syms;
	const struct trace_process *process; /* NULL or !present: unknown */
};

/* Storage for the frames of a converted finding, reused from call to call. */
struct report_frames {
	const char **v;
	size_t cap;
};

/*
 * Resolves engine finding `f` through `c` into *out, which points into `f`'s
 * symtab and into `fr` (valid until the next call with `fr` or
 * report_frames_free()). 0; -ENOMEM.
 */
int report_from_engine(const struct report_ctx *c, const struct finding *f,
		       struct report_frames *fr, struct report_finding *out);

/* Frees what report_from_engine() kept in `fr`. */
void report_frames_free(struct report_frames *fr);

#endif
