/*
 * oppipe.c - `analyze`'s trace reader on a thread of its own: it parses
 * operations into batches that the engine's thread takes in order, so
 * that parsing and analysis, each about half of analyze's work, run at
 * once. The engine stays on one thread. This file owns the batches and
 * the reader's thread; the reader and its symtab stay the caller's.
 *
 * DESIGN
 *  1. OPPIPE_DEPTH batches go round a bounded single-producer,
 *     single-consumer queue: `filled` batches from slot `head` on are the
 *     consumer's (the first of them the one it is reading), the slot after
 *     them the reader's to fill. `head` and `filled` change only under
 *     `mu`; a batch's contents are written by one side before the lock
 *     that hands it over, read by the other after it, so the mutex orders
 *     them. A batch of OPPIPE_BATCH ops costs three uncontended locks.
 *  2. The reader parses each op straight into its batch, which holds
 *     copies of the op's ranges and their argument names, since the
 *     reader's lists are overwritten (and may move) at the next line. The
 *     arrays grow only while the batch is empty, so those of ops already
 *     in it never move: an op that does not fit starts the next batch.
 *  3. A batch's `end` is 1 when more follow, else what trace_read()
 *     returned after its last op (0 at the end, or the reader's error);
 *     the thread ends after that batch, or when the consumer stops it.
 *     The consumer takes a whole batch at a time.
 *  4. Every op carries the line it came from, so that an engine error
 *     names the line as the single-threaded loop did.
 *  5. The reader is the faster side: it fills every slot and waits. Woken
 *     for each slot freed, it would sleep again after one batch, and each
 *     wake-up is a futex call (an interrupt to the other core) on the
 *     engine's thread, the slower one. So once the reader waits, it sleeps
 *     until no more than OPPIPE_REFILL_AT batches are left, and is woken
 *     once, by the consumer that takes the queue down to that: one wake-up
 *     per OPPIPE_DEPTH - OPPIPE_REFILL_AT batches. The consumer, which
 *     waits only when the reader is behind, is woken at the first batch.
 *     Who sleeps says so in `reader_waits` / `consumer_waits` (under mu),
 *     so that the other side signals only a sleeper, and it signals once
 *     it has let go of `mu`: woken under it, the sleeper would wake only
 *     to wait for the mutex, a second sleep and wake-up.
 */
#include "oppipe.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"

#define OPPIPE_BATCH 512
#define OPPIPE_DEPTH 8
/* The batches left when a waiting reader is woken (DESIGN 5). */
#define OPPIPE_REFILL_AT (OPPIPE_DEPTH / 2)
_Static_assert(OPPIPE_REFILL_AT > 0, "a reader is woken before the queue "
					 "is empty (oppipe_next_batch())");
/* The ranges a batch starts with: launches have 1 to 4. */
#define OPPIPE_RANGES (4 * OPPIPE_BATCH)

struct oppipe_batch {
	struct op ops[OPPIPE_BATCH];
	unsigned long lines[OPPIPE_BATCH];
	size_t n;
	struct op_range *ranges;
	size_t nranges;
	size_t ranges_cap;
	uint32_t *args; /* the ranges' argument names (DESIGN 2) */
	size_t nargs;
	size_t args_cap;
	int end; /* DESIGN 3 */
};

struct oppipe {
	struct trace_reader *r;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t readable; /* a batch filled */
	pthread_cond_t writable; /* a slot freed, or stop */
	struct oppipe_batch *slots[OPPIPE_DEPTH];
	size_t head;   /* under mu */
	size_t filled; /* under mu */
	bool stop;     /* under mu: the consumer wants no more */
	bool reader_waits;   /* under mu: for `writable` (DESIGN 5) */
	bool consumer_waits; /* under mu: for `readable` */
	/* The consumer's alone. */
	bool held; /* it reads slots[head] */
	/* The reader thread's alone: the op that did not fit in the last
	 * batch (its ranges still the reader's, DESIGN 2). */
	bool pending;
	struct op pending_op;
	unsigned long pending_line;
};

/* Copies the n ranges at v to out; NULL for none, as the reader gives
 * them. A loop, not memcpy(): an op has one to four. */
static const struct op_range *oppipe_copy_ranges(struct op_range *out,
						 const struct op_range *v,
						 size_t n)
{
	if (v == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		out[i] = v[i];
	return out;
}

/* oppipe_copy_ranges() of a list's argument names. */
static const uint32_t *oppipe_copy_args(uint32_t *out, const uint32_t *v,
					size_t n)
{
	if (v == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		out[i] = v[i];
	return out;
}

/* Makes room for `need` more items in an array of b; 0, 1 when b is not
 * empty and has no room (DESIGN 2), -ENOMEM. */
static int oppipe_room(const struct oppipe_batch *b, void **arr, size_t *cap,
		       size_t used, size_t need, size_t size)
{
	if (*cap - used >= need)
		return 0;
	if (b->n > 0)
		return 1;
	return grow_array(arr, cap, need, size);
}

/* Keeps the op the reader just parsed into b->ops[b->n], from `line`,
 * copying what it points to into b: 0; 1 when b has no room for it (b is
 * not empty); -ENOMEM. */
static int oppipe_keep(struct oppipe_batch *b, unsigned long line)
{
	struct op *o = &b->ops[b->n];
	size_t nr = o->nreads, nw = o->nwrites;
	const uint32_t *ra = o->read_args, *wa = o->write_args;
	size_t nargs = (ra ? nr : 0) + (wa ? nw : 0);
	struct op_range *rout;
	uint32_t *aout;
	int err;

	err = oppipe_room(b, (void **)&b->ranges, &b->ranges_cap, b->nranges,
			  nr + nw, sizeof(*b->ranges));
	if (err == 0 && nargs > 0)
		err = oppipe_room(b, (void **)&b->args, &b->args_cap, b->nargs,
				  nargs, sizeof(*b->args));
	if (err != 0)
		return err;
	rout = b->ranges + b->nranges;
	o->reads = oppipe_copy_ranges(rout, o->reads, nr);
	o->writes = oppipe_copy_ranges(rout + nr, o->writes, nw);
	b->nranges += nr + nw;
	if (nargs > 0) {
		aout = b->args + b->nargs;
		o->read_args = oppipe_copy_args(aout, ra, nr);
		o->write_args = oppipe_copy_args(aout + (ra ? nr : 0), wa, nw);
		b->nargs += nargs;
	}
	b->lines[b->n++] = line;
	return 0;
}

/* Fills b from the reader, the op left pending first (DESIGN 2, 3). */
static void oppipe_fill(struct oppipe *p, struct oppipe_batch *b)
{
	int rc = 1, keep = 0;

	b->n = 0;
	b->nranges = 0;
	b->nargs = 0;
	if (p->pending) {
		b->ops[0] = p->pending_op;
		keep = oppipe_keep(b, p->pending_line);
	}
	p->pending = false;
	while (keep == 0 && b->n < OPPIPE_BATCH &&
	       (rc = trace_read(p->r, &b->ops[b->n])) == 1) {
		keep = oppipe_keep(b, trace_reader_line(p->r));
		if (keep == 1) {
			p->pending = true;
			p->pending_op = b->ops[b->n];
			p->pending_line = trace_reader_line(p->r);
			rc = 1;
		}
	}
	b->end = keep < 0 ? keep : rc;
}

/* The slot to fill next, once there is one; NULL when stopped. */
static struct oppipe_batch *oppipe_wait_free(struct oppipe *p)
{
	struct oppipe_batch *b = NULL;

	pthread_mutex_lock(&p->mu);
	if (p->filled == OPPIPE_DEPTH && !p->stop) {
		p->reader_waits = true;
		while (p->reader_waits && !p->stop)
			pthread_cond_wait(&p->writable, &p->mu);
	}
	if (!p->stop)
		b = p->slots[(p->head + p->filled) % OPPIPE_DEPTH];
	pthread_mutex_unlock(&p->mu);
	return b;
}

static void *oppipe_reader(void *arg)
{
	struct oppipe *p = arg;
	struct oppipe_batch *b;
	int end = 1;
	bool wake;

	while (end == 1 && (b = oppipe_wait_free(p)) != NULL) {
		oppipe_fill(p, b);
		end = b->end;
		pthread_mutex_lock(&p->mu);
		p->filled++;
		wake = p->consumer_waits;
		p->consumer_waits = false;
		pthread_mutex_unlock(&p->mu);
		if (wake) /* DESIGN 5: once the lock is free for it */
			pthread_cond_signal(&p->readable);
	}
	return NULL;
}

static void oppipe_free_slots(struct oppipe *p)
{
	for (size_t i = 0; i < OPPIPE_DEPTH; i++) {
		if (p->slots[i] != NULL) {
			free(p->slots[i]->ranges);
			free(p->slots[i]->args);
		}
		free(p->slots[i]);
	}
}

static int oppipe_alloc_slots(struct oppipe *p)
{
	for (size_t i = 0; i < OPPIPE_DEPTH; i++) {
		struct oppipe_batch *b = calloc(1, sizeof(*b));

		p->slots[i] = b;
		if (b == NULL)
			return -ENOMEM;
		if (grow_array((void **)&b->ranges, &b->ranges_cap,
			       OPPIPE_RANGES, sizeof(*b->ranges)) < 0)
			return -ENOMEM;
	}
	return 0;
}

int oppipe_start(struct trace_reader *r, struct oppipe **out)
{
	struct oppipe *p = calloc(1, sizeof(*p));
	int err;

	if (p == NULL)
		return -ENOMEM;
	p->r = r;
	err = oppipe_alloc_slots(p);
	if (err == 0) {
		pthread_mutex_init(&p->mu, NULL);
		pthread_cond_init(&p->readable, NULL);
		pthread_cond_init(&p->writable, NULL);
		err = -pthread_create(&p->thread, NULL, oppipe_reader, p);
		if (err == 0) {
			*out = p;
			return 0;
		}
		pthread_cond_destroy(&p->writable);
		pthread_cond_destroy(&p->readable);
		pthread_mutex_destroy(&p->mu);
	}
	oppipe_free_slots(p);
	free(p);
	return err;
}

/* Hands the batch at head back to the reader and waits for the next. */
static struct oppipe_batch *oppipe_next_batch(struct oppipe *p)
{
	struct oppipe_batch *b;
	bool wake = false;

	pthread_mutex_lock(&p->mu);
	if (p->held) {
		p->head = (p->head + 1) % OPPIPE_DEPTH;
		p->filled--;
		wake = p->reader_waits && p->filled <= OPPIPE_REFILL_AT;
		p->reader_waits &= !wake;
	}
	/* The reader waited since the queue was full and only this side
	 * takes from it: it is woken at OPPIPE_REFILL_AT left, never empty,
	 * so that no wait comes between here and the signal below. */
	assert(!wake || p->filled == OPPIPE_REFILL_AT);
	while (p->filled == 0) {
		p->consumer_waits = true;
		pthread_cond_wait(&p->readable, &p->mu);
	}
	b = p->slots[p->head];
	pthread_mutex_unlock(&p->mu);
	if (wake) /* DESIGN 5: once the lock is free for it */
		pthread_cond_signal(&p->writable);
	p->held = true;
	return b;
}

int oppipe_next(struct oppipe *p, const struct op **ops,
		const unsigned long **lines, size_t *n)
{
	struct oppipe_batch *b = p->slots[p->head];

	do {
		if (p->held && b->end != 1)
			return b->end;
		b = oppipe_next_batch(p);
	} while (b->n == 0);
	*ops = b->ops;
	*lines = b->lines;
	*n = b->n;
	return 1;
}

void oppipe_free(struct oppipe *p)
{
	if (p == NULL)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_signal(&p->writable);
	pthread_mutex_unlock(&p->mu);
	pthread_join(p->thread, NULL);
	pthread_cond_destroy(&p->writable);
	pthread_cond_destroy(&p->readable);
	pthread_mutex_destroy(&p->mu);
	oppipe_free_slots(p);
	free(p);
}
