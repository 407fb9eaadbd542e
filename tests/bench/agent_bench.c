/*
 * agent_bench.c - what npusan_launch() costs the application, with the agent
 * on and a consumer draining its ring, and with the agent off.
 *
 * Not a test. Each configuration runs in a fresh process (the agent reads
 * its environment once), and with the agent on, that process first forks a
 * consumer: tests/fakedaemon accepts its registration and the consumer
 * drains the ring with ringread_drain() in a tight loop, counting records
 * without decoding them (the daemon's decoding and analysis come on top, on
 * its own cores). Each figure is the median of BENCH_RUNS timed runs of
 * back-to-back launches with 2 read and 2 write ranges and a pre-interned
 * operator name, called through libnpusan.so's PLT from BENCH_CHAIN frames
 * deep (so that NPUSAN_STACKS=16 finds 16 frames). Before each run the ring
 * is drained empty; after it, the bench waits until the consumer has taken
 * everything and asks it for its counts, so `delivered` and `dropped` are
 * exact per run.
 *
 * The consumer is pinned to one CPU and each pushing thread to another when
 * the machine has enough; with fewer, they share and the figures say so.
 *
 * A dormant agent (NPUSAN=dormant: registered, not attached) is timed the
 * same way, a launch through the PLT and one behind npusan_pushing(); and
 * so are an allocation and its free, which a dormant or attached agent
 * keeps in its table of live allocations for the snapshot an attach sends.
 *
 * The floor of a launch is timed too, in the same invocation: the same
 * record bytes pushed to a bare multi-producer ring in the process's own
 * memory (a fetch_add of the head, the copy, a release store of the commit
 * word; no consumer, no check for room, no call through a PLT), and the
 * launch's figure is printed as a ratio of it.
 *
 * Build in Release and run: see tests/bench/agent_bench.sh.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fakedaemon.h"
#include "npusan.h"
#include "ringread.h"
#include "ring_layout.h"

#define BENCH_RUNS 7
#define BENCH_CHAIN 24	    /* frames under each timed loop */
#define BENCH_MAX_THREADS 2
#define BENCH_DRAIN_BATCH 4096 /* records per ringread_drain() */
#define BENCH_TIMEOUT_MS 30000

#ifdef __clang__
#define BENCH_NOIPA __attribute__((noinline))
#else
#define BENCH_NOIPA __attribute__((noipa))
#endif

static volatile uintptr_t bench_sink;
/* Each configuration's median ns/op, by index, written by its process
 * (MAP_SHARED): main prints the ratios once all have run. */
static double *bench_medians;
static size_t bench_index;
static long bench_consumer_nap_us; /* --consumer-nap-us */

/*
 * Shared between a configuration's process and its consumer (a MAP_SHARED
 * anonymous mapping made before the fork). The consumer publishes its
 * counts only when asked (sync_req), so reading them costs the producer
 * nothing while it is timed.
 */
struct bench_shm {
	_Atomic int listening; /* consumer: the fake daemon listens */
	_Atomic int ready;     /* consumer: the ring is mapped (-1: failed) */
	_Atomic int stop;      /* producer: drain what is left and exit */
	_Atomic unsigned sync_req;
	_Atomic unsigned sync_ack; /* release: the counts below are fresh */
	uint64_t delivered; /* launch records the consumer took */
	uint64_t records;   /* every record, definitions and gaps included */
	uint64_t dropped;   /* the producers' drop counter */
	long nap_us;	    /* sleep after an empty drain; 0: sched_yield */
	char sock[108];
};

struct bench_cfg {
	const char *label;
	bool agent;	       /* false: NPUSAN unset, npusan_init() never */
	int threads;
	const char *ring_full; /* NPUSAN_RING_FULL, NULL: default (drop) */
	const char *stacks;    /* NPUSAN_STACKS, NULL: unset (off) */
	uint32_t stack;	       /* the stack argument of each launch */
	long iters;	       /* launches per thread per run */
	double target_ns;      /* the per-call budget, 0: none */
	bool guarded;	       /* each call behind `if (npusan_active())`, or
				  with `dormant`, `if (npusan_pushing())` */
	bool dormant;	       /* NPUSAN=dormant: registered, detached */
	bool alloc_free;       /* time npusan_alloc() + npusan_free(), not
				  launches; per call */
	bool empty;	       /* the guarded loop without the guard or the
				  call: what the loop itself costs */
	bool floor;	       /* the bare ring push, not npusan_launch() */
	int ratio_of;	       /* print median / cfgs[ratio_of - 1]'s; 0:
				  none */
};

/* What one thread does in one run. */
struct bench_thread {
	const struct bench_cfg *cfg;
	uint32_t op;
	int cpu; /* -1: not pinned */
	pthread_barrier_t *start;
	double t0, t1; /* ns, CLOCK_MONOTONIC */
};

struct bench_run {
	double ns_per_op[BENCH_MAX_THREADS];
	double push_ns;	 /* first start to last end */
	double drain_ns; /* first start until the consumer had it all */
	uint64_t delivered, dropped;
};

static double bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void bench_nap_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

static int bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The median of `n` values; sorts a copy. */
static double bench_median(const double *v, int n)
{
	double s[BENCH_RUNS * BENCH_MAX_THREADS];

	memcpy(s, v, (size_t)n * sizeof(*v));
	qsort(s, (size_t)n, sizeof(*s), bench_cmp);
	return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

/* The `k`-th CPU this process may run on, or -1 when there are not k+1. */
static int bench_cpu(int k)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return -1;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &set) && k-- == 0)
			return c;
	return -1;
}

static int bench_ncpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 1;
	return CPU_COUNT(&set);
}

static void bench_pin(int cpu)
{
	cpu_set_t set;

	if (cpu < 0)
		return;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

/* ---- the consumer ------------------------------------------------------ */

struct bench_counts {
	uint64_t delivered, records;
};

static int bench_count_cb(void *arg, unsigned type, const void *payload,
			  size_t len)
{
	struct bench_counts *c = arg;

	(void)payload;
	(void)len;
	c->records++;
	c->delivered += type == RING_REC_LAUNCH;
	return 0;
}

/* The consumer process: registers the agent, then drains until told to
 * stop. Never returns. */
static void bench_consumer(struct bench_shm *shm)
{
	struct fakedaemon_agent a;
	struct ringread_counters rc;
	struct bench_counts c = { 0 };
	struct fakedaemon *d;
	struct ringread *r;
	const char *why = NULL;
	unsigned ack = 0;
	int n, err;

	err = fakedaemon_start(shm->sock, &d);
	if (err < 0) {
		fprintf(stderr, "agent_bench: fakedaemon_start %s: %s\n",
			shm->sock, strerror(-err));
		atomic_store(&shm->ready, -1);
		_exit(1);
	}
	atomic_store(&shm->listening, 1);
	err = fakedaemon_next(d, BENCH_TIMEOUT_MS, &a);
	if (err == 0 && a.fd < 0)
		err = -EBADF;
	if (err == 0)
		err = ringread_map(a.fd, &r, &why);
	if (err < 0) {
		fprintf(stderr, "agent_bench: no ring from the agent: %s%s%s\n",
			strerror(-err), why ? ": " : "", why ? why : "");
		atomic_store(&shm->ready, -1);
		fakedaemon_stop(d);
		_exit(1);
	}
	atomic_store(&shm->ready, 1);
	for (;;) {
		/* Relaxed: a request; what it asks for is ordered by the
		 * release store of sync_ack below. */
		unsigned req = atomic_load_explicit(&shm->sync_req,
						    memory_order_relaxed);
		bool stop = atomic_load_explicit(&shm->stop,
						 memory_order_relaxed);

		n = ringread_drain(r, BENCH_DRAIN_BATCH, 0, bench_count_cb, &c);
		if (req != ack) {
			ringread_counters(r, &rc);
			shm->delivered = c.delivered;
			shm->records = c.records;
			shm->dropped = rc.dropped;
			ack = req;
			/* Release: pairs with the acquire load in
			 * bench_sync(); the counts above come first. */
			atomic_store_explicit(&shm->sync_ack, ack,
					      memory_order_release);
		}
		if (stop && n == 0)
			break;
		if (n == 0 && shm->nap_us > 0)
			bench_nap_us(shm->nap_us);
		else if (n == 0)
			sched_yield(); /* let a producer on our CPU run */
	}
	ringread_unmap(r);
	close(a.fd);
	fakedaemon_stop(d);
	_exit(0);
}

/* Fresh counts from the consumer into shm. 0 or -ETIMEDOUT. */
static int bench_sync(struct bench_shm *shm)
{
	unsigned req = atomic_fetch_add(&shm->sync_req, 1) + 1;
	double until = bench_now_ns() + BENCH_TIMEOUT_MS * 1e6;

	/* Acquire: pairs with the release store in bench_consumer(). */
	while (atomic_load_explicit(&shm->sync_ack, memory_order_acquire) !=
	       req) {
		if (bench_now_ns() > until)
			return -ETIMEDOUT;
		bench_nap_us(20);
	}
	return 0;
}

/* ---- the floor --------------------------------------------------------- */

/* The floor's ring: RING_DEFAULT's 8 MiB, and room past the end so that
 * a record never wraps. */
#define BENCH_FLOOR_BYTES (8u << 20)

struct bench_floor {
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) unsigned char data[BENCH_FLOOR_BYTES + 4096];
};

static struct bench_floor *bench_floor_ring;

/*
 * A launch's record pushed as bare as a multi-producer ring allows: the
 * bytes agent_push_launch() writes, with nothing else around them.
 */
static BENCH_NOIPA void bench_floor_push(uint64_t stream, uint32_t name,
					 const struct npusan_range *reads,
					 size_t nreads,
					 const struct npusan_range *writes,
					 size_t nwrites, uint32_t stack)
{
	struct bench_floor *f = bench_floor_ring;
	uint64_t len = sizeof(struct ring_launch) +
		       (nreads + nwrites) * sizeof(struct ring_range);
	uint64_t need = ring_rec_size(len), pos;
	struct ring_launch *l;
	struct ring_rec *rec;

	/* Relaxed: it only claims the bytes; the commit word below
	 * publishes them. */
	pos = atomic_fetch_add_explicit(&f->head, need, memory_order_relaxed) &
	      (BENCH_FLOOR_BYTES - 1);
	rec = (struct ring_rec *)(void *)(f->data + pos);
	/* Relaxed: the tag is published by the commit word's release. */
	atomic_store_explicit(&rec->tag, ring_tag(pos), memory_order_relaxed);
	l = (struct ring_launch *)(void *)(rec + 1);
	l->kind = RING_OP_LAUNCH;
	l->flags = 0;
	l->reserved = 0;
	l->stack = stack;
	l->stream = stream;
	l->name = name;
	l->nreads = (uint32_t)nreads;
	l->nwrites = (uint32_t)nwrites;
	l->reserved2 = 0;
	for (size_t i = 0; i < nreads; i++)
		l->ranges[i] = (struct ring_range){ reads[i].ptr, reads[i].len };
	for (size_t i = 0; i < nwrites; i++)
		l->ranges[nreads + i] =
			(struct ring_range){ writes[i].ptr, writes[i].len };
	/* Release: the record before the word, as ring_commit() does; no
	 * consumer here pairs with it, but its cost is the floor's. */
	atomic_store_explicit(&rec->word,
			      ring_word(RING_COMMIT, RING_REC_LAUNCH, need),
			      memory_order_release);
}

/* ---- the producer ------------------------------------------------------ */

/* cfg->iters allocations and frees of distinct blocks, as a caching
 * allocator hands them out; each thread its own addresses. */
static BENCH_NOIPA void bench_alloc_loop(struct bench_thread *t)
{
	uint64_t base = 0x7e0000000000 + ((uint64_t)(uintptr_t)t << 20);
	long n = t->cfg->iters / 2;

	t->t0 = bench_now_ns();
	for (long i = 0; i < n; i++) {
		uint64_t p = base + (uint64_t)(i & 1023) * 4096;

		npusan_alloc(p, 4096, 0, NPUSAN_STACK_NONE);
		npusan_free(p);
	}
	t->t1 = bench_now_ns();
}

/* The timed loop: cfg->iters launches, back to back. */
static BENCH_NOIPA void bench_loop(struct bench_thread *t)
{
	const struct bench_cfg *cfg = t->cfg;
	struct npusan_range reads[2] = { { 0x7f0000000000, 4096 },
					 { 0x7f0000100000, 65536 } };
	struct npusan_range writes[2] = { { 0x7f0000200000, 4096 },
					  { 0x7f0000300000, 256 } };
	long n = cfg->iters;
	uint32_t op = t->op, stack = cfg->stack;

	if (cfg->alloc_free) {
		bench_alloc_loop(t);
		return;
	}
	t->t0 = bench_now_ns();
	if (cfg->floor) {
		for (long i = 0; i < n; i++)
			bench_floor_push((uint64_t)i & 3, op, reads, 2, writes,
					 2, stack);
	} else if (cfg->empty) {
		for (long i = 0; i < n; i++)
			bench_sink += (uintptr_t)i;
	} else if (cfg->guarded && cfg->dormant) {
		for (long i = 0; i < n; i++) {
			if (npusan_pushing())
				npusan_launch((uint64_t)i & 3, op, reads, 2,
					      writes, 2, stack);
			bench_sink += (uintptr_t)i;
		}
	} else if (cfg->guarded) {
		/* The inline check is a relaxed load of a variable the
		 * compiler cannot assume constant, so it stays in the loop. */
		for (long i = 0; i < n; i++) {
			if (npusan_active())
				npusan_launch((uint64_t)i & 3, op, reads, 2,
					      writes, 2, stack);
			bench_sink += (uintptr_t)i;
		}
	} else {
		for (long i = 0; i < n; i++) {
			/* The call is external (PLT), so it is never
			 * elided; the stream varies as an application's
			 * would. */
			npusan_launch((uint64_t)i & 3, op, reads, 2, writes, 2,
				      stack);
		}
	}
	t->t1 = bench_now_ns();
}

/* Runs bench_loop() under `depth` more frames of its own. */
static BENCH_NOIPA int bench_recurse(int depth, struct bench_thread *t)
{
	if (depth == 0)
		bench_loop(t);
	else
		bench_recurse(depth - 1, t);
	bench_sink += (uintptr_t)depth; /* not a tail call */
	return depth;
}

static void *bench_thread_main(void *arg)
{
	struct bench_thread *t = arg;

	bench_pin(t->cpu);
	if (t->start != NULL)
		pthread_barrier_wait(t->start);
	bench_recurse(BENCH_CHAIN, t);
	return NULL;
}

/* One run of cfg->threads threads; the first is the calling thread. */
static int bench_run_once(const struct bench_cfg *cfg, uint32_t op,
			  int first_cpu, struct bench_run *out)
{
	struct bench_thread th[BENCH_MAX_THREADS];
	pthread_t tid[BENCH_MAX_THREADS];
	pthread_barrier_t start;
	double t0 = 1e300, t1 = 0;

	memset(th, 0, sizeof(th));
	pthread_barrier_init(&start, NULL, (unsigned)cfg->threads);
	for (int i = 0; i < cfg->threads; i++) {
		th[i].cfg = cfg;
		th[i].op = op;
		th[i].cpu = first_cpu < 0 ? -1 : bench_cpu(first_cpu + i);
		th[i].start = cfg->threads > 1 ? &start : NULL;
	}
	for (int i = 1; i < cfg->threads; i++)
		if (pthread_create(&tid[i], NULL, bench_thread_main, &th[i]))
			return -EAGAIN;
	bench_thread_main(&th[0]);
	for (int i = 1; i < cfg->threads; i++)
		pthread_join(tid[i], NULL);
	pthread_barrier_destroy(&start);
	for (int i = 0; i < cfg->threads; i++) {
		out->ns_per_op[i] = (th[i].t1 - th[i].t0) / (double)cfg->iters;
		t0 = th[i].t0 < t0 ? th[i].t0 : t0;
		t1 = th[i].t1 > t1 ? th[i].t1 : t1;
	}
	out->push_ns = t1 - t0;
	out->drain_ns = t1 - t0;
	if (cfg->agent && !cfg->dormant) {
		int err = npusan_wait_drained(BENCH_TIMEOUT_MS);

		out->drain_ns = bench_now_ns() - t0;
		if (err < 0)
			return err;
	}
	return 0;
}

static void bench_report(const struct bench_cfg *cfg, bool shared,
			 const struct bench_run *runs)
{
	double per[BENCH_RUNS * BENCH_MAX_THREADS], thr[BENCH_RUNS];
	double rate[BENCH_RUNS], drain[BENCH_RUNS], drop[BENCH_RUNS];
	uint64_t total = (uint64_t)cfg->iters * (uint64_t)cfg->threads;
	double median;
	int np = 0;

	for (int r = 0; r < BENCH_RUNS; r++) {
		for (int i = 0; i < cfg->threads; i++)
			per[np++] = runs[r].ns_per_op[i];
		rate[r] = (double)total / runs[r].push_ns * 1e9;
		drain[r] = (double)runs[r].delivered / runs[r].drain_ns * 1e9;
		drop[r] = 100.0 * (double)runs[r].dropped / (double)total;
	}
	median = bench_median(per, np);
	bench_medians[bench_index] = median;
	printf("%s: %.1f ns/op (median of %d", cfg->label, median,
	       BENCH_RUNS);
	if (cfg->threads > 1)
		printf(" runs x %d threads", cfg->threads);
	printf(", %ld launches per thread per run)%s\n", cfg->iters,
	       shared ? " [threads share CPUs]" : "");
	if (cfg->threads > 1) {
		for (int i = 0; i < cfg->threads; i++) {
			for (int r = 0; r < BENCH_RUNS; r++)
				thr[r] = runs[r].ns_per_op[i];
			printf("  thread %d: %.1f ns/op (median of %d)\n", i,
			       bench_median(thr, BENCH_RUNS), BENCH_RUNS);
		}
	}
	if (cfg->agent) {
		printf("  pushed: %.2f M launches/s aggregate (median of %d)\n",
		       bench_median(rate, BENCH_RUNS) / 1e6, BENCH_RUNS);
		printf("  drained by the consumer: %.2f M records/s, dropped "
		       "%.1f%% of launches (medians of %d; last run: "
		       "%llu delivered, %llu dropped)\n",
		       bench_median(drain, BENCH_RUNS) / 1e6,
		       bench_median(drop, BENCH_RUNS), BENCH_RUNS,
		       (unsigned long long)runs[BENCH_RUNS - 1].delivered,
		       (unsigned long long)runs[BENCH_RUNS - 1].dropped);
	}
	if (cfg->target_ns > 0)
		printf("  target <= %.0f ns/op: %s\n", cfg->target_ns,
		       median <= cfg->target_ns ? "met" : "MISSED");
	fflush(stdout);
}

/* Starts the consumer and the agent. 0, or a negative errno. */
static int bench_agent_up(const struct bench_cfg *cfg, struct bench_shm *shm,
			  int consumer_cpu, pid_t *consumer)
{
	double until = bench_now_ns() + BENCH_TIMEOUT_MS * 1e6;
	char dir[] = "/tmp/npusan-agent-bench.XXXXXX";
	pid_t pid;
	int err;

	if (mkdtemp(dir) == NULL)
		return -errno;
	snprintf(shm->sock, sizeof(shm->sock), "%s/sock", dir);
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		bench_pin(consumer_cpu);
		bench_consumer(shm);
	}
	*consumer = pid;
	while (atomic_load(&shm->listening) == 0 &&
	       atomic_load(&shm->ready) == 0 && bench_now_ns() < until)
		bench_nap_us(100);
	setenv("NPUSAN_SOCKET", shm->sock, 1);
	if (cfg->ring_full != NULL)
		setenv("NPUSAN_RING_FULL", cfg->ring_full, 1);
	if (cfg->stacks != NULL)
		setenv("NPUSAN_STACKS", cfg->stacks, 1);
	if (cfg->dormant)
		setenv("NPUSAN", "dormant", 1);
	err = npusan_init();
	if (err < 0)
		return err;
	while (atomic_load(&shm->ready) == 0 && bench_now_ns() < until)
		bench_nap_us(100);
	if (atomic_load(&shm->ready) != 1)
		return -ENOTCONN;
	/* The fake daemon has removed its socket by the time we are done;
	 * the directory is ours to remove. */
	return 0;
}

static void bench_agent_down(struct bench_shm *shm, pid_t consumer)
{
	char dir[sizeof(shm->sock)];
	char *slash;
	int status;

	atomic_store(&shm->stop, 1);
	waitpid(consumer, &status, 0);
	snprintf(dir, sizeof(dir), "%s", shm->sock);
	slash = strrchr(dir, '/');
	if (slash != NULL) {
		*slash = '\0';
		unlink(shm->sock);
		rmdir(dir);
	}
}

/* One configuration, in the current (fresh) process. The exit status. */
static int bench_config(const struct bench_cfg *cfg)
{
	struct bench_run runs[BENCH_RUNS], warm;
	struct bench_cfg warm_cfg = *cfg;
	struct bench_shm *shm;
	pid_t consumer = -1;
	uint64_t d0 = 0, x0 = 0;
	int ncpus = bench_ncpus(), err;
	/* CPU 0 for the consumer, the next ones for the producers, when
	 * there are enough of them. */
	bool enough = ncpus >= cfg->threads + (cfg->agent ? 1 : 0);
	int first_cpu = enough ? (cfg->agent ? 1 : 0) : -1;
	uint32_t op;

	shm = mmap(NULL, sizeof(*shm), PROT_READ | PROT_WRITE,
		   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shm == MAP_FAILED)
		return 1;
	if (cfg->floor) {
		bench_floor_ring = mmap(NULL, sizeof(*bench_floor_ring),
					PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (bench_floor_ring == MAP_FAILED)
			return 1;
	}
	memset(shm, 0, sizeof(*shm));
	shm->nap_us = bench_consumer_nap_us;
	if (cfg->agent) {
		err = bench_agent_up(cfg, shm, enough ? bench_cpu(0) : -1,
				     &consumer);
		if (err < 0) {
			fprintf(stderr, "agent_bench: %s: agent not up: %s\n",
				cfg->label, strerror(-err));
			if (consumer > 0)
				bench_agent_down(shm, consumer);
			return 1;
		}
	}
	if (npusan_enabled() != (cfg->agent && !cfg->dormant ? 1 : 0) ||
	    npusan_active() != (cfg->agent ? 1 : 0)) {
		fprintf(stderr, "agent_bench: %s: agent %s, expected %s\n",
			cfg->label, npusan_enabled() ? "on" :
				    npusan_active() ? "dormant" : "off",
			cfg->dormant ? "dormant" : cfg->agent ? "on" : "off");
		return 1;
	}
	op = npusan_intern("aten::addmm");
	/* Warm-up: resolves the PLT entry, defines the name (and the stack)
	 * on the ring, faults the ring's pages in. */
	warm_cfg.iters = cfg->iters / 4 > 0 ? cfg->iters / 4 : 1;
	err = bench_run_once(&warm_cfg, op, first_cpu, &warm);
	if (cfg->agent && err == 0 && (err = bench_sync(shm)) == 0) {
		d0 = shm->delivered;
		x0 = shm->dropped;
	}
	for (int r = 0; r < BENCH_RUNS && err == 0; r++) {
		err = bench_run_once(cfg, op, first_cpu, &runs[r]);
		if (err == 0 && cfg->agent)
			err = bench_sync(shm);
		if (err == 0 && cfg->agent) {
			runs[r].delivered = shm->delivered - d0;
			runs[r].dropped = shm->dropped - x0;
			d0 = shm->delivered;
			x0 = shm->dropped;
		}
	}
	if (err < 0)
		fprintf(stderr, "agent_bench: %s: %s\n", cfg->label,
			strerror(-err));
	else
		bench_report(cfg, !enough, runs);
	if (cfg->agent)
		bench_agent_down(shm, consumer);
	munmap(shm, sizeof(*shm));
	return err < 0;
}

/* Runs bench_config() in a child process; its exit status. */
static int bench_fork(const struct bench_cfg *cfg)
{
	int status;
	pid_t pid;

	fflush(stdout);
	bench_medians[bench_index] = 0; /* 0 until the child reports */
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0)
		_exit(bench_config(cfg));
	if (waitpid(pid, &status, 0) < 0)
		return 1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* Each launch against its floor, timed in this same invocation. */
static void bench_print_ratios(const struct bench_cfg *cfgs, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const struct bench_cfg *c = &cfgs[i];
		double of;

		if (c->ratio_of == 0 || bench_medians[i] == 0)
			continue;
		of = bench_medians[c->ratio_of - 1];
		if (of == 0)
			continue;
		printf("ratio %s / its floor: %.2f (%.1f / %.1f ns); target "
		       "at most 2\n",
		       c->label, bench_medians[i] / of, bench_medians[i], of);
	}
}

static void bench_usage(void)
{
	fprintf(stderr,
		"usage: agent_bench [--quick] [--only N] [--consumer-nap-us US]\n"
		"  --quick    a tenth of the launches per run\n"
		"  --only N   only the Nth configuration (from 1), e.g. under "
		"perf\n"
		"  --consumer-nap-us US\n"
		"             the consumer sleeps US microseconds after an "
		"empty drain\n"
		"             instead of spinning (sched_yield), as a daemon "
		"draining\n"
		"             on a timer would\n");
}

int main(int argc, char **argv)
{
	static const char *const agent_env[] = {
		"NPUSAN", "NPUSAN_RECORD", "NPUSAN_RING_FULL", "NPUSAN_STACKS",
		"NPUSAN_STACK_METHOD", "NPUSAN_SOCKET", NULL
	};
	long scale = 1, only = 0;
	int failed = 0;
	char *end;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0) {
			scale = 10;
		} else if (strcmp(argv[i], "--consumer-nap-us") == 0 &&
			   i + 1 < argc) {
			bench_consumer_nap_us = strtol(argv[++i], &end, 10);
			if (*end != '\0' || bench_consumer_nap_us < 0)
				only = -1;
		} else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
			only = strtol(argv[++i], &end, 10);
			if (*end != '\0' || only < 1)
				only = -1;
		} else {
			only = -1;
		}
		if (only < 0) {
			bench_usage();
			return 2;
		}
	}
	/* The agent must start off here (its constructor already ran):
	 * when the environment turned it on, start again without it. */
	if (npusan_enabled()) {
		for (int i = 0; agent_env[i] != NULL; i++)
			unsetenv(agent_env[i]);
		execv("/proc/self/exe", argv);
		fprintf(stderr, "agent_bench: re-exec: %s\n", strerror(errno));
		return 1;
	}
	for (int i = 0; agent_env[i] != NULL; i++)
		unsetenv(agent_env[i]);
	/* RING_SIZE stays whatever the caller set (8M by default). */

	const struct bench_cfg cfgs[] = {
		{ .label = "floor: bare ring push of the same record, "
			   "1 thread",
		  .threads = 1, .iters = 2000000 / scale, .floor = true },
		{ .label = "floor: bare ring push of the same record, "
			   "2 threads",
		  .threads = 2, .iters = 2000000 / scale, .floor = true },
		{ .label = "launch 4 ranges, 1 thread", .agent = true,
		  .threads = 1, .iters = 2000000 / scale, .target_ns = 50,
		  .ratio_of = 1 },
		{ .label = "launch 4 ranges, 2 threads", .agent = true,
		  .threads = 2, .iters = 2000000 / scale, .target_ns = 150,
		  .ratio_of = 2 },
		{ .label = "launch 4 ranges, agent disabled", .threads = 1,
		  .iters = 100000000 / scale, .target_ns = 2 },
		{ .label = "launch 4 ranges, agent disabled, guarded by "
			   "npusan_active()",
		  .threads = 1, .iters = 100000000 / scale, .target_ns = 2,
		  .guarded = true },
		{ .label = "launch 4 ranges, 1 thread, NPUSAN_RING_FULL=block",
		  .agent = true, .threads = 1, .ring_full = "block",
		  .iters = 2000000 / scale },
		{ .label = "launch 4 ranges, 2 threads, NPUSAN_RING_FULL=block",
		  .agent = true, .threads = 2, .ring_full = "block",
		  .iters = 2000000 / scale },
		{ .label = "launch 4 ranges, 1 thread, NPUSAN_STACKS=16 native",
		  .agent = true, .threads = 1, .stacks = "16",
		  .stack = NPUSAN_STACK_NATIVE, .iters = 1000000 / scale },
		{ .label = "launch 4 ranges, agent dormant", .agent = true,
		  .threads = 1, .iters = 100000000 / scale, .target_ns = 2,
		  .dormant = true },
		{ .label = "launch 4 ranges, agent dormant, guarded by "
			   "npusan_pushing()",
		  .agent = true, .threads = 1, .iters = 100000000 / scale,
		  .target_ns = 2, .guarded = true, .dormant = true },
		{ .label = "alloc + free, agent dormant (live table), per call",
		  .agent = true, .threads = 1, .iters = 4000000 / scale,
		  .dormant = true, .alloc_free = true },
		{ .label = "alloc + free, agent on (live table and ring), per "
			   "call",
		  .agent = true, .threads = 1, .iters = 2000000 / scale,
		  .alloc_free = true },
		{ .label = "alloc + free, 2 threads, agent on, per call",
		  .agent = true, .threads = 2, .iters = 2000000 / scale,
		  .alloc_free = true },
		{ .label = "the guarded loops without guard or call, for "
			   "reference",
		  .threads = 1, .iters = 100000000 / scale, .empty = true },
	};

	signal(SIGPIPE, SIG_IGN);
	printf("agent_bench: %d CPUs; ring %s; the consumer counts records "
	       "without decoding and, when the ring is empty, %s\n",
	       bench_ncpus(),
	       getenv("NPUSAN_RING_SIZE") ? getenv("NPUSAN_RING_SIZE")
					  : "8M (default)",
	       bench_consumer_nap_us > 0 ? "naps" : "spins");
	if (bench_consumer_nap_us > 0)
		printf("agent_bench: consumer nap %ld us\n",
		       bench_consumer_nap_us);
	bench_medians = mmap(NULL, sizeof(cfgs) / sizeof(cfgs[0]) *
				   sizeof(double),
			     PROT_READ | PROT_WRITE,
			     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (bench_medians == MAP_FAILED)
		return 1;
	for (size_t i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++) {
		bench_index = i;
		if (only == 0 || (size_t)only == i + 1)
			failed |= bench_fork(&cfgs[i]);
	}
	bench_print_ratios(cfgs, sizeof(cfgs) / sizeof(cfgs[0]));
	return failed;
}
