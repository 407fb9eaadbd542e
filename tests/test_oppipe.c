/*
 * test_oppipe.c - analyze's reader thread (cli/oppipe.c) against a consumer
 * slower than it, as the engine is: the reader fills every slot and sleeps
 * until the consumer wakes it (DESIGN 5 there), and a consumer that stops
 * early frees the pipe while the reader sleeps. A lost wake-up hangs, which
 * the test's timeout turns into a failure. Labelled concurrency, so that
 * tools/test.sh also runs it under ThreadSanitizer.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "oppipe.h"
#include "symtab.h"
#include "testutil.h"
#include "trace.h"

/* Ops in the trace: many times the pipe's slots of 512. */
#define NOPS 40000

/* A trace of NOPS launches; op i is on line i + 2. Caller frees. */
static char *many_launches(size_t *len)
{
	char *text;
	FILE *f = open_memstream(&text, len);

	ck_assert_ptr_nonnull(f);
	fputs("npusan-trace 1\n", f);
	for (int i = 0; i < NOPS; i++)
		fprintf(f, "launch stream=%d op=k read=0x%x+8@in write=0x%x\n",
			1 + i % 3, 0x9000 + (i % 40) * 16,
			0x1000 + (i % 50) * 16);
	ck_assert_int_eq(fclose(f), 0);
	return text;
}

/* Long enough for the reader to fill every free slot meanwhile. */
static void nap(void)
{
	struct timespec ts = { .tv_nsec = 20 * 1000 * 1000 };

	nanosleep(&ts, NULL);
}

struct pipe_fixture {
	char *text;
	struct symtab *syms;
	struct trace_reader *r;
	struct oppipe *p;
};

static void pipe_start(struct pipe_fixture *x)
{
	size_t len;

	x->text = many_launches(&len);
	ck_assert_int_eq(symtab_new(&x->syms), 0);
	ck_assert_int_eq(trace_reader_new_mem(x->text, len, "t.trace",
					      x->syms, &x->r), 0);
	ck_assert_int_eq(oppipe_start(x->r, &x->p), 0);
}

static void pipe_end(struct pipe_fixture *x)
{
	oppipe_free(x->p);
	trace_reader_close(x->r);
	symtab_free(x->syms);
	free(x->text);
}

START_TEST(oppipe_slow_consumer_gets_every_op_in_order)
{
	struct pipe_fixture x;
	const struct op *ops;
	const unsigned long *lines;
	unsigned long next = 2;
	size_t n;
	int rc, batches = 0;

	pipe_start(&x);
	while ((rc = oppipe_next(x.p, &ops, &lines, &n)) == 1) {
		if (batches++ < 12)
			nap(); /* the reader fills the queue and waits */
		for (size_t i = 0; i < n; i++) {
			ck_assert_uint_eq(lines[i], next++);
			ck_assert_int_eq(ops[i].kind, OP_LAUNCH);
			ck_assert_uint_eq(ops[i].nreads, 1);
			ck_assert_uint_eq(ops[i].reads[0].len, 8);
			ck_assert_ptr_nonnull(ops[i].read_args);
			ck_assert_uint_eq(ops[i].writes[0].ptr,
					  0x1000 + ((lines[i] - 2) % 50) * 16);
		}
	}
	ck_assert_int_eq(rc, 0);
	ck_assert_uint_eq(next, NOPS + 2);
	pipe_end(&x);
}
END_TEST

START_TEST(oppipe_free_returns_while_the_reader_waits)
{
	struct pipe_fixture x;
	const struct op *ops;
	const unsigned long *lines;
	size_t n;

	pipe_start(&x);
	ck_assert_int_eq(oppipe_next(x.p, &ops, &lines, &n), 1);
	nap(); /* the reader fills every slot and sleeps */
	ck_assert_int_eq(oppipe_next(x.p, &ops, &lines, &n), 1);
	nap(); /* one slot freed: too few to wake it */
	pipe_end(&x); /* joins the reader: hangs if it is not woken */
}
END_TEST

static Suite *oppipe_suite(void)
{
	Suite *s = suite_create("oppipe");
	TCase *tc = tcase_create("core");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, oppipe_slow_consumer_gets_every_op_in_order);
	tcase_add_test(tc, oppipe_free_returns_while_the_reader_waits);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_main(oppipe_suite());
}
