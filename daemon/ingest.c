/*
 * ingest.c - draining rings into engines, and findings into the store.
 *
 * DESIGN
 *
 * 1. Each registered process belongs to one drain thread, chosen at
 *    registration (the one with the fewest). A thread takes its processes
 *    in turn and drains at most INGEST_BATCH records from each per round,
 *    so a flooding process costs the others one batch of delay, never
 *    more; a thread that found nothing in a round naps period_ms.
 * 2. A process's ring, decoder, symtab and engine are touched only by its
 *    thread. The loop thread only links a new process into a thread's list
 *    and marks one disconnected, both under that thread's mutex.
 * 3. The engine deduplicates. A first occurrence goes to the store at once;
 *    repeats are summed per finding and handed over once per round, so a
 *    finding repeated a million times a second costs the store one upsert
 *    per round.
 * 4. A disconnected process is drained as long as it lives (an agent that
 *    closed its socket may still push); once it is gone, the last drain
 *    skips what it left unfinished, its drops become a gap, and the store
 *    records it exited. A process that registers again while it is still
 *    drained here keeps its handle: a ring has one consumer.
 * 5. Counters go on where the store left them, across daemon restarts.
 *    A daemon that takes a ring over from another one (which died) finds
 *    in the ring how many operations were ever taken from it, and in the
 *    store how many the last stored counters had accounted for: the
 *    difference were taken by the dead daemon and never stored, and are
 *    counted lost. The engine needs no gap for them, being new; the agent
 *    sends its snapshot and a gap when it registers again.
 * 6. Registration never waits for the database (a lock another program
 *    holds, a full disk): a process is drained and analysed under the
 *    store's provisional id from the start, and its drain thread takes
 *    over the stored counters (5) once the store has its row. Until then
 *    its counters are not sent, and it is not finished, even when gone,
 *    so that no row is ever written with less than it had; findings go
 *    to the store meanwhile. A finding the store refuses (its queue is
 *    full) is counted as operations lost, so the verdict cannot claim to
 *    be complete.
 */
#include "ingest.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "procstat.h"
#include "ringdec.h"
#include "ringread.h"
#include "symtab.h"
#include "u64map.h"

#define INGEST_BATCH 4096         /* records per process per round */
#define INGEST_UPDATE_MS 200      /* counters to the store at most this often */
#define INGEST_ALIVE_CHECK_MS 500 /* a disconnected process's liveness */
#define INGEST_MAX_THREADS 64
#define INGEST_ENGINE_BYTES ((size_t)1 << 30)

struct ingest_proc {
	struct ingest_proc *next;
	struct ingest_thread *thread;
	int64_t id; /* the store's provisional id (DESIGN 6) */
	bool stored; /* its row is stored, its counters taken over */
	uint32_t pid;
	uint64_t start_time;
	int fd;
	struct ringread *rr;
	struct symtab *syms;
	struct ringdec *dec;
	struct engine *engine;
	struct u64map repeats;  /* engine finding id -> index in pending */
	struct finding *pending; /* the latest repeat of each, count = delta */
	size_t npending, cap_pending;
	uint64_t events, lost, gaps;
	/* enum store_state, running or dormant: the loop thread's (attach and
	 * detach), read by the drain thread. */
	_Atomic int state;
	int64_t last_ms, updated_ms, checked_ms;
	int64_t empty_mono_ms; /* when its ring was last found empty */
	bool disconnected; /* under the thread's lock */
	struct ingest *in;
};

struct ingest_thread {
	pthread_t thread;
	pthread_mutex_t lock;
	struct ingest_proc *procs;
	unsigned nprocs;
	struct ingest *in;
	/* Its latest round's fullest ring (parts per million) and longest
	 * lag; written by the thread, read by ingest_get_stats(). */
	_Atomic uint32_t fill_ppm;
	_Atomic int64_t lag_ms;
};

struct ingest {
	struct store *store;
	unsigned period_ms;
	unsigned nthreads;
	_Atomic bool stop;
	_Atomic uint64_t events, lost;
	_Atomic uint32_t running;
	_Atomic uint64_t findings[FINDING_KIND_COUNT]; /* occurrences */
	pthread_mutex_t rate_lock;
	int64_t rate_ms;
	uint64_t rate_events;
	double rate;
	struct ingest_thread threads[INGEST_MAX_THREADS];
};

static int64_t ingest_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* For durations (the lag), which the wall clock's steps must not bend. */
static int64_t ingest_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- findings -------------------------------------------------------- */

/* Frames of symtab stack `id` as strings, into `buf` (at most `max`). */
static size_t ingest_frames(const struct symtab *syms, uint32_t id,
			    const char **buf, size_t max)
{
	const uint32_t *frames;
	size_t n = symtab_stack(syms, id, &frames);

	if (n > max)
		n = max;
	for (size_t i = 0; i < n; i++)
		buf[i] = symtab_str(syms, frames[i], NULL);
	return n;
}

#define INGEST_MAX_FRAMES 256

static void ingest_access(const struct symtab *syms,
			  const struct finding_access *a,
			  struct store_access *out, const char **frames)
{
	out->stream = a->stream;
	out->seq = a->seq;
	out->write = a->write;
	out->op = symtab_str(syms, a->op, NULL);
	if (out->op == NULL)
		out->op = "?";
	out->stack = frames;
	out->nstack = ingest_frames(syms, a->stack, frames, INGEST_MAX_FRAMES);
}

/* Hands one finding, standing for `count` occurrences, to the store. */
static void ingest_submit(struct ingest_proc *p, const struct finding *f,
			  uint64_t count)
{
	static __thread const char *frames[3][INGEST_MAX_FRAMES];
	struct store_finding sf = {
		.process_id = p->id,
		.kind = f->kind,
		.detected_at = f->detected_at,
		.ptr = f->ptr,
		.has_alloc = f->has_alloc,
		.has_previous = f->has_previous,
		.count = count,
		.first_ms = p->last_ms,
		.last_ms = p->last_ms,
	};

	if (f->has_alloc) {
		sf.alloc_ptr = f->alloc.ptr;
		sf.alloc_size = f->alloc.size;
		sf.alloc_has_stream = f->alloc.has_stream;
		sf.alloc_stream = f->alloc.stream;
		sf.alloc_stack = frames[2];
		sf.alloc_nstack = ingest_frames(p->syms, f->alloc.stack,
						frames[2], INGEST_MAX_FRAMES);
	}
	ingest_access(p->syms, &f->access, &sf.access, frames[0]);
	if (f->has_previous)
		ingest_access(p->syms, &f->previous, &sf.previous, frames[1]);
	if (store_finding_submit(p->in->store, &sf) < 0) {
		/* Its operations' outcome is lost (DESIGN 6). */
		p->lost += count;
		atomic_fetch_add_explicit(&p->in->lost, count,
					  memory_order_relaxed);
	}
}

/* The engine's callback: firsts go out now, repeats are summed (DESIGN 3). */
static void ingest_finding_cb(const struct finding *f, bool first, void *arg)
{
	struct ingest_proc *p = arg;
	uint64_t *slot;
	struct finding *grown;

	/* Relaxed: a statistic; nothing is ordered by it. Every occurrence,
	 * first or repeat, is counted here once. */
	if (f->kind < FINDING_KIND_COUNT)
		atomic_fetch_add_explicit(&p->in->findings[f->kind], 1,
					  memory_order_relaxed);
	if (first) {
		ingest_submit(p, f, 1);
		return;
	}
	slot = u64map_get(&p->repeats, f->id);
	if (slot != NULL) {
		uint64_t delta = p->pending[*slot].count + 1;

		p->pending[*slot] = *f;
		p->pending[*slot].count = delta;
		return;
	}
	if (p->npending == p->cap_pending) {
		size_t cap = p->cap_pending ? p->cap_pending * 2 : 16;

		grown = realloc(p->pending, cap * sizeof(*grown));
		if (grown == NULL) {
			ingest_submit(p, f, 1); /* no room to sum: send now */
			return;
		}
		p->pending = grown;
		p->cap_pending = cap;
	}
	if (u64map_put(&p->repeats, f->id, p->npending) < 0) {
		ingest_submit(p, f, 1);
		return;
	}
	p->pending[p->npending] = *f;
	p->pending[p->npending].count = 1;
	p->npending++;
}

static void ingest_flush_repeats(struct ingest_proc *p)
{
	for (size_t i = 0; i < p->npending; i++)
		ingest_submit(p, &p->pending[i], p->pending[i].count);
	p->npending = 0;
	u64map_clear(&p->repeats);
}

/* ---- draining ----------------------------------------------------------- */

/* A gap: one more, and the operations it says were lost (none counted
 * when it does not know). */
static void ingest_count_gap(struct ingest_proc *p, const struct op *op)
{
	uint64_t n = op->has_lost ? op->lost : 0;

	p->gaps++;
	p->lost += n;
	atomic_fetch_add_explicit(&p->in->lost, n, memory_order_relaxed);
}

static int ingest_record_cb(void *arg, unsigned type, const void *payload,
			    size_t len)
{
	struct ingest_proc *p = arg;
	struct op op;

	if (ringdec_record(p->dec, type, payload, len, &op) != 1)
		return 0; /* a definition, or malformed: ringdec counts it */
	/* A gap is no operation of the process's: it is counted apart. */
	if (op.kind == OP_GAP)
		ingest_count_gap(p, &op);
	else
		p->events++;
	/* An op the engine refuses (a stream beyond its limit) is skipped;
	 * out of memory it forgets history itself, as a gap would. */
	engine_feed(p->engine, &op);
	return 0;
}

/* Drains one batch; the number of records taken. */
static int ingest_drain(struct ingest_proc *p, unsigned flags)
{
	uint64_t before = p->events;
	int n = ringread_drain(p->rr, INGEST_BATCH, flags, ingest_record_cb, p);

	if (n > 0) {
		p->last_ms = ingest_now_ms();
		/* Relaxed: a statistic, summed once per batch. */
		atomic_fetch_add_explicit(&p->in->events, p->events - before,
					  memory_order_relaxed);
	}
	return n < 0 ? 0 : n;
}

/*
 * After a drain of `p` at monotonic `now`: how full its ring is (parts
 * per million) and how long since it was last found empty (ms), as
 * ingest_stats defines them. head is the producers' and untrusted:
 * the fill is clamped to the capacity.
 */
static void ingest_backlog(struct ingest_proc *p, int64_t now,
			   uint32_t *fill_ppm, int64_t *lag_ms)
{
	struct ringread_counters c;
	uint64_t used;

	ringread_counters(p->rr, &c);
	used = c.head - c.tail;
	if (c.head < c.tail || c.capacity == 0)
		used = 0; /* a producer's nonsense: not a backlog */
	if (used > c.capacity)
		used = c.capacity;
	if (used == 0)
		p->empty_mono_ms = now;
	*fill_ppm = c.capacity ? (uint32_t)(used * 1000000 / c.capacity) : 0;
	*lag_ms = now - p->empty_mono_ms;
}

/* The counters as the store keeps them (DESIGN 5). */
static void ingest_counters(const struct ingest_proc *p,
			    struct store_counters *c)
{
	struct ringread_counters rc;

	ringread_counters(p->rr, &rc);
	*c = (struct store_counters){ .events = p->events, .lost = p->lost,
				      .gaps = p->gaps, .ring_ops = rc.ops };
}

/* Queues the counters and `st`, or the state attach set for a process
 * that runs on. */
static void ingest_update(struct ingest_proc *p, enum store_state st)
{
	struct store_counters c;

	/* Not before the stored counters are taken over (DESIGN 6): its
	 * counters would overwrite theirs with less. */
	if (!p->stored)
		return;
	/* Relaxed: a state the loop thread set; an update that misses the
	 * newest one is followed by another within INGEST_UPDATE_MS. */
	if (st != STORE_EXITED)
		st = atomic_load_explicit(&p->state, memory_order_relaxed);
	ingest_counters(p, &c);
	store_process_update(p->in->store, p->id, &c, p->last_ms, st);
	p->updated_ms = ingest_now_ms();
}

/* Whether the process is still the one that registered. */
static bool ingest_alive(const struct ingest_proc *p)
{
	uint64_t t = 0;

	if (kill((pid_t)p->pid, 0) < 0 && errno == ESRCH)
		return false;
	if (procstat_start_time((pid_t)p->pid, &t) < 0)
		t = 0;
	/* Unreadable /proc (hidepid): trust kill(), which said it exists. */
	return t == 0 || p->start_time == 0 || t == p->start_time;
}

/* Takes the stored counters over once the store has the row (DESIGN 5,
 * 6); the drain thread's. */
static void ingest_adopt(struct ingest_proc *p)
{
	struct store_counters was;
	struct ringread_counters rc;
	int64_t id;
	int err;

	if (p->stored)
		return;
	err = store_process_registered(p->in->store, p->id, &id, &was);
	if (err == 0)
		return;
	p->stored = true;
	if (err < 0)
		return; /* refused by SQLite: the store logged it */
	p->events += was.events;
	p->lost += was.lost;
	p->gaps += was.gaps;
	ringread_counters(p->rr, &rc);
	if (rc.ops_at_map > was.ring_ops) {
		p->lost += rc.ops_at_map - was.ring_ops;
		atomic_fetch_add_explicit(&p->in->lost, rc.ops_at_map - was.ring_ops,
					  memory_order_relaxed);
	}
}

static void ingest_proc_free(struct ingest_proc *p)
{
	if (p->in != NULL)
		store_process_forget(p->in->store, p->id);
	engine_free(p->engine);
	ringdec_free(p->dec);
	symtab_free(p->syms);
	ringread_unmap(p->rr);
	u64map_fini(&p->repeats);
	free(p->pending);
	if (p->fd >= 0)
		close(p->fd);
	free(p);
}

/* The last drain of a process that is gone (DESIGN 4). */
static void ingest_finish(struct ingest_proc *p)
{
	struct op gap = { .kind = OP_GAP, .has_lost = true };

	while (ingest_drain(p, RINGREAD_DEAD) > 0)
		;
	gap.lost = ringread_take_pending(p->rr);
	if (gap.lost != 0) {
		ingest_count_gap(p, &gap);
		engine_feed(p->engine, &gap);
	}
	ingest_flush_repeats(p);
	ingest_update(p, STORE_EXITED);
	atomic_fetch_sub_explicit(&p->in->running, 1, memory_order_relaxed);
}

/*
 * One round over a thread's processes: a batch from each, then the
 * processes found gone are finished and freed. The thread's lock guards
 * the list only; draining runs without it. Returns the records taken.
 */
static unsigned ingest_round(struct ingest_thread *t)
{
	struct ingest_proc **link, *p;
	unsigned total = 0;
	uint32_t fill, max_fill = 0;
	int64_t now, lag, max_lag = 0;
	bool gone;

	pthread_mutex_lock(&t->lock);
	link = &t->procs;
	while ((p = *link) != NULL) {
		pthread_mutex_unlock(&t->lock);
		ingest_adopt(p);
		total += (unsigned)ingest_drain(p, 0);
		ingest_flush_repeats(p);
		ingest_backlog(p, ingest_mono_ms(), &fill, &lag);
		max_fill = fill > max_fill ? fill : max_fill;
		max_lag = lag > max_lag ? lag : max_lag;
		now = ingest_now_ms();
		if (now - p->updated_ms >= INGEST_UPDATE_MS)
			ingest_update(p, STORE_RUNNING);
		pthread_mutex_lock(&t->lock);
		gone = false;
		if (p->disconnected && p->stored && now - p->checked_ms >= 0) {
			p->checked_ms = now + INGEST_ALIVE_CHECK_MS;
			gone = !ingest_alive(p);
		}
		if (gone) {
			*link = p->next;
			t->nprocs--;
			pthread_mutex_unlock(&t->lock);
			ingest_finish(p);
			ingest_proc_free(p);
			pthread_mutex_lock(&t->lock);
			continue;
		}
		link = &p->next;
	}
	pthread_mutex_unlock(&t->lock);
	/* Relaxed: statistics, each read on its own (ingest_get_stats). */
	atomic_store_explicit(&t->fill_ppm, max_fill, memory_order_relaxed);
	atomic_store_explicit(&t->lag_ms, max_lag, memory_order_relaxed);
	return total;
}

static void ingest_sample_rate(struct ingest *in)
{
	int64_t now = ingest_now_ms();
	uint64_t events;

	pthread_mutex_lock(&in->rate_lock);
	if (now - in->rate_ms >= 1000) {
		events = atomic_load_explicit(&in->events, memory_order_relaxed);
		if (in->rate_ms != 0)
			in->rate = (double)(events - in->rate_events) * 1000.0 /
				   (double)(now - in->rate_ms);
		in->rate_ms = now;
		in->rate_events = events;
	}
	pthread_mutex_unlock(&in->rate_lock);
}

static void *ingest_thread_main(void *arg)
{
	struct ingest_thread *t = arg;
	struct ingest *in = t->in;
	struct timespec nap = { 0, (long)in->period_ms * 1000000L };

	/* Acquire: pairs with the release store in ingest_free(). */
	while (!atomic_load_explicit(&in->stop, memory_order_acquire)) {
		if (ingest_round(t) == 0)
			nanosleep(&nap, NULL);
		if (t == &in->threads[0])
			ingest_sample_rate(in);
	}
	return NULL;
}

/* ---- the API ------------------------------------------------------------ */

/*
 * A drain thread per CPU on small hosts, half the CPUs on larger ones,
 * where the jobs' own processes need the rest: on 2 cores, one thread
 * could not keep up with 2 million operations/s (daemon_bench.py).
 */
static unsigned ingest_default_threads(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);

	if (cpus < 1)
		return 1;
	return cpus < 4 ? (unsigned)cpus : (unsigned)(cpus / 2);
}

int ingest_new(const struct ingest_opts *o, struct ingest **out)
{
	struct ingest *in = calloc(1, sizeof(*in));
	sigset_t all, old;
	int err = 0;

	if (in == NULL)
		return -ENOMEM;
	in->store = o->store;
	in->period_ms = o->period_ms ? o->period_ms : 10;
	in->nthreads = o->threads ? o->threads : ingest_default_threads();
	if (in->nthreads > INGEST_MAX_THREADS)
		in->nthreads = INGEST_MAX_THREADS;
	pthread_mutex_init(&in->rate_lock, NULL);
	/* The loop thread handles signals; drain threads never do. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (unsigned i = 0; i < in->nthreads && err == 0; i++) {
		struct ingest_thread *t = &in->threads[i];

		t->in = in;
		pthread_mutex_init(&t->lock, NULL);
		err = -pthread_create(&t->thread, NULL, ingest_thread_main, t);
		if (err < 0)
			in->nthreads = i;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err < 0) {
		ingest_free(in);
		return err;
	}
	*out = in;
	return 0;
}

void ingest_free(struct ingest *in)
{
	struct ingest_proc *p;

	if (in == NULL)
		return;
	/* Release: pairs with the acquire load in ingest_thread_main(). */
	atomic_store_explicit(&in->stop, true, memory_order_release);
	for (unsigned i = 0; i < in->nthreads; i++)
		pthread_join(in->threads[i].thread, NULL);
	/* Registrations still queued are stored now, if the disk lets us,
	 * so that every process's counters are taken over (DESIGN 6) and
	 * its last update is sent; the loop has stopped, nobody waits. */
	store_flush(in->store);
	for (unsigned i = 0; i < in->nthreads; i++) {
		struct ingest_thread *t = &in->threads[i];

		while ((p = t->procs) != NULL) {
			t->procs = p->next;
			/* The daemon stops, the process may go on: take what
			 * is committed, leave it running for the next daemon. */
			ingest_adopt(p);
			while (ingest_drain(p, 0) > 0)
				;
			ingest_flush_repeats(p);
			ingest_update(p, STORE_RUNNING);
			ingest_proc_free(p);
		}
		pthread_mutex_destroy(&t->lock);
	}
	pthread_mutex_destroy(&in->rate_lock);
	free(in);
}

static int ingest_proc_new(struct ingest *in, int fd, struct ingest_proc **out,
			   const char **why)
{
	struct engine_opts eo = { .dedup = true,
				  .finding_cb = ingest_finding_cb,
				  .max_bytes = INGEST_ENGINE_BYTES };
	struct ingest_proc *p = calloc(1, sizeof(*p));
	int err;

	if (p == NULL)
		return -ENOMEM;
	p->fd = -1;
	p->in = in;
	eo.arg = p;
	err = u64map_init(&p->repeats);
	if (err == 0)
		err = ringread_map(fd, &p->rr, why);
	if (err == 0)
		err = symtab_new(&p->syms);
	if (err == 0)
		err = ringdec_new(p->syms, &p->dec);
	if (err == 0)
		err = engine_new(&eo, &p->engine);
	if (err < 0) {
		ingest_proc_free(p);
		return err;
	}
	*out = p;
	return 0;
}

/* The handle of a process still drained here (DESIGN 4), or NULL; found,
 * it counts as connected again, so that it is not finished meanwhile. */
static struct ingest_proc *ingest_find(struct ingest *in, uint32_t pid,
				       uint64_t start_time)
{
	struct ingest_proc *found = NULL;

	for (unsigned i = 0; i < in->nthreads && found == NULL; i++) {
		struct ingest_thread *t = &in->threads[i];

		pthread_mutex_lock(&t->lock);
		for (struct ingest_proc *p = t->procs; p != NULL; p = p->next) {
			if (p->pid == pid && p->start_time == start_time) {
				p->disconnected = false;
				found = p;
				break;
			}
		}
		pthread_mutex_unlock(&t->lock);
	}
	return found;
}

/* The drain thread with the fewest processes. */
static struct ingest_thread *ingest_pick(struct ingest *in)
{
	struct ingest_thread *best = &in->threads[0];

	for (unsigned i = 1; i < in->nthreads; i++) {
		if (in->threads[i].nprocs < best->nprocs)
			best = &in->threads[i];
	}
	return best;
}

int ingest_register(struct ingest *in, const struct store_process *sp, int fd,
		    struct ingest_proc **out, const char **why)
{
	struct ingest_thread *t;
	struct ingest_proc *p;
	int err;

	*why = NULL;
	p = ingest_find(in, sp->pid, sp->start_time);
	if (p != NULL) {
		err = store_process_register_async(in->store, sp, NULL);
		if (err < 0) {
			ingest_disconnect(in, p); /* as it was */
			return err;
		}
		/* Relaxed: see ingest_update(). */
		atomic_store_explicit(&p->state, (int)sp->state,
				      memory_order_relaxed);
		close(fd);
		*out = p;
		return 0;
	}
	err = ingest_proc_new(in, fd, &p, why);
	if (err < 0)
		return err;
	err = store_process_register_async(in->store, sp, &p->id);
	if (err < 0) {
		ingest_proc_free(p);
		return err;
	}
	p->fd = fd;
	p->pid = sp->pid;
	p->start_time = sp->start_time;
	atomic_store_explicit(&p->state, (int)sp->state, memory_order_relaxed);
	p->last_ms = ingest_now_ms();
	p->empty_mono_ms = ingest_mono_ms();
	atomic_fetch_add_explicit(&in->running, 1, memory_order_relaxed);
	t = ingest_pick(in);
	pthread_mutex_lock(&t->lock);
	p->thread = t;
	p->next = t->procs;
	t->procs = p;
	t->nprocs++;
	pthread_mutex_unlock(&t->lock);
	*out = p;
	return 0;
}

int64_t ingest_proc_id(const struct ingest_proc *p)
{
	int64_t id;

	return store_process_registered(p->in->store, p->id, &id, NULL) == 1
		       ? id
		       : 0;
}

void ingest_set_state(struct ingest_proc *p, enum store_state st)
{
	/* Relaxed: see ingest_update(), which stores it. */
	atomic_store_explicit(&p->state, (int)st, memory_order_relaxed);
}

void ingest_disconnect(struct ingest *in, struct ingest_proc *p)
{
	struct ingest_thread *t = p->thread;

	(void)in;
	pthread_mutex_lock(&t->lock);
	p->disconnected = true;
	p->checked_ms = 0;
	pthread_mutex_unlock(&t->lock);
}

void ingest_get_stats(struct ingest *in, struct ingest_stats *out)
{
	uint32_t fill;
	int64_t lag;

	out->running = atomic_load_explicit(&in->running, memory_order_relaxed);
	out->events = atomic_load_explicit(&in->events, memory_order_relaxed);
	out->lost = atomic_load_explicit(&in->lost, memory_order_relaxed);
	/* Relaxed, like their stores: independent statistics. */
	for (int k = 0; k < FINDING_KIND_COUNT; k++)
		out->findings[k] = atomic_load_explicit(&in->findings[k],
							memory_order_relaxed);
	fill = 0;
	lag = 0;
	for (unsigned i = 0; i < in->nthreads; i++) {
		uint32_t f = atomic_load_explicit(&in->threads[i].fill_ppm,
						  memory_order_relaxed);
		int64_t l = atomic_load_explicit(&in->threads[i].lag_ms,
						 memory_order_relaxed);

		fill = f > fill ? f : fill;
		lag = l > lag ? l : lag;
	}
	out->ring_fill = (double)fill / 1e6;
	out->lag_s = (double)lag / 1e3;
	pthread_mutex_lock(&in->rate_lock);
	out->events_per_s = in->rate;
	pthread_mutex_unlock(&in->rate_lock);
}
