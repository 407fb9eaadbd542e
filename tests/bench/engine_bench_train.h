/*
 * engine_bench_train.h - the training workload's types, shared by the
 * model (engine_bench_model.c: the allocator, the layer tables, emitting
 * operations, call sites, setup) and the run (engine_bench_train.c:
 * forward, backward, micro-batches, optimizer steps). Internal to
 * engine_bench.
 */
#ifndef NPUSAN_BENCH_ENGINE_BENCH_TRAIN_H
#define NPUSAN_BENCH_ENGINE_BENCH_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine_bench.h"
#include "op.h"

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

/* A pre-LN transformer layer; slot 0 is the previous layer's output. */
enum { LS_IN = 0, LS_OUT = 16 };

enum {
	LP_LN1, LP_QKV_W, LP_QKV_B, LP_PROJ_W, LP_PROJ_B, LP_LN2,
	LP_FC1_W, LP_FC1_B, LP_FC2_W, LP_FC2_B, LAYER_PARAMS
};

/* The head: final norm, this rank's vocabulary slice and the loss. */
enum { HP_LNF, HP_HEAD_W, HEAD_PARAMS };

enum { HS_IN = 0, HS_LOGP = 4, HS_LOSS = 5, HS_LABELS = 6, HS_MASK = 7 };

/* The entries of layer_slots, layer_kernels and head_kernels
 * (engine_bench_model.c, which asserts them): the arrays below are sized
 * by the layer, the largest block. */
#define MAX_SLOTS (LS_OUT + 1)
#define MAX_KERNELS 12
#define HEAD_KERNELS 4

struct block_def {
	const struct slot_def *slots;
	size_t nslots;
	const struct kernel_def *kernels;
	size_t nkernels;
	const uint64_t *param_sizes;
	size_t nparams;
	int8_t last_reader[MAX_SLOTS];	/* last forward kernel to read */
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
	struct kernel_sites head[HEAD_KERNELS];
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

/* A zeroed op of `kind` appended to the workload. */
struct op *emit(struct gen *g, enum op_kind kind);

/* The range of all of `t`. */
struct op_range whole(const struct tensor *t);

/* The i-th of three equal views (q, k, v of a fused projection). */
struct op_range third(const struct tensor *t, int i);

/*
 * One kernel on stream s: 1 to 4 accesses, reads then writes. Bit i of
 * whole_mask is set when access i covers a whole tensor; the others are
 * views, which the workload's statistics count.
 */
void launch_mask(struct gen *g, int s, struct site site,
		 const struct op_range *rd, size_t nr,
		 const struct op_range *wr, size_t nw,
		 unsigned whole_mask);

/* The usual case: every access is a whole tensor. */
void launch(struct gen *g, int s, struct site site,
	    const struct op_range *rd, size_t nr,
	    const struct op_range *wr, size_t nw);

/* An allocation on stream s, with the stack of the code that made it. */
struct tensor alloc(struct gen *g, int s, uint64_t size,
		    struct site at);

/* Frees `t` on its allocation stream, and forgets it. */
void release(struct gen *g, struct tensor *t);

/* record_stream of `t` for stream s. */
void record_stream(struct gen *g, const struct tensor *t, int s);

/*
 * A new event. Events live only as long as the code that made them, and
 * the driver hands a destroyed event's handle out again, so handles come
 * round from a small ring.
 */
uint64_t event_new(struct gen *g);

/* Destroys `ev`, whose handle comes round again. */
void event_free(struct gen *g, uint64_t ev);

/* An event op of `kind` on `ev`, on stream s. */
void event_op(struct gen *g, enum op_kind kind, uint64_t ev, int s);

/* Work on `to` waits for what `from` has queued so far, through an event. */
void handoff(struct gen *g, int from, int to);

/* Stream a waits for everything stream b queued so far. */
void stream_wait(struct gen *g, int a, int b);

/* The host waits for stream s. */
void stream_sync(struct gen *g, int s);

/* Interns every call site's operator and stack. */
void init_sites(struct gen *g);

/* The model's setup: streams, parameters and buckets allocated and
 * loaded, then one device sync. */
void init_model(struct gen *g);

#endif
