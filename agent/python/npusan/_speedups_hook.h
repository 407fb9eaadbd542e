/*
 * _speedups_hook.h - the C interface between npusan._speedups and the
 * dispatcher hook (_torchhook.cpp), the adapter's one C++ file: the
 * operator plans and the ranges the C path keeps, and the table of C
 * functions the hook calls, which _speedups hands it as a capsule. Plain C
 * with no Python header, so that the C++ side sees only this.
 *
 * The hook calls the ranges and extent entries without the GIL; every
 * other entry wants the GIL held.
 */
#ifndef NPUSAN_SPEEDUPS_HOOK_H
#define NPUSAN_SPEEDUPS_HOOK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HOOK_API_CAPSULE "npusan._speedups.hook_api"

/* Range pairs kept on the C stack before the heap is used. */
#define RANGES_INLINE 32

struct _object; /* PyObject, opaque here */

struct npusan_range {
	uint64_t ptr;
	uint64_t len;
};

/* Growable ranges, inline first, each with its argument's name id; the
 * heap block (if any) is malloc's, so that they grow without the GIL. */
struct ranges {
	struct npusan_range *v;
	uint32_t *names;
	size_t n, cap;
	uint32_t name; /* of the argument (or return) being collected */
	struct npusan_range inline_v[RANGES_INLINE];
	uint32_t inline_names[RANGES_INLINE];
};

/* An argument that can hold tensors whose memory the operator touches. */
struct arg_plan {
	ptrdiff_t pos;        /* in the schema's arguments */
	struct _object *name; /* the keyword, borrowed from the plan's entry */
	int write, nest;
	uint32_t name_id;
};

/* A return that is a fresh output. */
struct ret_plan {
	ptrdiff_t pos;
	int nest;
	uint32_t name_id;
};

/* One operator overload, read once from Adapter.spec()'s entry. */
struct plan {
	struct _object *entry; /* Adapter.spec()'s: holds what the plan borrows */
	struct _object *func;  /* kept: id(func) is the plan's key */
	struct _object *run;   /* runs the operator: entry[4] or func */
	uint32_t op;
	int record_stream, single_return;
	ptrdiff_t nargs, nrets;
	struct arg_plan *args;
	struct ret_plan *rets;
};

/* One tensor as the hook reads it from the dispatcher's stack. */
struct hook_tensor {
	uint64_t data;   /* data pointer; 0 without storage */
	uint64_t elem;   /* bytes per element */
	int64_t offset;  /* storage offset, in elements */
	const int64_t *sizes, *strides;
	int64_t ndim;
	int contiguous;
};

/* One operator's outcome, for hook_api.finish(). */
struct hook_call {
	const struct plan *plan;
	struct ranges *reads, *writes;
	/* (storage start, extent) of each device tensor returned: the
	 * pending allocations they claim. */
	struct ranges *claims;
	int64_t device; /* -2: none */
	int syncs_held; /* Adapter.host_sync() held some for this thread */
};

struct hook_api {
	/* Pushes t's ranges (its bytes into *bytes when contiguous, else
	 * 0); 0, or -ENOMEM. No GIL needed. */
	int (*ranges_add)(struct ranges *r, const struct hook_tensor *t,
			  uint64_t *bytes);
	/* Pushes one range; 0, or -ENOMEM. No GIL needed. */
	int (*ranges_push)(struct ranges *r, uint64_t ptr, uint64_t len);
	/* The bytes from t's storage start to its end. No GIL needed. */
	uint64_t (*extent)(const struct hook_tensor *t);
	void (*ranges_init)(struct ranges *r);
	void (*ranges_fini)(struct ranges *r);
	/* The plan of operator `name` (aten::add) overload `overload` ("" for
	 * the default), a capsule that owns it into *capsule (a new
	 * reference); NULL with npusan turned off. GIL held. */
	const struct plan *(*plan)(struct _object *core, const char *name,
				   const char *overload,
				   struct _object **capsule);
	/* The operator ran: its launch, the allocations it claims, the
	 * synchronizations its thread held. GIL held. */
	void (*finish)(struct _object *core, const struct hook_call *k);
	/* aten::record_stream ran on the storage at `start` for the stream
	 * of those ids. GIL held. */
	void (*record_stream)(struct _object *core, uint64_t start,
			      int64_t stream_id, int64_t device_index,
			      int64_t device_type);
	/* The operator raised: the synchronizations its thread held go out.
	 * GIL held. */
	void (*release)(struct _object *core);
	/* Our own failure (std::exception's what()): npusan off. GIL held. */
	void (*fail)(struct _object *core, const char *why);
	/* Whether npusan is on. GIL held. */
	int (*on)(struct _object *core);
	/* Whether devices have streams of their own. GIL held. */
	int (*per_device)(struct _object *core);
};

#ifdef __cplusplus
}
#endif

#endif
