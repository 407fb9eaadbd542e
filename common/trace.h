/*
 * trace.h - reading and writing the trace format (docs/trace-format.md):
 * version 1, and version 2, which adds graph capture and replay.
 *
 * The reader is strict: the first deviation from the format stops it with a
 * message "FILE:LINE: what is wrong", and nothing in its input (NUL bytes,
 * huge lines, truncated files, out-of-range numbers, invalid UTF-8) makes it
 * crash or read out of bounds. The one exception is a torn last line (no
 * newline, not a valid line: a writer killed in the middle of it), which
 * ends the trace and is reported by trace_reader_torn(). It interns
 * operator names and stack frames into a caller's symtab, so an op carries
 * ids, never strings.
 *
 * The writer prints ops in the canonical form the reader accepts, defining
 * each stack before its first use; reading its output back yields the same
 * operations. It hands the stream whole lines only, in batches.
 */
#ifndef NPUSAN_TRACE_H
#define NPUSAN_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "op.h"
#include "symtab.h"

/*
 * A trace's first line is TRACE_MAGIC, a space and the version digit; the
 * writer puts it at the first byte of its stream, so the digit is byte
 * TRACE_VERSION_AT of the file (see trace_writer_new_version()).
 */
#define TRACE_MAGIC "npusan-trace"
#define TRACE_VERSION_AT (sizeof(TRACE_MAGIC))

/* The longest line the reader accepts, line ending excluded. */
#define TRACE_MAX_LINE (64u * 1024 * 1024)

/* A trace's `process` line; strings are NUL-terminated, NULL when absent. */
struct trace_process {
	bool present;
	bool has_rank;
	uint64_t pid;
	uint64_t rank;
	const char *job;
	const char *name;
};

struct trace_reader;

/*
 * Opens `path` for reading ("-" is standard input). `syms` receives the
 * interned names and stacks and must outlive the reader. Caller owns *out;
 * release with trace_reader_close(), which accepts NULL.
 * 0; -ENOMEM; a negative errno from open(2) (the message, naming the file,
 * is then in *errmsg when errmsg is not NULL; caller frees it).
 */
int trace_reader_open(const char *path, struct symtab *syms,
		      struct trace_reader **out, char **errmsg);

/*
 * A reader over `len` bytes at `data`, which must outlive the reader; `name`
 * is the file name used in messages. 0 or -ENOMEM.
 */
int trace_reader_new_mem(const void *data, size_t len, const char *name,
			 struct symtab *syms, struct trace_reader **out);

void trace_reader_close(struct trace_reader *r);

/*
 * Reads the next operation into *op; header, `process` and `stack` lines
 * are consumed on the way. The op's ranges stay valid until the next call.
 * 1 with an op; 0 at the end of the trace, also when that is a torn last
 * line (trace_reader_torn() then says so); -EINVAL on a format error
 * (an input without the header line is one), -EIO on a read error,
 * -ENOMEM, -E2BIG when a line exceeds TRACE_MAX_LINE or a table is full;
 * after an error trace_reader_error() says what was wrong and every later
 * call returns the same error.
 */
int trace_read(struct trace_reader *r, struct op *op);

/* "FILE:LINE: what is wrong" for the last error; "" when there was none. */
const char *trace_reader_error(const struct trace_reader *r);

/*
 * NULL, or when trace_read() returned 0 at a torn last line: "FILE:LINE:
 * the last line is cut short (why it does not parse), ...", for a warning.
 * The lines before it were read as usual; the torn one is not an op.
 */
const char *trace_reader_torn(const struct trace_reader *r);

/* The line of the op trace_read() returned last (1-based). */
unsigned long trace_reader_line(const struct trace_reader *r);

/* The file name given at open. */
const char *trace_reader_name(const struct trace_reader *r);

/* The trace's `process` line as read so far; `present` false when none. */
const struct trace_process *trace_reader_process(const struct trace_reader *r);

/* The version of the trace's header (1 or 2); 0 before it was read. A
 * version 2 word (docs/trace-format.md) in a version 1 trace is an error. */
unsigned trace_reader_version(const struct trace_reader *r);

/* Bytes of input consumed so far. */
uint64_t trace_reader_offset(const struct trace_reader *r);

struct trace_writer;

/*
 * A writer to `f`, which it does not close; writes the header line at once.
 * `syms` resolves the ids in the ops and must outlive the writer. `process`
 * is written right after the header when not NULL and present.
 * Caller owns *out; release with trace_writer_close(). 0; -ENOMEM; -EIO;
 * -EINVAL when the process's job or name is not a string the format can
 * carry (invalid UTF-8, control characters).
 */
int trace_writer_new(FILE *f, const struct symtab *syms,
		     const struct trace_process *process,
		     struct trace_writer **out);

/*
 * As trace_writer_new(), with a header of `version`, 1 or 2 (-EINVAL
 * otherwise); trace_writer_new() writes version 1.
 */
int trace_writer_new_version(FILE *f, const struct symtab *syms,
			     const struct trace_process *process,
			     unsigned version, struct trace_writer **out);

/*
 * Lets a version 1 writer write version 2 ops from now on, for a caller
 * that learns only late that it needs them (the agent's recorder). The
 * header already in the stream is not rewritten: the caller, who owns the
 * file, first calls trace_writer_flush(), then turns byte TRACE_VERSION_AT
 * of the file into '2', and only then writes the first version 2 op, so
 * that the file is a valid trace at every moment.
 */
void trace_writer_upgrade(struct trace_writer *w);

/*
 * Writes one op, preceded by the `stack` line of its stack the first time
 * the stack appears; nothing is written for an op it refuses. The lines
 * are kept in the writer and handed to the stream, with the ones before
 * them, in one fwrite() once enough are pending, and by
 * trace_writer_flush() and trace_writer_close(). 0; -EINVAL when the op is
 * not valid (an unknown kind, a version 2 op on a version 1 writer
 * (op_is_v2()), an empty range, a range past 2^64, an id not
 * in the symtab, a launch without a name, a string the format cannot
 * carry); -E2BIG when its line would exceed TRACE_MAX_LINE; -ENOMEM; -EIO
 * when handing the pending lines to the stream failed (they are lost).
 */
int trace_write_op(struct trace_writer *w, const struct op *op);

/*
 * Hands every pending line to the stream in one fwrite() and flushes the
 * stream: on an unbuffered stream, write(2)s that end at a line's end, so
 * a process killed after it returns leaves whole lines. 0, or -EIO when
 * this or any earlier write failed.
 */
int trace_writer_flush(struct trace_writer *w);

/* Flushes and frees the writer (NULL is accepted). 0, or -EIO when any
 * write failed. */
int trace_writer_close(struct trace_writer *w);

#endif
