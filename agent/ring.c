/*
 * ring.c - creating a ring and the producer's slow paths: a ring without
 * room (drop, or wait for the consumer), the gap record that reports drops,
 * and records too long for the ring.
 */
#include "ring.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "op.h"

int ring_create(uint64_t capacity, uint32_t flags, unsigned block_timeout_ms,
		struct ring **out)
{
	uint64_t max_record = capacity / 8 < RING_REC_LIMIT ? capacity / 8
							     : RING_REC_LIMIT;
	size_t len;
	struct ring *r;
	int err;

	_Static_assert(RING_MAX_RECORD_MIN <= RING_REC_LIMIT &&
			       RING_MAX_RECORD_MIN <= RING_MIN_CAPACITY / 8,
		       "ring_try_reserve()'s bound holds for every ring");
	if (capacity < RING_MIN_CAPACITY || capacity > RING_MAX_CAPACITY ||
	    (capacity & (capacity - 1)) != 0 || (flags & ~RING_F_BLOCK) != 0)
		return -EINVAL;
	/* The slack past the data area is max_record bytes (DESIGN 4). */
	len = ring_map_size(capacity, (uint32_t)max_record);
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return -ENOMEM;
	r->fd = memfd_create("npusan-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (r->fd < 0) {
		err = -errno;
		goto err_free;
	}
	/* Sealed against resizing, so a consumer that checks the seals can
	 * never take SIGBUS from a shrunk file. */
	if (ftruncate(r->fd, (off_t)len) < 0 ||
	    fcntl(r->fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		err = -errno;
		goto err_close;
	}
	r->hdr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	if (r->hdr == MAP_FAILED) {
		err = -errno;
		goto err_close;
	}
	r->map_len = len;
	r->data = (unsigned char *)r->hdr + RING_HEADER_SIZE;
	r->capacity = capacity;
	r->mask = capacity - 1;
	r->max_record = max_record;
	r->flags = flags;
	r->block_timeout_ms = block_timeout_ms;
	r->hdr->magic = RING_MAGIC;
	r->hdr->version = RING_VERSION;
	r->hdr->header_size = RING_HEADER_SIZE;
	r->hdr->capacity = capacity;
	r->hdr->max_record = (uint32_t)r->max_record;
	r->hdr->flags = flags;
	r->hdr->producer_pid = (uint64_t)getpid();
	*out = r;
	return 0;
err_close:
	close(r->fd);
err_free:
	free(r);
	return err;
}

void ring_destroy(struct ring *r)
{
	if (r == NULL)
		return;
	munmap(r->hdr, r->map_len);
	close(r->fd);
	free(r);
}

/* Loads the consumer's tail and shares it with the other producers. */
static uint64_t ring__refresh_tail(struct ring *r)
{
	/* Acquire: pairs with the release store of tail in ringread_drain(),
	 * after which the consumed bytes are zero. */
	uint64_t tail = ring_load_acquire(&r->hdr->tail);

	/* Release: pairs with the acquire loads of tail_cache in
	 * ring_reserve(), passing on what the load above ordered. A thread may
	 * overwrite a newer tail with an older one; that only costs a refresh. */
	ring_store_release(&r->tail_cache, tail);
	return tail;
}

static void ring__drop(struct ring *r)
{
	/* Relaxed: counters; the gap record that reports them carries no
	 * other data. */
	atomic_fetch_add_explicit(&r->hdr->dropped, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&r->hdr->pending, 1, memory_order_relaxed);
}

int ring__too_long(struct ring *r)
{
	ring__drop(r);
	return -EMSGSIZE;
}

/*
 * Whether a producer should keep waiting for room: a consumer has drained
 * at least once, and its beat or the tail moved within block_timeout_ms.
 * `*beat`, `*tail` and `*since` carry what the caller saw last.
 */
static bool ring__consumer_alive(struct ring *r, uint64_t *beat,
				 uint64_t *tail, uint64_t *since)
{
	/* Relaxed: the beat is a liveness hint; room is checked through the
	 * acquire load of tail. */
	uint64_t b = ring_load_relaxed(&r->hdr->beat);
	uint64_t t = ring_load_relaxed(&r->hdr->tail);
	uint64_t now = clock_mono_ms();

	if (b == 0 || b == ring_load_relaxed(&r->stalled_beat))
		return false;
	if (b != *beat || t != *tail || *since == 0) {
		*beat = b;
		*tail = t;
		*since = now;
		return true;
	}
	if (now - *since < r->block_timeout_ms)
		return true;
	/* Relaxed: only a hint to later producers that waiting is futile. */
	ring_store_relaxed(&r->stalled_beat, b);
	return false;
}

/*
 * A blocked producer naps, 50 us doubling to 1 ms, and never spins or
 * yields: a full ring holds far more than a millisecond of the consumer's
 * work, so waking sooner gains nothing, while a yielding producer takes
 * the CPU the consumer needs to make room (on a busy host, 8 producers
 * blocked in sched_yield() halved the daemon's throughput).
 */
static void ring__backoff(unsigned round)
{
	struct timespec ts = { 0, round < 4 ? 50000L << round : 1000000L };

	nanosleep(&ts, NULL);
}

/*
 * Reloads the tail and claims room, waiting for it while the ring blocks
 * and its consumer is alive. True with *slot filled.
 */
static bool ring__wait(struct ring *r, unsigned type, uint64_t need,
		       struct ring_slot *slot)
{
	uint64_t beat = 0, tail = 0, since = 0;

	for (unsigned round = 0;; round++) {
		if (ring__try(r, type, need, ring__refresh_tail(r), slot))
			return true;
		if (!(r->flags & RING_F_BLOCK) ||
		    !ring__consumer_alive(r, &beat, &tail, &since))
			return false;
		ring__backoff(round);
	}
}

int ring__full(struct ring *r, unsigned type, uint64_t need,
	       struct ring_slot *slot)
{
	if (ring__wait(r, type, need, slot))
		return 0;
	ring__drop(r);
	return -ENOBUFS;
}

bool ring_drop_if_full(struct ring *r, uint64_t need)
{
	/* Relaxed: a hint, as in ring__gap_fits(). */
	uint64_t gap = ring_load_relaxed(&r->hdr->pending) != 0 ?
			       ring_rec_size(sizeof(struct ring_op)) :
			       0;
	uint64_t pos;

	if (r->flags & RING_F_BLOCK)
		return false;
	/* Relaxed: as in ring__gap_fits(). */
	pos = ring_load_relaxed(&r->hdr->head);
	if (pos + gap + need - ring__refresh_tail(r) <= r->capacity)
		return false;
	ring__drop(r);
	return true;
}

/*
 * Whether the gap record and the record after it both fit now. A gap that
 * found room only for itself would be followed by more drops, and so a
 * second gap, for one stretch of lost records.
 */
static bool ring__gap_fits(struct ring *r, uint64_t gap_need, uint64_t need)
{
	/* Relaxed: a hint; the claims below decide. */
	uint64_t pos = ring_load_relaxed(&r->hdr->head);
	uint64_t tail = ring__refresh_tail(r);

	return pos + gap_need + need - tail <= r->capacity;
}

int ring__reserve_gap(struct ring *r, unsigned type, uint64_t need,
		      struct ring_slot *slot)
{
	uint64_t gap_need = ring_rec_size(sizeof(struct ring_op)), lost;
	struct ring_slot gap;
	struct ring_op *op;

	/* A full ring drops at once, leaving the count for whoever finds
	 * room: a drop costs no exchange of the count and no giving back. */
	if (!(r->flags & RING_F_BLOCK) && !ring__gap_fits(r, gap_need, need)) {
		ring__drop(r);
		return -ENOBUFS;
	}
	/* Relaxed: whoever takes the count reports it; the gap record is
	 * ordered before our record by the reservations on head. */
	lost = atomic_exchange_explicit(&r->hdr->pending, 0,
					memory_order_relaxed);
	if (lost != 0) {
		if (!ring__try_cached(r, RING_REC_OP, gap_need, &gap) &&
		    !ring__wait(r, RING_REC_OP, gap_need, &gap)) {
			/* Relaxed: as in ring__drop(). */
			atomic_fetch_add_explicit(&r->hdr->pending, lost,
						  memory_order_relaxed);
			ring__drop(r);
			return -ENOBUFS;
		}
		op = gap.payload;
		memset(op, 0, sizeof(*op));
		op->kind = OP_GAP;
		op->flags = RING_OP_HAS_LOST;
		op->a = lost;
		ring_commit(&gap);
	}
	if (ring__try_cached(r, type, need, slot))
		return 0;
	return ring__full(r, type, need, slot);
}
