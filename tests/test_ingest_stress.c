/*
 * test_ingest_stress.c - processes registering and exiting while the drain
 * threads work, as the loop thread registers them under load: every one is
 * drained to its end and recorded exited. tools/test.sh also runs this
 * suite under ThreadSanitizer (label concurrency).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ingest.h"
#include "ring.h"
#include "store.h"
#include "testutil.h"

#define STRESS_PROCS 300
#define STRESS_OPS 40
/* Past PID_MAX_LIMIT (2^22): no process has such a pid, so a process
 * registered with one is found gone at its first liveness check. */
#define STRESS_NO_PID 0x400000u

static void push_op(struct ring *r, enum op_kind kind, uint64_t a)
{
	struct ring_slot slot;
	struct ring_op *op;

	ck_assert_int_eq(ring_reserve(r, RING_REC_OP, sizeof(*op), &slot), 0);
	op = slot.payload;
	memset(op, 0, sizeof(*op));
	op->kind = (uint8_t)kind;
	op->a = a;
	ring_commit(&slot);
}

/* Registers process `pid` with a ring holding STRESS_OPS operations. */
static struct ingest_proc *register_one(struct ingest *in, uint32_t pid)
{
	struct store_process sp = { .pid = pid, .start_time = 1,
				    .uid = (uint32_t)getuid(),
				    .host = "stress", .job = "stress" };
	struct ingest_proc *p;
	const char *why = NULL;
	struct ring *r;
	int fd;

	ck_assert_int_eq(ring_create(RING_MIN_CAPACITY, 0, 1000, &r), 0);
	for (uint64_t i = 0; i < STRESS_OPS; i++)
		push_op(r, OP_STREAM_CREATE, i + 1);
	fd = dup(ring_fd(r));
	ck_assert_int_ge(fd, 0);
	ck_assert_msg(ingest_register(in, &sp, fd, &p, &why) == 0, "%s",
		      why ? why : "");
	ring_destroy(r); /* ingest keeps its own mapping and fd */
	return p;
}

struct tally {
	unsigned procs, exited, wrong_events;
};

static int tally_cb(void *arg, const struct store_process *p)
{
	struct tally *t = arg;

	t->procs++;
	if (p->state == STORE_EXITED) {
		t->exited++;
		if (p->events != STRESS_OPS || p->lost != 0)
			t->wrong_events++;
	}
	return 0;
}

/*
 * STRESS_PROCS processes register one after another, each gone as soon as
 * it registered or one registration later, while the drain threads (_i of
 * them) finish the ones before: none may be left undrained.
 */
START_TEST(ingest_registrations_while_draining_lose_no_process)
{
	struct ingest_opts io = { .threads = (unsigned)_i, .period_ms = 1 };
	struct store_filter f = { 0 };
	struct store_opts so = { 0 };
	struct ingest_proc *prev = NULL, *p;
	struct ingest *in;
	struct store *store;
	struct tally t = { 0 };
	char *dir = tu_tmpdir(), path[512], *err = NULL;

	snprintf(path, sizeof(path), "%s/npusan.db", dir);
	so.path = path;
	ck_assert_msg(store_open(&so, &store, &err) == 0, "%s", err);
	io.store = store;
	ck_assert_int_eq(ingest_new(&io, &in), 0);
	for (uint32_t i = 0; i < STRESS_PROCS; i++) {
		p = register_one(in, STRESS_NO_PID + i);
		if (prev != NULL)
			ingest_disconnect(in, prev);
		prev = NULL;
		if (i % 2 == 0)
			ingest_disconnect(in, p);
		else
			prev = p;
	}
	if (prev != NULL)
		ingest_disconnect(in, prev);
	for (int i = 0; i < 3000; i++) {
		memset(&t, 0, sizeof(t));
		ck_assert_int_eq(store_flush(store), 0);
		ck_assert_int_eq(store_list(store, &f, tally_cb, &t), 0);
		if (t.exited == STRESS_PROCS)
			break;
		tu_nap_ms(10);
	}
	ck_assert_uint_eq(t.procs, STRESS_PROCS);
	ck_assert_msg(t.exited == STRESS_PROCS,
		      "%u of %u processes never finished", STRESS_PROCS - t.exited,
		      STRESS_PROCS);
	ck_assert_uint_eq(t.wrong_events, 0);
	ingest_free(in);
	store_close(store);
	free(dir);
}
END_TEST

static Suite *ingest_stress_suite(void)
{
	Suite *s = suite_create("ingest_stress");
	TCase *tc = tcase_create("ingest_stress");

	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc,
			    ingest_registrations_while_draining_lose_no_process,
			    1, 3);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(ingest_stress_suite());
}
