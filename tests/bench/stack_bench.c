/*
 * stack_bench.c - what a native stack capture costs per launch, with each
 * method and depth, and what naming one frame costs.
 *
 * Not a test. Each figure is the median of 7 runs of a timed loop, from a
 * call chain of BENCH_CHAIN recursive frames, so every depth asked for is
 * reached (checked, not assumed). The loop captures the same stack over and
 * over, so its lines sit in L1: a launch from a cold, deep Python stack
 * pays cache misses on top. The one-off costs (a thread's first capture,
 * the unwinder's first call) are timed once, before anything warms them.
 *
 * Build it in Release: cmake -DCMAKE_BUILD_TYPE=Release, target
 * stack_bench.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "stack.h"

#define BENCH_RUNS 7
#define BENCH_CHAIN 48 /* frames of bench_recurse() under each capture */

#ifdef __clang__
#define BENCH_NOIPA __attribute__((noinline))
#else
#define BENCH_NOIPA __attribute__((noipa))
#endif

static volatile uintptr_t bench_sink;

static double bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int bench_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double bench_median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), bench_cmp);
	return v[n / 2];
}

struct bench_case {
	enum stack_method method;
	int depth;
	long iters;
	double ns[BENCH_RUNS];
	int got; /* frames the last capture returned */
};

static BENCH_NOIPA void bench_captures(struct bench_case *c)
{
	uintptr_t pcs[STACK_MAX_DEPTH];

	for (int r = 0; r < BENCH_RUNS; r++) {
		double t0 = bench_now_ns();

		for (long i = 0; i < c->iters; i++) {
			c->got = stack_capture(c->method, pcs, c->depth, 0);
			bench_sink += pcs[c->got - 1];
		}
		c->ns[r] = (bench_now_ns() - t0) / (double)c->iters;
	}
}

/* Runs `fn(arg)` under `depth` more frames of its own. */
int bench_recurse(int depth, void (*fn)(void *), void *arg);

BENCH_NOIPA int bench_recurse(int depth, void (*fn)(void *), void *arg)
{
	if (depth == 0)
		fn(arg);
	else
		bench_recurse(depth - 1, fn, arg);
	bench_sink += (uintptr_t)depth;
	return depth;
}

static void bench_captures_cb(void *arg)
{
	bench_captures(arg);
}

static void bench_first_capture_cb(void *arg)
{
	uintptr_t pcs[16];
	double t0 = bench_now_ns();

	stack_capture(STACK_FRAME_POINTERS, pcs, 16, 0);
	*(double *)arg = bench_now_ns() - t0;
}

static void *bench_thread(void *arg)
{
	bench_recurse(BENCH_CHAIN, bench_first_capture_cb, arg);
	return NULL;
}

static double bench_symbolize(uintptr_t pc, long iters)
{
	char buf[STACK_SYMBOL_LEN];
	double ns[BENCH_RUNS];

	for (int r = 0; r < BENCH_RUNS; r++) {
		double t0 = bench_now_ns();

		for (long i = 0; i < iters; i++)
			bench_sink += (uintptr_t)stack_symbolize(pc, buf,
								 sizeof(buf));
		ns[r] = (bench_now_ns() - t0) / (double)iters;
	}
	return bench_median(ns, BENCH_RUNS);
}

int main(void)
{
	static const int depths[] = { 8, 16, 32 };
	struct bench_case c;
	double once, ns[BENCH_RUNS];
	uintptr_t pcs[4];
	char name[STACK_SYMBOL_LEN];

	/* One-offs first, while nothing has warmed them. */
	bench_recurse(BENCH_CHAIN, bench_first_capture_cb, &once);
	printf("stack_capture fp first call on the main thread: %.1f us "
	       "(once; pthread_getattr_np reads /proc/self/maps)\n",
	       once / 1e3);
	for (int r = 0; r < BENCH_RUNS; r++) {
		pthread_t t;

		if (pthread_create(&t, NULL, bench_thread, &ns[r]) != 0 ||
		    pthread_join(t, NULL) != 0) {
			fprintf(stderr, "stack_bench: pthread_create failed\n");
			return 1;
		}
	}
	printf("stack_capture fp first call on a new thread: %.1f us "
	       "(median of %d threads)\n",
	       bench_median(ns, BENCH_RUNS) / 1e3, BENCH_RUNS);
	once = bench_now_ns();
	stack_capture(STACK_UNWIND, pcs, 4, 0);
	printf("stack_capture unwind first call: %.1f us "
	       "(once; loads libgcc_s)\n",
	       (bench_now_ns() - once) / 1e3);

	for (int m = 0; m < STACK_METHOD_COUNT; m++) {
		for (size_t d = 0; d < sizeof(depths) / sizeof(depths[0]);
		     d++) {
			memset(&c, 0, sizeof(c));
			c.method = (enum stack_method)m;
			c.depth = depths[d];
			c.iters = m == STACK_FRAME_POINTERS ? 2000000 : 20000;
			bench_recurse(BENCH_CHAIN, bench_captures_cb, &c);
			if (c.got != c.depth) {
				fprintf(stderr,
					"stack_bench: %s reached depth %d of "
					"%d\n",
					stack_method_name(c.method), c.got,
					c.depth);
				return 1;
			}
			printf("stack_capture %s depth=%d: %.1f ns "
			       "(median of %d)\n",
			       stack_method_name(c.method), c.depth,
			       bench_median(c.ns, BENCH_RUNS), BENCH_RUNS);
		}
	}

	/* A frame of this program (few dynamic symbols) and one of libc
	 * (about 3000): dladdr() scans the module's symbols. (It names no
	 * symbol for some of libc's aliased ones, fopen among them.) */
	stack_capture(STACK_FRAME_POINTERS, pcs, 1, 0);
	stack_symbolize(pcs[0], name, sizeof(name));
	printf("stack_symbolize %s: %.1f ns (median of %d)\n", name,
	       bench_symbolize(pcs[0], 100000), BENCH_RUNS);
	pcs[0] = (uintptr_t)(void *)printf + 16;
	stack_symbolize(pcs[0], name, sizeof(name));
	printf("stack_symbolize %s: %.1f ns (median of %d)\n", name,
	       bench_symbolize(pcs[0], 20000), BENCH_RUNS);
	return 0;
}
