/*
 * engine_bench.c - how fast the engine analyses a training run, how fast
 * the trace reader parses one, and how much memory the engine keeps.
 *
 * Not a test. It generates a deterministic, training-like stream of
 * operations in memory, then times the engine over it with generation and
 * parsing excluded, times the trace reader alone over the same operations
 * written as a trace, and samples the engine's memory in a separate,
 * untimed pass. tests/bench/run_bench.sh builds it in Release and puts it
 * side by side with PyTorch's CUDA Sanitizer (csan_bench.py) on the same
 * operations, which --write-trace hands over.
 *
 * The workload is the last stage of a pipeline-parallel transformer
 * trained with DDP: 32 layers, gradient accumulation over 4 micro-batches,
 * activations received from the previous stage and gradients sent back,
 * labels copied in and preprocessed on side streams, some activations
 * offloaded to the host and prefetched back for the backward pass, grads
 * as views into allreduce buckets, clipping, fused Adam with fp32 master
 * weights, an EMA model updated on its own stream and metrics copied out.
 * Sequence lengths vary between micro-batches as the seed decides, so
 * activation sizes vary and the caching allocator model reuses addresses
 * the way PyTorch's does. A few deliberate mistakes recur so that findings
 * exist (see bug_*()); the engine deduplicates them.
 *
 * --shape flush generates another shape instead (see generate_flush()):
 * an exact-pointer job with 2,000 live allocations and a `flush` every
 * step, where the cost of flush shows; --shape graph a model captured as
 * a graph and replayed every step, next to the same model run eagerly
 * (see generate_graph()). --trace FILE times the engine over
 * any recorded trace, so users can measure the shapes of their own jobs;
 * run_bench.sh then hands the same operations to PyTorch's sanitizer.
 *
 * This file holds the helpers, the workload in memory, the measurements,
 * the report and main(); the training workload lives in
 * engine_bench_model.c and engine_bench_train.c, the other shapes in
 * engine_bench_shapes.c, the trace parts in engine_bench_trace.c, over
 * engine_bench.h.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "clock.h"
#include "engine.h"
#include "engine_bench.h"
#include "engine_bench_train.h"
#include "grow.h"
#include "op.h"
#include "symtab.h"
#include "trace.h"

#define SAMPLE_EVERY 1024	/* ops between memory samples */
#define MEM_TARGET 160		/* bytes per live allocation, at most */

/* ---- small helpers --------------------------------------------------- */

_Noreturn void die(const char *what)
{
	fprintf(stderr, "engine_bench: %s\n", what);
	exit(1);
}

void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n);
	if (p == NULL)
		die("out of memory");
	return p;
}

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double now(void)
{
	return (double)clock_mono_ns() * 1e-9;
}

/* CPU time of this thread: the wall time less any wait for a core, which
 * a loaded 2-core machine adds to the wall figure. */
double cpu_now(void)
{
	return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Sorts v in place. */
double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* "7.12e6": the form csan_bench.py prints too, which run_bench.sh reads. */
const char *sci(char *buf, size_t size, double v)
{
	int e = 0;

	if (v <= 0) {
		snprintf(buf, size, "0");
		return buf;
	}
	while (v >= 9.995) {
		v /= 10;
		e++;
	}
	while (v < 1) {
		v *= 10;
		e--;
	}
	snprintf(buf, size, "%.2fe%d", v, e);
	return buf;
}

/* splitmix64: fixed seed in, the same workload out, on every machine. */
uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void workload_free(struct workload *w)
{
	struct range_chunk *c;

	while ((c = w->chunks) != NULL) {
		w->chunks = c->next;
		free(c);
	}
	free(w->ops);
	symtab_free(w->syms);
}

struct op *workload_emit(struct workload *w, enum op_kind kind)
{
	struct op *op;

	if (grow_array((void **)&w->ops, &w->cap, w->nops + 1,
		       sizeof(*w->ops)) < 0)
		die("out of memory");
	op = &w->ops[w->nops++];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	return op;
}

/* Room for n ranges that stay put while the workload grows. */
struct op_range *workload_ranges(struct workload *w, size_t n)
{
	struct range_chunk *c = w->chunks;

	if (n > RANGES_PER_CHUNK)
		die("a launch with more ranges than a chunk holds");
	if (c == NULL || RANGES_PER_CHUNK - c->used < n) {
		c = xrealloc(NULL, sizeof(*c));
		c->next = w->chunks;
		c->used = 0;
		w->chunks = c;
	}
	c->used += n;
	return c->r + c->used - n;
}

/* ---- measuring ------------------------------------------------------- */

struct tally {
	uint64_t occurrences;
	uint64_t distinct[FINDING_KIND_COUNT];
};

/* Counts findings; printing them would time stdio, not the engine. */
static void count_finding(const struct finding *f, bool first, void *arg)
{
	struct tally *t = arg;

	t->occurrences++;
	if (first)
		t->distinct[f->kind]++;
}

static struct engine *engine_or_die(struct tally *t)
{
	struct engine_opts o = { .dedup = true, .finding_cb = count_finding,
				 .arg = t };
	struct engine *e;

	memset(t, 0, sizeof(*t));
	if (engine_new(&o, &e) < 0)
		die("engine_new failed");
	return e;
}

static _Noreturn void feed_failed(size_t i, int err)
{
	fprintf(stderr, "engine_bench: engine_feed failed at op %zu: %s\n", i,
		strerror(-err));
	exit(1);
}

/* Seconds a fresh engine takes over the first n ops; its CPU seconds in
 * *cpu. */
static double time_engine(const struct workload *w, size_t n,
			  struct tally *t, double *cpu)
{
	struct engine *e = engine_or_die(t);
	double t0, t1, c0;
	int err;

	c0 = cpu_now();
	t0 = now();
	for (size_t i = 0; i < n; i++) {
		if ((err = engine_feed(e, &w->ops[i])) != 0)
			feed_failed(i, err);
	}
	t1 = now();
	*cpu = cpu_now() - c0;
	engine_free(e);
	return t1 - t0;
}

/*
 * Memory, in a pass of its own so that the timed runs stay free of it.
 * The MEM_TARGET is on engine bytes per live allocation in steady
 * state: engine_get_stats()'s bytes over live_allocs, sampled every
 * SAMPLE_EVERY ops once the first optimizer step has filled the pool of
 * allocations. Everything the engine holds counts, its fixed tables and
 * the history of every byte included, since that is what a daemon pays
 * per process it watches.
 */
struct mem_report {
	struct engine_stats end;
	struct engine_stats at_max;	/* the sample with most allocs */
	struct engine_memory mem_at_max; /* where its bytes went */
	struct engine_stats at_worst;	/* the sample of ratio_max */
	struct engine_memory mem_at_worst;
	uint64_t max_segments;		/* over all samples */
	uint64_t max_accesses;
	double ratio_max;
	double ratio_median;
	size_t samples;
};

static void measure_memory(const struct workload *w, struct mem_report *m)
{
	size_t cap = w->nops / SAMPLE_EVERY + 1, n = 0;
	double *ratios = xrealloc(NULL, cap * sizeof(*ratios));
	struct tally t;
	struct engine *e = engine_or_die(&t);
	struct engine_stats st;
	int err;

	memset(m, 0, sizeof(*m));
	for (size_t i = 0; i < w->nops; i++) {
		if ((err = engine_feed(e, &w->ops[i])) != 0)
			feed_failed(i, err);
		if ((i + 1) % SAMPLE_EVERY != 0 || i < w->warm_ops)
			continue;
		engine_get_stats(e, &st);
		if (st.segments > m->max_segments)
			m->max_segments = st.segments;
		if (st.accesses > m->max_accesses)
			m->max_accesses = st.accesses;
		if (st.live_allocs == 0)
			continue;
		ratios[n++] = (double)st.bytes / (double)st.live_allocs;
		if (ratios[n - 1] > m->ratio_max) {
			m->ratio_max = ratios[n - 1];
			m->at_worst = st;
			engine_get_memory(e, &m->mem_at_worst);
		}
		if (st.live_allocs > m->at_max.live_allocs) {
			m->at_max = st;
			engine_get_memory(e, &m->mem_at_max);
		}
	}
	engine_get_stats(e, &m->end);
	m->samples = n;
	m->ratio_median = n ? median(ratios, n) : 0;
	engine_free(e);
	free(ratios);
}

/* ---- the report ------------------------------------------------------ */

static const char usage[] =
	"Usage: engine_bench [OPTIONS]\n"
	"\n"
	"Generates a deterministic, training-like workload in memory and\n"
	"reports the engine's throughput (generation and parsing excluded),\n"
	"the trace reader's throughput and the engine's memory. Everything\n"
	"runs on one thread. Not a test: it never fails on a figure.\n"
	"\n"
	"Options:\n"
	"  --launches N        launches in the workload (default 1000000)\n"
	"  --seed S            the workload's seed (default 1)\n"
	"  --runs R            timed runs; medians are reported (default 5)\n"
	"  --compare-ops N     also time the engine over the first N ops, the\n"
	"                      ones csan_bench.py feeds to PyTorch's CUDA\n"
	"                      Sanitizer (default 200000; 0 skips it)\n"
	"  --shape S           the generated workload: training (default), the\n"
	"                      pipeline-parallel training step described in\n"
	"                      engine_bench.c, or flush, an exact-pointer job\n"
	"                      with 2000 live allocations and a flush per step,\n"
	"                      or graph, a model captured once and replayed\n"
	"                      every step, timed next to its eager twin\n"
	"  --trace FILE        time the engine over a recorded trace instead\n"
	"                      (parsed into memory first; - is stdin)\n"
	"  --write-trace PATH  write the workload as a v1 trace to PATH\n"
	"  --compare-only      time the engine over the first --compare-ops\n"
	"                      ops only (run_bench.sh's rounds)\n"
	"  -h, --help          show this help\n";

struct bench_opts {
	uint64_t launches;
	uint64_t seed;
	unsigned runs;
	uint64_t compare_ops;
	const char *trace_path;
	const char *shape;	/* "training" or "flush" */
	const char *input;	/* --trace */
	bool compare_only;
};

static uint64_t parse_u64(const char *opt, const char *s, uint64_t min,
			  uint64_t max)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno != 0 || end == s || *end != '\0' || s[0] == '-' ||
	    v < min || v > max) {
		fprintf(stderr,
			"engine_bench: %s wants a number from %" PRIu64
			" to %" PRIu64 ", not '%s'\n",
			opt, min, max, s);
		exit(2);
	}
	return v;
}

static void parse_args(int argc, char **argv, struct bench_opts *o)
{
	static const struct option longopts[] = {
		{ "launches", required_argument, NULL, 'l' },
		{ "seed", required_argument, NULL, 's' },
		{ "runs", required_argument, NULL, 'r' },
		{ "compare-ops", required_argument, NULL, 'c' },
		{ "write-trace", required_argument, NULL, 'w' },
		{ "shape", required_argument, NULL, 'S' },
		{ "trace", required_argument, NULL, 't' },
		{ "compare-only", no_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct bench_opts){ .launches = 1000000, .seed = 1, .runs = 5,
				  .compare_ops = 200000, .shape = "training" };
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'l':
			o->launches = parse_u64("--launches", optarg, 1,
						UINT32_MAX);
			break;
		case 's':
			o->seed = parse_u64("--seed", optarg, 0, UINT64_MAX);
			break;
		case 'r':
			o->runs = (unsigned)parse_u64("--runs", optarg, 1,
						      1000);
			break;
		case 'c':
			o->compare_ops = parse_u64("--compare-ops", optarg, 0,
						   UINT64_MAX);
			break;
		case 'w':
			o->trace_path = optarg;
			break;
		case 'S':
			if (strcmp(optarg, "training") != 0 &&
			    strcmp(optarg, "flush") != 0 &&
			    strcmp(optarg, "graph") != 0) {
				fprintf(stderr, "engine_bench: --shape is "
						"training, flush or graph, not "
						"'%s'\n",
					optarg);
				exit(2);
			}
			o->shape = optarg;
			break;
		case 't':
			o->input = optarg;
			break;
		case 'C':
			o->compare_only = true;
			break;
		case 'h':
			fputs(usage, stdout);
			exit(0);
		default:
			fputs(usage, stderr);
			exit(2);
		}
	}
	if (optind < argc) {
		fputs(usage, stderr);
		exit(2);
	}
	if (o->compare_only && o->compare_ops == 0) {
		fputs("engine_bench: --compare-only wants --compare-ops above "
		      "0\n", stderr);
		exit(2);
	}
}

static void print_source(const struct workload *w,
			 const struct bench_opts *o)
{
	if (o->input != NULL)
		printf("workload: the trace %s\n", o->input);
	else if (strcmp(o->shape, "flush") == 0)
		printf("workload: flush-heavy, seed %" PRIu64 ", %d streams, %d "
		       "live allocations, %" PRIu64 " steps of %d launches, "
		       "each ending in a flush\n",
		       o->seed, FLUSH_STREAMS, FLUSH_LIVE, w->steps,
		       FLUSH_STEP_LAUNCHES);
	else
		printf("workload: seed %" PRIu64 ", %d streams, %" PRIu64
		       " optimizer steps of %d micro-batches (the last cut at "
		       "the launch limit)\n",
		       o->seed, NSTREAMS, w->steps, MICRO_BATCHES);
}

static void print_workload(const struct workload *w,
			   const struct bench_opts *o)
{
	uint64_t kinds[OP_KIND_COUNT] = { 0 };
	const uint32_t *frames;
	uint32_t names = 0, stacks = 0;
	const char *s;

	for (size_t i = 0; i < w->nops; i++)
		kinds[w->ops[i].kind]++;
	/* Ids are dense, so the first unknown one is the count plus one. */
	while (symtab_stack(w->syms, stacks + 1, &frames) > 0)
		stacks++;
	for (uint32_t id = 1; (s = symtab_str(w->syms, id, NULL)) != NULL;
	     id++)
		names += strncmp(s, "aten::", 6) == 0 ||
			 strncmp(s, "c10d::", 6) == 0;
	print_source(w, o);
	printf("ops: %zu\n", w->nops);
	for (int k = 0; k < OP_KIND_COUNT; k++) {
		if (kinds[k] == 0)
			continue;
		printf("  %s: %" PRIu64 " (%.2f%%)\n", op_kind_name(k),
		       kinds[k], 100.0 * (double)kinds[k] / (double)w->nops);
	}
	if (w->launches > 0 && w->accesses > 0)
		printf("accesses: %.2f per launch, %.1f%% of them views (not "
		       "a whole tensor)\n",
		       (double)w->accesses / (double)w->launches,
		       100.0 * (double)w->views / (double)w->accesses);
	if (w->max_live > 0)
		printf("live allocations: %" PRIu64 " at most\n",
		       w->max_live);
	printf("interned: %u operator names, %u stacks\n", names, stacks);
}

/* The engine over the csan_bench prefix, in wall-clock and in the thread's
 * CPU time: run_bench.sh divides each by EventHandler's over the same ops. */
static void report_prefix(const struct workload *w,
			  const struct bench_opts *o, double *secs)
{
	size_t prefix = o->compare_ops < w->nops ? o->compare_ops : w->nops;
	double *cpu, p, pc;
	struct tally t;
	char a[32], b[32];

	if (prefix == 0)
		return;
	cpu = xrealloc(NULL, o->runs * sizeof(*cpu));
	for (unsigned r = 0; r < o->runs; r++)
		secs[r] = time_engine(w, prefix, &t, &cpu[r]);
	p = (double)prefix / median(secs, o->runs);
	pc = (double)prefix / median(cpu, o->runs);
	printf("engine, first %zu ops: %s ops/s (%.0f ns/op), median of %u "
	       "runs; thread CPU time %s ops/s\n",
	       prefix, sci(a, sizeof(a), p), 1e9 / p, o->runs,
	       sci(b, sizeof(b), pc));
	free(cpu);
}

/* The engine over the whole workload, then over the csan_bench prefix. */
static double report_engine(const struct workload *w,
			    const struct bench_opts *o, double *secs)
{
	struct tally t;
	double ops_s, cpu_s, *cpu = xrealloc(NULL, o->runs * sizeof(*cpu));
	char a[32], b[32], c[32];

	for (unsigned r = 0; r < o->runs; r++)
		secs[r] = time_engine(w, w->nops, &t, &cpu[r]);
	ops_s = (double)w->nops / median(secs, o->runs);
	cpu_s = (double)w->nops / median(cpu, o->runs);
	printf("engine: %s ops/s (%.0f ns/op), median of %u runs "
	       "(fastest %s, slowest %s)\n",
	       sci(a, sizeof(a), ops_s), 1e9 / ops_s, o->runs,
	       sci(b, sizeof(b), (double)w->nops / secs[0]),
	       sci(c, sizeof(c), (double)w->nops / secs[o->runs - 1]));
	printf("engine, thread CPU time: %s ops/s (%.0f ns/op), median of %u "
	       "runs\n",
	       sci(a, sizeof(a), cpu_s), 1e9 / cpu_s, o->runs);
	printf("findings: %" PRIu64 " distinct (%" PRIu64 " data_race, %" PRIu64
	       " missing_record_stream), %" PRIu64 " occurrences (%.3f%% of "
	       "ops)\n",
	       t.distinct[FINDING_DATA_RACE] +
		       t.distinct[FINDING_MISSING_RECORD_STREAM],
	       t.distinct[FINDING_DATA_RACE],
	       t.distinct[FINDING_MISSING_RECORD_STREAM], t.occurrences,
	       100.0 * (double)t.occurrences / (double)w->nops);
	free(cpu);
	report_prefix(w, o, secs);
	return ops_s;
}

static void report_parse(const struct workload *w,
			 const struct bench_opts *o, double *secs)
{
	char *text = NULL;
	size_t len = 0;
	double med;
	FILE *f;
	char a[32];

	if ((f = open_memstream(&text, &len)) == NULL)
		die("open_memstream failed");
	write_trace(w, f, "the memory stream");
	if (fclose(f) != 0)
		die("closing the memory stream failed");
	for (unsigned r = 0; r < o->runs; r++)
		secs[r] = time_parse(text, len, w->nops);
	med = median(secs, o->runs);
	printf("parse: %.0f MB/s over %.1f MB of trace (%s ops/s), median of "
	       "%u runs, reader only\n",
	       (double)len / 1e6 / med, (double)len / 1e6,
	       sci(a, sizeof(a), (double)w->nops / med), o->runs);
	free(text);
}

/* Where the bytes of one sample went, per live allocation. */
static void print_breakdown(const char *what, const struct engine_stats *st,
			    const struct engine_memory *mm)
{
	double n = (double)st->live_allocs;

	printf("engine bytes per live allocation %s (%" PRIu64 "): %.0f B "
	       "= allocations "
	       "%.1f (%.1f used), accesses %.1f (%.1f used, %" PRIu64
	       " live), segments %.1f (%.1f used, %" PRIu64
	       "), usages %.1f (%.1f used) + arrays %.1f, read lists %.1f, "
	       "hash %.1f, other %.1f\n",
	       what, st->live_allocs, (double)st->bytes / n, (double)mm->alloc_slabs / n,
	       (double)mm->alloc_used / n, (double)mm->access_slabs / n,
	       (double)mm->access_used / n, st->accesses,
	       (double)mm->seg_slabs / n, (double)mm->seg_used / n,
	       st->segments, (double)mm->usage_slabs / n,
	       (double)mm->usage_used / n, (double)mm->usage_arrays / n,
	       (double)mm->read_lists / n, (double)mm->alloc_hash / n,
	       (double)mm->other / n);
}

static void report_memory(const struct workload *w, struct mem_report *m)
{
	struct rusage ru;

	measure_memory(w, m);
	printf("engine memory: peak %.1f KiB\n",
	       (double)m->end.peak_bytes / 1024);
	if (m->samples == 0) {
		printf("engine bytes per live allocation, steady state: no "
		       "samples, the workload ends before one optimizer step "
		       "is done\n");
	} else {
		printf("engine at the most live allocations (%" PRIu64 "): "
		       "%.1f KiB, %.0f B each, %" PRIu64 " history segments, %"
		       PRIu64 " accesses\n",
		       m->at_max.live_allocs, (double)m->at_max.bytes / 1024,
		       (double)m->at_max.bytes /
			       (double)m->at_max.live_allocs,
		       m->at_max.segments, m->at_max.accesses);
		printf("engine history at most: %" PRIu64 " segments, %" PRIu64
		       " accesses\n",
		       m->max_segments, m->max_accesses);
		printf("engine bytes per live allocation, steady state: %.0f B "
		       "at most, %.0f B median, over %zu samples\n",
		       m->ratio_max, m->ratio_median, m->samples);
		print_breakdown("at the most live allocations", &m->at_max,
				&m->mem_at_max);
		print_breakdown("at the worst sample", &m->at_worst,
				&m->mem_at_worst);
	}
	printf("engine at the end: %.1f KiB, %" PRIu64 " live allocations, %"
	       PRIu64 " history segments, %" PRIu64 " accesses\n",
	       (double)m->end.bytes / 1024, m->end.live_allocs,
	       m->end.segments, m->end.accesses);
	getrusage(RUSAGE_SELF, &ru);
	printf("process peak RSS: %.0f MiB (mostly the workload and its trace "
	       "text, kept in memory)\n",
	       (double)ru.ru_maxrss / 1024);
}

/* The engine's bytes after the whole workload. */
static struct engine_stats graph_end_stats(const struct workload *w)
{
	struct engine_stats st;
	struct tally t;
	struct engine *e = engine_or_die(&t);
	int err;

	for (size_t i = 0; i < w->nops; i++) {
		if ((err = engine_feed(e, &w->ops[i])) != 0)
			feed_failed(i, err);
	}
	engine_get_stats(e, &st);
	engine_free(e);
	return st;
}

/* One side of --shape graph: launches/s, a replay counting each launch
 * it runs. Returns the median thread CPU ns per launch, the figure a
 * loaded machine does not inflate. */
static double graph_time(const char *what, const struct workload *w,
			 const struct bench_opts *o, double *secs)
{
	double *cpu = xrealloc(NULL, o->runs * sizeof(*cpu)), med, cmed;
	struct engine_stats st = graph_end_stats(w);
	struct tally t;
	char a[32], b[32];

	for (unsigned r = 0; r < o->runs; r++)
		secs[r] = time_engine(w, w->nops, &t, &cpu[r]);
	med = median(secs, o->runs);
	cmed = median(cpu, o->runs);
	printf("%s: %zu ops, %" PRIu64 " launches: %s launches/s (%.0f ns "
	       "per launch, thread CPU %.0f ns), %s ops/s; %" PRIu64
	       " findings; engine at the end %.1f KiB\n",
	       what, w->nops, w->launches,
	       sci(a, sizeof(a), (double)w->launches / med),
	       1e9 * med / (double)w->launches,
	       1e9 * cmed / (double)w->launches,
	       sci(b, sizeof(b), (double)w->nops / med), t.occurrences,
	       (double)st.bytes / 1024);
	free(cpu);
	return 1e9 * cmed / (double)w->launches;
}

/* --shape graph: the replayed model next to the same model run eagerly. */
static int report_graph(const struct bench_opts *o)
{
	struct workload gw, ew;
	double *secs = xrealloc(NULL, o->runs * sizeof(*secs)), g, e;

	generate_graph(&gw, o->launches, false);
	generate_graph(&ew, o->launches, true);
	printf("npusan engine benchmark: single-threaded, nothing pinned\n");
	printf("workload: a model of %d launches on %d streams captured once "
	       "as a graph and replayed every step, %" PRIu64 " steps; its "
	       "eager twin issues the same launches every step\n",
	       GRAPH_STREAMS * GRAPH_PER_STREAM + 1, GRAPH_STREAMS, gw.steps);
	g = graph_time("graph (replays)", &gw, o, secs);
	e = graph_time("eager twin", &ew, o, secs);
	printf("target, replay cost per launch (thread CPU time): %.2f of "
	       "eager's; target at most 1\n", g / e);
	printf("reproduce: engine_bench --shape graph --launches %" PRIu64
	       " --runs %u\n", o->launches, o->runs);
	free(secs);
	workload_free(&gw);
	workload_free(&ew);
	return 0;
}

int main(int argc, char **argv)
{
	struct bench_opts o;
	struct workload w;
	struct mem_report m;
	double *secs, ops_s;
	FILE *f;
	char a[32];

	parse_args(argc, argv, &o);
	if (strcmp(o.shape, "graph") == 0 && o.input == NULL)
		return report_graph(&o);
	if (o.input != NULL)
		load_trace(&w, o.input);
	else if (strcmp(o.shape, "flush") == 0)
		generate_flush(&w, o.launches, o.seed);
	else
		generate(&w, o.launches, o.seed);
	secs = xrealloc(NULL, o.runs * sizeof(*secs));
	if (o.compare_only) {
		report_prefix(&w, &o, secs);
		free(secs);
		workload_free(&w);
		return 0;
	}

	printf("npusan engine benchmark: single-threaded, nothing pinned\n");
	print_workload(&w, &o);
	if (o.trace_path != NULL) {
		if ((f = fopen(o.trace_path, "w")) == NULL) {
			fprintf(stderr, "engine_bench: %s: %s\n", o.trace_path,
				strerror(errno));
			return 1;
		}
		write_trace(&w, f, o.trace_path);
		if (fclose(f) != 0)
			die("closing the trace failed");
	}
	ops_s = report_engine(&w, &o, secs);
	report_parse(&w, &o, secs);
	report_memory(&w, &m);

	printf("target, engine throughput: %s ops/s on one core; target at "
	       "least 5e6 ops/s\n",
	       sci(a, sizeof(a), ops_s));
	if (m.samples > 0)
		printf("target, engine memory: %.0f B per live allocation, the "
		       "most in steady state; target at most %d B\n",
		       m.ratio_max, MEM_TARGET);
	else
		printf("target, engine memory: no steady state in this "
		       "workload; target at most %d B per live allocation\n",
		       MEM_TARGET);
	printf("target, against torch.cuda._sanitizer.EventHandler: see "
	       "run_bench.sh; target at least 100 times its ops/s\n");
	if (o.input != NULL)
		printf("reproduce: %s --trace %s --runs %u --compare-ops %"
		       PRIu64 "\n",
		       argv[0], o.input, o.runs, o.compare_ops);
	else
		printf("reproduce: %s --shape %s --launches %" PRIu64
		       " --seed %" PRIu64 " --runs %u --compare-ops %" PRIu64
		       "\n",
		       argv[0], o.shape, o.launches, o.seed, o.runs,
		       o.compare_ops);
	free(secs);
	workload_free(&w);
	return 0;
}
