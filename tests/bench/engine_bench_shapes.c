/*
 * engine_bench_shapes.c - engine_bench's other generated workloads: --shape
 * flush, an exact-pointer job with a flush every step, and --shape graph, a
 * model captured once and replayed, with its eager twin.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_bench.h"
#include "op.h"
#include "symtab.h"

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

void generate_flush(struct workload *w, uint64_t launches,
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
void generate_graph(struct workload *w, uint64_t launches, bool eager)
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
