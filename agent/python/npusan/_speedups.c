/*
 * _speedups.c - npusan._speedups: the adapter's per-operator path in C.
 *
 * npusan.torch's dispatch mode and its allocation callbacks run on every
 * operator of a job. This module does what DispatchMode.__torch_dispatch__,
 * Adapter.on_memory_allocation and Adapter.on_memory_deallocation do in
 * npusan/torch/_adapter.py, without the interpreter's cost per bytecode,
 * and calls libnpusan through the function pointers ctypes resolved (or a
 * test's fake agent made) instead of through ctypes' argument conversion.
 * Python keeps what is rare: classifying an operator seen for the first
 * time, naming a new stack, claiming an allocation through anything but a
 * fresh output or for a stream in a graph capture (from the graph's pool),
 * record_stream, graph capture and replay, and turning npusan off.
 *
 * DESIGN
 *
 * 1. _adapter.py is the reference: each step here has its counterpart
 *    there, and the tests run both. The package falls back to it wherever
 *    this module is not built or does not load.
 * 2. A failure of our own (a tensor method missing, an int out of range,
 *    memory) goes to adapter.fail() as an exception, which turns npusan
 *    off; the operator then runs, or has run, exactly once, and its own
 *    exception reaches the caller untouched.
 * 3. Ranges live on the C stack of each call (heap past RANGES_INLINE), never
 *    in the Core: the operator may release the GIL and another thread's
 *    operator run through here meanwhile.
 * 4. While an operator runs, adapter.inside maps its thread to None, so
 *    that host synchronizations reported meanwhile are held (by Python's
 *    Adapter.host_sync()) and pushed after its launch, by release() here.
 * 5. Stack keys are bytes of (code object address, f_lasti) per frame, in
 *    Stacks' own cache (npusan/_stack.py), which keeps every code object a
 *    key names alive, so an address stays its code's.
 * 6. The dispatch mode itself is a Core: _adapter.py derives its C mode
 *    from Core and TorchDispatchMode, so that the __torch_dispatch__ torch
 *    finds on the mode is bound to the mode, as PyTorch 2 requires (it
 *    refuses one bound to any other object as "a classmethod").
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000
#error "npusan._speedups needs CPython 3.11 or later (PyFrame_GetLasti)"
#endif

/* As _classify.MAX_RUNS: more contiguous runs than this are one span. */
#define MAX_RUNS 16
/* Dimensions sorted on the C stack; a tensor with more is one span. */
#define MAX_DIMS 64
/* Range pairs kept on the C stack before the heap is used. */
#define RANGES_INLINE 32
/* npusan_intern_stack() takes at most this many frames. */
#define MAX_FRAMES 256

#define WRITE 2 /* _classify.WRITE */

struct npusan_range {
	uint64_t ptr;
	uint64_t len;
};

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

/* Growable ranges, inline first, each with its argument's name id. */
struct ranges {
	struct npusan_range *v;
	uint32_t *names;
	size_t n, cap;
	uint32_t name; /* of the argument (or return) being collected */
	struct npusan_range inline_v[RANGES_INLINE];
	uint32_t inline_names[RANGES_INLINE];
};

static void ranges_init(struct ranges *r)
{
	r->v = r->inline_v;
	r->names = r->inline_names;
	r->n = 0;
	r->cap = RANGES_INLINE;
	r->name = 0;
}

static void ranges_fini(struct ranges *r)
{
	if (r->v != r->inline_v)
		PyMem_Free(r->v); /* and the names after the ranges */
}

/* 0; -1 with MemoryError set. */
static int ranges_push(struct ranges *r, uint64_t ptr, uint64_t len)
{
	if (r->n == r->cap) {
		size_t cap = r->cap * 2;
		struct npusan_range *v =
			PyMem_Malloc(cap * (sizeof(*v) + sizeof(*r->names)));

		if (v == NULL) {
			PyErr_NoMemory();
			return -1;
		}
		memcpy(v, r->v, r->n * sizeof(*v));
		memcpy(v + cap, r->names, r->n * sizeof(*r->names));
		ranges_fini(r);
		r->v = v;
		r->names = (uint32_t *)(v + cap);
		r->cap = cap;
	}
	r->v[r->n].ptr = ptr;
	r->v[r->n].len = len;
	r->names[r->n] = r->name;
	r->n++;
	return 0;
}

/* The name id at `i` of `ids` (a tuple of ints; else none) into *out, 0
 * for none; -1 with an exception set. */
static int name_at(PyObject *ids, Py_ssize_t i, uint32_t *out)
{
	unsigned long v = 0;

	if (ids != NULL && PyTuple_Check(ids) && i < PyTuple_GET_SIZE(ids))
		v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(ids, i));
	*out = (uint32_t)v;
	return v == (unsigned long)-1 && PyErr_Occurred() ? -1 : 0;
}

/* Interned names of the tensor methods and adapter attributes used. */
static PyObject *s_data_ptr, *s_is_contiguous, *s_numel, *s_element_size,
	*s_get_device, *s_size, *s_stride, *s_storage_offset, *s_on, *s_fail,
	*s_spec, *s_claim, *s_record_stream, *s_classify, *s_name;

typedef struct {
	PyObject_HEAD
	PyObject *adapter;        /* _adapter.Adapter */
	PyObject *stacks;         /* _stack.Stacks */
	PyObject *specs;          /* adapter.specs: func -> (OpSpec, op id) */
	PyObject *pending;        /* adapter.pending: start -> stream */
	PyObject *inside;         /* adapter.inside: thread -> held syncs */
	PyObject *live;           /* adapter.live: starts the agent knows */
	PyObject *capturing;      /* adapter.capturing: stream -> graph */
	PyObject *current_stream; /* adapter.current_stream(device) */
	PyObject *device_attr;    /* "is_cpu", "is_cuda", "is_npu" */
	PyObject *tensor_type;    /* torch.Tensor */
	PyObject *stack_ids;      /* stacks._ids: key -> stack id */
	PyObject *stack_skip;     /* stacks._skip: id(code) -> machinery */
	int max_frames;           /* stacks._max */
	int per_device;           /* adapter.per_device */
	launch_fn launch;
	alloc_fn alloc;
	free_fn free;
	launch_args_fn launch_args; /* NULL: the library predates it */
	free_at_fn free_at;         /* NULL: the library predates it */
} Core;

/* ---- helpers ------------------------------------------------------------ */

/* Whether the adapter is on; an error counts as off. */
static int core_on(Core *c)
{
	PyObject *on = PyObject_GetAttr(c->adapter, s_on);
	int r;

	if (on == NULL) {
		PyErr_Clear();
		return 0;
	}
	r = PyObject_IsTrue(on);
	Py_DECREF(on);
	if (r < 0) {
		PyErr_Clear();
		return 0;
	}
	return r;
}

/* Hands the pending exception to adapter.fail() (DESIGN 2). */
static void core_fail(Core *c)
{
	PyObject *type, *value, *tb, *r;

	PyErr_Fetch(&type, &value, &tb);
	PyErr_NormalizeException(&type, &value, &tb);
	if (value == NULL)
		value = Py_NewRef(Py_None);
	r = PyObject_CallMethodOneArg(c->adapter, s_fail, value);
	Py_XDECREF(r);
	Py_XDECREF(type);
	Py_XDECREF(value);
	Py_XDECREF(tb);
	PyErr_Clear();
}

/* adapter.current_stream(device); 0, or -1 with an exception. */
static int core_stream(Core *c, int64_t device, uint64_t *out)
{
	PyObject *d = PyLong_FromLongLong(device), *s;
	unsigned long long v;

	if (d == NULL)
		return -1;
	s = PyObject_CallOneArg(c->current_stream, d);
	Py_DECREF(d);
	if (s == NULL)
		return -1;
	v = PyLong_AsUnsignedLongLong(s);
	Py_DECREF(s);
	if (v == (unsigned long long)-1 && PyErr_Occurred())
		return -1;
	*out = v;
	return 0;
}

/* t.name() as an integer; 0, or -1 with an exception. */
static int call_i64(PyObject *t, PyObject *name, int64_t *out)
{
	PyObject *r = PyObject_CallMethodNoArgs(t, name);
	long long v;

	if (r == NULL)
		return -1;
	v = PyLong_AsLongLong(r);
	Py_DECREF(r);
	if (v == -1 && PyErr_Occurred())
		return -1;
	*out = v;
	return 0;
}

static int call_u64(PyObject *t, PyObject *name, uint64_t *out)
{
	PyObject *r = PyObject_CallMethodNoArgs(t, name);
	unsigned long long v;

	if (r == NULL)
		return -1;
	v = PyLong_AsUnsignedLongLong(r);
	Py_DECREF(r);
	if (v == (unsigned long long)-1 && PyErr_Occurred())
		return -1;
	*out = v;
	return 0;
}

/* 1 when `v` is a tensor on this device, 0 when not, -1 on error. */
static int core_is_device(Core *c, PyObject *v)
{
	PyObject *on;
	int r;

	if (!PyObject_TypeCheck(v, (PyTypeObject *)c->tensor_type))
		return 0;
	on = PyObject_GetAttr(v, c->device_attr);
	if (on == NULL)
		return -1;
	r = on == Py_True;
	Py_DECREF(on);
	return r;
}

struct dim {
	int64_t stride, size;
};

/* Pushes the ranges of a strided tensor, as _classify.strided_ranges(). */
static int add_strided(struct ranges *r, uint64_t ptr, uint64_t elem,
		       PyObject *sizes, PyObject *strides)
{
	struct dim dims[MAX_DIMS];
	Py_ssize_t n = PyTuple_Size(sizes), nd = 0, i;
	uint64_t run = 1, count = 1, span = 1, offsets[MAX_RUNS];
	size_t noff = 1;
	int too_many = 0;

	if (n < 0 || PyTuple_Size(strides) != n) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "sizes and strides");
		return -1;
	}
	for (i = 0; i < n; i++) {
		int64_t size = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes, i));
		int64_t stride = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));

		if (PyErr_Occurred())
			return -1;
		if (size == 0)
			return 0;
		if (size > 1 && stride > 0) {
			span += (uint64_t)(size - 1) * (uint64_t)stride;
			if (nd == MAX_DIMS)
				too_many = 1;
			else
				dims[nd++] = (struct dim){ stride, size };
		}
	}
	/* Too many dimensions to sort here: their span. */
	if (too_many)
		return ranges_push(r, ptr, span * elem);
/* Insertion sort by (stride, size), as Python sorts the pairs. */
	for (i = 1; i < nd; i++) {
		struct dim d = dims[i];
		Py_ssize_t j = i;

		while (j > 0 && (dims[j - 1].stride > d.stride ||
				 (dims[j - 1].stride == d.stride &&
				  dims[j - 1].size > d.size))) {
			dims[j] = dims[j - 1];
			j--;
		}
		dims[j] = d;
	}
	for (i = 0; i < nd && (uint64_t)dims[i].stride == run; i++)
		run *= (uint64_t)dims[i].size;
	for (Py_ssize_t k = i; k < nd && count <= MAX_RUNS; k++)
		count *= (uint64_t)dims[k].size;
	if (count > MAX_RUNS)
		return ranges_push(r, ptr, span * elem);
	offsets[0] = 0;
	for (Py_ssize_t k = i; k < nd; k++) {
		size_t had = noff;

		/* offsets = [o + j * stride for o in offsets for j in range] */
		for (int64_t j = dims[k].size - 1; j >= 0; j--) {
			for (size_t o = 0; o < had; o++)
				offsets[(size_t)j * had + o] =
					offsets[o] + (uint64_t)j *
					(uint64_t)dims[k].stride;
		}
		noff = had * (size_t)dims[k].size;
	}
	for (size_t a = 1; a < noff; a++) {
		uint64_t o = offsets[a];
		size_t b = a;

		while (b > 0 && offsets[b - 1] > o) {
			offsets[b] = offsets[b - 1];
			b--;
		}
		offsets[b] = o;
	}
	for (size_t a = 0; a < noff; a++) {
		if (ranges_push(r, ptr + offsets[a] * elem, run * elem) < 0)
			return -1;
	}
	return 0;
}

/* The ranges of tensor t (on this device): its data pointer in *ptr and,
 * when it is contiguous, its bytes in *bytes (else 0). 0, or -1 with an
 * exception. */
static int add_tensor(struct ranges *r, PyObject *t, uint64_t *ptr,
		      uint64_t *bytes)
{
	uint64_t p, numel, elem;
	PyObject *contig, *sizes, *strides;
	int is_contig, ret;

	*bytes = 0;
	if (call_u64(t, s_data_ptr, &p) < 0)
		return -1;
	*ptr = p;
	if (p == 0)
		return 0;
	contig = PyObject_CallMethodNoArgs(t, s_is_contiguous);
	if (contig == NULL)
		return -1;
	is_contig = contig == Py_True;
	Py_DECREF(contig);
	if (call_u64(t, s_element_size, &elem) < 0)
		return -1;
	if (is_contig) {
		if (call_u64(t, s_numel, &numel) < 0)
			return -1;
		*bytes = numel * elem;
		return numel ? ranges_push(r, p, numel * elem) : 0;
	}
	sizes = PyObject_CallMethodNoArgs(t, s_size);
	if (sizes == NULL)
		return -1;
	strides = PyObject_CallMethodNoArgs(t, s_stride);
	ret = strides ? add_strided(r, p, elem, sizes, strides) : -1;
	Py_DECREF(sizes);
	Py_XDECREF(strides);
	return ret;
}

/* As _adapter._extent(), for a tensor that starts its storage: the bytes
 * from there to its last element's end. */
static int tensor_extent(PyObject *t, uint64_t *out)
{
	PyObject *sizes, *strides = NULL;
	uint64_t elems = 1, elem;
	int ret = -1;

	if (call_u64(t, s_element_size, &elem) < 0)
		return -1;
	sizes = PyObject_CallMethodNoArgs(t, s_size);
	if (sizes != NULL)
		strides = PyObject_CallMethodNoArgs(t, s_stride);
	if (strides == NULL || !PyTuple_Check(sizes) ||
	    !PyTuple_Check(strides) ||
	    PyTuple_GET_SIZE(sizes) != PyTuple_GET_SIZE(strides)) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "sizes and strides");
		goto out;
	}
	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(sizes); i++) {
		int64_t size = PyLong_AsLongLong(PyTuple_GET_ITEM(sizes, i));
		int64_t st = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));

		if (size == 0) {
			elems = 0;
			break;
		}
		elems += (uint64_t)(size - 1) * (uint64_t)st;
	}
	*out = elems * elem;
	ret = PyErr_Occurred() ? -1 : 0;
out:
	Py_XDECREF(sizes);
	Py_XDECREF(strides);
	return ret;
}

/* The device index of the first device tensor, kept in *device where
 * devices have streams of their own. */
static int note_device(Core *c, PyObject *t, int64_t *device)
{
	if (!c->per_device || *device != -2)
		return 0;
	return call_i64(t, s_get_device, device);
}

/* The ranges of the device tensors in v, nest levels of lists deep, as
 * _adapter._collect(). */
static int collect(Core *c, PyObject *v, int nest, struct ranges *r,
		   int64_t *device)
{
	uint64_t p, bytes;
	PyObject *seq;
	int ok;

	if (nest == 0) {
		ok = core_is_device(c, v);
		if (ok <= 0)
			return ok;
		if (add_tensor(r, v, &p, &bytes) < 0)
			return -1;
		return note_device(c, v, device);
	}
	seq = PySequence_Fast(v, "a tensor list");
	if (seq == NULL)
		return -1;
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
		PyObject *e = PySequence_Fast_GET_ITEM(seq, i);

		if (e != Py_None && collect(c, e, nest - 1, r, device) < 0) {
			Py_DECREF(seq);
			return -1;
		}
	}
	Py_DECREF(seq);
	return 0;
}

/* Whether frames of `code` are machinery, per Stacks._skip, asking
 * Stacks._classify() the first time. 1, 0, or -1 with an exception. */
static int machinery(Core *c, PyCodeObject *code)
{
	PyObject *key = PyLong_FromVoidPtr(code), *v;
	int r;

	if (key == NULL)
		return -1;
	v = PyDict_GetItemWithError(c->stack_skip, key);
	Py_DECREF(key);
	if (v != NULL)
		return v == Py_True;
	if (PyErr_Occurred())
		return -1;
	v = PyObject_CallMethodOneArg(c->stacks, s_classify, (PyObject *)code);
	if (v == NULL)
		return -1;
	r = PyObject_IsTrue(v);
	Py_DECREF(v);
	return r;
}

/* The stack id of the calling Python code, as Stacks.capture(): leading
 * machinery frames skipped, up to max_frames keyed, a new key named by
 * Stacks._name(). 0 when stacks are off; -1 with an exception. */
static int64_t capture(Core *c)
{
	uint64_t key[2 * MAX_FRAMES];
	PyFrameObject *f, *top, *next;
	PyObject *k, *id;
	int n = 0, m;
	int64_t sid;

	if (c->max_frames == 0)
		return 0;
	f = PyEval_GetFrame();
	Py_XINCREF(f);
	while (f != NULL) {
		PyCodeObject *code = PyFrame_GetCode(f);

		m = machinery(c, code);
		Py_DECREF(code);
		if (m < 0) {
			Py_DECREF(f);
			return -1;
		}
		if (!m)
			break;
		next = PyFrame_GetBack(f);
		Py_DECREF(f);
		f = next;
	}
	top = f;
	Py_XINCREF(f);
	while (f != NULL && n < c->max_frames) {
		PyCodeObject *code = PyFrame_GetCode(f);

		key[2 * n] = (uint64_t)(uintptr_t)code;
		key[2 * n + 1] = (uint64_t)PyFrame_GetLasti(f);
		Py_DECREF(code);
		n++;
		next = PyFrame_GetBack(f);
		Py_DECREF(f);
		f = next;
	}
	Py_XDECREF(f);
	k = PyBytes_FromStringAndSize((const char *)key,
				      (Py_ssize_t)(2 * n * sizeof(key[0])));
	if (k == NULL) {
		Py_XDECREF(top);
		return -1;
	}
	id = PyDict_GetItemWithError(c->stack_ids, k);
	if (id != NULL) {
		Py_INCREF(id);
	} else if (!PyErr_Occurred()) {
		PyObject *count = PyLong_FromLong(n);

		id = count ? PyObject_CallMethodObjArgs(
				     c->stacks, s_name, k,
				     top ? (PyObject *)top : Py_None, count,
				     NULL)
			   : NULL;
		Py_XDECREF(count);
	}
	Py_DECREF(k);
	Py_XDECREF(top);
	if (id == NULL)
		return -1;
	sid = PyLong_AsLongLong(id);
	Py_DECREF(id);
	if (sid == -1 && PyErr_Occurred())
		return -1;
	return sid;
}

/* The pending allocation at `ptr`, where fresh output t starts, if any,
 * goes to the agent with t's extent (`bytes` when t is contiguous) and the
 * operator's stack: the fast claim in _adapter.py. */
static int claim_fresh(Core *c, PyObject *t, uint64_t ptr, uint64_t bytes,
		       uint32_t stack)
{
	PyObject *key = PyLong_FromUnsignedLongLong(ptr), *stream;
	uint64_t s, extent = bytes;
	int ret = -1;

	if (key == NULL)
		return -1;
	stream = PyDict_GetItemWithError(c->pending, key);
	if (stream == NULL) {
		ret = PyErr_Occurred() ? -1 : 0;
		goto out;
	}
	s = PyLong_AsUnsignedLongLong(stream);
	if (s == (uint64_t)-1 && PyErr_Occurred())
		goto out;
	/* From a graph's pool: left pending for adapter.claim(). */
	if (PyDict_GET_SIZE(c->capturing) != 0) {
		int in_capture = PyDict_Contains(c->capturing, stream);

		if (in_capture != 0) {
			ret = in_capture < 0 ? -1 : 0;
			goto out;
		}
	}
	if (extent == 0 && tensor_extent(t, &extent) < 0)
		goto out;
	if (PyDict_DelItem(c->pending, key) < 0)
		goto out;
	c->alloc(ptr, extent, s, stack);
	ret = PySet_Add(c->live, key);
out:
	Py_DECREF(key);
	return ret;
}

/* ---- the dispatch mode ---------------------------------------------- */

/* Ends thread `tid`'s operator and pushes the synchronizations it held, as
 * Adapter.release() (DESIGN 4); a pending exception is kept. */
static void release(Core *c, PyObject *tid)
{
	PyObject *type, *value, *tb, *held;

	PyErr_Fetch(&type, &value, &tb);
	held = PyDict_GetItemWithError(c->inside, tid);
	Py_XINCREF(held);
	if (held != NULL && PyDict_DelItem(c->inside, tid) < 0)
		core_fail(c);
	if (held != NULL && PyList_Check(held) && core_on(c)) {
		for (Py_ssize_t i = 0; i < PyList_GET_SIZE(held); i++) {
			PyObject *call = PyList_GET_ITEM(held, i), *r;

			r = PyObject_Call(PyTuple_GET_ITEM(call, 0),
					  PyTuple_GET_ITEM(call, 1), NULL);
			if (r == NULL) {
				core_fail(c);
				break;
			}
			Py_DECREF(r);
		}
	}
	if (held == NULL && PyErr_Occurred())
		core_fail(c);
	Py_XDECREF(held);
	PyErr_Restore(type, value, tb);
}

/* The fresh outputs of `result` (spec.returns) as writes, each claiming
 * its pending allocation. */
static int outputs(Core *c, PyObject *spec, PyObject *ret_ids,
		   PyObject *result, struct ranges *w, int64_t *device,
		   uint32_t stack)
{
	PyObject *returns = PyTuple_GET_ITEM(spec, 2);
	int single = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 3));

	if (single < 0)
		return -1;

	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(returns); i++) {
		PyObject *rs = PyTuple_GET_ITEM(returns, i), *v;
		Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(rs, 0));
		int nest = (int)PyLong_AsLong(PyTuple_GET_ITEM(rs, 1)), ok;
		uint64_t p, bytes;

		if (PyErr_Occurred() || name_at(ret_ids, i, &w->name) < 0)
			return -1;
		if (single) {
			v = result;
		} else {
			if (!PyTuple_Check(result) ||
			    pos >= PyTuple_GET_SIZE(result)) {
				PyErr_SetString(PyExc_TypeError, "returns");
				return -1;
			}
			v = PyTuple_GET_ITEM(result, pos);
		}
		if (nest != 0) {
			if (v != Py_None && collect(c, v, nest, w, device) < 0)
				return -1;
			continue;
		}
		ok = core_is_device(c, v);
		if (ok < 0)
			return -1;
		if (ok == 0)
			continue;
		if (add_tensor(w, v, &p, &bytes) < 0 ||
		    note_device(c, v, device) < 0)
			return -1;
		if (p != 0 && claim_fresh(c, v, p, bytes, stack) < 0)
			return -1;
	}
	return 0;
}

/* __torch_dispatch__(func, types, args=(), kwargs=None) */
static PyObject *core_dispatch(PyObject *self, PyObject *const *a,
			       Py_ssize_t na)
{
	Core *c = (Core *)self;
	PyObject *func, *args, *kwargs, *entry, *spec, *argspecs, *result;
	PyObject *arg_ids = NULL, *ret_ids = NULL;
	PyObject *tid = NULL;
	struct ranges reads, writes;
	int64_t device = -2, stack;
	uint64_t stream;
	unsigned long op;
	int record;

	if (na < 2 || na > 4) {
		PyErr_SetString(PyExc_TypeError,
				"__torch_dispatch__(func, types, args, kwargs)");
		return NULL;
	}
	func = a[0];
	args = na > 2 ? a[2] : NULL;
	kwargs = na > 3 && a[3] != Py_None ? a[3] : NULL;
	if (args == NULL || !PyTuple_Check(args)) {
		args = args ? PySequence_Tuple(args) : PyTuple_New(0);
		if (args == NULL)
			return NULL;
	} else {
		Py_INCREF(args);
	}
	if (!core_on(c)) {
		result = PyObject_Call(func, args, kwargs);
		Py_DECREF(args);
		return result;
	}
	ranges_init(&reads);
	ranges_init(&writes);
	entry = PyDict_GetItemWithError(c->specs, func);
	if (entry != NULL)
		Py_INCREF(entry);
	else if (!PyErr_Occurred())
		entry = PyObject_CallMethodOneArg(c->adapter, s_spec, func);
	if (entry == NULL)
		goto before_failed;
	spec = PyTuple_GET_ITEM(entry, 0);
	op = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(entry, 1));
	/* Adapter.spec()'s names, used where the library takes them. */
	if (c->launch_args != NULL && PyTuple_GET_SIZE(entry) >= 4) {
		arg_ids = PyTuple_GET_ITEM(entry, 2);
		ret_ids = PyTuple_GET_ITEM(entry, 3);
	}
	record = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 4));
	if (PyErr_Occurred())
		goto before_failed;
	if (record) {
		PyObject *kw = kwargs ? Py_NewRef(kwargs) : PyDict_New();

		result = kw ? PyObject_CallMethodObjArgs(c->adapter,
							 s_record_stream, func,
							 args, kw, NULL)
			    : NULL;
		Py_XDECREF(kw);
		goto done;
	}
	argspecs = PyTuple_GET_ITEM(spec, 1);
	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(argspecs); i++) {
		PyObject *as = PyTuple_GET_ITEM(argspecs, i), *v = NULL;
		Py_ssize_t pos = PyLong_AsSsize_t(PyTuple_GET_ITEM(as, 0));
		long kind = PyLong_AsLong(PyTuple_GET_ITEM(as, 2));
		int nest = (int)PyLong_AsLong(PyTuple_GET_ITEM(as, 3));

		if (PyErr_Occurred() || name_at(arg_ids, i, &reads.name) < 0)
			goto before_failed;
		writes.name = reads.name;
		if (pos < PyTuple_GET_SIZE(args))
			v = PyTuple_GET_ITEM(args, pos);
		else if (kwargs != NULL)
			v = PyDict_GetItemWithError(kwargs,
						    PyTuple_GET_ITEM(as, 1));
		if (v == NULL && PyErr_Occurred())
			goto before_failed;
		if (v == NULL || v == Py_None)
			continue;
		if (collect(c, v, nest, kind == WRITE ? &writes : &reads,
			    &device) < 0)
			goto before_failed;
	}
	stack = capture(c);
	if (stack < 0)
		goto before_failed;
	tid = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
	if (tid == NULL || PyDict_SetItem(c->inside, tid, Py_None) < 0)
		goto before_failed;

	result = PyObject_Call(func, args, kwargs);
	if (result == NULL)
		goto done;
	if (outputs(c, spec, ret_ids, result, &writes, &device,
		    (uint32_t)stack) < 0)
		goto after_failed;
	if (PyDict_GET_SIZE(c->pending) != 0) {
		PyObject *sid = PyLong_FromLongLong(stack), *r;

		r = sid ? PyObject_CallMethodObjArgs(c->adapter, s_claim,
						     result, sid, NULL)
			: NULL;
		Py_XDECREF(sid);
		if (r == NULL)
			goto after_failed;
		Py_DECREF(r);
	}
	if (reads.n != 0 || writes.n != 0) {
		if (core_stream(c, device, &stream) < 0)
			goto after_failed;
		if (c->launch_args != NULL) /* names every range */
			c->launch_args(stream, (uint32_t)op, reads.v,
				       reads.names, reads.n, writes.v,
				       writes.names, writes.n, (uint32_t)stack);
		else
			c->launch(stream, (uint32_t)op, reads.v, reads.n,
				  writes.v, writes.n, (uint32_t)stack);
	}
	goto done;

before_failed:
	core_fail(c);
	if (tid != NULL)
		release(c, tid);
	Py_CLEAR(tid);
	result = PyObject_Call(func, args, kwargs);
	goto done;
after_failed:
	core_fail(c);
done:
	if (tid != NULL) {
		release(c, tid);
		Py_DECREF(tid);
	}
	Py_XDECREF(entry);
	Py_DECREF(args);
	ranges_fini(&reads);
	ranges_fini(&writes);
	return result;
}

/* ---- allocation callbacks ------------------------------------------- */

static PyObject *core_on_memory_allocation(PyObject *self, PyObject *ptr)
{
	Core *c = (Core *)self;
	PyObject *d, *s = NULL;

	if (!core_on(c))
		Py_RETURN_NONE;
	d = PyLong_FromLong(-1);
	if (d != NULL)
		s = PyObject_CallOneArg(c->current_stream, d);
	Py_XDECREF(d);
	if (s == NULL || PyDict_SetItem(c->pending, ptr, s) < 0)
		core_fail(c);
	Py_XDECREF(s);
	Py_RETURN_NONE;
}

/* npusan_free_at() of `ptr` with the stack of the Python code that freed
 * it (where a missing record_stream's fix goes), or npusan_free() with an
 * older library. 0; -1 with an exception. */
static int core_free(Core *c, PyObject *ptr)
{
	uint64_t p = PyLong_AsUnsignedLongLong(ptr);
	int64_t stack;

	if (PyErr_Occurred())
		return -1;
	if (c->free_at == NULL) {
		c->free(p);
		return 0;
	}
	stack = capture(c);
	if (stack < 0)
		return -1;
	c->free_at(p, (uint32_t)stack);
	return 0;
}

static PyObject *core_on_memory_deallocation(PyObject *self, PyObject *ptr)
{
	Core *c = (Core *)self;
	int r;

	if (!core_on(c))
		Py_RETURN_NONE;
	r = PyDict_Contains(c->pending, ptr);
	if (r > 0) {
		r = PyDict_DelItem(c->pending, ptr);
	} else if (r == 0) {
		r = PySet_Discard(c->live, ptr);
		if (r > 0)
			r = core_free(c, ptr);
	}
	if (r < 0)
		core_fail(c);
	Py_RETURN_NONE;
}

/* ---- the type ------------------------------------------------------- */

static int core_traverse(PyObject *self, visitproc visit, void *arg)
{
	Core *c = (Core *)self;

	Py_VISIT(c->adapter);
	Py_VISIT(c->stacks);
	Py_VISIT(c->specs);
	Py_VISIT(c->pending);
	Py_VISIT(c->capturing);
	Py_VISIT(c->inside);
	Py_VISIT(c->live);
	Py_VISIT(c->current_stream);
	Py_VISIT(c->device_attr);
	Py_VISIT(c->tensor_type);
	Py_VISIT(c->stack_ids);
	Py_VISIT(c->stack_skip);
	return 0;
}

static int core_clear(PyObject *self)
{
	Core *c = (Core *)self;

	Py_CLEAR(c->adapter);
	Py_CLEAR(c->stacks);
	Py_CLEAR(c->specs);
	Py_CLEAR(c->pending);
	Py_CLEAR(c->capturing);
	Py_CLEAR(c->inside);
	Py_CLEAR(c->live);
	Py_CLEAR(c->current_stream);
	Py_CLEAR(c->device_attr);
	Py_CLEAR(c->tensor_type);
	Py_CLEAR(c->stack_ids);
	Py_CLEAR(c->stack_skip);
	return 0;
}

static void core_dealloc(PyObject *self)
{
	PyObject_GC_UnTrack(self);
	core_clear(self);
	Py_TYPE(self)->tp_free(self);
}

/* An attribute that must be there; NULL with an exception. */
static PyObject *attr(PyObject *o, const char *name)
{
	return PyObject_GetAttrString(o, name);
}

static void *pointer(PyObject *pointers, Py_ssize_t i)
{
	return PyLong_AsVoidPtr(PyTuple_GET_ITEM(pointers, i));
}

/* Core(adapter, stacks, tensor_type,
 *      (launch, alloc, free[, launch_args[, free_at]])),
 * launch_args and free_at 0 when the library predates them */
static int core_init(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = { "adapter", "stacks", "tensor_type",
				 "pointers", NULL };
	Core *c = (Core *)self;
	PyObject *adapter, *stacks, *tensor_type, *pointers, *max, *backend;
	PyObject *per_device;
	long frames;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO!O!", names, &adapter,
					 &stacks, &PyType_Type, &tensor_type,
					 &PyTuple_Type, &pointers))
		return -1;
	if (PyTuple_GET_SIZE(pointers) < 3 || PyTuple_GET_SIZE(pointers) > 5) {
		PyErr_SetString(PyExc_ValueError, "pointers: (launch, alloc, "
				"free[, launch_args[, free_at]])");
		return -1;
	}
	core_clear(self);
	c->adapter = Py_NewRef(adapter);
	c->stacks = Py_NewRef(stacks);
	c->tensor_type = Py_NewRef(tensor_type);
	if (!(c->specs = attr(adapter, "specs")) ||
	    !(c->pending = attr(adapter, "pending")) ||
	    !(c->inside = attr(adapter, "inside")) ||
	    !(c->live = attr(adapter, "live")) ||
	    !(c->capturing = attr(adapter, "capturing")) ||
	    !(c->current_stream = attr(adapter, "current_stream")) ||
	    !(c->stack_ids = attr(stacks, "_ids")) ||
	    !(c->stack_skip = attr(stacks, "_skip")) ||
	    !(backend = attr(adapter, "backend")))
		return -1;
	c->device_attr = attr(backend, "device_attr");
	Py_DECREF(backend);
	max = c->device_attr ? attr(stacks, "_max") : NULL;
	if (max == NULL)
		return -1;
	frames = PyLong_AsLong(max);
	Py_DECREF(max);
	if (frames == -1 && PyErr_Occurred())
		return -1;
	if (frames < 0 || frames > MAX_FRAMES) {
		PyErr_SetString(PyExc_ValueError, "stacks._max");
		return -1;
	}
	c->max_frames = (int)frames;
	per_device = attr(adapter, "per_device");
	if (per_device == NULL)
		return -1;
	c->per_device = PyObject_IsTrue(per_device);
	Py_DECREF(per_device);
	if (c->per_device < 0)
		return -1;
	if (!PyDict_Check(c->specs) || !PyDict_Check(c->pending) ||
	    !PyDict_Check(c->inside) ||
	    !PySet_Check(c->live) || !PyDict_Check(c->capturing) || !PyUnicode_Check(c->device_attr) ||
	    !PyDict_Check(c->stack_ids) || !PyDict_Check(c->stack_skip)) {
		PyErr_SetString(PyExc_TypeError, "adapter or stacks");
		return -1;
	}
	c->launch = (launch_fn)pointer(pointers, 0);
	c->alloc = (alloc_fn)pointer(pointers, 1);
	c->free = (free_fn)pointer(pointers, 2);
	c->launch_args = (launch_args_fn)(PyTuple_GET_SIZE(pointers) >= 4 ?
					  pointer(pointers, 3) : NULL);
	c->free_at = (free_at_fn)(PyTuple_GET_SIZE(pointers) >= 5 ?
				  pointer(pointers, 4) : NULL);
	if (PyErr_Occurred())
		return -1;
	if (!c->launch || !c->alloc || !c->free) {
		PyErr_SetString(PyExc_ValueError, "a null function pointer");
		return -1;
	}
	return 0;
}

static PyMethodDef core_methods[] = {
	{ "__torch_dispatch__", (PyCFunction)(void (*)(void))core_dispatch,
	  METH_FASTCALL,
	  "__torch_dispatch__(func, types, args=(), kwargs=None)" },
	{ "on_memory_allocation", core_on_memory_allocation, METH_O,
	  "The allocation callback: keeps ptr pending." },
	{ "on_memory_deallocation", core_on_memory_deallocation, METH_O, "The deallocation callback: npusan_free() of a known ptr." },
	{ NULL, NULL, 0, NULL },
};

static PyTypeObject core_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "npusan._speedups.Core",
	.tp_basicsize = sizeof(Core),
	/* A base: the adapter's dispatch mode is a Python class deriving from
	 * Core and from TorchDispatchMode (DESIGN 6). */
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC |
		    Py_TPFLAGS_BASETYPE,
	.tp_doc = "Core(adapter, stacks, tensor_type, pointers): the "
		  "adapter's per-operator path, the base of its dispatch mode",
	.tp_traverse = core_traverse,
	.tp_clear = core_clear,
	.tp_dealloc = core_dealloc,
	.tp_methods = core_methods,
	.tp_init = core_init,
	.tp_new = PyType_GenericNew,
};

/* strided_ranges(ptr, elem, sizes, strides, out): _classify's, in C. */
static PyObject *py_strided_ranges(PyObject *self, PyObject *args)
{
	unsigned long long ptr, elem;
	PyObject *sizes, *strides, *out, *item;
	struct ranges r;
	int err = 0;

	(void)self;
	if (!PyArg_ParseTuple(args, "KKO!O!O!", &ptr, &elem, &PyTuple_Type,
			      &sizes, &PyTuple_Type, &strides, &PyList_Type,
			      &out))
		return NULL;
	ranges_init(&r);
	if (add_strided(&r, ptr, elem, sizes, strides) < 0)
		err = -1;
	for (size_t i = 0; err == 0 && i < r.n; i++) {
		item = PyLong_FromUnsignedLongLong(r.v[i].ptr);
		err = item ? PyList_Append(out, item) : -1;
		Py_XDECREF(item);
		item = err ? NULL : PyLong_FromUnsignedLongLong(r.v[i].len);
		err = item ? PyList_Append(out, item) : -1;
		Py_XDECREF(item);
	}
	ranges_fini(&r);
	if (err < 0)
		return NULL;
	Py_RETURN_NONE;
}

/* ---- threads already running ------------------------------------- */

/* The profile function watch_threads() sets on a thread: removes itself at
 * the thread's first event and calls hook() there. Never fails: a profile
 * function's error would be raised in the user's code. */
static int threads_profile_cb(PyObject *hook, PyFrameObject *frame, int what,
			      PyObject *arg)
{
	PyObject *type, *value, *tb, *r;

	(void)frame;
	(void)what;
	(void)arg;
	Py_INCREF(hook); /* PyEval_SetProfile() drops the thread's reference */
	PyErr_Fetch(&type, &value, &tb);
	PyEval_SetProfile(NULL, NULL);
	r = PyObject_CallNoArgs(hook);
	if (r == NULL)
		PyErr_WriteUnraisable(hook);
	Py_XDECREF(r);
	PyErr_Restore(type, value, tb);
	Py_DECREF(hook);
	return 0;
}

/* watch_threads(hook): hook() runs once in each other thread of this
 * interpreter, at its next Python event. A thread with a profile function
 * of its own (a profiler) keeps it and is missed. Returns (hooked, missed).
 * Thread states are walked holding the GIL, which every thread holds to
 * end its own; a thread state created without the GIL (PyGILState_Ensure)
 * can be missed. */
static PyObject *py_watch_threads(PyObject *self, PyObject *hook)
{
	PyThreadState *me = PyThreadState_Get(), *t;
	PyInterpreterState *interp = PyThreadState_GetInterpreter(me);
	long hooked = 0, missed = 0;

	(void)self;
	if (!PyCallable_Check(hook)) {
		PyErr_SetString(PyExc_TypeError, "watch_threads(hook): callable");
		return NULL;
	}
	for (t = PyInterpreterState_ThreadHead(interp); t != NULL;
	     t = PyThreadState_Next(t)) {
		if (t == me)
			continue;
		if (t->c_profilefunc != NULL) {
			missed++;
			continue;
		}
#if PY_VERSION_HEX < 0x030C0000
		if (_PyEval_SetProfile(t, threads_profile_cb, hook) < 0)
			return NULL;
#endif
		hooked++;
	}
#if PY_VERSION_HEX >= 0x030C0000
	/* From 3.12 a thread sets another's profile function only through
	 * PyEval_SetProfileAllThreads(), which would replace the profilers
	 * counted above: then none is hooked. This thread gets its own back. */
	if (missed != 0) {
		missed += hooked;
		hooked = 0;
	} else if (hooked != 0) {
		Py_tracefunc mine = me->c_profilefunc;
		PyObject *obj = Py_XNewRef(me->c_profileobj);

		PyEval_SetProfileAllThreads(threads_profile_cb, hook);
		PyEval_SetProfile(mine, obj);
		Py_XDECREF(obj);
	}
#endif
	return Py_BuildValue("(ll)", hooked, missed);
}

static PyMethodDef module_methods[] = {
	{ "watch_threads", py_watch_threads, METH_O,
	  "watch_threads(hook): hook() once in each other thread; "
	  "(hooked, missed)" },
	{ "strided_ranges", py_strided_ranges, METH_VARARGS,
	  "strided_ranges(ptr, elem, sizes, strides, out): as "
	  "npusan.torch._classify.strided_ranges" },
	{ NULL, NULL, 0, NULL },
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "npusan._speedups",
	.m_doc = "npusan.torch's per-operator path in C",
	.m_size = -1,
	.m_methods = module_methods,
};

static int intern(PyObject **s, const char *name)
{
	*s = PyUnicode_InternFromString(name);
	return *s ? 0 : -1;
}

PyMODINIT_FUNC PyInit__speedups(void);

PyMODINIT_FUNC PyInit__speedups(void)
{
	PyObject *m;

	if (intern(&s_data_ptr, "data_ptr") < 0 ||
	    intern(&s_is_contiguous, "is_contiguous") < 0 ||
	    intern(&s_numel, "numel") < 0 ||
	    intern(&s_element_size, "element_size") < 0 ||
	    intern(&s_get_device, "get_device") < 0 ||
	    intern(&s_size, "size") < 0 || intern(&s_stride, "stride") < 0 ||
	    intern(&s_storage_offset, "storage_offset") < 0 ||
	    intern(&s_on, "on") < 0 || intern(&s_fail, "fail") < 0 ||
	    intern(&s_spec, "spec") < 0 || intern(&s_claim, "claim") < 0 ||
	    intern(&s_record_stream, "record_stream") < 0 ||
	    intern(&s_classify, "_classify") < 0 ||
	    intern(&s_name, "_name") < 0)
		return NULL;
	if (PyType_Ready(&core_type) < 0)
		return NULL;
	m = PyModule_Create(&module);
	if (m == NULL)
		return NULL;
	if (PyModule_AddObjectRef(m, "Core", (PyObject *)&core_type) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
