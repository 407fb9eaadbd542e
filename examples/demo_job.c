/*
 * demo_job.c - npusan-demo: a 4-rank "training job" for trying npusan.
 *
 * The launcher starts four ranks, as torchrun does: each is this program
 * run again with RANK, LOCAL_RANK and WORLD_SIZE set. Each rank tells the
 * agent what a framework adapter would (npusan.h): streams, events, the
 * caching allocator's blocks, kernels with the memory they read and
 * write, and the Python stack each came from. A few steps of data-parallel
 * training run on three streams: compute (0), communication (1) and copy
 * (2). Two mistakes are seeded, each on one rank:
 *
 *  - rank 1 starts the gradient all-reduce on the communication stream
 *    without waiting for the backward pass on the compute stream: a data
 *    race on the gradient buckets;
 *  - rank 2 copies the loss to the host on the copy stream and frees it
 *    without record_stream: the allocator may hand the block out while the
 *    copy still reads it.
 *
 * Run it under npusan:  npusanctl run -- npusan-demo
 * It exits 0 whatever npusan finds; `npusanctl run` then exits 1.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "npusan.h"

#define DEMO_RANKS 4
#define DEMO_STEPS 5
#define DEMO_LAYERS 4

enum { COMPUTE = 0, COMM = 1, COPY = 2 };
enum { EV_GRADS = 1, EV_COPY = 2 };

/* Stacks as a PyTorch adapter reports them: Python frames, innermost
 * first. */
struct demo {
	int rank;
	uint32_t op_mm, op_mm_bwd, op_allreduce, op_sgd, op_copy, op_loss;
	uint32_t st_fwd, st_bwd, st_ar, st_opt, st_loss, st_log;
	uint64_t next_ptr;
};

static uint32_t demo_stack(const char *f0, const char *f1)
{
	uint32_t frames[3] = { npusan_intern(f0), npusan_intern(f1),
			       npusan_intern("train.py:120 in main") };

	return npusan_intern_stack(frames, 3);
}

static void demo_names(struct demo *d)
{
	d->op_mm = npusan_intern("aten::mm");
	d->op_mm_bwd = npusan_intern("aten::mm_backward");
	d->op_allreduce = npusan_intern("hccl::all_reduce");
	d->op_sgd = npusan_intern("aten::_foreach_add_");
	d->op_copy = npusan_intern("aten::_to_copy");
	d->op_loss = npusan_intern("aten::mse_loss");
	d->st_fwd = demo_stack("model.py:35 in forward",
			       "train.py:84 in step");
	d->st_bwd = demo_stack("model.py:52 in backward",
			       "train.py:88 in step");
	d->st_ar = demo_stack("dist.py:17 in all_reduce_grads",
			      "train.py:90 in step");
	d->st_opt = demo_stack("optim.py:40 in step", "train.py:94 in step");
	d->st_loss = demo_stack("loss.py:12 in compute_loss",
				"train.py:86 in step");
	d->st_log = demo_stack("metrics.py:12 in log_loss",
			       "train.py:98 in step");
}

/* A block from the caching allocator, on `stream`. */
static uint64_t demo_alloc(struct demo *d, uint64_t size, uint64_t stream,
			   uint32_t stack)
{
	uint64_t p = d->next_ptr;

	d->next_ptr += (size + 0xfff) & ~(uint64_t)0xfff;
	npusan_alloc(p, size, stream, stack);
	return p;
}

static void demo_kernel(uint64_t stream, uint32_t op, uint64_t in,
			uint64_t in_len, uint64_t out, uint64_t out_len,
			uint32_t stack)
{
	struct npusan_range r = { in, in_len }, w = { out, out_len };

	npusan_launch(stream, op, &r, in_len ? 1 : 0, &w, 1, stack);
}

/* One training step over the weights and gradient buckets. */
static void demo_step(struct demo *d, const uint64_t *weights,
		      const uint64_t *grads, uint64_t act_bytes)
{
	uint64_t acts[DEMO_LAYERS], loss, host_copy;

	for (int l = 0; l < DEMO_LAYERS; l++) {
		acts[l] = demo_alloc(d, act_bytes, COMPUTE, d->st_fwd);
		demo_kernel(COMPUTE, d->op_mm, weights[l], 1 << 20, acts[l],
			    act_bytes, d->st_fwd);
	}
	loss = demo_alloc(d, 4, COMPUTE, d->st_loss);
	demo_kernel(COMPUTE, d->op_loss, acts[DEMO_LAYERS - 1], act_bytes,
		    loss, 4, d->st_loss);

	for (int l = DEMO_LAYERS - 1; l >= 0; l--)
		demo_kernel(COMPUTE, d->op_mm_bwd, acts[l], act_bytes,
			    grads[l], 1 << 20, d->st_bwd);
	/* The all-reduce may start once the backward pass is done: the
	 * seeded race on rank 1 leaves this wait out. */
	npusan_event_record(EV_GRADS, COMPUTE);
	if (d->rank != 1)
		npusan_event_wait(EV_GRADS, COMM);
	for (int l = 0; l < DEMO_LAYERS; l++)
		demo_kernel(COMM, d->op_allreduce, grads[l], 1 << 20, grads[l],
			    1 << 20, d->st_ar);
	npusan_stream_wait(COMPUTE, COMM);
	for (int l = 0; l < DEMO_LAYERS; l++)
		demo_kernel(COMPUTE, d->op_sgd, grads[l], 1 << 20, weights[l],
			    1 << 20, d->st_opt);

	/* The loss goes to the host on the copy stream, after the loss
	 * kernel; freeing it needs record_stream (or a wait) for the copy
	 * stream, which rank 2 forgets. */
	host_copy = demo_alloc(d, 4, COPY, d->st_log);
	npusan_event_record(EV_COPY, COMPUTE);
	npusan_event_wait(EV_COPY, COPY);
	demo_kernel(COPY, d->op_copy, loss, 4, host_copy, 4, d->st_log);
	if (d->rank != 2)
		npusan_record_stream(loss, COPY);
	npusan_free(loss);
	npusan_stream_sync(COPY);
	npusan_free(host_copy);
	for (int l = 0; l < DEMO_LAYERS; l++)
		npusan_free(acts[l]);
}

static int demo_rank(int rank)
{
	struct demo d = { .rank = rank,
			  .next_ptr = 0x7f0000000000ull +
				      ((uint64_t)rank << 32) };
	uint64_t weights[DEMO_LAYERS], grads[DEMO_LAYERS];
	int err;

	demo_names(&d);
	npusan_stream_create(COMM);
	npusan_stream_create(COPY);
	npusan_event_create(EV_GRADS);
	npusan_event_create(EV_COPY);
	for (int l = 0; l < DEMO_LAYERS; l++) {
		weights[l] = demo_alloc(&d, 1 << 20, COMPUTE, d.st_fwd);
		grads[l] = demo_alloc(&d, 1 << 20, COMPUTE, d.st_bwd);
	}
	for (int s = 0; s < DEMO_STEPS; s++)
		demo_step(&d, weights, grads, 256 << 10);
	npusan_device_sync();
	for (int l = 0; l < DEMO_LAYERS; l++) {
		npusan_free(weights[l]);
		npusan_free(grads[l]);
	}
	/* Short-lived: let the daemon take everything before exiting (it
	 * would drain the ring after the exit too). */
	err = npusan_wait_drained(5000);
	if (err == -ETIMEDOUT)
		fprintf(stderr, "npusan-demo: rank %d: the daemon did not take "
				"every operation in time\n", rank);
	printf("rank %d: %d steps done\n", rank, DEMO_STEPS);
	return 0;
}

/* The launcher: each rank is this program again, as torchrun runs them. */
static int demo_launch(const char *self)
{
	pid_t pids[DEMO_RANKS];
	int failed = 0, status;

	for (int r = 0; r < DEMO_RANKS; r++) {
		char rank[16], world[16];

		snprintf(rank, sizeof(rank), "%d", r);
		snprintf(world, sizeof(world), "%d", DEMO_RANKS);
		pids[r] = fork();
		if (pids[r] < 0) {
			perror("npusan-demo: fork");
			return 1;
		}
		if (pids[r] == 0) {
			setenv("RANK", rank, 1);
			setenv("LOCAL_RANK", rank, 1);
			setenv("WORLD_SIZE", world, 1);
			execl(self, self, "--rank", rank, (char *)NULL);
			perror("npusan-demo: exec");
			_exit(127);
		}
	}
	for (int r = 0; r < DEMO_RANKS; r++) {
		while (waitpid(pids[r], &status, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed = 1;
	}
	return failed;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--rank") == 0)
		return demo_rank(atoi(argv[2]));
	if (argc != 1) {
		fprintf(stderr, "usage: npusan-demo\n"
				"Runs a 4-rank training job with one data "
				"race (rank 1) and one missing record_stream "
				"(rank 2), for npusanctl run.\n");
		return 2;
	}
	return demo_launch("/proc/self/exe");
}
