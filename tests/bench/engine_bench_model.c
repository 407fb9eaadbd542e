/*
 * engine_bench_model.c - the training workload's machinery (see
 * engine_bench.c): the streams and the caching allocator model, the model's
 * layers and head as tables, the operations the generator emits, the names
 * and stacks of its call sites, and the model's state set up.
 * engine_bench_train.c drives them through a training run.
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
#include "engine_bench_train.h"
#include "grow.h"
#include "op.h"
#include "symtab.h"

/* ---- streams, tensors and the caching allocator ---------------------- */

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

	if (grow_array((void **)&l->ptrs, &l->cap, l->n + 1,
		       sizeof(*l->ptrs)) < 0)
		die("out of memory");
	l->ptrs[l->n++] = ptr;
}

/* ---- the model ------------------------------------------------------- */

#define LINEAR "torch/nn/modules/linear.py:116 in forward"
#define LAYER_NORM "torch/nn/functional.py:2546 in layer_norm"
#define DROPOUT "torch/nn/functional.py:1295 in dropout"

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

static const uint64_t head_param_sizes[HEAD_PARAMS] = {
	[HP_LNF] = HIDDEN * 2, [HP_HEAD_W] = HIDDEN * VOCAB_SHARD * 2,
};

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

_Static_assert(ARRAY_SIZE(layer_slots) == MAX_SLOTS, "MAX_SLOTS");
_Static_assert(ARRAY_SIZE(layer_kernels) == MAX_KERNELS, "MAX_KERNELS");
_Static_assert(ARRAY_SIZE(head_kernels) == HEAD_KERNELS, "HEAD_KERNELS");

static struct block_def layer_def = {
	layer_slots, ARRAY_SIZE(layer_slots), layer_kernels,
	ARRAY_SIZE(layer_kernels), layer_param_sizes, LAYER_PARAMS, { 0 },
};

static struct block_def head_def = {
	head_slots, ARRAY_SIZE(head_slots), head_kernels,
	ARRAY_SIZE(head_kernels), head_param_sizes, HEAD_PARAMS, { 0 },
};

/* ---- emitting operations --------------------------------------------- */

struct op *emit(struct gen *g, enum op_kind kind)
{
	return workload_emit(g->w, kind);
}

struct op_range whole(const struct tensor *t)
{
	return (struct op_range){ t->ptr, t->size };
}

/* The i-th of three equal views (q, k, v of a fused projection). */
struct op_range third(const struct tensor *t, int i)
{
	uint64_t len = t->size / 3;

	return (struct op_range){ t->ptr + (uint64_t)i * len, len };
}

/*
 * One kernel on stream s: 1 to 4 accesses, reads then writes. Bit i of
 * whole_mask is set when access i covers a whole tensor; the others are
 * views, which the workload's statistics count.
 */
void launch_mask(struct gen *g, int s, struct site site,
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
void launch(struct gen *g, int s, struct site site,
	    const struct op_range *rd, size_t nr,
	    const struct op_range *wr, size_t nw)
{
	launch_mask(g, s, site, rd, nr, wr, nw, 0xf);
}

/* An allocation on stream s, with the stack of the code that made it. */
struct tensor alloc(struct gen *g, int s, uint64_t size,
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

void release(struct gen *g, struct tensor *t)
{
	emit(g, OP_FREE)->ptr = t->ptr;
	devmem_put(&g->mem, t->stream, block_size(t->size), t->ptr);
	g->live--;
	t->ptr = 0;
}

void record_stream(struct gen *g, const struct tensor *t, int s)
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
uint64_t event_new(struct gen *g)
{
	size_t i = g->next_event++ % EVENT_HANDLES;
	uint64_t ev = g->event_base + i * 0x60;

	if (g->event_live[i])
		die("generator: more events live than handles");
	g->event_live[i] = true;
	emit(g, OP_EVENT_CREATE)->event = ev;
	return ev;
}

void event_free(struct gen *g, uint64_t ev)
{
	g->event_live[(ev - g->event_base) / 0x60] = false;
	emit(g, OP_EVENT_DESTROY)->event = ev;
}

void event_op(struct gen *g, enum op_kind kind, uint64_t ev, int s)
{
	struct op *op = emit(g, kind);

	op->event = ev;
	op->stream = stream_ids[s];
}

/* Work on `to` waits for what `from` has queued so far, through an event. */
void handoff(struct gen *g, int from, int to)
{
	uint64_t ev = event_new(g);

	event_op(g, OP_EVENT_RECORD, ev, from);
	event_op(g, OP_EVENT_WAIT, ev, to);
	event_free(g, ev);
}

void stream_wait(struct gen *g, int a, int b)
{
	struct op *op = emit(g, OP_STREAM_WAIT);

	op->stream = stream_ids[a];
	op->on = stream_ids[b];
}

void stream_sync(struct gen *g, int s)
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

void init_sites(struct gen *g)
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

void init_model(struct gen *g)
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
