/*
 * report.h - findings as people and programs read them.
 *
 * The text report reads like PyTorch's CUDA Sanitizer's: the two accesses
 * (or the allocation and its last use) with their streams, sequence
 * numbers, operators and stacks, and for a missing record_stream the two
 * ways to fix it. The JSON form is one line per finding, exactly as
 * shared/spec/findings.md defines it. `analyze` prints both today; `show`
 * and `findings` will print the same.
 */
#ifndef NPUSAN_REPORT_H
#define NPUSAN_REPORT_H

#include <stdbool.h>
#include <stdio.h>

#include "engine.h"
#include "symtab.h"
#include "trace.h"

struct report_ctx {
	const struct symtab *syms;
	const struct trace_process *process; /* NULL or !present: unknown */
	bool color;
};

/* The full human report of `f`, ending in a blank line. */
void report_text(FILE *out, const struct report_ctx *c,
		 const struct finding *f);

/* `f` as one JSON object on one line, newline included. */
void report_json(FILE *out, const struct report_ctx *c,
		 const struct finding *f);

/* `s` (len bytes) as a JSON string with its quotes. */
void report_json_string(FILE *out, const char *s, size_t len);

/* Whether to colour output on `f`: a terminal, and NO_COLOR unset. */
bool report_want_color(FILE *f);

#endif
