/*
 * _speedups.h - what the files of npusan._speedups share: the Core (the
 * adapter's state as the C path holds it), the ranges an operator touches,
 * the libnpusan entry points it calls, and each file's functions that the
 * others call. The design is in _speedups.c's opening comment.
 */
#ifndef NPUSAN_SPEEDUPS_H
#define NPUSAN_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include "_speedups_hook.h"

#if PY_VERSION_HEX < 0x030B0000
#error "npusan._speedups needs CPython 3.11 or later (PyFrame_GetLasti)"
#endif

/* As _classify.MAX_RUNS: more contiguous runs than this are one span. */
#define MAX_RUNS 16
/* Dimensions sorted on the C stack; a tensor with more is one span. */
#define MAX_DIMS 64
/* npusan_intern_stack() takes at most this many frames. */
#define MAX_FRAMES 256

#define WRITE 2 /* _classify.WRITE */

typedef void (*launch_fn)(uint64_t, uint32_t, const struct npusan_range *,
			  size_t, const struct npusan_range *, size_t,
			  uint32_t);
typedef void (*alloc_fn)(uint64_t, uint64_t, uint64_t, uint32_t);
typedef void (*free_fn)(uint64_t);
typedef void (*free_at_fn)(uint64_t, uint32_t);
typedef void (*launch_args_fn)(uint64_t, uint32_t, const struct npusan_range *,
			       const uint32_t *, size_t,
			       const struct npusan_range *, const uint32_t *,
			       size_t, uint32_t);

/* Code objects whose frames are machinery or not, as Stacks._skip says,
 * direct-mapped by address (_speedups_stack.c); emptied whenever Stacks
 * forgets its own (Stacks.add_machinery()). */
#define SKIP_SLOTS 256

struct skip_slot {
	const void *code; /* NULL: empty */
	int machinery;
};

/* The stacks seen, by key (_speedups_stack.c). */
struct stack_cache {
	struct stack_slot *slots; /* NULL until the first stack */
	size_t used;
};

typedef struct {
	PyObject_HEAD
	PyObject *adapter;        /* _adapter.Adapter */
	PyObject *stacks;         /* _stack.Stacks */
	PyObject *specs;          /* adapter.specs: func -> (OpSpec, op id) */
	PyObject *plans;          /* adapter.plans: id(func) -> its plan */
	PyObject *pending;        /* adapter.pending: start -> stream */
	PyObject *inside;         /* adapter.inside: thread -> held syncs */
	PyObject *live;           /* adapter.live: starts the agent knows */
	PyObject *capturing;      /* adapter.capturing: stream -> graph */
	PyObject *current_stream; /* adapter.current_stream(device) */
	PyObject *adapter_dict;   /* adapter.__dict__, where adapter.on is */
	PyObject *stream_reader;  /* backend.stream_reader or None */
	PyObject *device_attr;    /* "is_cpu", "is_cuda", "is_npu" */
	PyObject *tensor_type;    /* torch.Tensor */
	PyObject *stack_ids;      /* stacks._ids: key -> stack id */
	PyObject *stack_skip;     /* stacks._skip: id(code) -> machinery */
	int max_frames;           /* stacks._max */
	int per_device;           /* adapter.per_device */
	int has_nbytes;           /* tensors have .nbytes (PyTorch 2) */
	launch_fn launch;
	alloc_fn alloc;
	free_fn free;
	launch_args_fn launch_args; /* NULL: the library predates it */
	free_at_fn free_at;         /* NULL: the library predates it */
	struct stack_cache seen;    /* owned: stack_cache_free() */
	struct skip_slot skip_seen[SKIP_SLOTS];
} Core;

/* Interned names of the tensor methods and adapter attributes used
 * (_speedups.c makes them). */
extern PyObject *s_data_ptr, *s_is_contiguous, *s_numel, *s_element_size,
	*s_get_device, *s_size, *s_stride, *s_on, *s_fail, *s_spec, *s_claim,
	*s_record_stream, *s_classify, *s_name, *s_torch_dispatch, *s_nbytes,
	*s_stream_reader;

/* _speedups.c */
int core_on(Core *c);
void core_fail(Core *c);
int core_stream(Core *c, int64_t device, uint64_t *out);

/* _speedups_ranges.c: the bytes each tensor touches. */
void ranges_init(struct ranges *r);
void ranges_fini(struct ranges *r);
int ranges__push(struct ranges *r, uint64_t ptr, uint64_t len);
int ranges_push(struct ranges *r, uint64_t ptr, uint64_t len);
int ranges_add_dims(struct ranges *r, uint64_t ptr, uint64_t elem, int64_t n,
		    const int64_t *sizes, const int64_t *strides);
int ranges_add_strided(struct ranges *r, uint64_t ptr, uint64_t elem,
		       PyObject *sizes, PyObject *strides);
int ranges_is_device(Core *c, PyObject *v);
int ranges_add_tensor(Core *c, struct ranges *r, PyObject *t, uint64_t *ptr,
		      uint64_t *bytes);
uint64_t ranges_span_elems(int64_t n, const int64_t *sizes,
			   const int64_t *strides);
int ranges_extent(PyObject *t, uint64_t *out);
int ranges_note_device(Core *c, PyObject *t, int64_t *device);
int ranges_collect(Core *c, PyObject *v, int nest, struct ranges *r,
		   int64_t *device);

/* _speedups_stack.c: the Python stack as an agent stack id. */
int64_t stack_capture(Core *c);
void stack_cache_free(struct stack_cache *sc);
PyObject *stack_forget_machinery(PyObject *self, PyObject *unused);

/* _speedups_dispatch.c: the dispatch mode and the allocation callbacks. */
PyObject *dispatch_torch_dispatch(PyObject *self, PyObject *const *a,
				  Py_ssize_t na);
PyObject *dispatch_on_memory_allocation(PyObject *self, PyObject *ptr);
PyObject *dispatch_on_memory_deallocation(PyObject *self, PyObject *ptr);
PyObject *dispatch_plan(Core *c, PyObject *func, struct plan **out);
void dispatch_release(Core *c, PyObject *tid);
int dispatch_claim(Core *c, uint64_t start, uint64_t extent, int64_t stack,
		   int graph_too);
int dispatch_launch(Core *c, uint32_t op, const struct ranges *rd,
		    const struct ranges *wr, int64_t device, int64_t stack);

/* _speedups_hook.c: what the dispatcher hook calls, as a capsule. */
PyObject *hook_api_capsule(void);

/* _speedups_threads.c: threads already running. */
PyObject *threads_watch(PyObject *self, PyObject *hook);

/* _speedups_mode.c: PyTorch 1.13's mode stack, run in C. */
extern PyTypeObject mode_stack_type;

#endif
