/*
 * test_ingest.c - rings drained into engines, findings into the store:
 * records pushed by the real producer (agent/ring.c) into a ring that a
 * real store (in a temporary directory) receives the findings of.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ingest.h"
#include "ring.h"
#include "store.h"
#include "testutil.h"

struct fixture {
	char *dir;
	struct store *store;
	struct ingest *ingest;
	struct ring *ring;
};

static void fx_open(struct fixture *fx)
{
	struct store_opts so = { 0 };
	struct ingest_opts io = { .threads = 2, .period_ms = 2 };
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
	c->count = f->count;
	snprintf(c->kind, sizeof(c->kind), "%s", finding_kind_name(f->kind));
	snprintf(c->op, sizeof(c->op), "%s", f->access.op);
	snprintf(c->prev_op, sizeof(c->prev_op), "%s",
		 f->has_previous ? f->previous.op : "");
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
	char state[16];
	uint64_t events, lost;
};

static int list_cb(void *arg, const struct store_process *p)
{
	struct listed *l = arg;

	l->n++;
	snprintf(l->state, sizeof(l->state), "%s",
		 store_state_name(p->state));
	l->events = p->events;
	l->lost = p->lost;
	return 0;
}

/* A process that is gone is drained to the end, its drops counted as
 * lost, and recorded exited. */
START_TEST(ingest_exited_process_is_finished)
{
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
	atomic_fetch_add(&fx.ring->hdr->pending, 5);
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
	ck_assert_uint_eq(l.lost, 5);
	ck_assert_uint_eq(l.events, 2);
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

static Suite *ingest_suite(void)
{
	Suite *s = suite_create("ingest");
	TCase *tc = tcase_create("ingest");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, ingest_race_in_ring_reaches_store);
	tcase_add_test(tc, ingest_repeats_sum_into_one_row);
	tcase_add_test(tc, ingest_exited_process_is_finished);
	tcase_add_test(tc, ingest_free_drains_and_keeps_running);
	tcase_add_test(tc, ingest_findings_the_store_refuses_count_as_lost);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(ingest_suite());
}
