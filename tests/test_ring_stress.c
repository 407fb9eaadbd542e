/*
 * test_ring_stress.c - many producer threads against one consumer, as the
 * agent and the daemon use the ring: the producers in a forked child (the
 * memfd inherited through fork), the consumer in the test process.
 *
 * Every record carries its thread, a per-thread sequence number, its own
 * length (a function of both) and a checksum of the rest, so the consumer
 * can tell a record read whole and in order from anything else. Producers
 * are killed with SIGKILL mid-record and at random moments; the consumer
 * must deliver every committed record, report the unfinished ones lost,
 * misread nothing and stop.
 *
 * One test runs producer threads and the consumer in one process, so that
 * ThreadSanitizer (tools/test.sh, label concurrency) sees both sides.
 */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "op.h"
#include "ring.h"
#include "ringread.h"
#include "testutil.h"

#define ST_THREADS 4
#define ST_TYPE RING_REC_LAUNCH /* the test's records; gaps are RING_REC_OP */

/* ---- the records ------------------------------------------------------ */

struct st_rec {
	uint32_t thread;
	uint32_t len; /* payload bytes, this header included */
	uint64_t seq;
	uint64_t sum; /* st_sum() of the payload */
};

static uint64_t st_mix(uint64_t x)
{
	x += UINT64_C(0x9e3779b97f4a7c15);
	x = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
	x = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
	return x ^ (x >> 31);
}

static uint64_t st_seed(uint32_t thread, uint64_t seq)
{
	return st_mix(seq * ST_THREADS + thread);
}

/* Mostly short records, now and then a long one. */
static size_t st_len(uint32_t thread, uint64_t seq)
{
	uint64_t m = st_seed(thread, seq);

	if (m % 61 == 0)
		return sizeof(struct st_rec) + (size_t)(m >> 8) % 4000;
	return sizeof(struct st_rec) + (size_t)(m >> 8) % 400;
}

/* FNV-1a over the payload but its `sum`. */
static uint64_t st_sum(const unsigned char *p, size_t len)
{
	uint64_t h = UINT64_C(0xcbf29ce484222325);

	for (size_t i = 0; i < len; i++) {
		if (i == offsetof(struct st_rec, sum))
			i += sizeof(uint64_t);
		if (i < len)
			h = (h ^ p[i]) * UINT64_C(0x100000001b3);
	}
	return h;
}

static void st_fill(unsigned char *p, uint32_t thread, uint64_t seq, size_t len)
{
	struct st_rec r = { thread, (uint32_t)len, seq, 0 };
	uint64_t x = st_seed(thread, seq) | 1;

	memcpy(p, &r, sizeof(r));
	for (size_t i = sizeof(r); i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (unsigned char)x;
	}
	r.sum = st_sum(p, len);
	memcpy(p + offsetof(struct st_rec, sum), &r.sum, sizeof(r.sum));
}

/* ---- producers -------------------------------------------------------- */

enum st_mode {
	ST_COUNT,   /* push n records each, then return */
	ST_FOREVER, /* push until killed */
	ST_HALT,    /* thread 0 leaves a record reserved after n; see below */
};

/* What producers tell the consumer; shared across fork(). */
struct st_shared {
	_Atomic uint64_t pushed[ST_THREADS];  /* committed */
	_Atomic uint64_t dropped[ST_THREADS]; /* -ENOBUFS */
	_Atomic int done;                     /* threads finished (or parked) */
	_Atomic int reserved;   /* ST_HALT: the unfinished record exists */
	_Atomic uint64_t offset; /* ST_HALT: its offset in the data area */
	_Atomic int bad;        /* an unexpected error */
};

struct st_prod {
	struct ring *r;
	struct st_shared *sh;
	enum st_mode mode;
	uint32_t id;
	uint64_t n;
	long pace_us; /* a pause every 32 records, so a slow consumer keeps
			 up now and then */
};

static int st_push(struct ring *r, uint32_t thread, uint64_t seq)
{
	size_t len = st_len(thread, seq);
	struct ring_slot s;
	int err;

	err = ring_reserve(r, ST_TYPE, len, &s);
	if (err < 0)
		return err;
	st_fill(s.payload, thread, seq, len);
	ring_commit(&s);
	return 0;
}

/* ST_HALT, thread 0: reserves its record n, writes half of it, says so and
 * waits to be killed. */
static void st_halt(struct st_prod *p)
{
	size_t len = st_len(p->id, p->n);
	unsigned char buf[4096 + sizeof(struct st_rec)];
	struct ring_slot s;

	if (ring_reserve(p->r, ST_TYPE, len, &s) != 0) {
		atomic_store(&p->sh->bad, 1);
	} else {
		st_fill(buf, p->id, p->n, len);
		memcpy(s.payload, buf, len / 2);
		atomic_store(&p->sh->offset,
			     (uint64_t)((unsigned char *)s.rec - p->r->data));
	}
	atomic_store(&p->sh->reserved, 1);
	atomic_fetch_add(&p->sh->done, 1);
	for (;;)
		pause();
}

static void *st_produce(void *arg)
{
	struct timespec ms = { 0, 1000000 };
	struct st_prod *p = arg;
	int err;

	for (uint64_t seq = 0; p->mode == ST_FOREVER || seq < p->n; seq++) {
		/* ST_HALT: the others push half their records before thread
		 * 0's unfinished one and half after it. */
		while (p->mode == ST_HALT && p->id != 0 && seq == p->n / 2 &&
		       !atomic_load(&p->sh->reserved))
			nanosleep(&ms, NULL);
		if (p->pace_us != 0 && seq % 32 == 31) {
			struct timespec pace = { 0, p->pace_us * 1000 };

			nanosleep(&pace, NULL);
		}
		err = st_push(p->r, p->id, seq);
		if (err == -ENOBUFS) {
			atomic_fetch_add_explicit(&p->sh->dropped[p->id], 1,
						  memory_order_relaxed);
		} else if (err < 0) {
			atomic_store(&p->sh->bad, err);
			break;
		} else {
			atomic_fetch_add_explicit(&p->sh->pushed[p->id], 1,
						  memory_order_relaxed);
		}
	}
	if (p->mode == ST_HALT && p->id == 0)
		st_halt(p);
	atomic_fetch_add(&p->sh->done, 1);
	if (p->mode == ST_HALT)
		for (;;)
			pause();
	return NULL;
}

/* n[i]: thread i's records (or the point where it halts). */
static void st_start(pthread_t *t, struct st_prod *p, struct ring *r,
		     struct st_shared *sh, enum st_mode mode,
		     const uint64_t *n, long pace_us)
{
	for (uint32_t i = 0; i < ST_THREADS; i++) {
		p[i] = (struct st_prod){ r, sh, mode, i, n[i], pace_us };
		if (pthread_create(&t[i], NULL, st_produce, &p[i]) != 0)
			atomic_store(&sh->bad, -EAGAIN);
	}
}

static struct st_shared *st_shared_new(void)
{
	struct st_shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
				    MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	ck_assert_ptr_ne(sh, MAP_FAILED);
	memset(sh, 0, sizeof(*sh));
	return sh;
}

/* ---- one mapping for both sides --------------------------------------- */

/*
 * ThreadSanitizer keys what it knows by address, so the consumer's own
 * mapping of the ring would be other memory to it: it would see none of
 * the ordering between producers and consumer (the release store of the
 * tail and the acquire loads that pair with it) and report every reuse of
 * a slot a lap later as a race between two producers. While st_alias is
 * set, ringread_map()'s mmap() of the ring returns the producer's mapping
 * (and ringread_unmap()'s munmap() leaves it), so that both sides use one
 * address, as they use one memory. The test is linked with
 * -Wl,--wrap=mmap,--wrap=munmap.
 */
static struct {
	int fd;
	void *base;
	size_t len;
} st_alias = { -1, NULL, 0 };

void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd,
		  off_t off);
int __real_munmap(void *addr, size_t len);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd,
		  off_t off);
int __wrap_munmap(void *addr, size_t len);

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd,
		  off_t off)
{
	if (fd >= 0 && fd == st_alias.fd && off == 0 && len <= st_alias.len)
		return st_alias.base;
	return __real_mmap(addr, len, prot, flags, fd, off);
}

int __wrap_munmap(void *addr, size_t len)
{
	if (addr != NULL && addr == st_alias.base && len <= st_alias.len)
		return 0;
	return __real_munmap(addr, len);
}

/* ---- the consumer ----------------------------------------------------- */

struct st_check {
	bool strict;                /* every sequence number, in order */
	uint64_t next[ST_THREADS];  /* the lowest sequence number due */
	uint64_t got[ST_THREADS];   /* delivered */
	uint64_t gap_lost;          /* sum of the gaps' counts */
	uint64_t gaps;
	uint64_t lost;              /* RINGREAD_LOST callbacks */
	uint64_t lost_bytes;
	char err[200];
};

static int st_bad(struct st_check *k, const char *what, uint32_t thread,
		  uint64_t seq)
{
	snprintf(k->err, sizeof(k->err), "%s (thread %u, seq %llu)", what,
		 thread, (unsigned long long)seq);
	return -EPROTO;
}

static int st_cb(void *arg, unsigned type, const void *payload, size_t len)
{
	const unsigned char *p = payload;
	struct st_check *k = arg;
	struct ring_op op;
	struct st_rec r;

	if (type == RINGREAD_LOST) {
		k->lost++;
		k->lost_bytes += len;
		return 0;
	}
	if (type == RING_REC_OP) {
		if (len != sizeof(op))
			return st_bad(k, "operation of a bad length", 0, len);
		memcpy(&op, p, sizeof(op));
		if (op.kind != OP_GAP || op.flags != RING_OP_HAS_LOST ||
		    op.a == 0)
			return st_bad(k, "not a gap", op.kind, op.a);
		k->gaps++;
		k->gap_lost += op.a;
		return k->strict ? st_bad(k, "a gap", 0, op.a) : 0;
	}
	if (type != ST_TYPE || len < sizeof(r))
		return st_bad(k, "bad record type or length", type, len);
	memcpy(&r, p, sizeof(r));
	if (r.thread >= ST_THREADS)
		return st_bad(k, "bad thread", r.thread, r.seq);
	if (r.seq < k->next[r.thread] ||
	    (k->strict && r.seq != k->next[r.thread]))
		return st_bad(k, "out of order", r.thread, r.seq);
	if (r.len != st_len(r.thread, r.seq) ||
	    len != ring_rec_size(r.len) - sizeof(struct ring_rec))
		return st_bad(k, "bad length", r.thread, r.seq);
	if (st_sum(p, r.len) != r.sum)
		return st_bad(k, "bad checksum", r.thread, r.seq);
	for (size_t i = r.len; i < len; i++) {
		if (p[i] != 0)
			return st_bad(k, "padding not zero", r.thread, r.seq);
	}
	k->next[r.thread] = r.seq + 1;
	k->got[r.thread]++;
	return 0;
}

static int st_drain(struct ringread *c, unsigned max, unsigned flags,
		    struct st_check *k)
{
	int n = ringread_drain(c, max, flags, st_cb, k);

	ck_assert_msg(n >= 0, "drain: %d: %s", n, k->err);
	return n;
}

static void st_sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

struct st_env {
	struct ring *r;
	struct ringread *c;
	struct st_shared *sh;
	struct st_check k;
};

/* A ring at `start` and its consumer; with `alias`, the consumer uses the
 * producer's mapping (see st_alias). */
static void st_open(struct st_env *e, uint64_t capacity, uint32_t flags,
		    uint64_t start, bool alias)
{
	const char *why = NULL;

	memset(e, 0, sizeof(*e));
	ck_assert_int_eq(ring_create(capacity, flags, 5000, &e->r), 0);
	ring_store_relaxed(&e->r->hdr->head, start);
	ring_store_relaxed(&e->r->hdr->tail, start);
	ring_store_relaxed(&e->r->tail_cache, start);
	if (alias) {
		st_alias.fd = ring_fd(e->r);
		st_alias.base = e->r->hdr;
		st_alias.len = e->r->map_len;
	}
	/* Mapped before the producers start: a blocking producer waits for a
	 * consumer that has mapped the ring. */
	ck_assert_int_eq(ringread_map(ring_fd(e->r), &e->c, &why), 0);
	e->sh = st_shared_new();
}

static void st_close(struct st_env *e)
{
	munmap(e->sh, sizeof(*e->sh));
	ringread_unmap(e->c);
	st_alias.fd = -1;
	st_alias.base = NULL;
	st_alias.len = 0;
	ring_destroy(e->r);
}

/* ---- tests ------------------------------------------------------------ */

/*
 * ThreadSanitizer sees no ordering through memory shared with another
 * process: in a forked child, a slot that one producer thread wrote and
 * another reuses a lap later (after the consumer in the parent released
 * it) is reported as a race. The tests with a forked child run in the
 * ASan/UBSan build; under TSan, ring_stress_threads_in_one_process covers
 * the ring.
 */
#ifndef __SANITIZE_THREAD__
#define ST_RECORDS 20000

/* After the producers are gone: drains what they left, skipping what they
 * never finished; it must end. */
static void st_drain_dead(struct ringread *c, struct st_check *k)
{
	struct ringread_counters n;
	int rounds = 0;

	while (st_drain(c, 256, RINGREAD_DEAD, k) > 0)
		ck_assert_int_lt(++rounds, 100000);
	ringread_counters(c, &n);
	ck_assert_uint_eq(n.tail, n.head);
	ck_assert_uint_eq(n.corrupt, 0);
	ck_assert_uint_eq(n.lost_bytes, k->lost_bytes);
}

/* The producers in a child process; it exits once they are done. */
static pid_t st_fork(struct ring *r, struct st_shared *sh, enum st_mode mode,
		     const uint64_t *n, long pace_us)
{
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct st_prod p[ST_THREADS];
		pthread_t t[ST_THREADS];

		st_start(t, p, r, sh, mode, n, pace_us);
		for (int i = 0; i < ST_THREADS; i++)
			pthread_join(t[i], NULL);
		_exit(atomic_load(&sh->bad) ? 1 : 0);
	}
	return pid;
}

/* Drains (`max` at a time, pausing `pause_us` when idle or always when
 * `slow`) until the child exits; its exit status. */
static int st_consume(struct ringread *c, pid_t pid, unsigned max,
		      long pause_us, bool slow, struct st_check *k)
{
	int status, n;

	for (;;) {
		n = st_drain(c, max, 0, k);
		if (n == 0 && waitpid(pid, &status, WNOHANG) == pid)
			break;
		if (n == 0 || slow)
			st_sleep_us(pause_us);
	}
	st_drain_dead(c, k);
	return status;
}

static uint64_t st_total(_Atomic uint64_t *v)
{
	uint64_t t = 0;

	for (int i = 0; i < ST_THREADS; i++)
		t += atomic_load(&v[i]);
	return t;
}

static bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] != 0)
			return false;
	}
	return true;
}


/* Blocking producers in a child against a consumer that keeps pausing:
 * the ring is full again and again, and nothing is lost. */
START_TEST(ring_stress_block_loses_nothing)
{
	const uint64_t n[ST_THREADS] = { ST_RECORDS, ST_RECORDS, ST_RECORDS,
					 ST_RECORDS };
	struct ringread_counters rc;
	struct st_env e;
	int status;
	pid_t pid;

	st_open(&e, RING_MIN_CAPACITY, RING_F_BLOCK, 0 - RING_MIN_CAPACITY,
		false);
	e.k.strict = true;
	pid = st_fork(e.r, e.sh, ST_COUNT, n, 0);
	status = st_consume(e.c, pid, 64, 50, true, &e.k);
	ck_assert_int_eq(status, 0);
	for (int i = 0; i < ST_THREADS; i++)
		ck_assert_uint_eq(e.k.got[i], ST_RECORDS);
	ck_assert_uint_eq(ring_dropped(e.r), 0);
	ck_assert_uint_eq(e.k.lost, 0);
	ringread_counters(e.c, &rc);
	ck_assert_uint_gt(rc.bytes, 50 * RING_MIN_CAPACITY);
	ck_assert(all_zero(e.r->data, e.r->capacity));
	st_close(&e);
}
END_TEST

/*
 * Dropping producers against a slow consumer: every record is delivered
 * in order or counted as dropped, exactly, and the gap records (with the
 * drops no gap reported yet) account for every drop.
 */
START_TEST(ring_stress_drops_accounted_exactly)
{
	const uint64_t n[ST_THREADS] = { ST_RECORDS, ST_RECORDS, ST_RECORDS,
					 ST_RECORDS };
	uint64_t got = 0, dropped;
	struct st_env e;
	int status;
	pid_t pid;

	st_open(&e, RING_MIN_CAPACITY, 0, (UINT64_C(1) << 35) - 4096, false);
	pid = st_fork(e.r, e.sh, ST_COUNT, n, 50);
	status = st_consume(e.c, pid, 64, 50, true, &e.k);
	ck_assert_int_eq(status, 0);
	dropped = ring_dropped(e.r);
	ck_assert_uint_gt(dropped, 0);
	ck_assert_uint_eq(st_total(e.sh->dropped), dropped);
	for (int i = 0; i < ST_THREADS; i++) {
		ck_assert_uint_eq(e.k.got[i], atomic_load(&e.sh->pushed[i]));
		ck_assert_uint_eq(e.k.got[i] + atomic_load(&e.sh->dropped[i]),
				  ST_RECORDS);
		got += e.k.got[i];
	}
	ck_assert_uint_gt(got, 0);
	ck_assert_uint_eq(got + dropped, ST_THREADS * ST_RECORDS);
	ck_assert_uint_gt(e.k.gaps, 0);
	ck_assert_uint_eq(e.k.gap_lost + ringread_take_pending(e.c), dropped);
	ck_assert_uint_eq(e.k.lost, 0);
	st_close(&e);
}
END_TEST

/*
 * Thread 0 reserves a record, writes half of it and stops; the others go
 * on committing after it. The consumer waits at the unfinished record
 * while the child lives; once it is killed, it delivers every committed
 * record, reports the unfinished one lost by its length, and stops.
 */
START_TEST(ring_stress_killed_mid_record)
{
	const uint64_t n[ST_THREADS] = { 100, 600, 600, 600 };
	size_t need = ring_rec_size(st_len(0, 100));
	struct ringread_counters rc;
	struct st_env e;
	int status, waited = 0;
	pid_t pid;

	st_open(&e, RING_MIN_CAPACITY * 16, 0, 0 - 64 * 1024, false);
	e.k.strict = true;
	pid = st_fork(e.r, e.sh, ST_HALT, n, 0);
	while (atomic_load(&e.sh->done) < ST_THREADS) {
		ck_assert_int_lt(++waited, 20000);
		st_drain(e.c, 256, 0, &e.k);
		st_sleep_us(500);
	}
	ck_assert_int_eq(atomic_load(&e.sh->bad), 0);
	/* Alive: the consumer waits at the unfinished record. */
	while (st_drain(e.c, 256, 0, &e.k) > 0)
		;
	ringread_counters(e.c, &rc);
	ck_assert_uint_eq(rc.tail & (e.r->capacity - 1),
			  atomic_load(&e.sh->offset));
	ck_assert_uint_eq(e.k.got[0], 100);
	ck_assert_uint_eq(e.k.lost, 0);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status));
	st_drain_dead(e.c, &e.k);
	for (int i = 0; i < ST_THREADS; i++)
		ck_assert_uint_eq(e.k.got[i], n[i]);
	ck_assert_uint_eq(e.k.lost, 1);
	ck_assert_uint_eq(e.k.lost_bytes, need);
	ck_assert_uint_eq(ring_dropped(e.r), 0);
	ck_assert(all_zero(e.r->data, e.r->capacity));
	st_close(&e);
}
END_TEST

/*
 * Killed at a random moment of a busy run (blocking or dropping): the
 * consumer reads only whole records, in order, reports the rest lost, and
 * stops with nothing left in the ring.
 */
START_TEST(ring_stress_killed_at_random)
{
	const uint64_t n[ST_THREADS] = { 0 };
	uint64_t seed = st_mix((uint64_t)_i + 1);
	long delay_us = 1000 + (long)(seed % 40000);
	struct st_env e;
	uint64_t t0, got = 0;
	struct timespec ts;
	int status;
	pid_t pid;

	st_open(&e, RING_MIN_CAPACITY, _i % 2 ? RING_F_BLOCK : 0,
		0 - RING_MIN_CAPACITY / 4 - 8 * (seed % 1000), false);
	pid = st_fork(e.r, e.sh, ST_FOREVER, n, 0);
	/* The delay runs from the first record delivered: the child may be
	 * slow to start its threads. */
	for (t0 = 0;;) {
		uint64_t now;

		st_drain(e.c, 128, 0, &e.k);
		clock_gettime(CLOCK_MONOTONIC, &ts);
		now = (uint64_t)ts.tv_sec * 1000000 +
		      (uint64_t)ts.tv_nsec / 1000;
		if (t0 == 0 && e.k.got[0] + e.k.got[1] + e.k.got[2] +
				       e.k.got[3] != 0)
			t0 = now;
		if (t0 != 0 && now - t0 >= (uint64_t)delay_us)
			break;
		if (seed & 1)
			st_sleep_us(100);
	}
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status));
	st_drain_dead(e.c, &e.k);
	for (int i = 0; i < ST_THREADS; i++) {
		/* At most one committed but not counted yet: the kill may
		 * fall between the two. */
		ck_assert_uint_le(e.k.got[i],
				  atomic_load(&e.sh->pushed[i]) + 1);
		got += e.k.got[i];
	}
	ck_assert_uint_gt(got, 0);
	ck_assert_int_eq(atomic_load(&e.sh->bad), 0);
	ck_assert(all_zero(e.r->data, e.r->capacity));
	st_close(&e);
}
END_TEST

#endif /* __SANITIZE_THREAD__ */

#define ST_ONE 25000 /* records per thread in one process */

/*
 * Producer threads and the consumer in one process, blocking and then
 * dropping: what ThreadSanitizer can check, since it does not see the
 * ordering between two processes.
 */
START_TEST(ring_stress_threads_in_one_process)
{
	const uint64_t n[ST_THREADS] = { ST_ONE, ST_ONE, ST_ONE, ST_ONE };
	uint32_t flags = _i == 0 ? RING_F_BLOCK : 0;
	struct st_prod p[ST_THREADS];
	pthread_t t[ST_THREADS];
	uint64_t got = 0;
	struct st_env e;
	int calls;

	st_open(&e, RING_MIN_CAPACITY, flags, 0 - 8 * 1000, true);
	e.k.strict = flags == RING_F_BLOCK;
	st_start(t, p, e.r, e.sh, ST_COUNT, n, flags ? 0 : 50);
	for (;;) {
		int done = atomic_load(&e.sh->done);

		calls = st_drain(e.c, 32, 0, &e.k);
		if (calls == 0 && done == ST_THREADS)
			break;
		st_sleep_us(flags ? 20 : 100);
	}
	for (int i = 0; i < ST_THREADS; i++) {
		ck_assert_int_eq(pthread_join(t[i], NULL), 0);
		ck_assert_uint_eq(e.k.got[i], atomic_load(&e.sh->pushed[i]));
		got += e.k.got[i];
	}
	ck_assert_int_eq(atomic_load(&e.sh->bad), 0);
	ck_assert_uint_eq(got + ring_dropped(e.r), ST_THREADS * ST_ONE);
	ck_assert_uint_eq(e.k.gap_lost + ringread_take_pending(e.c),
			  ring_dropped(e.r));
	if (flags == RING_F_BLOCK)
		ck_assert_uint_eq(ring_dropped(e.r), 0);
	ck_assert_uint_eq(e.k.lost, 0);
	st_close(&e);
}
END_TEST

static Suite *ring_stress_suite(void)
{
	Suite *s = suite_create("ring_stress");
	TCase *tc = tcase_create("stress");

	tcase_set_timeout(tc, 60);
#ifndef __SANITIZE_THREAD__
	tcase_add_test(tc, ring_stress_block_loses_nothing);
	tcase_add_test(tc, ring_stress_drops_accounted_exactly);
	tcase_add_test(tc, ring_stress_killed_mid_record);
	tcase_add_loop_test(tc, ring_stress_killed_at_random, 0, 6);
#endif
	tcase_add_loop_test(tc, ring_stress_threads_in_one_process, 0, 2);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(ring_stress_suite());
}
