/*
 * ring.h - the producer side of the shared-memory ring (proto/ring_layout.h).
 *
 * Any thread of the process may reserve, fill and commit records at once.
 * The fast path, ring_reserve() and ring_commit(), is inline: one
 * compare-and-swap on the head, no lock, no allocation, no syscall. Only a
 * ring without room leaves it (ring__full(): drop, or wait with
 * RING_F_BLOCK).
 *
 * A struct ring is the process's handle on a ring it created. Caller owns it;
 * release with ring_destroy(), which accepts NULL. After fork() a child must
 * not produce into its parent's ring: it leaves it mapped, never to touch it
 * again, and creates its own (agent/npusan.c, invariant 4).
 */
#ifndef NPUSAN_AGENT_RING_H
#define NPUSAN_AGENT_RING_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ringop.h"

struct ring {
	struct ring_header *hdr;
	unsigned char *data;
	uint64_t capacity;
	uint64_t mask;
	uint64_t max_record;
	/*
	 * The newest tail any producer thread has loaded. Stored with release
	 * after an acquire load of hdr->tail and loaded with acquire, so a
	 * thread using it is ordered after the consumer's zeroing as if it had
	 * loaded hdr->tail itself; it saves a read of the consumer's cache line
	 * on every push.
	 */
	_Atomic uint64_t tail_cache;
	/* Set once a blocked producer gave up on a stalled consumer, so later
	 * ones drop at once; cleared when the consumer's beat moves. */
	_Atomic uint64_t stalled_beat;
	unsigned block_timeout_ms;
	uint32_t flags; /* RING_F_*, kept here: the shared copy is untrusted */
	int fd;
	size_t map_len;
};

/* Every ring's max_record is at least this (ring_create()). */
#define RING_MAX_RECORD_MIN (RING_MIN_CAPACITY / 8)

/* A reserved record: fill `payload`, then ring_commit(). */
struct ring_slot {
	struct ring_rec *rec;
	void *payload;
	uint32_t word;
};

/*
 * Creates a ring of `capacity` data bytes (a power of two within
 * [RING_MIN_CAPACITY, RING_MAX_CAPACITY]) in a sealed memfd. `flags` are
 * RING_F_*; with RING_F_BLOCK a producer waits up to `block_timeout_ms` of
 * consumer inactivity before it drops. 0; -EINVAL on a bad capacity; a
 * negative errno from memfd_create, ftruncate, fcntl or mmap.
 */
int ring_create(uint64_t capacity, uint32_t flags, unsigned block_timeout_ms,
		struct ring **out);

/* Unmaps the ring and closes its fd. Accepts NULL. */
void ring_destroy(struct ring *r);

/* The memfd, for the daemon. Owned by the ring. */
static inline int ring_fd(const struct ring *r)
{
	return r->fd;
}

/*
 * Out of line: the ring lacked room for `need` bytes by the cached tail.
 * Reloads the tail, then drops (counting it) or, with RING_F_BLOCK, waits
 * for room. 0 with the reservation in *slot; -ENOBUFS when dropped.
 */
int ring__full(struct ring *r, unsigned type, uint64_t need,
	       struct ring_slot *slot);

/* Out of line: reserves the gap record for pending drops before `need`. */
int ring__reserve_gap(struct ring *r, unsigned type, uint64_t need,
		      struct ring_slot *slot);

/*
 * Drops a record of `need` bytes (at most r->max_record) without
 * reserving it, counting it, when the ring does not block and has no room
 * for it by a fresh tail (nor for the gap record before it, while drops
 * wait for one). True when dropped. For a caller with work to do before a
 * reservation that would fail.
 */
bool ring_drop_if_full(struct ring *r, uint64_t need);

/* Out of line: counts a record too long for this ring. -EMSGSIZE. */
int ring__too_long(struct ring *r);

/*
 * Writes the header of the record of `need` bytes at `pos`, BUSY until
 * ring_commit(). A record near the end runs on into the slack
 * (proto/ring_layout.h, DESIGN 4): its bytes are contiguous.
 */
static inline void ring__place(struct ring *r, uint64_t pos, uint64_t need,
			       unsigned type, struct ring_slot *slot)
{
	struct ring_rec *rec = (struct ring_rec *)(r->data + (pos & r->mask));

	/* Release: pairs with the consumer's acquire load of the word. No
	 * payload is read through BUSY, but the consumer checks the tag of
	 * any non-zero word, even of a live producer's: a BUSY seen with a
	 * stale tag would pass for a corrupt header and be skipped. */
	ring_store_relaxed(&rec->tag, ring_tag(pos));
	ring_store_release(&rec->word, ring_word(RING_BUSY, type, need));
	slot->rec = rec;
	slot->payload = rec + 1;
	slot->word = ring_word(RING_COMMIT, type, need);
}

/*
 * Claims `need` bytes at the head if they fit against `tail`, and writes
 * the record's header. True with *slot filled; false when the ring looks
 * full.
 */
static inline bool ring__try(struct ring *r, unsigned type, uint64_t need,
			     uint64_t tail, struct ring_slot *slot)
{
	uint64_t pos = ring_load_relaxed(&r->hdr->head);

	do {
		if (pos + need - tail > r->capacity)
			return false;
		/*
		 * Relaxed: head only orders producers among themselves. What
		 * must be ordered, our writes after the consumer's zeroing, is
		 * ordered by the acquire load of the tail we checked against.
		 */
	} while (!atomic_compare_exchange_weak_explicit(
		&r->hdr->head, &pos, pos + need, memory_order_relaxed,
		memory_order_relaxed));
	ring__place(r, pos, need, type, slot);
	return true;
}

/* ring__try() against the tail some producer loaded last (tail_cache). */
static inline bool ring__try_cached(struct ring *r, unsigned type,
				    uint64_t need, struct ring_slot *slot)
{
	/* Acquire: pairs with the release store in ring__refresh_tail(). */
	return ring__try(r, type, need, ring_load_acquire(&r->tail_cache),
			 slot);
}

/*
 * Reserves a record of `type` of `need` bytes (ring_rec_size(), at most
 * RING_MAX_RECORD_MIN) when the inline path can: no drops waiting for
 * their gap record, room by the cached tail. True with *slot; false,
 * having claimed and counted nothing, when ring_reserve() would leave the
 * inline path. For a caller that falls back to its own slow path.
 */
static inline bool ring_try_reserve(struct ring *r, unsigned type,
				    uint64_t need, struct ring_slot *slot)
{
	/* Relaxed: as in ring_reserve(). */
	return ring_load_relaxed(&r->hdr->pending) == 0 &&
	       ring__try_cached(r, type, need, slot);
}

/*
 * Reserves a record of `type` with `len` payload bytes. 0 with *slot, whose
 * payload the caller fills before ring_commit(); -ENOBUFS when the ring is
 * full (the record is dropped and counted); -EMSGSIZE when the record
 * exceeds r->max_record (dropped and counted).
 */
static inline int ring_reserve(struct ring *r, unsigned type, size_t len,
			       struct ring_slot *slot)
{
	uint64_t need;

	/* Checked before rounding up, which wraps near SIZE_MAX. */
	if (len > r->max_record - sizeof(struct ring_rec))
		return ring__too_long(r);
	need = ring_rec_size(len);
	/* Relaxed: a drop we do not see yet is reported by a later record. */
	if (ring_load_relaxed(&r->hdr->pending) != 0)
		return ring__reserve_gap(r, type, need, slot);
	if (ring__try_cached(r, type, need, slot))
		return 0;
	return ring__full(r, type, need, slot);
}

/* Publishes a filled record to the consumer. */
static inline void ring_commit(const struct ring_slot *slot)
{
	/* Release: the payload is visible to the consumer's acquire load of
	 * the word in ringread_drain() before the word says COMMIT. */
	ring_store_release(&slot->rec->word, slot->word);
}

/* Records dropped since the ring was created. */
static inline uint64_t ring_dropped(const struct ring *r)
{
	return ring_load_relaxed(&r->hdr->dropped);
}

#endif
