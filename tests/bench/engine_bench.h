/*
 * engine_bench.h - what engine_bench's files share (engine_bench.c has
 * the program's description): the workload in memory that every source
 * of operations fills and every measurement reads, the small helpers, the
 * generators of each --shape, and the trace parts. Internal to the
 * benchmark; engine_bench_train.h adds the training workload's types.
 */
#ifndef NPUSAN_BENCH_ENGINE_BENCH_H
#define NPUSAN_BENCH_ENGINE_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "op.h"
#include "symtab.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define MiB (1024ull * 1024)

#define RANGES_PER_CHUNK 65536

/* The shapes' sizes the report prints (engine_bench_shapes.c has the rest
 * of them and what they mean). */
#define FLUSH_LIVE 2000
#define FLUSH_STREAMS 8
#define FLUSH_STEP_LAUNCHES 500
#define GRAPH_STREAMS 8
#define GRAPH_PER_STREAM 48

/* ---- the workload in memory ------------------------------------------ */

/*
 * Launch ranges live in fixed chunks, so the pointers the ops hold stay
 * valid while the op array grows.
 */
struct range_chunk {
	struct range_chunk *next;
	size_t used;
	struct op_range r[RANGES_PER_CHUNK];
};

struct workload {
	struct symtab *syms;
	struct op *ops;
	size_t nops;
	size_t cap;
	struct range_chunk *chunks;
	uint64_t launches;
	uint64_t accesses;
	uint64_t views;	     /* accesses that are not a whole tensor */
	size_t warm_ops;     /* ops of the setup and first step */
	uint64_t steps;
	uint64_t max_live;   /* allocations, as the generator counts them */
};

/* Prints "engine_bench: WHAT" and exits 1. */
_Noreturn void die(const char *what);

/* realloc(), or die(). */
void *xrealloc(void *p, size_t n);

/* Seconds on the monotonic clock. */
double now(void);

/* CPU time of this thread: the wall time less any wait for a core, which
 * a loaded 2-core machine adds to the wall figure. */
double cpu_now(void);

/* Sorts v in place. */
double median(double *v, size_t n);

/* "7.12e6": the form csan_bench.py prints too, which run_bench.sh reads. */
const char *sci(char *buf, size_t size, double v);

/* splitmix64: fixed seed in, the same workload out, on every machine. */
uint64_t rng_next(uint64_t *s);

/* Frees what `w` holds; not `w` itself. */
void workload_free(struct workload *w);

/* A zeroed op of `kind` appended to `w`. */
struct op *workload_emit(struct workload *w, enum op_kind kind);

/* Room for n ranges that stay put while the workload grows. */
struct op_range *workload_ranges(struct workload *w, size_t n);

/*
 * Builds the workload: the model's setup, then optimizer steps until
 * `launches` launches exist. The ops after the last of them are cut, and
 * the trace ends as a process does: a device sync, then a `flush`, which
 * without the sync would report every cross-stream use still in flight.
 */
void generate(struct workload *w, uint64_t launches, uint64_t seed);

/* --shape flush's workload (engine_bench_shapes.c). */
void generate_flush(struct workload *w, uint64_t launches,
		    uint64_t seed);

/* The graph workload (eager false) or its eager twin; `launches` counts
 * each replayed launch. */
void generate_graph(struct workload *w, uint64_t launches, bool eager);

/*
 * The operations of a recorded trace, parsed into memory before anything
 * is timed, with their ranges copied out of the reader's buffers.
 */
void load_trace(struct workload *w, const char *path);

/* `w` as a version 1 trace on `f`, or exits 1 naming `name`. */
void write_trace(const struct workload *w, FILE *f, const char *name);

/* Seconds the reader takes over the trace in buf, interning included. */
double time_parse(const char *buf, size_t len, size_t expect);

#endif
