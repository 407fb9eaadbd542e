/*
 * test_ingest.c - rings drained into engines, findings into the store:
 * records pushed by the real producer (agent/ring.c) into a ring that a
 * real store (in a temporary directory) receives the findings of.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "ingest.h"
#include "ring.h"
#include "ringread.h"
#include "store.h"
#include "testutil.h"

struct fixture {
	char *dir;
	struct store *store;
	struct ingest *ingest;
	struct ring *ring;
};

static void fx_open_threads(struct fixture *fx, unsigned threads)
{
	struct store_opts so = { 0 };
	struct ingest_opts io = { .threads = threads, .period_ms = 2 };
	char path[512];
	char *err = NULL;

	fx->dir = tu_tmpdir();
	snprintf(path, sizeof(path), "%s/npusan.db", fx->dir);
	so.path = path;
	ck_assert_msg(store_open(&so, &fx->store, &err) == 0, "%s", err);
	io.store = fx->store;
	ck_assert_int_eq(ingest_new(&io, &fx->ingest), 0);
	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 1000, &fx->ring), 0);
}

static void fx_open(struct fixture *fx)
{
	fx_open_threads(fx, 2);
}

static void fx_close(struct fixture *fx)
{
	ingest_free(fx->ingest);
	store_close(fx->store);
	ring_destroy(fx->ring);
	free(fx->dir);
}

/* Registers a process with the fixture's ring (a dup of its fd). */
static struct ingest_proc *fx_register(struct fixture *fx, uint32_t pid,
				       const char *job)
{
	struct store_process sp = { .pid = pid, .uid = (uint32_t)getuid(),
				    .host = "test", .job = job,
				    .has_rank = true, .rank = 3 };
	struct ingest_proc *p;
	const char *why = NULL;
	int fd = dup(ring_fd(fx->ring));

	ck_assert_int_ge(fd, 0);
	ck_assert_msg(ingest_register(fx->ingest, &sp, fd, &p, &why) == 0,
		      "%s", why ? why : "");
	return p;
}

static void push_string(struct ring *r, uint32_t id, const char *s)
{
	struct ring_slot slot;
	struct ring_string *def;
	size_t n = strlen(s);

	ck_assert_int_eq(ring_reserve(r, RING_REC_STRING, sizeof(*def) + n,
				      &slot), 0);
	def = slot.payload;
	def->id = id;
	def->len = (uint32_t)n;
	memcpy(def->bytes, s, n);
	ring_commit(&slot);
}

static void push_op(struct ring *r, enum op_kind kind, uint64_t a, uint64_t b)
{
	struct ring_slot slot;
	struct ring_op *op;

	ck_assert_int_eq(ring_reserve(r, RING_REC_OP, sizeof(*op), &slot), 0);
	op = slot.payload;
	memset(op, 0, sizeof(*op));
	op->kind = (uint8_t)kind;
	op->a = a;
	op->b = b;
	ring_commit(&slot);
}

/* A launch on `stream` of operator `name` reading `rd` and writing `wr`
 * (0: none), 8 bytes each. */
static void push_launch(struct ring *r, uint64_t stream, uint32_t name,
			uint64_t rd, uint64_t wr)
{
	struct ring_slot slot;
	struct ring_launch *l;
	uint32_t n = (rd != 0) + (wr != 0), i = 0;

	ck_assert_int_eq(ring_reserve(r, RING_REC_LAUNCH,
				      sizeof(*l) + n * sizeof(l->ranges[0]),
				      &slot), 0);
	l = slot.payload;
	memset(l, 0, sizeof(*l));
	l->kind = OP_LAUNCH;
	l->stream = stream;
	l->name = name;
	l->nreads = rd != 0;
	l->nwrites = wr != 0;
	if (rd != 0)
		l->ranges[i++] = (struct ring_range){ rd, 8 };
	if (wr != 0)
		l->ranges[i] = (struct ring_range){ wr, 8 };
	ring_commit(&slot);
}

/* A race on fresh memory at `ptr`: written on stream 0, read on 7. */
static void push_race(struct ring *r, uint64_t ptr)
{
	push_launch(r, 0, 1, 0, ptr);
	push_launch(r, 7, 2, ptr, 0);
}

struct collected {
	unsigned n;
	uint64_t count;
	char kind[32];
	char op[64];
	char prev_op[64];
	char job[32];
};

static int collect_cb(void *arg, const struct store_finding *f,
		      const struct store_process *p)
{
	struct collected *c = arg;

	c->n++;
	c->count = f->v.count;
	snprintf(c->kind, sizeof(c->kind), "%s", f->v.kind);
	snprintf(c->op, sizeof(c->op), "%s", f->v.access.op);
	snprintf(c->prev_op, sizeof(c->prev_op), "%s",
		 f->v.has_previous ? f->v.previous.op : "");
	snprintf(c->job, sizeof(c->job), "%s", p->job ? p->job : "");
	return 0;
}

/* Polls the store until `pred` holds or 10 s pass. */
static void wait_findings(struct fixture *fx, unsigned want_n,
			  uint64_t want_count, struct collected *c)
{
	struct store_filter f = { 0 };
	struct timespec nap = { 0, 10000000 };

	for (int i = 0; i < 1000; i++) {
		memset(c, 0, sizeof(*c));
		ck_assert_int_eq(store_flush(fx->store), 0);
		ck_assert_int_eq(store_findings(fx->store, &f, collect_cb, c),
				 0);
		if (c->n == want_n && c->count >= want_count)
			return;
		nanosleep(&nap, NULL);
	}
}

START_TEST(ingest_race_in_ring_reaches_store)
{
	struct fixture fx;
	struct collected c;

	fx_open(&fx);
	fx_register(&fx, (uint32_t)getpid(), "job-a");
	push_string(fx.ring, 1, "aten::randn");
	push_string(fx.ring, 2, "aten::add");
	push_op(fx.ring, OP_STREAM_CREATE, 7, 0);
	push_race(fx.ring, 0x1000);
	wait_findings(&fx, 1, 1, &c);
	ck_assert_uint_eq(c.n, 1);
	ck_assert_str_eq(c.kind, "data_race");
	ck_assert_str_eq(c.op, "aten::add");
	ck_assert_str_eq(c.prev_op, "aten::randn");
	ck_assert_str_eq(c.job, "job-a");
	fx_close(&fx);
}
END_TEST

/* The same mistake every step is one row whose count is every step. */
START_TEST(ingest_repeats_sum_into_one_row)
{
	struct fixture fx;
	struct collected c;

	fx_open(&fx);
	fx_register(&fx, (uint32_t)getpid(), NULL);
	push_string(fx.ring, 1, "fill");
	push_string(fx.ring, 2, "use");
	for (uint64_t i = 0; i < 500; i++)
		push_race(fx.ring, 0x10000 + i * 64);
	wait_findings(&fx, 1, 500, &c);
	ck_assert_uint_eq(c.n, 1);
	ck_assert_uint_eq(c.count, 500);
	fx_close(&fx);
}
END_TEST

struct listed {
	unsigned n;
	int64_t id;
	char state[16];
	uint64_t events, lost, gaps;
};

static int list_cb(void *arg, const struct store_process *p)
{
	struct listed *l = arg;

	l->n++;
	l->id = p->id;
	snprintf(l->state, sizeof(l->state), "%s",
		 store_state_name(p->state));
	l->events = p->events;
	l->lost = p->lost;
	l->gaps = p->gaps;
	return 0;
}

/* A process that is gone is drained to the end, its drops counted as
 * lost, and recorded exited; drops beyond any real count (_i 1) are a gap
 * of unknown size, never a wrapped total. */
START_TEST(ingest_exited_process_is_finished)
{
	static const uint64_t pending[] = { 5, UINT64_MAX - 1 };
	static const uint64_t lost[] = { 5, 0 };
	struct store_filter f = { 0 };
	struct timespec nap = { 0, 10000000 };
	struct ingest_proc *p;
	struct fixture fx;
	struct listed l;
	pid_t child;
	int status;

	fx_open(&fx);
	child = fork();
	if (child == 0) {
		pause();
		_exit(0);
	}
	p = fx_register(&fx, (uint32_t)child, NULL);
	push_op(fx.ring, OP_STREAM_CREATE, 1, 0);
	push_op(fx.ring, OP_DEVICE_SYNC, 0, 0);
	/* Drops the ring never reported in a gap record. */
	atomic_fetch_add(&fx.ring->hdr->pending, pending[_i]);
	kill(child, SIGKILL);
	waitpid(child, &status, 0);
	ingest_disconnect(fx.ingest, p);
	for (int i = 0; i < 1000; i++) {
		memset(&l, 0, sizeof(l));
		store_flush(fx.store);
		ck_assert_int_eq(store_list(fx.store, &f, list_cb, &l), 0);
		if (strcmp(l.state, "exited") == 0)
			break;
		nanosleep(&nap, NULL);
	}
	ck_assert_uint_eq(l.n, 1);
	ck_assert_str_eq(l.state, "exited");
	ck_assert_uint_eq(l.lost, lost[_i]);
	ck_assert_uint_eq(l.gaps, 1);
	ck_assert_uint_eq(l.events, 2);
	fx_close(&fx);
}
END_TEST

/* A process that exited but is not reaped yet (a zombie) can push no
 * more: it is finished at once, not when its parent gets round to it, so
 * that a query about its job sees its last operations. */
START_TEST(ingest_zombie_process_is_finished)
{
	struct store_filter f = { 0 };
	struct timespec nap = { 0, 10000000 };
	struct ingest_proc *p;
	struct fixture fx;
	struct listed l;
	siginfo_t si;
	pid_t child;

	fx_open(&fx);
	child = fork();
	if (child == 0) {
		pause();
		_exit(0);
	}
	p = fx_register(&fx, (uint32_t)child, NULL);
	push_op(fx.ring, OP_DEVICE_SYNC, 0, 0);
	kill(child, SIGKILL);
	/* Waits for the exit but leaves the zombie. */
	ck_assert_int_eq(waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT),
			 0);
	ingest_disconnect(fx.ingest, p);
	for (int i = 0; i < 500; i++) {
		memset(&l, 0, sizeof(l));
		store_flush(fx.store);
		ck_assert_int_eq(store_list(fx.store, &f, list_cb, &l), 0);
		if (strcmp(l.state, "exited") == 0)
			break;
		nanosleep(&nap, NULL);
	}
	ck_assert_str_eq(l.state, "exited");
	ck_assert_uint_eq(l.events, 1);
	waitpid(child, NULL, 0);
	fx_close(&fx);
}
END_TEST

/* Stopping the daemon takes what was committed and leaves the process
 * running, for the next daemon. */
START_TEST(ingest_free_drains_and_keeps_running)
{
	struct store_filter f = { 0 };
	struct collected c;
	struct fixture fx;
	struct listed l = { 0 };
	struct store_opts so = { 0 };
	char path[512];
	char *err = NULL;

	fx_open(&fx);
	fx_register(&fx, (uint32_t)getpid(), NULL);
	push_string(fx.ring, 1, "fill");
	push_string(fx.ring, 2, "use");
	push_race(fx.ring, 0x1000);
	ingest_free(fx.ingest);
	store_close(fx.store);
	snprintf(path, sizeof(path), "%s/npusan.db", fx.dir);
	so.path = path;
	ck_assert_msg(store_open(&so, &fx.store, &err) == 0, "%s", err);
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(store_findings(fx.store, &f, collect_cb, &c), 0);
	ck_assert_uint_eq(c.n, 1);
	ck_assert_int_eq(store_list(fx.store, &f, list_cb, &l), 0);
	ck_assert_uint_eq(l.events, 2);
	store_close(fx.store);
	ring_destroy(fx.ring);
	free(fx.dir);
}
END_TEST

/*
 * Drain threads are interchangeable: a burst of registrations spreads over
 * every thread (two here), and whichever takes a process drains it. Five
 * processes, each with a race in its own ring, make five findings.
 */
START_TEST(ingest_every_process_of_a_burst_is_drained)
{
	struct store_process sp = { .uid = (uint32_t)getuid(), .host = "test",
				    .job = "burst" };
	struct ring *rings[5];
	struct fixture fx;
	struct collected c;
	struct ingest_proc *p;
	const char *why;

	fx_open(&fx);
	for (unsigned i = 0; i < 5; i++) {
		ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 1000,
					     &rings[i]), 0);
		push_string(rings[i], 1, "fill");
		push_string(rings[i], 2, "use");
		push_race(rings[i], 0x1000);
	}
	for (unsigned i = 0; i < 5; i++) {
		sp.pid = 0x400000u + i; /* distinct, and no live process */
		sp.has_rank = true;
		sp.rank = i;
		why = NULL;
		ck_assert_msg(ingest_register(fx.ingest, &sp,
					      dup(ring_fd(rings[i])), &p,
					      &why) == 0, "%s", why ? why : "");
	}
	wait_findings(&fx, 5, 1, &c);
	ck_assert_uint_eq(c.n, 5);
	fx_close(&fx);
	for (unsigned i = 0; i < 5; i++)
		ring_destroy(rings[i]);
}
END_TEST

/* A record of `type` with `len` payload bytes holding a stream_wait of
 * `stream` on `on` whose kind is `kind`. */
static void push_raw_wait(struct ring *r, unsigned type, size_t len,
			  uint8_t kind, uint64_t stream, uint64_t on)
{
	struct ring_slot slot;
	struct ring_op op = { .kind = kind, .a = stream, .b = on };

	ck_assert_int_eq(ring_reserve(r, type, len, &slot), 0);
	memset(slot.payload, 0, len);
	memcpy(slot.payload, &op, len < sizeof(op) ? len : sizeof(op));
	ring_commit(&slot);
}

/* Polls the store until its one process has `events` events. */
static void wait_events(struct fixture *fx, uint64_t events, struct listed *l)
{
	struct store_filter f = { 0 };

	for (int i = 0; i < 1000; i++) {
		memset(l, 0, sizeof(*l));
		ck_assert_int_eq(store_flush(fx->store), 0);
		ck_assert_int_eq(store_list(fx->store, &f, list_cb, l), 0);
		if (l->events >= events)
			return;
		tu_nap_ms(10);
	}
}

/*
 * A sync between a write and a read that the daemon cannot decode (a bad
 * length, kind or record type, by _i) is an operation lost, not one that
 * never happened: it is counted and becomes a gap, so the two accesses,
 * which it may have ordered, are never reported as a race.
 */
START_TEST(ingest_undecodable_sync_is_a_gap_not_a_race)
{
	static const struct {
		unsigned type;
		size_t len;
		uint8_t kind;
	} bad[] = {
		{ RING_REC_OP, sizeof(struct ring_op) + 8, OP_STREAM_WAIT },
		{ RING_REC_OP, sizeof(struct ring_op), OP_KIND_COUNT },
		{ 9, sizeof(struct ring_op), OP_STREAM_WAIT },
	};
	struct fixture fx;
	struct collected c;
	struct listed l;

	fx_open(&fx);
	fx_register(&fx, (uint32_t)getpid(), NULL);
	push_string(fx.ring, 1, "fill");
	push_string(fx.ring, 2, "use");
	push_op(fx.ring, OP_STREAM_CREATE, 7, 0);
	push_launch(fx.ring, 0, 1, 0, 0x1000);
	push_raw_wait(fx.ring, bad[_i].type, bad[_i].len, bad[_i].kind, 7, 0);
	push_launch(fx.ring, 7, 2, 0x1000, 0);
	wait_events(&fx, 3, &l);
	memset(&c, 0, sizeof(c));
	ck_assert_int_eq(store_flush(fx.store), 0);
	ck_assert_int_eq(store_findings(fx.store, &(struct store_filter){ 0 },
					collect_cb, &c), 0);
	ck_assert_msg(c.n == 0, "a %s across an undecodable sync", c.kind);
	ck_assert_uint_eq(l.events, 3);
	ck_assert_uint_eq(l.lost, 1);
	ck_assert_uint_eq(l.gaps, 1);
	fx_close(&fx);
}
END_TEST

static void push_gap(struct ring *r, uint64_t lost)
{
	struct ring_slot slot;
	struct ring_op *op;

	ck_assert_int_eq(ring_reserve(r, RING_REC_OP, sizeof(*op), &slot), 0);
	op = slot.payload;
	memset(op, 0, sizeof(*op));
	op->kind = OP_GAP;
	op->flags = RING_OP_HAS_LOST;
	op->a = lost;
	ring_commit(&slot);
}

/*
 * Counts an agent controls never wrap: a ring whose header says 2^64 - 6
 * operations were consumed before, and gap records claiming 2^64 - 1 and
 * twice 2^53 - 1 lost. The impossible ones are gaps of unknown size; the
 * sums saturate at 2^53, for the process and for the host.
 */
START_TEST(ingest_agent_counts_saturate_never_wrap)
{
	struct ingest_stats st;
	struct fixture fx;
	struct listed l;

	fx_open(&fx);
	atomic_store(&fx.ring->hdr->consumed, UINT64_MAX - 5);
	fx_register(&fx, (uint32_t)getpid(), NULL);
	push_gap(fx.ring, UINT64_MAX);
	push_gap(fx.ring, RINGREAD_MAX_COUNT - 1);
	push_gap(fx.ring, RINGREAD_MAX_COUNT - 1);
	push_op(fx.ring, OP_DEVICE_SYNC, 0, 0);
	wait_events(&fx, 1, &l);
	ck_assert_uint_eq(l.events, 1);
	ck_assert_uint_eq(l.lost, RINGREAD_MAX_COUNT);
	ck_assert_uint_eq(l.gaps, 4); /* the ring taken over, and three */
	ingest_get_stats(fx.ingest, &st);
	ck_assert_uint_eq(st.lost, RINGREAD_MAX_COUNT);
	fx_close(&fx);
}
END_TEST

/* Writes launches into a ring until told to stop, as a child that kept
 * its parent's mapping does, faster than a drain thread analyses them;
 * drops (a full ring) are fine. */
#define FLOOD_RANGES 16
#define FLOOD_WRITERS 2

struct flood {
	struct ring *ring;
	atomic_bool stop;
};

static void *flood_main(void *arg)
{
	const size_t len = sizeof(struct ring_launch) +
			   FLOOD_RANGES * sizeof(struct ring_range);
	struct flood *fl = arg;
	struct ring_slot slot;
	struct ring_launch *l;

	while (!atomic_load(&fl->stop)) {
		if (ring_reserve(fl->ring, RING_REC_LAUNCH, len, &slot) < 0)
			continue;
		l = slot.payload;
		memset(l, 0, len);
		l->kind = OP_LAUNCH;
		l->stream = 1;
		l->nwrites = FLOOD_RANGES;
		for (unsigned i = 0; i < FLOOD_RANGES; i++)
			l->ranges[i] = (struct ring_range){ 0x10000 * (i + 1),
							    64 };
		ring_commit(&slot);
	}
	return NULL;
}

/*
 * A process that exits while something keeps writing its ring is drained
 * up to where it left it and finished, a batch at a time: the other
 * process on the same (only) drain thread has its finding meanwhile.
 */
START_TEST(ingest_exited_process_flooded_holds_no_thread)
{
	struct store_process sp = { .pid = 0x400000u, .uid = (uint32_t)getuid(),
				    .host = "test", .job = "other" };
	struct store_filter f = { 0 };
	struct flood fl = { 0 };
	struct ingest_proc *p;
	struct ring *other;
	struct fixture fx;
	struct collected c;
	struct listed l;
	const char *why = NULL;
	pthread_t writers[FLOOD_WRITERS];
	pid_t child;
	bool exited = false;

	fx_open_threads(&fx, 1);
	/* A ring large enough that the thread takes many batches to empty
	 * it, and the writer keeps it full. */
	ring_destroy(fx.ring);
	ck_assert_int_eq(ring_create(UINT64_C(8) << 20, 0, 1000, &fx.ring), 0);
	child = fork();
	if (child == 0) {
		pause();
		_exit(0);
	}
	p = fx_register(&fx, (uint32_t)child, NULL);
	fl.ring = fx.ring;
	for (int i = 0; i < FLOOD_WRITERS; i++)
		ck_assert_int_eq(pthread_create(&writers[i], NULL, flood_main,
						&fl), 0);
	while (atomic_load(&fx.ring->hdr->dropped) == 0)
		tu_nap_ms(1); /* full */
	ingest_disconnect(fx.ingest, p);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	tu_nap_ms(100); /* found gone and drained before the other comes */
	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 1000, &other), 0);
	push_string(other, 1, "fill");
	push_string(other, 2, "use");
	push_race(other, 0x1000);
	ck_assert_int_eq(ingest_register(fx.ingest, &sp, dup(ring_fd(other)),
					 &p, &why), 0);
	for (int i = 0; i < 2000 && !(exited && c.n == 1); i++) {
		tu_nap_ms(10);
		memset(&c, 0, sizeof(c));
		memset(&l, 0, sizeof(l));
		ck_assert_int_eq(store_flush(fx.store), 0);
		ck_assert_int_eq(store_findings(fx.store, &f, collect_cb, &c),
				 0);
		f.has_pid = true;
		f.pid = (uint32_t)child;
		ck_assert_int_eq(store_list(fx.store, &f, list_cb, &l), 0);
		f.has_pid = false;
		exited = strcmp(l.state, "exited") == 0;
	}
	atomic_store(&fl.stop, true);
	for (int i = 0; i < FLOOD_WRITERS; i++)
		pthread_join(writers[i], NULL);
	ck_assert_msg(c.n == 1, "the other process waits for its finding");
	ck_assert_msg(exited, "the flooded process is never finished");
	fx_close(&fx);
	ring_destroy(other);
}
END_TEST

/* The state the store lists for `pid`, polled for up to `ms`
 * until it is `want`. */
static void wait_state(struct fixture *fx, pid_t pid, const char *want,
		       int ms, struct listed *l)
{
	struct store_filter f = { .has_pid = true, .pid = (uint32_t)pid };

	for (int i = 0; i <= ms / 10; i++) {
		memset(l, 0, sizeof(*l));
		ck_assert_int_eq(store_flush(fx->store), 0);
		ck_assert_int_eq(store_list(fx->store, &f, list_cb, l), 0);
		if (strcmp(l->state, want) == 0)
			return;
		tu_nap_ms(10);
	}
}

/*
 * A process that registers again before its old connection is seen
 * closed holds its handle through two connections: the first to close
 * does not let it be finished (and freed) under the second, whose close
 * comes later.
 */
START_TEST(ingest_handle_outlives_each_connection_but_the_last)
{
	struct ingest_proc *p, *again;
	struct fixture fx;
	struct listed l;
	pid_t child;

	fx_open(&fx);
	child = fork();
	if (child == 0) {
		pause();
		_exit(0);
	}
	p = fx_register(&fx, (uint32_t)child, NULL);
	again = fx_register(&fx, (uint32_t)child, NULL);
	ck_assert_ptr_eq(again, p);
	ingest_disconnect(fx.ingest, p);
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	wait_state(&fx, child, "exited", 1500, &l);
	ck_assert_str_eq(l.state, "running");
	ingest_disconnect(fx.ingest, again);
	wait_state(&fx, child, "exited", 10000, &l);
	ck_assert_str_eq(l.state, "exited");
	fx_close(&fx);
}
END_TEST

/* While the database takes no writes (another program holds its lock),
 * a process is registered and analysed; the findings past the store's
 * bound are dropped and counted as its operations lost, so its verdict
 * cannot claim to be complete once it is stored. */
START_TEST(ingest_findings_the_store_refuses_count_as_lost)
{
	struct store_opts so = { .max_queue_bytes = 2048 };
	struct ingest_opts io = { .threads = 1, .period_ms = 2 };
	struct store_filter f = { 0 };
	struct timespec nap = { 0, 10000000 };
	struct ingest_stats is = { 0 };
	struct store_health h;
	struct fixture fx;
	struct listed l;
	char path[512], name[32];
	sqlite3 *other = NULL;

	fx.dir = tu_tmpdir();
	snprintf(path, sizeof(path), "%s/npusan.db", fx.dir);
	so.path = path;
	ck_assert_int_eq(store_open(&so, &fx.store, NULL), 0);
	io.store = fx.store;
	ck_assert_int_eq(ingest_new(&io, &fx.ingest), 0);
	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 1000, &fx.ring), 0);
	ck_assert_int_eq(sqlite3_open(path, &other), SQLITE_OK);
	sqlite3_busy_timeout(other, 10000);
	ck_assert_int_eq(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL,
				      NULL), SQLITE_OK);
	fx_register(&fx, (uint32_t)getpid(), "full");
	push_op(fx.ring, OP_STREAM_CREATE, 7, 0);
	/* Forty distinct races: their operators differ. */
	for (uint32_t i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "op_%u_writer", i);
		push_string(fx.ring, 100 + 2 * i, name);
		snprintf(name, sizeof(name), "op_%u_reader", i);
		push_string(fx.ring, 101 + 2 * i, name);
		push_launch(fx.ring, 0, 100 + 2 * i, 0, 0x1000 + 64 * i);
		push_launch(fx.ring, 7, 101 + 2 * i, 0x1000 + 64 * i, 0);
	}
	for (int i = 0; i < 1000 && is.events < 81; i++) {
		nanosleep(&nap, NULL);
		ingest_get_stats(fx.ingest, &is);
	}
	ck_assert_uint_eq(is.events, 81);
	ck_assert_uint_gt(is.lost, 0);
	store_get_health(fx.store, &h);
	ck_assert_uint_eq(h.findings_dropped, is.lost);
	ck_assert_int_eq(sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(other);
	for (int i = 0; i < 1000; i++) {
		memset(&l, 0, sizeof(l));
		store_flush(fx.store);
		ck_assert_int_eq(store_list(fx.store, &f, list_cb, &l), 0);
		if (l.events == 81)
			break;
		nanosleep(&nap, NULL);
	}
	ck_assert_uint_eq(l.n, 1);
	ck_assert_uint_eq(l.events, 81);
	ck_assert_uint_eq(l.lost, is.lost);
	fx_close(&fx);
}
END_TEST

/* Polls the daemon's statistics until `done` holds of them or 10 s pass. */
static void wait_stats(struct fixture *fx,
		       bool (*done)(const struct ingest_stats *),
		       struct ingest_stats *is)
{
	struct timespec nap = { 0, 10000000 };

	for (int i = 0; i < 1000; i++) {
		ingest_get_stats(fx->ingest, is);
		if (done(is))
			return;
		nanosleep(&nap, NULL);
	}
}

static bool stats_held_up(const struct ingest_stats *is)
{
	return is->ring_fill > 0 && is->lag_s >= 0.2;
}

static bool stats_caught_up(const struct ingest_stats *is)
{
	return is->ring_fill == 0 && is->lag_s == 0;
}

/* A ring whose producer reserved a record and has not committed it yet
 * cannot be drained past it: the metrics show that ring's fill and a lag
 * that grows, whichever drain thread has it (here the second: an idle
 * process took the first), and both fall back to 0 once it is committed
 * and drained. */
START_TEST(ingest_ring_fill_and_lag_show_a_held_up_ring)
{
	struct store_process sp = { .pid = (uint32_t)getppid(),
				    .uid = (uint32_t)getuid(), .host = "test" };
	struct ingest_stats is = { 0 };
	struct ingest_proc *idle_p;
	const char *why = NULL;
	struct ring_slot slot;
	struct ring *idle;
	struct ring_op *op;
	struct fixture fx;

	fx_open(&fx);
	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 1000, &idle), 0);
	ck_assert_int_eq(ingest_register(fx.ingest, &sp, dup(ring_fd(idle)),
					 &idle_p, &why), 0);
	fx_register(&fx, (uint32_t)getpid(), NULL);
	push_op(fx.ring, OP_STREAM_CREATE, 7, 0);
	ck_assert_int_eq(ring_reserve(fx.ring, RING_REC_OP, sizeof(*op),
				      &slot), 0);
	op = slot.payload;
	memset(op, 0, sizeof(*op));
	op->kind = OP_DEVICE_SYNC;
	wait_stats(&fx, stats_held_up, &is);
	ck_assert_double_gt(is.ring_fill, 0);
	ck_assert_double_lt(is.ring_fill, 0.01);
	ck_assert_double_ge(is.lag_s, 0.2);
	ck_assert_uint_eq(is.events, 1);
	ring_commit(&slot);
	wait_stats(&fx, stats_caught_up, &is);
	ck_assert_double_eq(is.ring_fill, 0);
	ck_assert_double_eq(is.lag_s, 0);
	ck_assert_uint_eq(is.events, 2);
	fx_close(&fx);
	ring_destroy(idle);
}
END_TEST

static bool stats_idle(const struct ingest_stats *is)
{
	return is->events_per_s == 0;
}

/* Operations/s is a rate over the latest second or so: above 0 while a
 * process pushes, back to 0 once nothing more comes. */
START_TEST(ingest_rate_rises_then_falls_to_zero_idle)
{
	struct timespec nap = { 0, 10000000 };
	struct ingest_stats is = { 0 };
	struct fixture fx;
	uint64_t pushed = 0;

	fx_open(&fx);
	fx_register(&fx, (uint32_t)getpid(), NULL);
	/* A process pushing all along, until a rate sample covered some. */
	for (int i = 0; i < 1000 && is.events_per_s == 0; i++) {
		for (int k = 0; k < 5; k++)
			push_op(fx.ring, OP_DEVICE_SYNC, 0, 0);
		pushed += 5;
		nanosleep(&nap, NULL);
		ingest_get_stats(fx.ingest, &is);
	}
	ck_assert_double_gt(is.events_per_s, 0);
	/* Sampled over 1 s at least. */
	ck_assert_double_le(is.events_per_s, (double)pushed);
	wait_stats(&fx, stats_idle, &is);
	ck_assert_double_eq(is.events_per_s, 0);
	ck_assert_uint_eq(is.events, pushed);
	fx_close(&fx);
}
END_TEST

/* Registers `pid` of user `uid` with the fixture's ring: ingest_register's
 * result; the fd is closed when it is refused. */
static int fx_register_as(struct fixture *fx, uint32_t pid, uint32_t uid,
			  struct ingest_proc **p)
{
	struct store_process sp = { .pid = pid, .uid = uid, .host = "test",
				    .has_rank = true, .rank = 0 };
	const char *why = NULL;
	int fd = dup(ring_fd(fx->ring));
	int err;

	ck_assert_int_ge(fd, 0);
	err = ingest_register(fx->ingest, &sp, fd, p, &why);
	if (err < 0)
		close(fd);
	return err;
}

/* A process that registers again (a new connection) gets the handle it
 * has, but only as the user it first registered as: the same pid and
 * start time from another user is refused, so that no user can take
 * over another's analysis. */
START_TEST(ingest_process_registering_again_must_be_the_same_user)
{
	struct ingest_proc *p, *again = NULL;
	struct fixture fx;

	fx_open(&fx);
	ck_assert_int_eq(fx_register_as(&fx, (uint32_t)getpid(), 1000, &p), 0);
	ck_assert_int_eq(fx_register_as(&fx, (uint32_t)getpid(), 1000, &again),
			 0);
	ck_assert_ptr_eq(again, p);
	again = NULL;
	ck_assert_int_eq(fx_register_as(&fx, (uint32_t)getpid(), 1001, &again),
			 -EPERM);
	ck_assert_ptr_null(again);
	ingest_disconnect(fx.ingest, p);
	ingest_disconnect(fx.ingest, p);
	fx_close(&fx);
}
END_TEST

/* Operations naming streams past the engine's limit are skipped and
 * counted lost, each run of them one gap (as `analyze` counts them), so
 * that the process's verdict cannot claim to be complete. */
START_TEST(ingest_streams_past_engine_limit_lost_in_gaps)
{
	struct store_filter f = { 0 };
	struct timespec nap = { 0, 10000000 };
	struct ingest_stats is = { 0 };
	struct fixture fx;
	struct listed l = { 0 };

	fx_open(&fx);
	fx_register(&fx, (uint32_t)getpid(), NULL);
	for (uint64_t s = 1; s < ENGINE_MAX_STREAMS; s++)
		push_op(fx.ring, OP_STREAM_CREATE, s, 0);
	push_op(fx.ring, OP_STREAM_CREATE, 5000, 0);
	push_op(fx.ring, OP_STREAM_CREATE, 5001, 0);
	push_op(fx.ring, OP_DEVICE_SYNC, 0, 0);
	push_op(fx.ring, OP_STREAM_CREATE, 5002, 0);
	for (int i = 0;
	     i < 1000 && is.events + is.lost < ENGINE_MAX_STREAMS + 3; i++) {
		nanosleep(&nap, NULL);
		ingest_get_stats(fx.ingest, &is);
	}
	ck_assert_uint_eq(is.events, ENGINE_MAX_STREAMS);
	ck_assert_uint_eq(is.lost, 3);
	ingest_free(fx.ingest);
	fx.ingest = NULL;
	ck_assert_int_eq(store_flush(fx.store), 0);
	ck_assert_int_eq(store_list(fx.store, &f, list_cb, &l), 0);
	ck_assert_uint_eq(l.n, 1);
	ck_assert_uint_eq(l.events, ENGINE_MAX_STREAMS);
	ck_assert_uint_eq(l.lost, 3);
	ck_assert_uint_eq(l.gaps, 2);
	fx_close(&fx);
}
END_TEST

/* A registration refused (its fd is no ring) leaves the fd to its caller
 * and closes nothing else, fd 0 included: the daemon's own files stay
 * open. */
START_TEST(ingest_refused_ring_closes_no_file)
{
	struct store_process sp = { .pid = (uint32_t)getpid(),
				    .uid = (uint32_t)getuid(), .host = "test" };
	struct ingest_proc *p = NULL;
	const char *why = NULL;
	struct fixture fx;
	int pfd[2];

	if (fcntl(0, F_GETFD) < 0)
		ck_assert_int_eq(open("/dev/null", O_RDONLY), 0);
	fx_open(&fx);
	ck_assert_int_eq(pipe(pfd), 0);
	ck_assert_int_eq(ingest_register(fx.ingest, &sp, pfd[0], &p, &why),
			 -EINVAL);
	ck_assert_ptr_nonnull(why);
	ck_assert_int_ge(fcntl(0, F_GETFD), 0);
	ck_assert_int_ge(fcntl(pfd[0], F_GETFD), 0);
	close(pfd[0]);
	close(pfd[1]);
	fx_close(&fx);
}
END_TEST

/* Asked for more drain threads than it runs at most, ingest runs its
 * most and drains as ever; stopping joins each thread it started, and
 * only those. */
START_TEST(ingest_more_threads_than_its_limit_still_drains)
{
	struct fixture fx;
	struct collected c;

	fx_open_threads(&fx, 100000);
	fx_register(&fx, (uint32_t)getpid(), "many");
	push_string(fx.ring, 1, "w");
	push_string(fx.ring, 2, "r");
	push_op(fx.ring, OP_STREAM_CREATE, 7, 0);
	push_race(fx.ring, 0x1000);
	wait_findings(&fx, 1, 1, &c);
	ck_assert_uint_eq(c.n, 1);
	ck_assert_str_eq(c.job, "many");
	fx_close(&fx);
}
END_TEST

/* A process's handle names its row once the store has it: the id the
 * daemon answers with is the one queries list. */
START_TEST(ingest_proc_id_is_its_stored_row)
{
	struct store_filter f = { 0 };
	struct timespec nap = { 0, 10000000 };
	struct ingest_proc *p;
	struct fixture fx;
	struct listed l = { 0 };

	fx_open(&fx);
	p = fx_register(&fx, (uint32_t)getpid(), NULL);
	for (int i = 0; i < 1000 && (l.n == 0 || ingest_proc_id(p) == 0);
	     i++) {
		memset(&l, 0, sizeof(l));
		ck_assert_int_eq(store_flush(fx.store), 0);
		ck_assert_int_eq(store_list(fx.store, &f, list_cb, &l), 0);
		nanosleep(&nap, NULL);
	}
	ck_assert_uint_eq(l.n, 1);
	ck_assert_int_gt(l.id, 0);
	ck_assert_int_eq(ingest_proc_id(p), l.id);
	fx_close(&fx);
}
END_TEST

static Suite *ingest_suite(void)
{
	Suite *s = suite_create("ingest");
	TCase *tc = tcase_create("ingest");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, ingest_race_in_ring_reaches_store);
	tcase_add_test(tc, ingest_repeats_sum_into_one_row);
	tcase_add_loop_test(tc, ingest_exited_process_is_finished, 0, 2);
	tcase_add_test(tc, ingest_zombie_process_is_finished);
	tcase_add_test(tc, ingest_free_drains_and_keeps_running);
	tcase_add_test(tc, ingest_every_process_of_a_burst_is_drained);
	tcase_add_loop_test(tc, ingest_undecodable_sync_is_a_gap_not_a_race, 0,
			    3);
	tcase_add_test(tc, ingest_agent_counts_saturate_never_wrap);
	tcase_add_test(tc, ingest_exited_process_flooded_holds_no_thread);
	tcase_add_test(tc, ingest_handle_outlives_each_connection_but_the_last);
	tcase_add_test(tc, ingest_findings_the_store_refuses_count_as_lost);
	tcase_add_test(tc, ingest_ring_fill_and_lag_show_a_held_up_ring);
	tcase_add_test(tc, ingest_rate_rises_then_falls_to_zero_idle);
	tcase_add_test(tc,
		       ingest_process_registering_again_must_be_the_same_user);
	tcase_add_test(tc, ingest_streams_past_engine_limit_lost_in_gaps);
	tcase_add_test(tc, ingest_refused_ring_closes_no_file);
	tcase_add_test(tc, ingest_more_threads_than_its_limit_still_drains);
	tcase_add_test(tc, ingest_proc_id_is_its_stored_row);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(ingest_suite());
}
