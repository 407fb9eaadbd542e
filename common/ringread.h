/*
 * ringread.h - the consumer side of the shared-memory ring (proto/ring_layout.h).
 *
 * One thread drains one ring: the daemon's ingest for a registered process,
 * or the agent's recorder. Everything in the mapping is untrusted: every
 * length, tag and position is checked before use, a record is copied out of
 * shared memory before the callback sees it (so the producer cannot change
 * it under the check), and no content of the ring can make the consumer
 * read or write outside the mapping, loop forever or take SIGBUS.
 *
 * Caller owns the struct ringread; release with ringread_unmap(), which
 * accepts NULL. The fd passed to ringread_map() stays the caller's, as
 * does the mapping passed to ringread_borrow().
 */
#ifndef NPUSAN_RINGREAD_H
#define NPUSAN_RINGREAD_H

#include <stddef.h>
#include <stdint.h>

struct ringread;

/*
 * Maps the ring in memfd `fd` after checking its header and seals, and
 * bumps the consumer's beat, so blocked producers know a consumer exists. 0;
 * -EINVAL when the file is not a ring this version reads (*why then says
 * what is wrong: a static string); -ENOMEM; a negative errno from fstat,
 * fcntl or mmap.
 */
int ringread_map(int fd, struct ringread **out, const char **why);

/*
 * ringread_map() for a ring this process maps already (the agent's
 * recorder drains its own process's ring): reads through the `map_len`
 * bytes at `map`, which must stay mapped until ringread_unmap(). One
 * mapping of the memory, not two, also lets ThreadSanitizer pair the
 * producers' stores with the consumer's loads. Errors as ringread_map(),
 * without the seals (this process made the ring).
 */
int ringread_borrow(void *map, size_t map_len, struct ringread **out,
		    const char **why);

void ringread_unmap(struct ringread *r);

/*
 * The largest count of operations a ring can speak of: no process performs,
 * drops or has consumed more (2^53 is three years at 10^8 a second, and the
 * largest integer that a double, as JSON readers and Prometheus hold
 * numbers, keeps exact). A count above it, in the ring's header or in a
 * gap record, is corruption; a consumer's sums of counts saturate at it.
 */
#define RINGREAD_MAX_COUNT (UINT64_C(1) << 53)

/* The pseudo record type for lost records; `len` is the bytes skipped. */
#define RINGREAD_LOST 0u

/* ringread_drain() flags */
#define RINGREAD_DEAD 1u /* the producer is gone: skip what it left
			    unfinished instead of waiting for it */

/*
 * Called with each record in ring order: `type` an enum ring_rec_type (pads
 * are never passed) or RINGREAD_LOST, `payload` a private copy valid until
 * the callback returns. 0 to go on; a negative value stops the drain and is
 * returned by it (the record counts as consumed).
 */
typedef int (*ringread_cb)(void *arg, unsigned type, const void *payload,
			   size_t len);

/*
 * Consumes up to `max` committed records (pads not counted), stopping early
 * at one not committed yet (unless RINGREAD_DEAD), then publishes the new
 * tail and bumps the consumer's beat. A record whose header is corrupt (bad
 * length or tag) makes the consumer skip to the producers' head, reporting
 * RINGREAD_LOST. Returns the number of callbacks made, or a callback's
 * negative return.
 */
int ringread_drain(struct ringread *r, unsigned max, unsigned flags,
		   ringread_cb cb, void *arg);

/*
 * The producer is gone: what is reserved from now on is not its own (a
 * child that kept the mapping may write on). Later drains stop at the head
 * seen now (or the newest plausible one seen before, when it is absurd),
 * so that what is left of a process is at most one ring, drained in
 * batches like any other.
 */
void ringread_stop_at_head(struct ringread *r);

/*
 * Takes the count of dropped records that no gap record reported yet; for
 * a producer that is gone (a live one reports them itself).
 */
uint64_t ringread_take_pending(struct ringread *r);

struct ringread_counters {
	uint64_t capacity;  /* data bytes */
	uint64_t head;      /* producers' reservation position (untrusted) */
	uint64_t tail;      /* our position */
	uint64_t dropped;   /* records the producers dropped (untrusted) */
	uint64_t records;   /* records delivered, pads and lost excluded */
	uint64_t ops;       /* operation records taken by every consumer of
			       the ring, ever (proto/ring_layout.h DESIGN 7) */
	uint64_t ops_at_map; /* what `ops` was when we mapped the ring */
	uint64_t bytes;     /* bytes consumed */
	uint64_t lost_bytes; /* bytes skipped as lost */
	uint64_t corrupt;   /* corrupt headers met, and an impossible count
			       of operations consumed at map (taken as 0) */
};

void ringread_counters(const struct ringread *r, struct ringread_counters *c);

#endif
