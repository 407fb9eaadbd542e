/*
 * ringread.c - draining a ring a producer process wrote.
 *
 * The consumer keeps its own copy of the tail and trusts only it; the head
 * and the counters in shared memory are read as hints and checked against
 * the capacity. See proto/ring_layout.h for the layout and its invariants.
 */
#include "ringread.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ring_layout.h"

struct ringread {
	struct ring_header *hdr;
	unsigned char *data;
	uint64_t capacity;
	uint64_t mask;
	uint64_t max_record;
	size_t map_len;
	uint64_t tail;
	uint64_t head; /* the newest plausible head seen, at least tail */
	bool stopped;  /* ringread_stop_at_head(): head is final */
	uint64_t beat;
	bool borrowed; /* ringread_borrow(): the mapping is the caller's */
	uintptr_t page; /* the page size, a power of two */
	unsigned char *copy; /* max_record bytes */
	struct ringread_counters n;
};

static const char *ringread_check(const struct ring_header *h, off_t size)
{
	if (h->magic != RING_MAGIC)
		return "not an npusan ring (bad magic)";
	if (h->version != RING_VERSION)
		return h->version < RING_VERSION ?
			       "ring layout version is older than this "
			       "consumer's: agent and daemon come from "
			       "different npusan releases" :
			       "ring layout version is newer than this "
			       "consumer's: agent and daemon come from "
			       "different npusan releases";
	if (h->header_size != RING_HEADER_SIZE)
		return "unexpected ring header size";
	if (h->capacity < RING_MIN_CAPACITY ||
	    h->capacity > RING_MAX_CAPACITY ||
	    (h->capacity & (h->capacity - 1)) != 0)
		return "ring capacity is not a power of two in range";
	if (h->max_record < 64 || h->max_record > h->capacity / 2 ||
	    h->max_record % RING_ALIGN != 0)
		return "ring record limit out of range";
	if ((uint64_t)size != ring_map_size(h->capacity, h->max_record))
		return "ring file size does not match its capacity and slack";
	return NULL;
}

/* Where the data area is, once r->hdr, r->capacity and r->map_len are. */
static void ringread_layout(struct ringread *r)
{
	r->data = (unsigned char *)r->hdr + RING_HEADER_SIZE;
	r->mask = r->capacity - 1;
	r->page = (uintptr_t)sysconf(_SC_PAGESIZE);
	if (r->page == 0 || (r->page & (r->page - 1)) != 0)
		r->page = 1; /* no whole pages: skips zero bytes by bytes */
}

/* Maps the header alone, checks it, then maps the whole ring. */
static int ringread_mmap(int fd, struct ringread *r, const char **why)
{
	struct ring_header *h;
	struct stat st;
	int seals;

	if (fstat(fd, &st) < 0)
		return -errno;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
		*why = "ring file is not sealed against shrinking";
		return -EINVAL;
	}
	if (st.st_size < (off_t)RING_HEADER_SIZE) {
		*why = "ring file is shorter than its header";
		return -EINVAL;
	}
	h = mmap(NULL, RING_HEADER_SIZE, PROT_READ, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED)
		return -errno;
	/* Copied once: the producer may change the shared header later. */
	r->capacity = h->capacity;
	r->max_record = h->max_record;
	*why = ringread_check(h, st.st_size);
	munmap(h, RING_HEADER_SIZE);
	if (*why != NULL)
		return -EINVAL;
	r->map_len = ring_map_size(r->capacity, (uint32_t)r->max_record);
	r->hdr = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED,
		      fd, 0);
	if (r->hdr == MAP_FAILED)
		return -errno;
	ringread_layout(r);
	return 0;
}

/*
 * What ringread_map() and ringread_borrow() share once the ring is mapped:
 * the copy buffer, the tail where a previous consumer stopped, the counts
 * and the first beat. On error frees `r`, and its mapping unless borrowed.
 */
static int ringread_start(struct ringread *r, struct ringread **out,
			  const char **why)
{
	r->copy = malloc(r->max_record);
	if (r->copy == NULL) {
		ringread_unmap(r);
		return -ENOMEM;
	}
	/* Starting where a previous consumer stopped lets a restarted daemon
	 * go on. Acquire: pairs with that consumer's release store in
	 * ringread_publish(), so its `consumed` count, stored before, is
	 * seen below. */
	r->tail = ring_load_acquire(&r->hdr->tail);
	if (r->tail % RING_ALIGN != 0) {
		/* Records would be read across the end of the data area. */
		*why = "ring tail is not a multiple of 8";
		ringread_unmap(r);
		return -EINVAL;
	}
	r->head = r->tail;
	/* Relaxed: written by consumers only, the last of which is gone or is
	 * us; a producer's scribble there only skews its own statistics. */
	r->n.ops = r->n.ops_at_map = ring_load_relaxed(&r->hdr->consumed);
	if (r->n.ops > RINGREAD_MAX_COUNT) {
		r->n.ops = r->n.ops_at_map = 0;
		r->n.corrupt++;
	}
	/* Relaxed: a liveness hint. Beating at once tells blocked producers
	 * that a consumer exists before its first drain. */
	r->beat = ring_load_relaxed(&r->hdr->beat) + 1;
	ring_store_relaxed(&r->hdr->beat, r->beat);
	r->n.capacity = r->capacity;
	r->n.tail = r->tail;
	*out = r;
	return 0;
}

int ringread_map(int fd, struct ringread **out, const char **why)
{
	struct ringread *r = calloc(1, sizeof(*r));
	const char *unused;
	int err;

	if (why == NULL)
		why = &unused;
	*why = NULL;
	if (r == NULL)
		return -ENOMEM;
	err = ringread_mmap(fd, r, why);
	if (err < 0) {
		free(r);
		return err;
	}
	return ringread_start(r, out, why);
}

int ringread_borrow(void *map, size_t map_len, struct ringread **out,
		    const char **why)
{
	struct ringread *r;
	const char *unused;

	if (why == NULL)
		why = &unused;
	*why = NULL;
	if (map_len < RING_HEADER_SIZE) {
		*why = "ring file is shorter than its header";
		return -EINVAL;
	}
	*why = ringread_check(map, (off_t)map_len);
	if (*why != NULL)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return -ENOMEM;
	r->hdr = map;
	r->map_len = map_len;
	r->borrowed = true;
	/* Copied once, as ringread_mmap() does. */
	r->capacity = r->hdr->capacity;
	r->max_record = r->hdr->max_record;
	ringread_layout(r);
	return ringread_start(r, out, why);
}

void ringread_unmap(struct ringread *r)
{
	if (r == NULL)
		return;
	if (!r->borrowed)
		munmap(r->hdr, r->map_len);
	free(r->copy);
	free(r);
}

/*
 * The slack bytes that records in [from, to) may have run into: when the
 * range crosses the end of the data area, the one record that spans the
 * end (DESIGN 4 of ring_layout.h) ends at or before `to`, so within the
 * first to - end bytes of the slack, and within max_record.
 */
static uint64_t ringread_slack_used(const struct ringread *r, uint64_t n,
				    uint64_t first)
{
	return n - first < r->max_record ? n - first : r->max_record;
}

/* Zeroes the consumed bytes [from, to), wrapping at the end, and the
 * slack a record among them ran into. */
static void ringread_zero(struct ringread *r, uint64_t from, uint64_t to)
{
	uint64_t n = to - from, off = from & r->mask, first;

	if (n >= r->capacity) {
		memset(r->data, 0, r->capacity + r->max_record);
		return;
	}
	first = r->capacity - off < n ? r->capacity - off : n;
	memset(r->data + off, 0, first);
	memset(r->data, 0, n - first);
	memset(r->data + r->capacity, 0, ringread_slack_used(r, n, first));
}

/*
 * Zeroes [p, p + n) without writing its whole pages: those are given back
 * to the memfd (MADV_REMOVE punches a hole, which reads as zeroes), so a
 * page that was never written is never brought in. Only the partial pages
 * at the ends are written, and all of it where the hole cannot be made.
 */
static void ringread_punch(const struct ringread *r, unsigned char *p,
			   uint64_t n)
{
	uintptr_t a = (uintptr_t)p, b = a + n;
	uintptr_t pa = (a + r->page - 1) & ~(r->page - 1);
	uintptr_t pb = b & ~(r->page - 1);

	if (pa >= pb || madvise((void *)pa, pb - pa, MADV_REMOVE) < 0) {
		memset(p, 0, n);
		return;
	}
	memset(p, 0, pa - a);
	memset((void *)pb, 0, b - pb);
}

/*
 * Zeroes the skipped bytes [from, to), wrapping at the end, of which only
 * the header at `from` was read. A skip spans up to a whole ring (a corrupt
 * header may claim the head that far ahead), so it is punched, not written:
 * it touches no more of a sparse ring than what was read.
 */
static void ringread_discard(struct ringread *r, uint64_t from, uint64_t to)
{
	uint64_t n = to - from, off = from & r->mask, first;

	first = r->capacity - off < n ? r->capacity - off : n;
	ringread_punch(r, r->data + off, first);
	ringread_punch(r, r->data, n - first);
	ringread_punch(r, r->data + r->capacity,
		       ringread_slack_used(r, n, first));
}

/* Where producers have reserved up to, or `pos` (where this drain has read
 * to) when that is absurd: past a capacity from our tail, behind pos, or
 * not a multiple of 8 (a skip to it would read headers across the end). */
static uint64_t ringread_head(const struct ringread *r, uint64_t pos)
{
	/* Relaxed: used only to bound a skip; nothing is read through it. */
	uint64_t head = ring_load_relaxed(&r->hdr->head);

	if (r->stopped)
		return r->head;
	if (head - r->tail > r->capacity || head - r->tail < pos - r->tail ||
	    head % RING_ALIGN != 0)
		return pos;
	return head;
}

/* Whether a header at `pos` is plausible: length, type and tag. A record
 * of at most max_record bytes ends within the slack wherever it starts,
 * and no producer of this layout writes a pad (DESIGN 4 of
 * ring_layout.h). */
static bool ringread_valid(const struct ringread *r, uint64_t pos,
			   uint32_t word, uint32_t tag)
{
	uint64_t len = ring_word_len(word);

	return len >= sizeof(struct ring_rec) && len <= r->max_record &&
	       ring_word_type(word) != RING_REC_PAD && tag == ring_tag(pos);
}

/* Publishes the tail `pos` after zeroing what was consumed since `clean`
 * (what came before was zeroed as it was skipped). */
static void ringread_publish(struct ringread *r, uint64_t clean, uint64_t pos)
{
	if (pos != r->tail) {
		ringread_zero(r, clean, pos);
		r->n.bytes += pos - r->tail;
		r->tail = pos;
		/* Relaxed: ordered before the tail by the release store below,
		 * so a consumer that maps the ring after us (and loads the tail
		 * we left) sees at least this count (DESIGN 7 of ring.h). */
		ring_store_relaxed(&r->hdr->consumed, r->n.ops);
		/* Release: pairs with the producers' acquire load of tail in
		 * ring__refresh_tail(); the zeroing above comes first. */
		ring_store_release(&r->hdr->tail, pos);
	}
	/* Relaxed: a liveness hint for blocked producers. */
	ring_store_relaxed(&r->hdr->beat, ++r->beat);
	r->n.tail = r->tail;
}

enum ringread_state {
	RINGREAD_READY,      /* committed and plausible */
	RINGREAD_UNFINISHED, /* reserved, not committed yet */
	RINGREAD_CORRUPT,    /* a header no correct producer writes */
};

/*
 * Classifies the record at `pos` and stores its word. Any head above pos is
 * at least the end of the record at pos, since head moves by whole
 * reservations; so a record longer than head - pos is corrupt. The shared
 * head, a line every producer writes, is read only when the newest one
 * seen (*head) is too old to vouch for the record: an empty ring costs the
 * producers nothing.
 */
static enum ringread_state ringread_classify(const struct ringread *r,
					     uint64_t pos, uint64_t *head,
					     uint32_t *word)
{
	struct ring_rec *rec = (struct ring_rec *)(r->data + (pos & r->mask));
	uint32_t tag;
	bool fits;

	/* Acquire: pairs with the release store in ring_commit() (and of
	 * BUSY in ring__place()); the payload is complete once the word says
	 * COMMIT. */
	*word = ring_load_acquire(&rec->word);
	if (*word == 0)
		return RINGREAD_UNFINISHED;
	tag = ring_load_relaxed(&rec->tag);
	if (!ringread_valid(r, pos, *word, tag))
		return RINGREAD_CORRUPT;
	if (ring_word_len(*word) > *head - pos)
		*head = ringread_head(r, pos);
	fits = ring_word_len(*word) <= *head - pos;
	if ((*word & (RING_COMMIT | RING_BUSY)) == RING_COMMIT)
		return fits ? RINGREAD_READY : RINGREAD_CORRUPT;
	if ((*word & (RING_COMMIT | RING_BUSY)) == RING_BUSY && fits)
		return RINGREAD_UNFINISHED;
	return RINGREAD_CORRUPT;
}

/*
 * The bytes to skip as lost at `pos`, or 0 to wait there: a corrupt header
 * skips to the head; with RINGREAD_DEAD an unfinished record is skipped by
 * its length, or up to the head when its header was never written. A
 * header at the head itself is not a record yet: nothing is skipped.
 */
static uint64_t ringread_skip(struct ringread *r, uint64_t pos, uint64_t *head,
			      enum ringread_state st, uint32_t word,
			      unsigned flags)
{
	if (st == RINGREAD_CORRUPT || word == 0) {
		if (st != RINGREAD_CORRUPT && !(flags & RINGREAD_DEAD))
			return 0;
		*head = ringread_head(r, pos);
		if (*head != pos && st == RINGREAD_CORRUPT)
			r->n.corrupt++;
		return *head - pos;
	}
	return flags & RINGREAD_DEAD ? ring_word_len(word) : 0;
}

int ringread_drain(struct ringread *r, unsigned max, unsigned flags,
		   ringread_cb cb, void *arg)
{
	uint64_t pos = r->tail, clean = r->tail, head = r->head, len, skip;
	const struct ring_rec *rec;
	enum ringread_state st;
	uint32_t word;
	int calls = 0, err = 0;

	while ((unsigned)calls < max && err == 0) {
		if (r->stopped && pos == r->head)
			break; /* the rest is not the gone producer's */
		st = ringread_classify(r, pos, &head, &word);
		if (st != RINGREAD_READY) {
			skip = ringread_skip(r, pos, &head, st, word, flags);
			if (skip == 0)
				break;
			ringread_zero(r, clean, pos);
			ringread_discard(r, pos, pos + skip);
			clean = pos + skip;
			r->n.lost_bytes += skip;
			pos += skip;
			calls++;
			err = cb(arg, RINGREAD_LOST, NULL, skip);
			continue;
		}
		rec = (const struct ring_rec *)(r->data + (pos & r->mask));
		len = ring_word_len(word);
		pos += len;
		len -= sizeof(*rec);
		memcpy(r->copy, rec + 1, len);
		r->n.records++;
		if (ring_word_type(word) == RING_REC_OP ||
		    ring_word_type(word) == RING_REC_LAUNCH)
			r->n.ops++;
		calls++;
		err = cb(arg, ring_word_type(word), r->copy, len);
	}
	r->head = head;
	ringread_publish(r, clean, pos);
	return err < 0 ? err : calls;
}

void ringread_stop_at_head(struct ringread *r)
{
	r->head = ringread_head(r, r->head);
	r->stopped = true;
}

uint64_t ringread_take_pending(struct ringread *r)
{
	/* Relaxed: the producer is gone; this only moves a count. */
	return atomic_exchange_explicit(&r->hdr->pending, 0,
					memory_order_relaxed);
}

void ringread_counters(const struct ringread *r, struct ringread_counters *c)
{
	*c = r->n;
	/* Relaxed: statistics. */
	c->head = ring_load_relaxed(&r->hdr->head);
	c->dropped = ring_load_relaxed(&r->hdr->dropped);
}
