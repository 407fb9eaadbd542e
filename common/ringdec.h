/*
 * ringdec.h - turning the records of one ring into operations.
 *
 * The consumer of a ring (the daemon's ingest, the agent's recorder) hands
 * each record from ringread_drain() to ringdec_record(). It checks the
 * payload, keeps the producer's string and stack definitions, maps the
 * producer's ids to ids of the caller's symtab, and yields a struct op that
 * the engine or the trace writer accepts: strings are made valid UTF-8
 * without control characters, empty ranges are dropped and ranges past 2^64
 * are cut there. A record lost in the ring becomes a `gap`.
 *
 * Caller owns the struct ringdec; release with ringdec_free(), which accepts
 * NULL. The symtab must outlive it.
 */
#ifndef NPUSAN_RINGDEC_H
#define NPUSAN_RINGDEC_H

#include <stddef.h>
#include <stdint.h>

#include "op.h"
#include "symtab.h"

struct ringdec;

/* What a string becomes once the symtab holds its bound of bytes. */
#define RINGDEC_OVER_CAP "<over the memory cap>"

int ringdec_new(struct symtab *syms, struct ringdec **out);
void ringdec_free(struct ringdec *d);

/*
 * Bounds the bytes the symtab may hold (symtab_bytes()) through this
 * ring's definitions; 0 (the default): no bound. Past it a string becomes
 * RINGDEC_OVER_CAP and a stack the empty one, counted in over_cap.
 */
void ringdec_set_max_bytes(struct ringdec *d, size_t max_bytes);

/*
 * Decodes one record (type and payload as passed to a ringread_cb). 1 with
 * an op in *op, whose ranges stay valid until the next call; 0 when the
 * record defined a string or a stack; -EBADMSG when a definition is
 * malformed (ringdec_error() says how; nothing was defined); -ENOMEM;
 * -E2BIG when the symtab is full. A record that carries an operation, or
 * may (an unknown type), but cannot be decoded (malformed, or -ENOMEM,
 * -E2BIG) is one operation lost: 1, with a gap of one in *op, counted in
 * `lost`, and ringdec_error() says what was wrong.
 */
int ringdec_record(struct ringdec *d, unsigned type, const void *payload,
		   size_t len, struct op *op);

/* What was wrong with the last malformed record; "" when none was. */
const char *ringdec_error(const struct ringdec *d);

struct ringdec_counters {
	uint64_t ops;
	uint64_t strings;
	uint64_t stacks;
	uint64_t malformed;
	uint64_t lost;      /* operation records made gaps (see above) */
	uint64_t undefined; /* references to ids never defined */
	uint64_t truncated; /* strings cut at OP_MAX_STRING */
	uint64_t over_cap;  /* definitions past the bound on bytes */
};

void ringdec_counters(const struct ringdec *d, struct ringdec_counters *c);

#endif
