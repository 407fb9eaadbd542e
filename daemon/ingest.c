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
 *    thread. The loop thread touches a process only under its thread's
 *    mutex: it links a new one into the list, looks one up (ingest_find(),
 *    which reads `gone`), and counts its connections (`conns`: raised by
 *    a registration again, lowered by a disconnect, which also resets
 *    `checked_ms`). Its `state` alone it sets without the mutex, atomically.
 * 3. The engine deduplicates. A first occurrence goes to the store at once;
 *    repeats are summed per finding and handed over once per round, so a
 *    finding repeated a million times a second costs the store one upsert
 *    per round.
 * 4. A disconnected process is drained as long as it lives (an agent that
 *    closed its socket may still push); once it is gone, its ring is
 *    drained up to the head it left, a batch a round like any other (a
 *    child that kept the mapping and writes on holds no thread), what it
 *    left unfinished is skipped, its drops become a gap, and the store
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

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "engine.h"
#include "finding_view.h"
#include "grow.h"
#include "log.h"
#include "procstat.h"
#include "ringdec.h"
#include "ringread.h"
#include "suppress.h"
#include "symtab.h"
#include "u64map.h"

#define INGEST_BATCH 4096         /* records per process per round */
#define INGEST_UPDATE_MS 200      /* counters to the store at most this often */
#define INGEST_ALIVE_CHECK_MS 500 /* a disconnected process's liveness */
#define INGEST_MAX_THREADS 64
#define INGEST_ENGINE_BYTES ((size_t)1 << 30)
/* Of that cap, what a process's strings and stacks may take (its symtab,
 * ringdec_set_max_bytes()); the engine has the rest. */
#define INGEST_SYMTAB_BYTES (INGEST_ENGINE_BYTES / 8)

struct ingest_proc {
	struct ingest_proc *next;
	struct ingest_thread *thread;
	int64_t id; /* the store's provisional id (DESIGN 6) */
	bool stored; /* its row is stored, its counters taken over */
	uint32_t pid;
	uint64_t start_time;
	uint32_t uid; /* who registered it: never another (the store's rule) */
	int fd;
	struct ringread *rr;
	struct symtab *syms;
	struct ringdec *dec;
	struct engine *engine;
	struct u64map repeats;  /* engine finding id -> index in pending */
	struct finding *pending; /* the latest repeat of each, count = delta */
	struct finding_frames frames; /* ingest_submit()'s, reused */
	size_t npending, cap_pending;
	uint64_t events, lost, gaps;
	uint64_t bad; /* records and counts found corrupt, as of the last drain */
	bool warned;  /* the log said so once */
	bool skipping; /* engine_feed_or_skip()'s */
	/* enum store_state, running or dormant: the loop thread's (attach and
	 * detach), read by the drain thread. */
	_Atomic int state;
	int64_t last_ms, updated_ms, checked_ms;
	int64_t empty_mono_ms; /* when its ring was last found empty */
	/* Connections holding the handle (a process that registers again
	 * before its old connection is seen closed has two); disconnected at
	 * 0. Under the thread's lock. */
	unsigned conns;
	/* Found gone: its ring is drained up to where it left it, a batch
	 * a round, then it is finished (DESIGN 4). Set by its thread under
	 * the lock (ingest_find() reads it), read by its thread. */
	bool gone;
	struct ingest *in;
};

struct ingest_thread {
	pthread_t thread;
	pthread_mutex_t lock;
	struct ingest_proc *procs; /* under lock; new ones pushed at the head */
	/* The length of procs, changed under lock. Atomic because
	 * ingest_pick() reads it without the lock: relaxed, a balancing hint
	 * that orders nothing; a stale count costs balance only. */
	_Atomic unsigned nprocs;
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
	/* Of them, those supp suppressed (counted as they are stored). */
	_Atomic uint64_t suppressed[FINDING_KIND_COUNT];
	const struct suppress_set *supp; /* read-only: any thread asks it */
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

/* ---- findings -------------------------------------------------------- */

/* The daemon stores an operator it cannot name as "?". */
static void ingest_name_ops(struct finding_view *v)
{
	if (v->access.op == NULL)
		v->access.op = "?";
	if (v->has_previous && v->previous.op == NULL)
		v->previous.op = "?";
}

/*
 * Marks `v` with the name of the daemon's suppression that matches it,
 * counting its `count` occurrences (as engine kind `kind`) suppressed.
 * The match is made again for each batch of repeats: the set never
 * changes, so a finding is marked the same every time.
 */
static void ingest_suppress(struct ingest_proc *p, enum finding_kind kind,
			    struct finding_view *v, uint64_t count)
{
	long i = suppress_find(p->in->supp, v);

	if (i < 0)
		return;
	v->suppressed = suppress_entry_name(p->in->supp, (size_t)i);
	/* Relaxed: a statistic, as findings[] is. */
	if (kind < FINDING_KIND_COUNT)
		atomic_fetch_add_explicit(&p->in->suppressed[kind], count,
					  memory_order_relaxed);
}

/* Hands one finding, standing for `count` occurrences, to the store. */
static void ingest_submit(struct ingest_proc *p, const struct finding *f,
			  uint64_t count)
{
	struct store_finding sf = { .process_id = p->id };
	int err = finding_view_of(f, p->syms, &p->frames, &sf.v);

	if (err == 0) {
		ingest_name_ops(&sf.v);
		ingest_suppress(p, f->kind, &sf.v, count);
		sf.v.count = count;
		sf.v.first_ms = sf.v.last_ms = p->last_ms;
		err = store_finding_submit(p->in->store, &sf);
	}
	if (err < 0) {
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
	if (grow_array((void **)&p->pending, &p->cap_pending, p->npending + 1,
		       sizeof(*p->pending)) < 0) {
		ingest_submit(p, f, 1); /* no room to sum: send now */
		return;
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

/* a + b, saturating at the largest count a ring speaks of: an agent's
 * numbers must not wrap a sum into nonsense. */
static uint64_t ingest_sat_add(uint64_t a, uint64_t b)
{
	return a >= RINGREAD_MAX_COUNT || b >= RINGREAD_MAX_COUNT - a ?
		       RINGREAD_MAX_COUNT :
		       a + b;
}

/* Counts `n` operations lost, in the process and in the host's total. */
static void ingest_count_lost(struct ingest_proc *p, uint64_t n)
{
	uint64_t was;

	p->lost = ingest_sat_add(p->lost, n);
	/* Relaxed, on success and failure alike: a statistic, which orders
	 * nothing; the loop only keeps the sum saturated. */
	was = atomic_load_explicit(&p->in->lost, memory_order_relaxed);
	while (!atomic_compare_exchange_weak_explicit(
		&p->in->lost, &was, ingest_sat_add(was, n),
		memory_order_relaxed, memory_order_relaxed))
		;
}

/* A gap: one more, and the operations it says were lost (none counted
 * when it does not know). */
static void ingest_count_gap(struct ingest_proc *p, const struct op *op)
{
	p->gaps++;
	if (op->has_lost)
		ingest_count_lost(p, op->lost);
}

/* Feeds the engine a gap of `lost` operations (unknown: UINT64_MAX) that
 * no record carried, and counts it. */
static void ingest_gap(struct ingest_proc *p, uint64_t lost)
{
	struct op gap = { .kind = OP_GAP, .has_lost = lost != UINT64_MAX,
			  .lost = lost != UINT64_MAX ? lost : 0 };

	ingest_count_gap(p, &gap);
	engine_feed(p->engine, &gap);
}

/*
 * Says once per process that its ring held what no correct agent writes:
 * an undecodable record, a corrupt header, an impossible count. ringdec
 * counts a malformed record (and a gap's impossible count) in `malformed`,
 * and an operation record it could not decode in `lost` too, which it
 * made a gap of one; a malformed definition is no gap (nothing was
 * defined: what names it later is counted `undefined`). ringread counts
 * a corrupt header, or an impossible count met at map, in `corrupt`; what
 * it skipped comes as a gap. The log names the process.
 */
static void ingest_check_corrupt(struct ingest_proc *p)
{
	struct ringdec_counters dc;
	struct ringread_counters rc;
	uint64_t bad;

	ringdec_counters(p->dec, &dc);
	ringread_counters(p->rr, &rc);
	bad = dc.malformed + dc.lost + rc.corrupt;
	if (bad == p->bad)
		return;
	p->bad = bad;
	if (!p->warned)
		log_warn("pid %u: its ring holds what no agent writes (%s); "
			 "its analysis has a gap there, counted",
			 p->pid, *ringdec_error(p->dec) ? ringdec_error(p->dec) :
							 "a corrupt record header "
							 "or count");
	p->warned = true;
}

/* Feeds one operation; one naming a stream beyond the engine's limit is
 * counted lost, in a gap, as `analyze` counts it. engine_feed_or_skip()'s
 * result. */
static int ingest_feed(struct ingest_proc *p, const struct op *op)
{
	int rc = engine_feed_or_skip(p->engine, op, &p->skipping);

	if (rc > 0) {
		p->gaps += rc == ENGINE_SKIPPED_GAP;
		ingest_count_lost(p, 1);
	}
	return rc;
}

static int ingest_record_cb(void *arg, unsigned type, const void *payload,
			    size_t len)
{
	struct ingest_proc *p = arg;
	struct op op;

	if (ringdec_record(p->dec, type, payload, len, &op) != 1)
		return 0; /* a definition, taken (0) or refused (< 0, counted
			   * `malformed` by ringdec when it was malformed);
			   * an operation it cannot decode comes back a gap */
	/* A gap is no operation of the process's: it is counted apart. */
	if (op.kind == OP_GAP) {
		ingest_count_gap(p, &op);
		engine_feed(p->engine, &op);
		return 0;
	}
	/* Out of memory the engine forgets history itself, as a gap would. */
	if (ingest_feed(p, &op) > 0)
		return 0;
	p->events++;
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
		ingest_check_corrupt(p);
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

/* Whether the process is still the one that registered and can push:
 * a zombie cannot, and waiting for its parent to reap it would keep its
 * last operations from every query meanwhile. */
static bool ingest_alive(const struct ingest_proc *p)
{
	return !procstat_gone((pid_t)p->pid, p->start_time);
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
	p->lost = ingest_sat_add(p->lost, was.lost);
	p->gaps += was.gaps;
	ringread_counters(p->rr, &rc);
	if (rc.ops_at_map > was.ring_ops)
		ingest_count_lost(p, rc.ops_at_map - was.ring_ops);
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
	finding_frames_free(&p->frames);
	if (p->fd >= 0)
		close(p->fd);
	free(p);
}

/* Ends a process that is gone once its ring is drained (DESIGN 4). */
static void ingest_finish(struct ingest_proc *p)
{
	uint64_t pending;

	/* The producers' count, untrusted: beyond any real one, unknown. */
	pending = ringread_take_pending(p->rr);
	if (pending > RINGREAD_MAX_COUNT) {
		ingest_gap(p, UINT64_MAX);
		log_warn("pid %u: its ring claims %" PRIu64 " operations "
			 "dropped; counted a gap of unknown size",
			 p->pid, pending);
	} else if (pending != 0) {
		ingest_gap(p, pending);
	}
	ingest_flush_repeats(p);
	ingest_update(p, STORE_EXITED);
	atomic_fetch_sub_explicit(&p->in->running, 1, memory_order_relaxed);
}

/*
 * The link that points at `p` in its thread's list, looked up afresh under
 * the lock: ingest_register() pushes processes at the head while a round
 * has the lock released, so a link taken before a drain may no longer
 * point at p (writing through a stale head dropped every process
 * registered meanwhile: never drained, never finished).
 */
static struct ingest_proc **ingest_link_of(struct ingest_thread *t,
					   const struct ingest_proc *p)
{
	struct ingest_proc **link = &t->procs;

	while (*link != p) {
		assert(*link != NULL);
		link = &(*link)->next;
	}
	return link;
}

/*
 * One round over a thread's processes: a batch from each; a process found
 * gone is finished and freed once a batch drained the last of what it
 * left. The thread's lock guards the list and what DESIGN 2 names;
 * draining runs without it.
 * Returns the records taken.
 */
static unsigned ingest_round(struct ingest_thread *t)
{
	struct ingest_proc **link, *p;
	unsigned n, total = 0;
	uint32_t fill, max_fill = 0;
	int64_t now, lag, max_lag = 0;

	pthread_mutex_lock(&t->lock);
	link = &t->procs;
	while ((p = *link) != NULL) {
		pthread_mutex_unlock(&t->lock);
		ingest_adopt(p);
		n = (unsigned)ingest_drain(p, p->gone ? RINGREAD_DEAD : 0);
		total += n;
		ingest_flush_repeats(p);
		/* The lag is a duration, which the wall clock's steps must not
		 * bend. */
		ingest_backlog(p, (int64_t)clock_mono_ms(), &fill, &lag);
		max_fill = fill > max_fill ? fill : max_fill;
		max_lag = lag > max_lag ? lag : max_lag;
		now = ingest_now_ms();
		if (now - p->updated_ms >= INGEST_UPDATE_MS)
			ingest_update(p, STORE_RUNNING);
		pthread_mutex_lock(&t->lock);
		/* Not finished before its row is stored (DESIGN 5). */
		if (!p->gone && p->conns == 0 && p->stored &&
		    now - p->checked_ms >= 0) {
			p->checked_ms = now + INGEST_ALIVE_CHECK_MS;
			if (!ingest_alive(p)) {
				/* From the next round on, its last batches. */
				p->gone = true;
				ringread_stop_at_head(p->rr);
			}
		} else if (p->gone && n < INGEST_BATCH) {
			/* What it left is drained: */
			link = ingest_link_of(t, p);
			*link = p->next;
			atomic_fetch_sub_explicit(&t->nprocs, 1,
						  memory_order_relaxed);
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
	in->supp = o->supp;
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
			 * is committed up to the head now (a flooding process
			 * must not hold the stop up), leave it running for
			 * the next daemon. One found gone is finished. */
			ingest_adopt(p);
			if (!p->gone)
				ringread_stop_at_head(p->rr);
			while (ingest_drain(p, p->gone ? RINGREAD_DEAD : 0) > 0)
				;
			ingest_flush_repeats(p);
			if (p->gone)
				ingest_finish(p);
			else
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
				  .max_bytes = INGEST_ENGINE_BYTES -
					       INGEST_SYMTAB_BYTES };
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
		ringdec_set_max_bytes(p->dec, INGEST_SYMTAB_BYTES);
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
 * it holds one connection more, so that it is not finished meanwhile. */
static struct ingest_proc *ingest_find(struct ingest *in, uint32_t pid,
				       uint64_t start_time)
{
	struct ingest_proc *found = NULL;

	for (unsigned i = 0; i < in->nthreads && found == NULL; i++) {
		struct ingest_thread *t = &in->threads[i];

		pthread_mutex_lock(&t->lock);
		for (struct ingest_proc *p = t->procs; p != NULL; p = p->next) {
			/* One found gone is not the process registering. */
			if (p->pid == pid && p->start_time == start_time &&
			    !p->gone) {
				p->conns++;
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
	/* Relaxed: see struct ingest_thread. */
	unsigned n, least = atomic_load_explicit(&best->nprocs,
						 memory_order_relaxed);

	for (unsigned i = 1; i < in->nthreads; i++) {
		n = atomic_load_explicit(&in->threads[i].nprocs,
					 memory_order_relaxed);
		if (n < least) {
			best = &in->threads[i];
			least = n;
		}
	}
	return best;
}

int ingest_register(struct ingest *in, const struct store_process *sp, int fd,
		    struct ingest_proc **out, const char **why)
{
	struct ringread_counters rc;
	struct ingest_thread *t;
	struct ingest_proc *p;
	int err;

	*why = NULL;
	p = ingest_find(in, sp->pid, sp->start_time);
	if (p != NULL && p->uid != sp->uid) {
		/* The store would refuse it too, but only once it writes:
		 * what this daemon watches it refuses at once. */
		ingest_disconnect(in, p);
		return -EPERM;
	}
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
	p->uid = sp->uid;
	atomic_store_explicit(&p->state, (int)sp->state, memory_order_relaxed);
	ringread_counters(p->rr, &rc);
	if (rc.corrupt != 0) /* how many a dead daemon took: unknown */
		ingest_gap(p, UINT64_MAX);
	p->last_ms = ingest_now_ms();
	p->empty_mono_ms = (int64_t)clock_mono_ms();
	atomic_fetch_add_explicit(&in->running, 1, memory_order_relaxed);
	t = ingest_pick(in);
	p->conns = 1;
	pthread_mutex_lock(&t->lock);
	p->thread = t;
	p->next = t->procs;
	t->procs = p;
	atomic_fetch_add_explicit(&t->nprocs, 1, memory_order_relaxed);
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
	assert(p->conns > 0);
	if (--p->conns == 0)
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
	{
		out->findings[k] = atomic_load_explicit(&in->findings[k],
							memory_order_relaxed);
		out->suppressed[k] = atomic_load_explicit(
			&in->suppressed[k], memory_order_relaxed);
	}
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
