/*
 * engine_bench_train.c - the training workload (see engine_bench.c):
 * forward and backward through the layers and the head, the input pipeline,
 * micro-batches and optimizer steps with their deliberate mistakes, and
 * generate(), which runs them to the launch limit.
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
#include "op.h"

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
void generate(struct workload *w, uint64_t launches, uint64_t seed)
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
