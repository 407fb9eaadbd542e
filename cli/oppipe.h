/*
 * oppipe.h - the trace reader on a thread of its own, handing its
 * operations to the caller (the engine's thread) in batches through a
 * bounded queue, so that parsing and analysis run on two cores.
 */
#ifndef NPUSAN_OPPIPE_H
#define NPUSAN_OPPIPE_H

#include "trace.h"

struct oppipe;

/*
 * Starts a thread that reads every op of `r`. From then until
 * oppipe_free() only that thread uses `r` and the symtab it interns
 * into. 0, -ENOMEM or the error of pthread_create(); caller owns *out.
 */
int oppipe_start(struct trace_reader *r, struct oppipe **out);

/*
 * The next batch of ops: *n (at least 1) ops at *ops and the trace lines
 * they came from at *lines, valid until the next call: 1, or what
 * trace_read() returned at the end of the ops: 0 at the end of the
 * trace, or its negative error.
 */
int oppipe_next(struct oppipe *p, const struct op **ops,
		const unsigned long **lines, size_t *n);

/* Stops the reader (it may not have read everything), joins its thread
 * and frees `p`; the reader is the caller's again. Accepts NULL. */
void oppipe_free(struct oppipe *p);

#endif
