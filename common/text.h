/*
 * text.h - the one policy for text from outside: operator names and stack
 * frames from agents and traces, job, host and executable names, messages.
 *
 * Such text is stored as it came, as far as the trace format can carry it
 * (text_keep()), and made safe only where it is displayed: on a
 * terminal, in a table or a log line every character text_shown() refuses
 * becomes '?'; JSON escapes the same characters. The ones refused are
 * those a terminal may act on or that are no text at all: control
 * characters (C0, DEL and C1, U+0000-U+001F and U+007F-U+009F) and bytes
 * that are not valid UTF-8.
 */
#ifndef NPUSAN_TEXT_H
#define NPUSAN_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/*
 * Whether the character at `p` (`avail` bytes readable, at least 1) may be
 * displayed as it is; its length in *n: that of its valid UTF-8 sequence,
 * or 1 for a byte that starts none.
 */
bool text_shown(const unsigned char *p, size_t avail, size_t *n);

/*
 * `s` for display into `out` (`cap` bytes, NUL included): every character
 * text_shown() refuses becomes '?', and the text is cut at a character
 * boundary when it does not fit. `out` may be `s` itself, the result never
 * being longer. Returns `out`; NULL when `s` is NULL, `cap` is 0, or
 * nothing is left.
 */
char *text_clean(const char *s, char *out, size_t cap);

/* Writes `s` to `f` as text_clean() would make it. */
void text_put(FILE *f, const char *s);

/*
 * Whether the character at `p` can be carried by the trace format (valid
 * UTF-8, no control character below 0x20 other than tab and newline, which
 * quoted strings escape); its length in *n as for text_shown().
 */
bool text_trace_char(const unsigned char *p, size_t avail, size_t *n);

/*
 * The `len` bytes at `s` as text to store and pass on, into `out` (`cap`
 * bytes, NUL included): every character text_trace_char() refuses becomes
 * '?', and the text is cut at a character boundary when it does not fit.
 * So a live analysis, its recording and `analyze` of that recording see
 * one text. `out` may be `s`. Returns the length written.
 */
size_t text_keep(const char *s, size_t len, char *out, size_t cap);

#endif
