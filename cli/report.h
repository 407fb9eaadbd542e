/*
 * report.h - findings as people and programs read them.
 *
 * The text report reads like PyTorch's CUDA Sanitizer's: the two accesses
 * (or the allocation and its last use) with their streams, sequence
 * numbers, operators and stacks, and for a missing record_stream the two
 * ways to fix it. The JSON form is one line per finding, exactly as
 * docs/findings.md defines it.
 *
 * Both formatters take a struct finding_view (engine/finding_view.h), so
 * that every command prints a finding the same way: `analyze` resolves the
 * engine's findings with finding_view_of(), `findings`, `show` and
 * `report` decode the daemon's replies with client_finding().
 */
#ifndef NPUSAN_REPORT_H
#define NPUSAN_REPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "finding_view.h"

/*
 * The full human report of `f`, ending in a blank line. Native frames are
 * shown as "file:line in function (module+0xoff)" where their module and
 * its debug information (searched under $NPUSAN_DEBUG_DIR, else
 * /usr/lib/debug) resolve them (common/symbolize.h), as recorded otherwise.
 */
#define REPORT_ENV_DEBUG_DIR "NPUSAN_DEBUG_DIR"
void report_text(FILE *out, bool color, const struct finding_view *f);

/* Frees what report_text() kept between findings (the symbolizer's open
 * modules). Call once the command is done. */
void report_fini(void);

/*
 * `f` as one JSON object on one line, newline included; with first_seen and
 * last_seen when it has either (null for the other).
 */
void report_json(FILE *out, const struct finding_view *f);

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

#endif
