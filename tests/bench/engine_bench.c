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

#include "engine.h"
#include "op.h"
#include "symtab.h"
#include "trace.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define MiB (1024ull * 1024)

/*
 * The model. Sizes only decide addresses and ranges, not the work per op;
 * what matters is the number of tensors and how they are used.
 */
#define HIDDEN 1024ull
#define TOKENS 4096ull		/* the longest micro-batch: 2 x 2048 */
#define ACT (TOKENS * HIDDEN * 2) /* one bf16 activation, 8 MiB */
#define VOCAB_SHARD 8000ull	/* this rank's slice of the head */
#define LAYERS 32
#define MICRO_BATCHES 4
#define OFFLOAD_EVERY 4		/* one layer in 4 offloads fc1 */
#define STACK_GROUPS 8		/* call sites the layers run from */

/* Periods, in optimizer steps. */
#define EMA_EVERY 2
#define METRICS_EVERY 10
#define DEVICE_SYNC_EVERY 50

#define EVENT_HANDLES 64

/* The deliberate mistakes, each recurring with its own period. */
#define BUG_LABELS_EVERY 64	/* micro-batches */
#define BUG_PREFETCH_EVERY 50	/* micro-batches */
#define BUG_EMA_EVERY 32	/* steps */
#define BUG_METRICS_EVERY 100	/* steps */

#define RANGES_PER_CHUNK 65536
#define SAMPLE_EVERY 1024	/* ops between memory samples */

/* ---- small helpers --------------------------------------------------- */

static _Noreturn void die(const char *what)
{
	fprintf(stderr, "engine_bench: %s\n", what);
	exit(1);
}

static void *xrealloc(void *p, size_t n)
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

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

/* CPU time of this thread: the wall time less any wait for a core, which
 * a loaded 2-core machine adds to the wall figure. */
static double cpu_now(void)
{
	return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Sorts v in place. */
static double median(double *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* "7.12e6": the form csan_bench.py prints too, which run_bench.sh reads. */
static const char *sci(char *buf, size_t size, double v)
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
static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

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

static void workload_free(struct workload *w)
{
	struct range_chunk *c;

	while ((c = w->chunks) != NULL) {
		w->chunks = c->next;
		free(c);
	}
	free(w->ops);
	symtab_free(w->syms);
}

/* ---- streams, tensors and the caching allocator ---------------------- */

enum stream_role {
	S_COMPUTE,	/* the default stream: forward, backward, optimizer */
	S_ALLREDUCE,	/* DDP's NCCL stream */
	S_P2P,		/* pipeline send/recv */
	S_H2D,		/* label copies in */
	S_PREP,		/* label preprocessing */
	S_D2H,		/* metrics copies out */
	S_EMA,		/* the EMA model */
	S_OFFLOAD,	/* activation offload and prefetch */
	NSTREAMS
};

/* CUDA stream ids are stream handles, so they look like pointers. */
static const uint64_t stream_ids[NSTREAMS] = {
	[S_COMPUTE] = 0,
	[S_ALLREDUCE] = 0x55d6a1f3c2e0,
	[S_P2P] = 0x55d6a1f3d5a0,
	[S_H2D] = 0x55d6a20a1d10,
	[S_PREP] = 3,
	[S_D2H] = 0x55d6a20b6e80,
	[S_EMA] = 0x55d6a20b8a90,
	[S_OFFLOAD] = 0x55d6a20c0f30,
};

struct tensor {
	uint64_t ptr;	/* 0: not allocated */
	uint64_t size;	/* bytes the kernels touch */
	int stream;	/* allocation stream */
};

/* Freed blocks of one (stream, block size), reused last-in first-out. */
struct freelist {
	int stream;
	uint64_t block;
	uint64_t *ptrs;
	size_t n;
	size_t cap;
};

/*
 * Addresses as PyTorch's caching allocator hands them out: blocks rounded
 * to 512 bytes, small ones carved from 2 MiB segments, large ones in
 * segments of their own, and a freed block reused by the next allocation
 * of the same size on the same stream.
 */
struct devmem {
	uint64_t next;			/* the next fresh segment */
	uint64_t small_next[NSTREAMS];
	uint64_t small_end[NSTREAMS];
	struct freelist *lists;
	size_t nlists;
};

static uint64_t block_size(uint64_t size)
{
	return (size + 511) & ~511ull;
}

static struct freelist *freelist_of(struct devmem *m, int stream,
				    uint64_t block)
{
	struct freelist *l;

	for (size_t i = 0; i < m->nlists; i++) {
		if (m->lists[i].stream == stream && m->lists[i].block == block)
			return &m->lists[i];
	}
	m->lists = xrealloc(m->lists, (m->nlists + 1) * sizeof(*m->lists));
	l = &m->lists[m->nlists++];
	*l = (struct freelist){ .stream = stream, .block = block };
	return l;
}

static uint64_t segment(struct devmem *m, uint64_t size)
{
	uint64_t p = m->next;

	m->next += (size + 2 * MiB - 1) & ~(2 * MiB - 1);
	return p;
}

static uint64_t devmem_get(struct devmem *m, int stream, uint64_t block)
{
	struct freelist *l = freelist_of(m, stream, block);
	uint64_t p;

	if (l->n > 0)
		return l->ptrs[--l->n];
	if (block > MiB)
		return segment(m, block);
	if (m->small_end[stream] - m->small_next[stream] < block) {
		m->small_next[stream] = segment(m, 2 * MiB);
		m->small_end[stream] = m->small_next[stream] + 2 * MiB;
	}
	p = m->small_next[stream];
	m->small_next[stream] += block;
	return p;
}

static void devmem_put(struct devmem *m, int stream, uint64_t block,
		       uint64_t ptr)
{
	struct freelist *l = freelist_of(m, stream, block);

	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 16;
		l->ptrs = xrealloc(l->ptrs, l->cap * sizeof(*l->ptrs));
	}
	l->ptrs[l->n++] = ptr;
}

/* ---- the model ------------------------------------------------------- */

/* Where a kernel is launched from: its operator and its stack. */
struct site {
	uint32_t name;
	uint32_t stack;
};

enum slot_flags {
	KEEP = 1,	/* saved for backward */
	EXT = 2,	/* owned by someone else: never freed by the block */
	OFFLOAD = 4,	/* goes to the host in offloading layers */
	RESULT = 8,	/* outlives the backward pass (the loss) */
};

struct slot_def {
	uint64_t size;
	unsigned flags;
};

#define NO (-1)

/* One forward kernel and what autograd launches for it. */
struct kernel_def {
	const char *fwd;	/* forward operator */
	const char *bwd;	/* input-gradient operator; NULL: add */
	const char *where;	/* innermost frame of its forward stack */
	int8_t in[3];		/* slots read */
	int8_t out;
	int8_t aux;		/* a second output (rstd, dropout mask) */
	int8_t w;		/* weight and bias: block parameter indices */
	int8_t b;
	int8_t saved;		/* slot the input-gradient kernel reads */
	bool fused_wgrad;	/* the input-gradient kernel writes w's grad */
	bool thirds;		/* reads in[0] as q, k and v views */
};

#define LINEAR "torch/nn/modules/linear.py:116 in forward"
#define LAYER_NORM "torch/nn/functional.py:2546 in layer_norm"
#define DROPOUT "torch/nn/functional.py:1295 in dropout"

/* A pre-LN transformer layer; slot 0 is the previous layer's output. */
enum { LS_IN = 0, LS_OUT = 16 };

enum {
	LP_LN1, LP_QKV_W, LP_QKV_B, LP_PROJ_W, LP_PROJ_B, LP_LN2,
	LP_FC1_W, LP_FC1_B, LP_FC2_W, LP_FC2_B, LAYER_PARAMS
};

static const uint64_t layer_param_sizes[LAYER_PARAMS] = {
	[LP_LN1] = HIDDEN * 2, [LP_QKV_W] = HIDDEN * 3 * HIDDEN * 2,
	[LP_QKV_B] = 3 * HIDDEN * 2, [LP_PROJ_W] = HIDDEN * HIDDEN * 2,
	[LP_PROJ_B] = HIDDEN * 2, [LP_LN2] = HIDDEN * 2,
	[LP_FC1_W] = HIDDEN * 4 * HIDDEN * 2, [LP_FC1_B] = 4 * HIDDEN * 2,
	[LP_FC2_W] = 4 * HIDDEN * HIDDEN * 2, [LP_FC2_B] = HIDDEN * 2,
};

static const struct slot_def layer_slots[] = {
	{ ACT, KEEP | EXT },		/* 0: h_in (the layer below's) */
	{ ACT, KEEP },			/* 1: ln1 */
	{ TOKENS * 4, KEEP },		/* 2: rstd1 */
	{ 3 * ACT, KEEP },		/* 3: qkv */
	{ ACT, KEEP },			/* 4: attention output */
	{ ACT, 0 },			/* 5: projection */
	{ ACT, 0 },			/* 6: dropout */
	{ ACT / 2, KEEP },		/* 7: dropout mask */
	{ ACT, KEEP },			/* 8: h_mid */
	{ ACT, KEEP },			/* 9: ln2 */
	{ TOKENS * 4, KEEP },		/* 10: rstd2 */
	{ 4 * ACT, KEEP | OFFLOAD },	/* 11: fc1 */
	{ 4 * ACT, KEEP },		/* 12: gelu */
	{ ACT, 0 },			/* 13: fc2 */
	{ ACT, 0 },			/* 14: dropout */
	{ ACT / 2, KEEP },		/* 15: dropout mask */
	{ ACT, KEEP },			/* 16: h_out */
};

/* fwd, bwd, where, in, out, aux, w, b, saved, fused_wgrad, thirds */
static const struct kernel_def layer_kernels[] = {
	{ "aten::native_layer_norm", "aten::native_layer_norm_backward",
	  LAYER_NORM, { 0, NO, NO }, 1, 2, LP_LN1, NO, 0, true, false },
	{ "aten::addmm", "aten::mm", LINEAR, { 1, NO, NO }, 3, NO,
	  LP_QKV_W, LP_QKV_B, NO, false, false },
	{ "aten::_scaled_dot_product_flash_attention",
	  "aten::_scaled_dot_product_flash_attention_backward",
	  "torch/nn/functional.py:5373 in scaled_dot_product_attention",
	  { 3, NO, NO }, 4, NO, NO, NO, NO, false, true },
	{ "aten::addmm", "aten::mm", LINEAR, { 4, NO, NO }, 5, NO,
	  LP_PROJ_W, LP_PROJ_B, NO, false, false },
	{ "aten::native_dropout", "aten::native_dropout_backward", DROPOUT,
	  { 5, NO, NO }, 6, 7, NO, NO, 7, false, false },
	{ "aten::add", NULL, "model/block.py:88 in forward", { 0, 6, NO }, 8,
	  NO, NO, NO, NO, false, false },
	{ "aten::native_layer_norm", "aten::native_layer_norm_backward",
	  LAYER_NORM, { 8, NO, NO }, 9, 10, LP_LN2, NO, 8, true, false },
	{ "aten::addmm", "aten::mm", LINEAR, { 9, NO, NO }, 11, NO,
	  LP_FC1_W, LP_FC1_B, NO, false, false },
	{ "aten::gelu", "aten::gelu_backward",
	  "torch/nn/modules/activation.py:682 in forward", { 11, NO, NO }, 12,
	  NO, NO, NO, 11, false, false },
	{ "aten::addmm", "aten::mm", LINEAR, { 12, NO, NO }, 13, NO,
	  LP_FC2_W, LP_FC2_B, NO, false, false },
	{ "aten::native_dropout", "aten::native_dropout_backward", DROPOUT,
	  { 13, NO, NO }, 14, 15, NO, NO, 15, false, false },
	{ "aten::add", NULL, "model/block.py:93 in forward", { 8, 14, NO },
	  16, NO, NO, NO, NO, false, false },
};

/* The head: final norm, this rank's vocabulary slice and the loss. */
enum { HP_LNF, HP_HEAD_W, HEAD_PARAMS };

static const uint64_t head_param_sizes[HEAD_PARAMS] = {
	[HP_LNF] = HIDDEN * 2, [HP_HEAD_W] = HIDDEN * VOCAB_SHARD * 2,
};

enum { HS_IN = 0, HS_LOGP = 4, HS_LOSS = 5, HS_LABELS = 6, HS_MASK = 7 };

static const struct slot_def head_slots[] = {
	{ ACT, KEEP | EXT },			/* 0: last layer's h_out */
	{ ACT, KEEP },				/* 1: normalised */
	{ TOKENS * 4, KEEP },			/* 2: rstd */
	{ TOKENS * VOCAB_SHARD * 2, 0 },	/* 3: logits */
	{ TOKENS * VOCAB_SHARD * 2, KEEP },	/* 4: log-probabilities */
	{ 4, KEEP | RESULT },			/* 5: loss */
	{ TOKENS * 8, EXT },			/* 6: labels */
	{ TOKENS, EXT },			/* 7: loss mask */
};

static const struct kernel_def head_kernels[] = {
	{ "aten::native_layer_norm", "aten::native_layer_norm_backward",
	  LAYER_NORM, { 0, NO, NO }, 1, 2, HP_LNF, NO, 0, true, false },
	{ "aten::mm", "aten::mm", LINEAR, { 1, NO, NO }, 3, NO, HP_HEAD_W, NO,
	  NO, false, false },
	{ "aten::_log_softmax", "aten::_log_softmax_backward_data",
	  "torch/nn/functional.py:2247 in log_softmax", { 3, NO, NO }, 4, NO,
	  NO, NO, 4, false, false },
	{ "aten::nll_loss_forward", "aten::nll_loss_backward",
	  "torch/nn/functional.py:3029 in cross_entropy",
	  { 4, HS_LABELS, HS_MASK }, HS_LOSS, NO, NO, NO, HS_LABELS, false,
	  false },
};

#define MAX_SLOTS ARRAY_SIZE(layer_slots)
#define MAX_KERNELS ARRAY_SIZE(layer_kernels)

struct block_def {
	const struct slot_def *slots;
	size_t nslots;
	const struct kernel_def *kernels;
	size_t nkernels;
	const uint64_t *param_sizes;
	size_t nparams;
	int8_t last_reader[MAX_SLOTS];	/* last forward kernel to read */
};

static struct block_def layer_def = {
	layer_slots, ARRAY_SIZE(layer_slots), layer_kernels,
	ARRAY_SIZE(layer_kernels), layer_param_sizes, LAYER_PARAMS, { 0 },
};

static struct block_def head_def = {
	head_slots, ARRAY_SIZE(head_slots), head_kernels,
	ARRAY_SIZE(head_kernels), head_param_sizes, HEAD_PARAMS, { 0 },
};

struct kernel_sites {
	struct site fwd;
	struct site bwd;
	struct site wgrad;
	struct site bgrad;
	struct site accum;
};

/* A parameter with its fp32 master copy, Adam state, EMA copy and grad. */
struct param {
	struct tensor w;
	struct tensor master;
	struct tensor exp_avg;
	struct tensor exp_avg_sq;
	struct tensor ema;
	struct op_range grad;	/* a view into its bucket */
};

/* One instance of a block_def: a layer or the head. */
struct block {
	const struct block_def *def;
	struct param *params;
	struct tensor bucket;
	const struct kernel_sites *sites;	/* per kernel */
	bool offloads;
	uint64_t prefetched;			/* event, 0 when none */
	struct tensor t[MAX_SLOTS];
	struct tensor gr[MAX_SLOTS];
	bool owned[MAX_SLOTS];			/* gr[] is ours to free */
};

struct batch {
	uint64_t tokens;	/* sequences vary in length */
	struct tensor labels;
	struct tensor mask;
	uint64_t ready;		/* event recorded on S_PREP */
};

struct sites {
	struct kernel_sites layer[STACK_GROUPS][MAX_KERNELS];
	struct kernel_sites head[ARRAY_SIZE(head_kernels)];
	struct site init, init_zero;
	struct site h2d, roll, ne, masked_fill, recv, send, allreduce;
	struct site offload, prefetch, argmax, eq, to_float, mean, acc_sum;
	struct site ones, loss_acc, zero_loss, norm, norm_sum, clip_div;
	struct site clip_clamp, clip_mul, adam, copy_params, zero_grad;
	struct site ema, item, finite, all, avg, stack, d2h;
};

#define NPARAMS (LAYERS * LAYER_PARAMS + HEAD_PARAMS)

struct gen {
	struct workload *w;
	uint64_t rng;
	uint64_t limit;		/* launches wanted */
	uint64_t step;
	uint64_t mb;		/* micro-batches so far */
	uint64_t tokens;	/* of the current micro-batch */
	uint64_t pending_metrics; /* event the host syncs on next step */
	uint64_t live;
	struct devmem mem;
	uint64_t event_base;
	bool event_live[EVENT_HANDLES];
	size_t next_event;
	struct sites s;
	struct param params[NPARAMS];
	struct block layers[LAYERS];
	struct block head;
	struct batch batch[2];
};

/* ---- emitting operations --------------------------------------------- */

static struct op *workload_emit(struct workload *w, enum op_kind kind)
{
	struct op *op;

	if (w->nops == w->cap) {
		w->cap = w->cap ? 2 * w->cap : 1 << 20;
		w->ops = xrealloc(w->ops, w->cap * sizeof(*w->ops));
	}
	op = &w->ops[w->nops++];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	return op;
}

static struct op *emit(struct gen *g, enum op_kind kind)
{
	return workload_emit(g->w, kind);
}

/* Room for n ranges that stay put while the workload grows. */
static struct op_range *workload_ranges(struct workload *w, size_t n)
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

static struct op_range whole(const struct tensor *t)
{
	return (struct op_range){ t->ptr, t->size };
}

/* The i-th of three equal views (q, k, v of a fused projection). */
static struct op_range third(const struct tensor *t, int i)
{
	uint64_t len = t->size / 3;

	return (struct op_range){ t->ptr + (uint64_t)i * len, len };
}

/*
 * One kernel on stream s: 1 to 4 accesses, reads then writes. Bit i of
 * whole_mask is set when access i covers a whole tensor; the others are
 * views, which the workload's statistics count.
 */
static void launch_mask(struct gen *g, int s, struct site site,
			const struct op_range *rd, size_t nr,
			const struct op_range *wr, size_t nw,
			unsigned whole_mask)
{
	struct op_range *r = workload_ranges(g->w, nr + nw);
	struct op *op = emit(g, OP_LAUNCH);

	if (nr + nw < 1 || nr + nw > 4)
		die("generator: a launch needs 1 to 4 accesses");
	/* Either list may be NULL when empty, which memcpy() must not see. */
	for (size_t i = 0; i < nr; i++)
		r[i] = rd[i];
	for (size_t i = 0; i < nw; i++)
		r[nr + i] = wr[i];
	op->stream = stream_ids[s];
	op->name = site.name;
	op->stack = site.stack;
	op->reads = nr ? r : NULL;
	op->nreads = nr;
	op->writes = nw ? r + nr : NULL;
	op->nwrites = nw;
	/* generate() cuts what follows the last launch wanted. */
	if (++g->w->launches > g->limit)
		return;
	g->w->accesses += nr + nw;
	for (size_t i = 0; i < nr + nw; i++)
		g->w->views += !(whole_mask & (1u << i));
}

/* The usual case: every access is a whole tensor. */
static void launch(struct gen *g, int s, struct site site,
		   const struct op_range *rd, size_t nr,
		   const struct op_range *wr, size_t nw)
{
	launch_mask(g, s, site, rd, nr, wr, nw, 0xf);
}

/* An allocation on stream s, with the stack of the code that made it. */
static struct tensor alloc(struct gen *g, int s, uint64_t size,
			   struct site at)
{
	uint64_t block = block_size(size);
	struct tensor t = { devmem_get(&g->mem, s, block), size, s };
	struct op *op = emit(g, OP_ALLOC);

	op->ptr = t.ptr;
	op->size = block;
	op->stream = stream_ids[s];
	op->has_stream = true;
	op->stack = at.stack;
	if (++g->live > g->w->max_live && g->w->launches < g->limit)
		g->w->max_live = g->live;
	return t;
}

static void release(struct gen *g, struct tensor *t)
{
	emit(g, OP_FREE)->ptr = t->ptr;
	devmem_put(&g->mem, t->stream, block_size(t->size), t->ptr);
	g->live--;
	t->ptr = 0;
}

static void record_stream(struct gen *g, const struct tensor *t, int s)
{
	struct op *op = emit(g, OP_RECORD_STREAM);

	op->ptr = t->ptr;
	op->stream = stream_ids[s];
}

/*
 * A new event. Events live only as long as the code that made them, and
 * the driver hands a destroyed event's handle out again, so handles come
 * round from a small ring.
 */
static uint64_t event_new(struct gen *g)
{
	size_t i = g->next_event++ % EVENT_HANDLES;
	uint64_t ev = g->event_base + i * 0x60;

	if (g->event_live[i])
		die("generator: more events live than handles");
	g->event_live[i] = true;
	emit(g, OP_EVENT_CREATE)->event = ev;
	return ev;
}

static void event_free(struct gen *g, uint64_t ev)
{
	g->event_live[(ev - g->event_base) / 0x60] = false;
	emit(g, OP_EVENT_DESTROY)->event = ev;
}

static void event_op(struct gen *g, enum op_kind kind, uint64_t ev, int s)
{
	struct op *op = emit(g, kind);

	op->event = ev;
	op->stream = stream_ids[s];
}

/* Work on `to` waits for what `from` has queued so far, through an event. */
static void handoff(struct gen *g, int from, int to)
{
	uint64_t ev = event_new(g);

	event_op(g, OP_EVENT_RECORD, ev, from);
	event_op(g, OP_EVENT_WAIT, ev, to);
	event_free(g, ev);
}

static void stream_wait(struct gen *g, int a, int b)
{
	struct op *op = emit(g, OP_STREAM_WAIT);

	op->stream = stream_ids[a];
	op->on = stream_ids[b];
}

static void stream_sync(struct gen *g, int s)
{
	emit(g, OP_STREAM_SYNC)->stream = stream_ids[s];
}

/* ---- names and stacks ------------------------------------------------ */

static uint32_t intern(struct gen *g, const char *s)
{
	uint32_t id;

	if (symtab_intern(g->w->syms, s, strlen(s), &id) < 0)
		die("symtab_intern failed");
	return id;
}

/* The stack of `head` then `tail`, innermost frame first. */
static uint32_t stack_of(struct gen *g, const char *const *head, size_t nhead,
			 const char *const *tail, size_t ntail)
{
	uint32_t ids[16], id;
	size_t n = 0;

	if (nhead + ntail > ARRAY_SIZE(ids))
		die("generator: stack too deep");
	for (size_t i = 0; i < nhead; i++)
		ids[n++] = intern(g, head[i]);
	for (size_t i = 0; i < ntail; i++)
		ids[n++] = intern(g, tail[i]);
	if (symtab_intern_stack(g->w->syms, ids, n, &id) < 0)
		die("symtab_intern_stack failed");
	return id;
}

static const char *const main_frame[] = { "train.py:208 in main" };

static const char *const forward_tail[] = {
	"pipeline/schedule.py:311 in forward_step",
	"train.py:142 in train_step",
	"train.py:208 in main",
};

static const char *const backward_tail[] = {
	"torch/autograd/graph.py:744 in _engine_run_backward",
	"torch/autograd/__init__.py:267 in backward",
	"pipeline/schedule.py:355 in backward_step",
	"train.py:142 in train_step",
	"train.py:208 in main",
};

/*
 * The sites of a block's kernels, one set per group of layers: the model
 * runs its layers from a few call sites, so a kernel's stack tells which.
 * Backward kernels carry their autograd node's forward site above the
 * frames of the backward call.
 */
static void block_sites(struct gen *g, const struct kernel_def *k,
			size_t nk, int group, struct kernel_sites *out)
{
	for (size_t i = 0; i < nk; i++) {
		char model[64], stage[64], node[128];
		const char *fwd[] = { k[i].where, model, stage };
		const char *bwd[] = { node, stage };
		uint32_t fs, bs;

		snprintf(model, sizeof(model), "model/block.py:%zu in forward",
			 60 + 4 * i);
		snprintf(stage, sizeof(stage),
			 "model/stage.py:%d in run_group%d", 200 + 3 * group,
			 group);
		snprintf(node, sizeof(node), "autograd node of %s at %s",
			 k[i].fwd, model);
		fs = stack_of(g, fwd, ARRAY_SIZE(fwd), forward_tail,
			      ARRAY_SIZE(forward_tail));
		bs = stack_of(g, bwd, ARRAY_SIZE(bwd), backward_tail,
			      ARRAY_SIZE(backward_tail));
		out[i].fwd = (struct site){ intern(g, k[i].fwd), fs };
		out[i].bwd = (struct site){
			intern(g, k[i].bwd ? k[i].bwd : "aten::add_"), bs };
		out[i].wgrad = (struct site){ intern(g, "aten::mm"), bs };
		out[i].bgrad = (struct site){ intern(g, "aten::sum"), bs };
		out[i].accum = (struct site){ intern(g, "aten::add_"), bs };
	}
}

#define STEP "train.py:142 in train_step"
#define CLIP "torch/nn/utils/clip_grad.py"
#define SITE(field, op, where, caller) \
	{ offsetof(struct sites, field), op, where, caller }

/* Host-side launch sites: operator, innermost frame and its caller. */
static const struct site_def {
	size_t off; /* in struct sites */
	const char *op;
	const char *where;
	const char *caller;
} site_defs[] = {
	SITE(init, "aten::copy_", "model/init.py:30 in load_checkpoint",
	     "train.py:120 in setup"),
	SITE(init_zero, "aten::zero_", "model/init.py:36 in load_checkpoint",
	     "train.py:120 in setup"),
	SITE(h2d, "aten::copy_", "data/loader.py:97 in _prefetch",
	     "data/loader.py:120 in __next__"),
	SITE(roll, "aten::roll", "data/loader.py:101 in _prefetch",
	     "data/loader.py:120 in __next__"),
	SITE(ne, "aten::ne", "data/loader.py:102 in _prefetch",
	     "data/loader.py:120 in __next__"),
	SITE(masked_fill, "aten::masked_fill_",
	     "data/loader.py:103 in _prefetch",
	     "data/loader.py:120 in __next__"),
	SITE(recv, "c10d::recv_", "pipeline/p2p.py:52 in recv_forward",
	     "pipeline/schedule.py:305 in forward_step"),
	SITE(send, "c10d::send", "pipeline/p2p.py:77 in send_backward",
	     "pipeline/schedule.py:362 in backward_step"),
	SITE(allreduce, "c10d::allreduce_",
	     "torch/nn/parallel/distributed.py:1480 in _reduce_bucket",
	     "torch/autograd/__init__.py:267 in backward"),
	SITE(offload, "aten::copy_", "utils/offload.py:33 in pack",
	     "model/block.py:98 in forward"),
	SITE(prefetch, "aten::copy_", "utils/offload.py:58 in prefetch",
	     "pipeline/schedule.py:350 in backward_step"),
	SITE(argmax, "aten::argmax", "utils/metrics.py:12 in accuracy", STEP),
	SITE(eq, "aten::eq", "utils/metrics.py:12 in accuracy", STEP),
	SITE(to_float, "aten::_to_copy", "utils/metrics.py:13 in accuracy",
	     STEP),
	SITE(mean, "aten::mean", "utils/metrics.py:13 in accuracy", STEP),
	SITE(acc_sum, "aten::add_", "train.py:151 in accumulate", STEP),
	SITE(ones, "aten::ones_like", "torch/_tensor.py:522 in backward",
	     STEP),
	SITE(loss_acc, "aten::add_", "train.py:150 in accumulate", STEP),
	SITE(zero_loss, "aten::zero_", "train.py:131 in train_step",
	     "train.py:208 in main"),
	SITE(norm, "aten::linalg_vector_norm",
	     CLIP ":81 in clip_grad_norm_", STEP),
	SITE(norm_sum, "aten::sum", CLIP ":84 in clip_grad_norm_", STEP),
	SITE(clip_div, "aten::div", CLIP ":90 in clip_grad_norm_", STEP),
	SITE(clip_clamp, "aten::clamp_", CLIP ":91 in clip_grad_norm_",
	     STEP),
	SITE(clip_mul, "aten::_foreach_mul_", CLIP ":97 in clip_grad_norm_",
	     STEP),
	SITE(adam, "aten::_fused_adam_",
	     "torch/optim/adam.py:612 in _fused_adam", STEP),
	SITE(copy_params, "aten::_foreach_copy_",
	     "utils/mixed.py:48 in master_to_model", STEP),
	SITE(zero_grad, "aten::_foreach_zero_",
	     "torch/optim/optimizer.py:452 in zero_grad", STEP),
	SITE(ema, "aten::_foreach_lerp_", "utils/ema.py:41 in update",
	     "train.py:171 in train_step"),
	SITE(item, "aten::_local_scalar_dense", "train.py:176 in log_loss",
	     STEP),
	SITE(finite, "aten::isfinite", "utils/metrics.py:22 in collect", STEP),
	SITE(all, "aten::all", "utils/metrics.py:23 in collect", STEP),
	SITE(avg, "aten::div", "utils/metrics.py:25 in collect", STEP),
	SITE(stack, "aten::stack", "utils/metrics.py:27 in collect", STEP),
	SITE(d2h, "aten::copy_", "utils/metrics.py:29 in collect", STEP),
};

#undef SITE
#undef CLIP
#undef STEP

static void init_sites(struct gen *g)
{
	for (int grp = 0; grp < STACK_GROUPS; grp++)
		block_sites(g, layer_kernels, ARRAY_SIZE(layer_kernels), grp,
			    g->s.layer[grp]);
	block_sites(g, head_kernels, ARRAY_SIZE(head_kernels), STACK_GROUPS,
		    g->s.head);
	for (size_t i = 0; i < ARRAY_SIZE(site_defs); i++) {
		const struct site_def *d = &site_defs[i];
		const char *frames[] = { d->where, d->caller };
		struct site *s = (struct site *)((char *)&g->s + d->off);

		*s = (struct site){ intern(g, d->op),
				    stack_of(g, frames, ARRAY_SIZE(frames),
					     main_frame,
					     ARRAY_SIZE(main_frame)) };
	}
}

/* ---- the model's state ----------------------------------------------- */

static void init_block_def(struct block_def *d)
{
	for (size_t s = 0; s < d->nslots; s++)
		d->last_reader[s] = NO;
	for (size_t k = 0; k < d->nkernels; k++) {
		for (int i = 0; i < 3; i++) {
			if (d->kernels[k].in[i] != NO)
				d->last_reader[d->kernels[k].in[i]] = (int8_t)k;
		}
	}
}

/*
 * Parameters, their optimizer state and the buckets their grads live in,
 * all allocated up front and initialised on the compute stream: these are
 * most of the ~2,000 live allocations.
 */
static void init_block(struct gen *g, struct block *b,
		       const struct block_def *def, struct param *params,
		       const struct kernel_sites *sites)
{
	uint64_t off = 0;

	b->def = def;
	b->params = params;
	b->sites = sites;
	for (size_t i = 0; i < def->nparams; i++)
		off += block_size(def->param_sizes[i]);
	b->bucket = alloc(g, S_COMPUTE, off, g->s.init);
	launch(g, S_COMPUTE, g->s.init_zero, NULL, 0, (struct op_range[]){
		whole(&b->bucket) }, 1);
	off = 0;
	for (size_t i = 0; i < def->nparams; i++) {
		struct param *p = &params[i];
		uint64_t size = def->param_sizes[i];

		p->w = alloc(g, S_COMPUTE, size, g->s.init);
		p->master = alloc(g, S_COMPUTE, 2 * size, g->s.init);
		p->exp_avg = alloc(g, S_COMPUTE, 2 * size, g->s.init);
		p->exp_avg_sq = alloc(g, S_COMPUTE, 2 * size, g->s.init);
		p->ema = alloc(g, S_COMPUTE, size, g->s.init);
		p->grad = (struct op_range){ b->bucket.ptr + off, size };
		off += block_size(size);
		launch(g, S_COMPUTE, g->s.init, NULL, 0,
		       (struct op_range[]){ whole(&p->master) }, 1);
		launch(g, S_COMPUTE, g->s.copy_params,
		       (struct op_range[]){ whole(&p->master) }, 1,
		       (struct op_range[]){ whole(&p->w), whole(&p->ema) }, 2);
		launch(g, S_COMPUTE, g->s.init_zero, NULL, 0,
		       (struct op_range[]){ whole(&p->exp_avg),
					    whole(&p->exp_avg_sq) }, 2);
	}
}

static void init_model(struct gen *g)
{
	struct param *p = g->params;

	init_block_def(&layer_def);
	init_block_def(&head_def);
	for (int s = 1; s < NSTREAMS; s++)
		emit(g, OP_STREAM_CREATE)->stream = stream_ids[s];
	for (int l = 0; l < LAYERS; l++) {
		init_block(g, &g->layers[l], &layer_def, p,
			   g->s.layer[l % STACK_GROUPS]);
		g->layers[l].offloads = l % OFFLOAD_EVERY == OFFLOAD_EVERY - 1;
		p += LAYER_PARAMS;
	}
	init_block(g, &g->head, &head_def, p, g->s.head);
	/* Setup ends with the checkpoint loaded: the host syncs once. */
	emit(g, OP_DEVICE_SYNC);
}

/* ---- forward and backward -------------------------------------------- */

/* Slot sizes are given for TOKENS; activations scale with the batch. */
static uint64_t slot_size(const struct gen *g, const struct block_def *d,
			  size_t s)
{
	uint64_t size = d->slots[s].size;

	return size < TOKENS ? size : size / TOKENS * g->tokens;
}

static void block_forward(struct gen *g, struct block *b)
{
	const struct block_def *d = b->def;

	for (size_t k = 0; k < d->nkernels; k++) {
		const struct kernel_def *kd = &d->kernels[k];
		/* Room for every field; launch_mask() checks the 1-4 rule. */
		struct op_range rd[5], wr[2];
		size_t nr = 0, nw = 0;
		unsigned whole_mask = 0;

		if (kd->thirds) {
			for (int v = 0; v < 3; v++)
				rd[nr++] = third(&b->t[kd->in[0]], v);
		}
		for (int i = 0; i < 3 && kd->in[i] != NO && !kd->thirds; i++) {
			whole_mask |= 1u << nr;
			rd[nr++] = whole(&b->t[kd->in[i]]);
		}
		if (kd->w != NO) {
			whole_mask |= 1u << nr;
			rd[nr++] = whole(&b->params[kd->w].w);
		}
		if (kd->b != NO) {
			whole_mask |= 1u << nr;
			rd[nr++] = whole(&b->params[kd->b].w);
		}
		b->t[kd->out] = alloc(g, S_COMPUTE, slot_size(g, d, kd->out),
				      b->sites[k].fwd);
		whole_mask |= 1u << (nr + nw);
		wr[nw++] = whole(&b->t[kd->out]);
		if (kd->aux != NO) {
			b->t[kd->aux] = alloc(g, S_COMPUTE,
					      slot_size(g, d, kd->aux),
					      b->sites[k].fwd);
			whole_mask |= 1u << (nr + nw);
			wr[nw++] = whole(&b->t[kd->aux]);
		}
		launch_mask(g, S_COMPUTE, b->sites[k].fwd, rd, nr, wr, nw,
			    whole_mask);
		for (int i = 0; i < 3 && kd->in[i] != NO; i++) {
			int s = kd->in[i];

			if (d->last_reader[s] == (int8_t)k &&
			    !(d->slots[s].flags & (KEEP | EXT)))
				release(g, &b->t[s]);
		}
	}
}

/* Offloading layers send fc1 to the host once the layer is done with it;
 * the copy reads it on S_OFFLOAD, hence the record_stream. */
static void block_offload(struct gen *g, struct block *b)
{
	for (size_t s = 0; s < b->def->nslots; s++) {
		if (!b->offloads || !(b->def->slots[s].flags & OFFLOAD))
			continue;
		handoff(g, S_COMPUTE, S_OFFLOAD);
		launch(g, S_OFFLOAD, g->s.offload,
		       (struct op_range[]){ whole(&b->t[s]) }, 1, NULL, 0);
		record_stream(g, &b->t[s], S_OFFLOAD);
		release(g, &b->t[s]);
	}
}

/* Copies an offloaded layer's activations back, one layer ahead of its
 * backward pass, into memory of the offload stream's own pool. */
static void block_prefetch(struct gen *g, struct block *b)
{
	if (!b->offloads || b->prefetched)
		return;
	for (size_t s = 0; s < b->def->nslots; s++) {
		if (!(b->def->slots[s].flags & OFFLOAD))
			continue;
		b->t[s] = alloc(g, S_OFFLOAD, b->t[s].size, g->s.prefetch);
		launch(g, S_OFFLOAD, g->s.prefetch, NULL, 0,
		       (struct op_range[]){ whole(&b->t[s]) }, 1);
	}
	b->prefetched = event_new(g);
	event_op(g, OP_EVENT_RECORD, b->prefetched, S_OFFLOAD);
}

/*
 * Mistake: now and then the prefetched activation is used on the compute
 * stream without record_stream, so the offload stream's pool could hand
 * its memory out again while the backward pass still reads it.
 */
static bool bug_prefetch(const struct gen *g, const struct block *b)
{
	return b == &g->layers[LAYERS - 1] &&
	       g->mb % BUG_PREFETCH_EVERY == BUG_PREFETCH_EVERY - 1;
}

static void block_use_prefetched(struct gen *g, struct block *b)
{
	if (!b->offloads)
		return;
	block_prefetch(g, b);
	event_op(g, OP_EVENT_WAIT, b->prefetched, S_COMPUTE);
	event_free(g, b->prefetched);
	b->prefetched = 0;
	for (size_t s = 0; s < b->def->nslots; s++) {
		if ((b->def->slots[s].flags & OFFLOAD) && !bug_prefetch(g, b))
			record_stream(g, &b->t[s], S_COMPUTE);
	}
}

/* What autograd does for an add: the gradient flows to both inputs
 * unchanged; an input that already has one accumulates into it. */
static void backward_add(struct gen *g, struct block *b,
			 const struct kernel_def *kd, size_t k)
{
	struct tensor go = b->gr[kd->out];
	bool taken = false;

	for (int i = 0; i < 3 && kd->in[i] != NO; i++) {
		int s = kd->in[i];

		if (b->gr[s].ptr != 0) {
			launch(g, S_COMPUTE, b->sites[k].accum,
			       (struct op_range[]){ whole(&go) }, 1,
			       (struct op_range[]){ whole(&b->gr[s]) }, 1);
		} else {
			b->gr[s] = go;
			b->owned[s] = !taken && b->owned[kd->out];
			taken = taken || b->owned[s];
		}
	}
	if (taken)
		b->owned[kd->out] = false;
}

/*
 * What autograd runs for any other kernel: the input gradient, from the
 * output gradient, the saved tensor and the weight; the weight and bias
 * gradients, written into their bucket views; and an accumulation when
 * the input has a gradient already (a residual).
 */
static void backward_kernel(struct gen *g, struct block *b, size_t k)
{
	const struct block_def *d = b->def;
	const struct kernel_def *kd = &d->kernels[k];
	const struct kernel_sites *ks = &b->sites[k];
	struct tensor go = b->gr[kd->out], gi;
	struct op_range rd[3], wr[3];
	size_t nr = 0, nw = 0;
	unsigned whole_mask = 0;
	int in = kd->in[0];
	bool accumulate = b->gr[in].ptr != 0;

	whole_mask |= 1u << nr;
	rd[nr++] = whole(&go);
	if (kd->saved != NO) {
		whole_mask |= 1u << nr;
		rd[nr++] = whole(&b->t[kd->saved]);
	}
	if (kd->w != NO && !kd->fused_wgrad) {
		whole_mask |= 1u << nr;
		rd[nr++] = whole(&b->params[kd->w].w);
	}
	gi = alloc(g, S_COMPUTE, b->t[in].size, ks->bwd);
	if (kd->thirds) {
		for (int v = 0; v < 3; v++)
			wr[nw++] = third(&gi, v);
	} else {
		whole_mask |= 1u << (nr + nw);
		wr[nw++] = whole(&gi);
	}
	if (kd->fused_wgrad)
		wr[nw++] = b->params[kd->w].grad;
	launch_mask(g, S_COMPUTE, ks->bwd, rd, nr, wr, nw, whole_mask);
	if (kd->w != NO && !kd->fused_wgrad)
		launch_mask(g, S_COMPUTE, ks->wgrad, (struct op_range[]){
			whole(&go), whole(&b->t[in]) }, 2,
			&b->params[kd->w].grad, 1, 0x3);
	if (kd->b != NO)
		launch_mask(g, S_COMPUTE, ks->bgrad,
			    (struct op_range[]){ whole(&go) }, 1,
			    &b->params[kd->b].grad, 1, 0x1);
	if (accumulate) {
		launch(g, S_COMPUTE, ks->accum, (struct op_range[]){
			whole(&gi) }, 1, (struct op_range[]){
			whole(&b->gr[in]) }, 1);
		release(g, &gi);
	} else {
		b->gr[in] = gi;
		b->owned[in] = true;
	}
}

/*
 * Autograd over a block, last kernel first. A kernel's output and output
 * gradient go once its own backward has run, since the backward of every
 * kernel that read the output came before.
 */
static void block_backward(struct gen *g, struct block *b)
{
	const struct block_def *d = b->def;

	for (size_t k = d->nkernels; k-- > 0;) {
		const struct kernel_def *kd = &d->kernels[k];

		if (kd->bwd == NULL)
			backward_add(g, b, kd, k);
		else
			backward_kernel(g, b, k);
		if (b->owned[kd->out])
			release(g, &b->gr[kd->out]);
		b->gr[kd->out] = (struct tensor){ 0 };
		b->owned[kd->out] = false;
		if (!(d->slots[kd->out].flags & (EXT | RESULT)) &&
		    b->t[kd->out].ptr != 0)
			release(g, &b->t[kd->out]);
		if (kd->aux != NO)
			release(g, &b->t[kd->aux]);
	}
}

/* Once the last micro-batch has written a block's grads, DDP reduces its
 * bucket on the NCCL stream; ProcessGroupNCCL records the stream. */
static void allreduce(struct gen *g, struct block *b)
{
	handoff(g, S_COMPUTE, S_ALLREDUCE);
	launch(g, S_ALLREDUCE, g->s.allreduce, NULL, 0,
	       (struct op_range[]){ whole(&b->bucket) }, 1);
	record_stream(g, &b->bucket, S_ALLREDUCE);
}

/* ---- the input pipeline ---------------------------------------------- */

/* Labels arrive on S_H2D and are shifted and masked on S_PREP. */
static void batch_issue(struct gen *g, struct batch *bt)
{
	static const uint64_t lengths[] = { TOKENS, TOKENS, TOKENS - 512,
					    TOKENS - 1024 };
	struct tensor raw;

	bt->tokens = lengths[rng_next(&g->rng) % ARRAY_SIZE(lengths)];
	raw = alloc(g, S_H2D, bt->tokens * 8, g->s.h2d);
	launch(g, S_H2D, g->s.h2d, NULL, 0,
	       (struct op_range[]){ whole(&raw) }, 1);
	handoff(g, S_H2D, S_PREP);
	bt->labels = alloc(g, S_PREP, bt->tokens * 8, g->s.roll);
	launch(g, S_PREP, g->s.roll, (struct op_range[]){ whole(&raw) }, 1,
	       (struct op_range[]){ whole(&bt->labels) }, 1);
	bt->mask = alloc(g, S_PREP, bt->tokens, g->s.ne);
	launch(g, S_PREP, g->s.ne, (struct op_range[]){ whole(&raw) }, 1,
	       (struct op_range[]){ whole(&bt->mask) }, 1);
	launch(g, S_PREP, g->s.masked_fill,
	       (struct op_range[]){ whole(&bt->mask) }, 1,
	       (struct op_range[]){ whole(&bt->labels) }, 1);
	record_stream(g, &raw, S_PREP);
	release(g, &raw);
	bt->ready = event_new(g);
	event_op(g, OP_EVENT_RECORD, bt->ready, S_PREP);
}

/*
 * Mistake: now and then the labels reach the loss without record_stream,
 * and are freed while the compute stream may still read them.
 */
static bool bug_labels(const struct gen *g)
{
	return g->mb % BUG_LABELS_EVERY == BUG_LABELS_EVERY - 1;
}

static void batch_use(struct gen *g, struct batch *bt)
{
	event_op(g, OP_EVENT_WAIT, bt->ready, S_COMPUTE);
	event_free(g, bt->ready);
	if (!bug_labels(g))
		record_stream(g, &bt->labels, S_COMPUTE);
	record_stream(g, &bt->mask, S_COMPUTE);
	g->head.t[HS_LABELS] = bt->labels;
	g->head.t[HS_MASK] = bt->mask;
}

/* ---- a micro-batch and an optimizer step ----------------------------- */

/* Token accuracy for the logs, under no_grad, from the log-probabilities
 * the head keeps for its backward pass. */
static void accuracy(struct gen *g, struct tensor *acc_sum)
{
	struct tensor *logp = &g->head.t[HS_LOGP];
	struct tensor *labels = &g->head.t[HS_LABELS];
	struct tensor pred, hit, hitf, acc;

	pred = alloc(g, S_COMPUTE, g->tokens * 8, g->s.argmax);
	launch(g, S_COMPUTE, g->s.argmax, (struct op_range[]){ whole(logp) },
	       1, (struct op_range[]){ whole(&pred) }, 1);
	hit = alloc(g, S_COMPUTE, g->tokens, g->s.eq);
	launch(g, S_COMPUTE, g->s.eq, (struct op_range[]){ whole(&pred),
	       whole(labels) }, 2, (struct op_range[]){ whole(&hit) }, 1);
	release(g, &pred);
	hitf = alloc(g, S_COMPUTE, g->tokens * 4, g->s.to_float);
	launch(g, S_COMPUTE, g->s.to_float, (struct op_range[]){ whole(&hit) },
	       1, (struct op_range[]){ whole(&hitf) }, 1);
	release(g, &hit);
	acc = alloc(g, S_COMPUTE, 4, g->s.mean);
	launch(g, S_COMPUTE, g->s.mean, (struct op_range[]){ whole(&hitf) },
	       1, (struct op_range[]){ whole(&acc) }, 1);
	release(g, &hitf);
	launch(g, S_COMPUTE, g->s.acc_sum, (struct op_range[]){ whole(&acc) },
	       1, (struct op_range[]){ whole(acc_sum) }, 1);
	release(g, &acc);
}

/* One forward and backward pass; the last of a step reduces the grads. */
static void micro_batch(struct gen *g, bool last, struct tensor *loss_acc,
			struct tensor *acc_sum)
{
	struct batch *cur = &g->batch[g->mb % 2];
	struct batch *next = &g->batch[(g->mb + 1) % 2];
	struct tensor x, ones;

	/* The next batch's labels load while this one computes. */
	batch_issue(g, next);
	g->tokens = cur->tokens;
	x = alloc(g, S_COMPUTE, g->tokens * HIDDEN * 2, g->s.recv);
	handoff(g, S_COMPUTE, S_P2P);
	launch(g, S_P2P, g->s.recv, NULL, 0, (struct op_range[]){ whole(&x) },
	       1);
	record_stream(g, &x, S_P2P);
	handoff(g, S_P2P, S_COMPUTE);
	batch_use(g, cur);

	for (int l = 0; l < LAYERS; l++) {
		struct block *b = &g->layers[l];

		b->t[LS_IN] = l == 0 ? x : g->layers[l - 1].t[LS_OUT];
		block_forward(g, b);
		block_offload(g, b);
	}
	g->head.t[HS_IN] = g->layers[LAYERS - 1].t[LS_OUT];
	block_forward(g, &g->head);
	accuracy(g, acc_sum);

	ones = alloc(g, S_COMPUTE, 4, g->s.ones);
	launch(g, S_COMPUTE, g->s.ones, NULL, 0,
	       (struct op_range[]){ whole(&ones) }, 1);
	g->head.gr[HS_LOSS] = ones;
	g->head.owned[HS_LOSS] = true;
	block_backward(g, &g->head);
	if (last)
		allreduce(g, &g->head);

	for (int l = LAYERS - 1; l >= 0; l--) {
		struct block *b = &g->layers[l];
		struct block *above = l == LAYERS - 1 ? &g->head
						      : &g->layers[l + 1];

		/* The gradient of the block above's input is ours now. */
		b->gr[LS_OUT] = above->gr[LS_IN];
		b->owned[LS_OUT] = true;
		above->gr[LS_IN] = (struct tensor){ 0 };
		above->owned[LS_IN] = false;
		block_use_prefetched(g, b);
		if (l > 0)
			block_prefetch(g, &g->layers[l - 1]);
		block_backward(g, b);
		if (last)
			allreduce(g, b);
	}

	/* The input gradient goes back to the previous stage. */
	handoff(g, S_COMPUTE, S_P2P);
	launch(g, S_P2P, g->s.send,
	       (struct op_range[]){ whole(&g->layers[0].gr[LS_IN]) }, 1, NULL,
	       0);
	record_stream(g, &g->layers[0].gr[LS_IN], S_P2P);
	release(g, &g->layers[0].gr[LS_IN]);
	release(g, &x);

	launch(g, S_COMPUTE, g->s.loss_acc,
	       (struct op_range[]){ whole(&g->head.t[HS_LOSS]) }, 1,
	       (struct op_range[]){ whole(loss_acc) }, 1);
	release(g, &g->head.t[HS_LOSS]);
	release(g, &cur->labels);
	release(g, &cur->mask);
	g->mb++;
}

/* Mistake: the optimizer overwrites the weights without waiting for the
 * EMA stream, which may still be reading them. */
static bool bug_ema(const struct gen *g)
{
	return g->step % BUG_EMA_EVERY == BUG_EMA_EVERY - 1;
}

/* Mistake: the metrics copy skips its event_wait. */
static bool bug_metrics(const struct gen *g)
{
	return g->step % BUG_METRICS_EVERY == BUG_METRICS_EVERY - 1;
}

static void clip_grads(struct gen *g, struct tensor *total)
{
	struct tensor norms[NPARAMS], coef;
	size_t n = NPARAMS;

	/* _foreach_norm, two grads per launch here. */
	for (size_t i = 0; i < n; i += 2) {
		size_t m = i + 1 < n ? 2 : 1;
		struct op_range rd[2], wr[2];

		for (size_t j = 0; j < m; j++) {
			norms[i + j] = alloc(g, S_COMPUTE, 4, g->s.norm);
			rd[j] = g->params[i + j].grad;
			wr[j] = whole(&norms[i + j]);
		}
		launch_mask(g, S_COMPUTE, g->s.norm, rd, m, wr, m,
			    ((1u << m) - 1) << m);
	}
	*total = alloc(g, S_COMPUTE, 4, g->s.norm_sum);
	for (size_t i = 0; i < n; i += 3) {
		struct op_range rd[3];
		size_t m = n - i < 3 ? n - i : 3;

		for (size_t j = 0; j < m; j++)
			rd[j] = whole(&norms[i + j]);
		launch(g, S_COMPUTE, g->s.norm_sum, rd, m,
		       (struct op_range[]){ whole(total) }, 1);
	}
	for (size_t i = 0; i < n; i++)
		release(g, &norms[i]);
	coef = alloc(g, S_COMPUTE, 4, g->s.clip_div);
	launch(g, S_COMPUTE, g->s.clip_div, (struct op_range[]){
		whole(total) }, 1, (struct op_range[]){ whole(&coef) }, 1);
	launch(g, S_COMPUTE, g->s.clip_clamp, NULL, 0,
	       (struct op_range[]){ whole(&coef) }, 1);
	for (size_t i = 0; i < n; i += 2) {
		size_t m = i + 1 < n ? 2 : 1;
		struct op_range wr[2] = { g->params[i].grad };

		if (m == 2)
			wr[1] = g->params[i + 1].grad;
		launch_mask(g, S_COMPUTE, g->s.clip_mul, (struct op_range[]){
			whole(&coef) }, 1, wr, m, 0x1);
	}
	release(g, &coef);
}

static void optimizer(struct gen *g)
{
	size_t n = NPARAMS;

	if (!bug_ema(g))
		stream_wait(g, S_COMPUTE, S_EMA);
	for (size_t i = 0; i < n; i++) {
		struct param *p = &g->params[i];

		launch_mask(g, S_COMPUTE, g->s.adam, &p->grad, 1,
			    (struct op_range[]){ whole(&p->master),
						 whole(&p->exp_avg),
						 whole(&p->exp_avg_sq) }, 3,
			    0xe);
	}
	for (size_t i = 0; i < n; i += 2) {
		size_t m = i + 1 < n ? 2 : 1;
		struct op_range rd[2], wr[2], zero[2];

		for (size_t j = 0; j < m; j++) {
			rd[j] = whole(&g->params[i + j].master);
			wr[j] = whole(&g->params[i + j].w);
			zero[j] = g->params[i + j].grad;
		}
		launch(g, S_COMPUTE, g->s.copy_params, rd, m, wr, m);
		launch_mask(g, S_COMPUTE, g->s.zero_grad, NULL, 0, zero, m, 0);
	}
}

/* Every few steps the EMA model follows the weights on its own stream,
 * after the host's loss.item() sync. */
static void ema_update(struct gen *g)
{
	size_t n = NPARAMS;

	stream_wait(g, S_EMA, S_COMPUTE);
	for (size_t i = 0; i < n; i += 2) {
		size_t m = i + 1 < n ? 2 : 1;
		struct op_range rd[2], wr[2];

		for (size_t j = 0; j < m; j++) {
			rd[j] = whole(&g->params[i + j].w);
			wr[j] = whole(&g->params[i + j].ema);
		}
		launch(g, S_EMA, g->s.ema, rd, m, wr, m);
	}
}

/* Metrics are copied out on S_D2H and read by the host a step later. */
static uint64_t metrics(struct gen *g, const struct tensor *loss_acc,
			const struct tensor *acc_sum,
			const struct tensor *total)
{
	struct tensor fin = alloc(g, S_COMPUTE, 1, g->s.finite), ok, avg, out;
	uint64_t ev, done;

	launch(g, S_COMPUTE, g->s.finite, (struct op_range[]){
		whole(total) }, 1, (struct op_range[]){ whole(&fin) }, 1);
	ok = alloc(g, S_COMPUTE, 1, g->s.all);
	launch(g, S_COMPUTE, g->s.all, (struct op_range[]){ whole(&fin) }, 1,
	       (struct op_range[]){ whole(&ok) }, 1);
	avg = alloc(g, S_COMPUTE, 8, g->s.avg);
	launch(g, S_COMPUTE, g->s.avg, (struct op_range[]){ whole(loss_acc),
	       whole(acc_sum) }, 2, (struct op_range[]){ whole(&avg) }, 1);
	out = alloc(g, S_COMPUTE, 12, g->s.stack);
	launch(g, S_COMPUTE, g->s.stack, (struct op_range[]){
		whole(&avg), whole(total), whole(&ok) }, 3,
	       (struct op_range[]){ whole(&out) }, 1);
	ev = event_new(g);
	event_op(g, OP_EVENT_RECORD, ev, S_COMPUTE);
	if (!bug_metrics(g))
		event_op(g, OP_EVENT_WAIT, ev, S_D2H);
	event_free(g, ev);
	launch(g, S_D2H, g->s.d2h, (struct op_range[]){ whole(&out) }, 1,
	       NULL, 0);
	record_stream(g, &out, S_D2H);
	done = event_new(g);
	event_op(g, OP_EVENT_RECORD, done, S_D2H);
	release(g, &fin);
	release(g, &ok);
	release(g, &avg);
	release(g, &out);
	return done;
}

static void train_step(struct gen *g)
{
	struct tensor loss_acc, acc_sum, total;

	if (g->pending_metrics) {
		/* The host prints last step's metrics. */
		emit(g, OP_EVENT_SYNC)->event = g->pending_metrics;
		event_free(g, g->pending_metrics);
		g->pending_metrics = 0;
	}
	loss_acc = alloc(g, S_COMPUTE, 4, g->s.zero_loss);
	acc_sum = alloc(g, S_COMPUTE, 4, g->s.zero_loss);
	launch(g, S_COMPUTE, g->s.zero_loss, NULL, 0,
	       (struct op_range[]){ whole(&loss_acc), whole(&acc_sum) }, 2);
	for (int m = 0; m < MICRO_BATCHES; m++)
		micro_batch(g, m == MICRO_BATCHES - 1, &loss_acc, &acc_sum);

	/* DDP's finalize: the optimizer needs the reduced grads. */
	stream_wait(g, S_COMPUTE, S_ALLREDUCE);
	clip_grads(g, &total);
	optimizer(g);
	if (g->step % METRICS_EVERY == METRICS_EVERY - 1)
		g->pending_metrics = metrics(g, &loss_acc, &acc_sum, &total);
	/* loss.item() */
	launch(g, S_COMPUTE, g->s.item, (struct op_range[]){
		whole(&loss_acc) }, 1, NULL, 0);
	stream_sync(g, S_COMPUTE);
	release(g, &loss_acc);
	release(g, &acc_sum);
	release(g, &total);
	if (g->step % EMA_EVERY == 0)
		ema_update(g);
	/* torch.cuda.synchronize() around the periodic checkpoint. */
	if (g->step % DEVICE_SYNC_EVERY == DEVICE_SYNC_EVERY - 1)
		emit(g, OP_DEVICE_SYNC);
	g->step++;
}

/*
 * Builds the workload: the model's setup, then optimizer steps until
 * `launches` launches exist. The ops after the last of them are cut, and
 * the trace ends as a process does: a device sync, then a `flush`, which
 * without the sync would report every cross-stream use still in flight.
 */
static void generate(struct workload *w, uint64_t launches, uint64_t seed)
{
	struct gen *g = xrealloc(NULL, sizeof(*g));
	size_t cut;

	memset(g, 0, sizeof(*g));
	memset(w, 0, sizeof(*w));
	if (symtab_new(&w->syms) < 0)
		die("symtab_new failed");
	g->w = w;
	g->rng = seed;
	g->limit = launches;
	g->mem.next = 0x7f3c80000000ull + (rng_next(&g->rng) & 0xfff) * 2 * MiB;
	g->event_base = 0x55d6a3000000ull +
			(rng_next(&g->rng) & 0xffff) * 0x1000;
	init_sites(g);
	init_model(g);
	batch_issue(g, &g->batch[0]);
	while (w->launches < launches) {
		train_step(g);
		if (w->warm_ops == 0)
			w->warm_ops = w->nops;
	}
	w->steps = g->step;
	for (cut = w->nops; cut > 0 && w->launches > launches; cut--) {
		if (w->ops[cut - 1].kind == OP_LAUNCH)
			w->launches--;
	}
	while (cut > 0 && w->ops[cut - 1].kind != OP_LAUNCH)
		cut--;
	w->nops = cut;
	emit(g, OP_DEVICE_SYNC);
	emit(g, OP_FLUSH);
	for (size_t i = 0; i < g->mem.nlists; i++)
		free(g->mem.lists[i].ptrs);
	free(g->mem.lists);
	free(g);
}

/* ---- the flush-heavy shape ------------------------------------------- */

/*
 * What an exact-pointer trace recorded from a training job with a `flush`
 * per step looks like to the engine: FLUSH_LIVE live allocations, 8
 * streams, whole tensors accessed at their start (as PyTorch's CUDA
 * Sanitizer identifies them), one access per launch on average. Each step
 * runs compute on stream 0, then each side stream waits for the compute
 * (an event), works on a few tensors and is waited for by stream 0, then
 * some tensors are replaced (free + alloc) and the step ends with `flush`.
 * So almost every allocation has cross-stream uses, nearly all of them
 * long ordered: the shape where a flush that revisits every allocation
 * costs the most. Every FLUSH_BUG_EVERY steps one side stream is not
 * waited for before a free, so findings exist.
 */
#define FLUSH_LIVE 2000
#define FLUSH_STREAMS 8
#define FLUSH_STEP_LAUNCHES 500
#define FLUSH_SIDE_LAUNCHES 24	/* per side stream and step */
#define FLUSH_REPLACED 20	/* tensors freed and allocated per step */
#define FLUSH_BUG_EVERY 100

struct flush_gen {
	struct workload *w;
	uint64_t rng;
	uint64_t next_ptr;
	uint64_t ptr[FLUSH_LIVE];
	uint64_t size[FLUSH_LIVE];
	uint32_t ops[4];
	uint32_t stack;
};

static void flush_launch(struct flush_gen *g, uint64_t stream)
{
	uint64_t r = rng_next(&g->rng);
	size_t a = (size_t)(r >> 8) % FLUSH_LIVE;
	size_t b = (size_t)(r >> 32) % FLUSH_LIVE;
	/* 0, 1 (a read or a write) or 2 accesses: 1 on average. */
	unsigned shape = (unsigned)r & 3;
	size_t n = shape == 0 ? 0 : shape == 3 ? 2 : 1;
	struct op_range *rg = n ? workload_ranges(g->w, n) : NULL;
	struct op *op = workload_emit(g->w, OP_LAUNCH);

	op->stream = stream;
	op->name = g->ops[shape];
	op->stack = g->stack;
	if (n >= 1)
		rg[0] = (struct op_range){ g->ptr[a], g->size[a] };
	if (n == 2 && b != a)
		rg[1] = (struct op_range){ g->ptr[b], g->size[b] };
	else if (n == 2)
		n = 1;
	/* shape 1 reads a, 2 writes a, 3 reads a and writes b. */
	op->reads = shape == 1 || shape == 3 ? rg : NULL;
	op->nreads = shape == 1 || shape == 3;
	op->writes = shape == 2 ? rg : shape == 3 && n == 2 ? rg + 1 : NULL;
	op->nwrites = shape == 2 || (shape == 3 && n == 2);
	g->w->launches++;
	g->w->accesses += op->nreads + op->nwrites;
}

static void flush_alloc(struct flush_gen *g, size_t i)
{
	struct op *op = workload_emit(g->w, OP_ALLOC);

	g->size[i] = 512 * (1 + (rng_next(&g->rng) & 63));
	g->ptr[i] = g->next_ptr;
	g->next_ptr += g->size[i];
	op->ptr = g->ptr[i];
	op->size = g->size[i];
	op->has_stream = true;
	op->stream = 0;
	op->stack = g->stack;
}

static void flush_side(struct flush_gen *g, uint64_t s, bool bug)
{
	struct op *op;

	op = workload_emit(g->w, OP_EVENT_RECORD);
	op->event = s;
	op->stream = 0;
	op = workload_emit(g->w, OP_EVENT_WAIT);
	op->event = s;
	op->stream = s;
	for (int i = 0; i < FLUSH_SIDE_LAUNCHES; i++)
		flush_launch(g, s);
	if (bug)
		return;
	op = workload_emit(g->w, OP_STREAM_WAIT);
	op->stream = 0;
	op->on = s;
}

static void flush_step(struct flush_gen *g, uint64_t step)
{
	bool bug = step % FLUSH_BUG_EVERY == FLUSH_BUG_EVERY - 1;
	uint64_t compute = FLUSH_STEP_LAUNCHES -
			   (FLUSH_STREAMS - 1) * FLUSH_SIDE_LAUNCHES;

	for (uint64_t i = 0; i < compute; i++)
		flush_launch(g, 0);
	for (uint64_t s = 1; s < FLUSH_STREAMS; s++)
		flush_side(g, s, bug && s == FLUSH_STREAMS - 1);
	for (int i = 0; i < FLUSH_REPLACED; i++) {
		size_t t = (size_t)(rng_next(&g->rng) % FLUSH_LIVE);

		workload_emit(g->w, OP_FREE)->ptr = g->ptr[t];
		flush_alloc(g, t);
	}
	workload_emit(g->w, OP_FLUSH);
	g->w->steps++;
}

static void generate_flush(struct workload *w, uint64_t launches,
			   uint64_t seed)
{
	static const char *const names[4] = { "aten::empty_strided",
		"aten::sum", "aten::fill_", "aten::add.Tensor" };
	struct flush_gen *g = xrealloc(NULL, sizeof(*g));
	uint32_t frame;

	memset(g, 0, sizeof(*g));
	memset(w, 0, sizeof(*w));
	if (symtab_new(&w->syms) < 0)
		die("symtab_new failed");
	g->w = w;
	g->rng = seed;
	g->next_ptr = 0x7f3c80000000ull;
	for (int i = 0; i < 4; i++) {
		if (symtab_intern(w->syms, names[i], strlen(names[i]),
				  &g->ops[i]) < 0)
			die("symtab_intern failed");
	}
	if (symtab_intern(w->syms, "train.py:42 in step", 19, &frame) < 0 ||
	    symtab_intern_stack(w->syms, &frame, 1, &g->stack) < 0)
		die("symtab_intern failed");
	for (uint64_t s = 1; s < FLUSH_STREAMS; s++) {
		workload_emit(w, OP_STREAM_CREATE)->stream = s;
		workload_emit(w, OP_EVENT_CREATE)->event = s;
	}
	for (size_t i = 0; i < FLUSH_LIVE; i++)
		flush_alloc(g, i);
	w->max_live = FLUSH_LIVE;
	while (w->launches < launches) {
		flush_step(g, w->steps);
		if (w->warm_ops == 0)
			w->warm_ops = w->nops;
	}
	workload_emit(w, OP_DEVICE_SYNC);
	workload_emit(w, OP_FLUSH);
	free(g);
}

/*
 * --shape graph: a model captured once as a graph and replayed every step
 * (torch.cuda.graphs' make_graphed_callables, or an NPUGraph), on
 * GRAPH_STREAMS streams: the origin forks to the others through an event,
 * each runs GRAPH_PER_STREAM kernels on its own lane of activations (from
 * the graph's pool) and the shared weights, and all join back before the
 * output is written. Each step stages the input, replays, and reads the
 * output; `eager` generates the same steps with the body issued eagerly,
 * the figure the replay is compared with.
 */
#define GRAPH_STREAMS 8
#define GRAPH_PER_STREAM 48
#define GRAPH_LANE 16	  /* activations per stream */
#define GRAPH_PARAMS 64
#define GRAPH_TENSOR (256 * 1024)

struct graph_gen {
	struct workload *w;
	uint64_t act[GRAPH_STREAMS][GRAPH_LANE];
	uint64_t param[GRAPH_PARAMS];
	uint64_t input, output, loss;
	uint32_t ops[4];
	uint32_t stack;
	uint64_t body_launches, body_accesses;
};

static struct op *graph_launch(struct graph_gen *g, uint64_t s, int name,
			       size_t nr, size_t nw)
{
	struct op *op = workload_emit(g->w, OP_LAUNCH);
	struct op_range *rg = workload_ranges(g->w, nr + nw);

	op->stream = s;
	op->name = g->ops[name];
	op->stack = g->stack;
	op->reads = rg;
	op->nreads = nr;
	op->writes = rg + nr;
	op->nwrites = nw;
	g->w->launches++;
	g->w->accesses += nr + nw;
	return op;
}

static struct op_range graph_range(uint64_t ptr)
{
	return (struct op_range){ ptr, GRAPH_TENSOR };
}

static void graph_event(struct graph_gen *g, enum op_kind kind, uint64_t ev,
			uint64_t s)
{
	struct op *op = workload_emit(g->w, kind);

	op->event = ev;
	op->stream = s;
}

/* The model's forward: fork, a chain per stream, join, the output. */
static void graph_body(struct graph_gen *g)
{
	struct op *op;

	graph_event(g, OP_EVENT_RECORD, 100, 0);
	for (uint64_t s = 1; s < GRAPH_STREAMS; s++)
		graph_event(g, OP_EVENT_WAIT, 100, s);
	for (int k = 0; k < GRAPH_PER_STREAM; k++) {
		for (uint64_t s = 0; s < GRAPH_STREAMS; s++) {
			uint64_t in = k == 0 ? g->input
				    : g->act[s][(k - 1) % GRAPH_LANE];

			op = graph_launch(g, s, k % 3, 2, 1);
			((struct op_range *)op->reads)[0] = graph_range(in);
			((struct op_range *)op->reads)[1] = graph_range(
				g->param[(s * 7 + (uint64_t)k) % GRAPH_PARAMS]);
			((struct op_range *)op->writes)[0] =
				graph_range(g->act[s][k % GRAPH_LANE]);
		}
	}
	for (uint64_t s = 1; s < GRAPH_STREAMS; s++) {
		graph_event(g, OP_EVENT_RECORD, 100 + s, s);
		graph_event(g, OP_EVENT_WAIT, 100 + s, 0);
	}
	op = graph_launch(g, 0, 3, GRAPH_STREAMS, 1);
	for (uint64_t s = 0; s < GRAPH_STREAMS; s++)
		((struct op_range *)op->reads)[s] = graph_range(
			g->act[s][(GRAPH_PER_STREAM - 1) % GRAPH_LANE]);
	((struct op_range *)op->writes)[0] = graph_range(g->output);
}

static uint64_t graph_alloc(struct graph_gen *g, uint64_t *next, bool pool)
{
	struct op *op = workload_emit(g->w, OP_ALLOC);

	op->ptr = *next;
	op->size = GRAPH_TENSOR;
	op->has_stream = true;
	op->has_graph = pool;
	op->graph = pool ? 1 : 0;
	*next += GRAPH_TENSOR;
	return op->ptr;
}

static void graph_setup(struct graph_gen *g, struct workload *w)
{
	static const char *const names[4] = { "aten::addmm", "aten::gelu",
		"aten::native_layer_norm", "aten::cat" };
	uint64_t next = 0x7f3c80000000ull;
	uint32_t frame;

	memset(g, 0, sizeof(*g));
	memset(w, 0, sizeof(*w));
	g->w = w;
	if (symtab_new(&w->syms) < 0)
		die("symtab_new failed");
	for (int i = 0; i < 4; i++) {
		if (symtab_intern(w->syms, names[i], strlen(names[i]),
				  &g->ops[i]) < 0)
			die("symtab_intern failed");
	}
	if (symtab_intern(w->syms, "model.py:12 in forward", 22, &frame) < 0 ||
	    symtab_intern_stack(w->syms, &frame, 1, &g->stack) < 0)
		die("symtab_intern failed");
	for (uint64_t s = 1; s < GRAPH_STREAMS; s++)
		workload_emit(w, OP_STREAM_CREATE)->stream = s;
	for (int i = 0; i < GRAPH_PARAMS; i++)
		g->param[i] = graph_alloc(g, &next, false);
	for (int s = 0; s < GRAPH_STREAMS; s++) {
		for (int i = 0; i < GRAPH_LANE; i++)
			g->act[s][i] = graph_alloc(g, &next, true);
	}
	g->input = graph_alloc(g, &next, false);
	g->output = graph_alloc(g, &next, true);
	g->loss = graph_alloc(g, &next, false);
	w->max_live = GRAPH_PARAMS + GRAPH_STREAMS * GRAPH_LANE + 3;
}

/* One step: stage the input, run the body (a replay, or eagerly), take
 * the loss, and every tenth step wait for it on the host. */
static void graph_step(struct graph_gen *g, bool eager)
{
	struct op *op = graph_launch(g, 0, 0, 0, 1);

	((struct op_range *)op->writes)[0] = graph_range(g->input);
	if (eager) {
		graph_body(g);
	} else {
		op = workload_emit(g->w, OP_GRAPH_REPLAY);
		op->graph = 1;
		op->stream = 0;
		g->w->launches += g->body_launches;
		g->w->accesses += g->body_accesses;
	}
	op = graph_launch(g, 0, 3, 1, 1);
	((struct op_range *)op->reads)[0] = graph_range(g->output);
	((struct op_range *)op->writes)[0] = graph_range(g->loss);
	if (g->w->steps++ % 10 == 9)
		workload_emit(g->w, OP_STREAM_SYNC)->stream = 0;
}

/* The graph workload (eager false) or its eager twin; `launches` counts
 * each replayed launch. */
static void generate_graph(struct workload *w, uint64_t launches, bool eager)
{
	struct graph_gen *g = xrealloc(NULL, sizeof(*g));
	uint64_t l0, a0;

	graph_setup(g, w);
	if (!eager) {
		struct op *op = workload_emit(w, OP_CAPTURE_BEGIN);

		op->graph = 1;
		l0 = w->launches;
		a0 = w->accesses;
		graph_body(g);
		g->body_launches = w->launches - l0;
		g->body_accesses = w->accesses - a0;
		w->launches = l0; /* captured: they run at the replays */
		w->accesses = a0;
		op = workload_emit(w, OP_CAPTURE_END);
		op->graph = 1;
	}
	while (w->launches < launches) {
		graph_step(g, eager);
		if (w->warm_ops == 0)
			w->warm_ops = w->nops;
	}
	workload_emit(w, OP_DEVICE_SYNC);
	free(g);
}

/* ---- a recorded trace ------------------------------------------------ */

/* The whole file at path, read into memory; *len its length. */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
	size_t cap = 1 << 20, n = 0, got;
	char *buf;

	if (f == NULL) {
		fprintf(stderr, "engine_bench: %s: %s\n", path,
			strerror(errno));
		exit(2);
	}
	buf = xrealloc(NULL, cap);
	while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
		n += got;
		if (n == cap)
			buf = xrealloc(buf, cap *= 2);
	}
	if (ferror(f)) {
		fprintf(stderr, "engine_bench: reading %s failed\n", path);
		exit(2);
	}
	if (f != stdin)
		fclose(f);
	*len = n;
	return buf;
}

/*
 * The operations of a recorded trace, parsed into memory before anything
 * is timed, with their ranges copied out of the reader's buffers.
 */
static void load_trace(struct workload *w, const char *path)
{
	struct trace_reader *r;
	struct op op, *dst;
	struct op_range *rg;
	size_t len;
	char *text = slurp(path, &len);
	int rc;

	memset(w, 0, sizeof(*w));
	if (symtab_new(&w->syms) < 0 ||
	    trace_reader_new_mem(text, len, path, w->syms, &r) < 0)
		die("out of memory");
	while ((rc = trace_read(r, &op)) == 1) {
		rg = workload_ranges(w, op.nreads + op.nwrites);
		if (op.nreads)
			memcpy(rg, op.reads, op.nreads * sizeof(*rg));
		if (op.nwrites)
			memcpy(rg + op.nreads, op.writes,
			       op.nwrites * sizeof(*rg));
		dst = workload_emit(w, op.kind);
		*dst = op;
		dst->reads = op.nreads ? rg : NULL;
		dst->writes = op.nwrites ? rg + op.nreads : NULL;
		if (op.kind == OP_LAUNCH) {
			w->launches++;
			w->accesses += op.nreads + op.nwrites;
		}
	}
	if (rc < 0) {
		fprintf(stderr, "engine_bench: %s\n", trace_reader_error(r));
		exit(2);
	}
	trace_reader_close(r);
	free(text);
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
 * The 256-byte target is on engine bytes per live allocation in steady
 * state: engine_get_stats()'s bytes over live_allocs, sampled every
 * SAMPLE_EVERY ops once the first optimizer step has filled the pool of
 * allocations. Everything the engine holds counts, its fixed tables and
 * the history of every byte included, since that is what a daemon pays
 * per process it watches.
 */
struct mem_report {
	struct engine_stats end;
	struct engine_stats at_max;	/* the sample with most allocs */
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
		if (ratios[n - 1] > m->ratio_max)
			m->ratio_max = ratios[n - 1];
		if (st.live_allocs > m->at_max.live_allocs)
			m->at_max = st;
	}
	engine_get_stats(e, &m->end);
	m->samples = n;
	m->ratio_median = n ? median(ratios, n) : 0;
	engine_free(e);
	free(ratios);
}

static const struct trace_process bench_process = {
	.present = true, .pid = 4242, .job = "engine_bench", .has_rank = true,
	.rank = 3,
};

static void write_trace(const struct workload *w, FILE *f, const char *name)
{
	struct trace_writer *tw;
	int err;

	if ((err = trace_writer_new(f, w->syms, &bench_process, &tw)) < 0)
		goto err;
	for (size_t i = 0; i < w->nops; i++) {
		if ((err = trace_write_op(tw, &w->ops[i])) < 0) {
			trace_writer_close(tw);
			goto err;
		}
	}
	if ((err = trace_writer_close(tw)) < 0)
		goto err;
	return;
err:
	fprintf(stderr, "engine_bench: writing %s: %s\n", name, strerror(-err));
	exit(1);
}

/* Seconds the reader takes over the trace in buf, interning included. */
static double time_parse(const char *buf, size_t len, size_t expect)
{
	struct symtab *syms;
	struct trace_reader *r;
	struct op op;
	size_t n = 0;
	double t0, t1;
	int rc;

	t0 = now();
	if (symtab_new(&syms) < 0 ||
	    trace_reader_new_mem(buf, len, "bench.trace", syms, &r) < 0)
		die("out of memory");
	while ((rc = trace_read(r, &op)) == 1)
		n++;
	t1 = now();
	if (rc < 0) {
		fprintf(stderr, "engine_bench: %s\n", trace_reader_error(r));
		exit(1);
	}
	if (n != expect)
		die("the trace read back holds a different number of ops");
	trace_reader_close(r);
	symtab_free(syms);
	return t1 - t0;
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
	"  -h, --help          show this help\n";

struct bench_opts {
	uint64_t launches;
	uint64_t seed;
	unsigned runs;
	uint64_t compare_ops;
	const char *trace_path;
	const char *shape;	/* "training" or "flush" */
	const char *input;	/* --trace */
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

/* The engine over the whole workload, then over the csan_bench prefix. */
static double report_engine(const struct workload *w,
			    const struct bench_opts *o, double *secs)
{
	struct tally t;
	double ops_s, cpu_s, *cpu = xrealloc(NULL, o->runs * sizeof(*cpu));
	size_t prefix = o->compare_ops < w->nops ? o->compare_ops : w->nops;
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
	if (prefix > 0) {
		double p;

		for (unsigned r = 0; r < o->runs; r++)
			secs[r] = time_engine(w, prefix, &t, &cpu[r]);
		p = (double)prefix / median(secs, o->runs);
		printf("engine, first %zu ops: %s ops/s (%.0f ns/op), median "
		       "of %u runs\n",
		       prefix, sci(a, sizeof(a), p), 1e9 / p, o->runs);
	}
	free(cpu);
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
		       "most in steady state; target at most 256 B\n",
		       m.ratio_max);
	else
		printf("target, engine memory: no steady state in this "
		       "workload; target at most 256 B per live allocation\n");
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
