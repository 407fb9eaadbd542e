/*
 * _speedups_ranges.c - the bytes each tensor of an operator touches, as
 * npusan.torch._adapter's _add(), _extent(), _collect() and
 * _classify.strided_ranges() find them: (pointer, length) pairs, each
 * with the name id of its argument, in a struct ranges that lives on the
 * caller's C stack and owns the heap block it grows into (ranges_fini()
 * frees it). The block is malloc's, and ranges__push() and
 * ranges_add_dims() set no exception, so that the dispatcher hook
 * (_torchhook.cpp) collects ranges without the GIL.
 */
#include "_speedups.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void ranges_init(struct ranges *r)
{
	r->v = r->inline_v;
	r->names = r->inline_names;
	r->n = 0;
	r->cap = RANGES_INLINE;
	r->name = 0;
}

void ranges_fini(struct ranges *r)
{
	if (r->v != r->inline_v)
		free(r->v); /* and the names after the ranges */
}

/* 0; -ENOMEM. Needs no GIL: the dispatcher hook calls it without. */
int ranges__push(struct ranges *r, uint64_t ptr, uint64_t len)
{
	if (r->n == r->cap) {
		size_t cap = r->cap * 2;
		struct npusan_range *v =
			malloc(cap * (sizeof(*v) + sizeof(*r->names)));

		if (v == NULL)
			return -ENOMEM;
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

/* 0; -1 with MemoryError set. */
int ranges_push(struct ranges *r, uint64_t ptr, uint64_t len)
{
	if (ranges__push(r, ptr, len) == 0)
		return 0;
	PyErr_NoMemory();
	return -1;
}

/* t.name() as an integer; 0, or -1 with an exception. */
static int ranges_call_i64(PyObject *t, PyObject *name, int64_t *out)
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

static int ranges_call_u64(PyObject *t, PyObject *name, uint64_t *out)
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
int ranges_is_device(Core *c, PyObject *v)
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

/* The dimensions of size > 1 and stride > 0 into dims, their count in
 * *nd (MAX_DIMS + 1 for more than fit) and their span in elements in
 * *span. 1 when the tensor is empty, else 0. */
static int ranges_dims(int64_t n, const int64_t *sizes, const int64_t *strides,
		       struct dim *dims, Py_ssize_t *nd, uint64_t *span)
{
	*nd = 0;
	*span = 1;
	for (int64_t i = 0; i < n; i++) {
		int64_t size = sizes[i], stride = strides[i];

		if (size == 0)
			return 1;
		if (size > 1 && stride > 0) {
			*span += (uint64_t)(size - 1) * (uint64_t)stride;
			if (*nd < MAX_DIMS)
				dims[*nd] = (struct dim){ stride, size };
			if (*nd <= MAX_DIMS)
				(*nd)++;
		}
	}
	return 0;
}

/* Insertion sort by (stride, size), as Python sorts the pairs. */
static void ranges_sort_dims(struct dim *dims, Py_ssize_t nd)
{
	for (Py_ssize_t i = 1; i < nd; i++) {
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
}

/* The sorted element offsets of the runs of the outer dimensions
 * dims[0..nd) (at most MAX_RUNS runs in all); returns their count. */
static size_t ranges_offsets(const struct dim *dims, Py_ssize_t nd,
			     uint64_t *offsets)
{
	size_t noff = 1;

	offsets[0] = 0;
	for (Py_ssize_t k = 0; k < nd; k++) {
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
	return noff;
}

/* Pushes the ranges of a strided tensor of n dimensions, as
 * _classify.strided_ranges(); 0, or -ENOMEM. Needs no GIL. */
int ranges_add_dims(struct ranges *r, uint64_t ptr, uint64_t elem, int64_t n,
		    const int64_t *sizes, const int64_t *strides)
{
	struct dim dims[MAX_DIMS];
	uint64_t run = 1, count = 1, span, offsets[MAX_RUNS];
	Py_ssize_t nd, i;
	size_t noff;
	int err;

	if (ranges_dims(n, sizes, strides, dims, &nd, &span) != 0)
		return 0;
	/* Too many dimensions to sort here: their span. */
	if (nd > MAX_DIMS)
		return ranges__push(r, ptr, span * elem);
	ranges_sort_dims(dims, nd);
	for (i = 0; i < nd && (uint64_t)dims[i].stride == run; i++)
		run *= (uint64_t)dims[i].size;
	for (Py_ssize_t k = i; k < nd && count <= MAX_RUNS; k++)
		count *= (uint64_t)dims[k].size;
	if (count > MAX_RUNS)
		return ranges__push(r, ptr, span * elem);
	noff = ranges_offsets(dims + i, nd - i, offsets);
	for (size_t a = 0; a < noff; a++) {
		err = ranges__push(r, ptr + offsets[a] * elem, run * elem);
		if (err < 0)
			return err;
	}
	return 0;
}

/* The integers of tuple t into v[0..n); -1 with an exception. */
static int ranges_tuple_i64(PyObject *t, Py_ssize_t n, int64_t *v)
{
	for (Py_ssize_t i = 0; i < n; i++) {
		v[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(t, i));
		if (v[i] == -1 && PyErr_Occurred())
			return -1;
	}
	return 0;
}

/*
 * The sizes and the strides of a tensor, tuples of as many integers, into
 * *v: sizes in (*v)[0..n), strides in (*v)[n..2n), in inline_v (2 *
 * MAX_DIMS) where they fit, else in memory the caller frees with
 * PyMem_Free() where *v is not inline_v. n, or -1 with an exception and
 * nothing to free.
 */
static Py_ssize_t ranges_dims_of(PyObject *sizes, PyObject *strides,
				 int64_t *inline_v, int64_t **v)
{
	Py_ssize_t n;

	if (!PyTuple_Check(sizes) || !PyTuple_Check(strides) ||
	    PyTuple_GET_SIZE(strides) != PyTuple_GET_SIZE(sizes)) {
		PyErr_SetString(PyExc_ValueError, "sizes and strides");
		return -1;
	}
	n = PyTuple_GET_SIZE(sizes);
	*v = inline_v;
	if (n > MAX_DIMS && (*v = PyMem_Malloc(2 * (size_t)n * sizeof(**v))) ==
				    NULL) {
		PyErr_NoMemory();
		return -1;
	}
	if (ranges_tuple_i64(sizes, n, *v) == 0 &&
	    ranges_tuple_i64(strides, n, *v + n) == 0)
		return n;
	if (*v != inline_v)
		PyMem_Free(*v);
	return -1;
}

/* Pushes the ranges of a strided tensor of sizes and strides given as
 * tuples, as _classify.strided_ranges(); 0, or -1 with an exception. */
int ranges_add_strided(struct ranges *r, uint64_t ptr, uint64_t elem,
		       PyObject *sizes, PyObject *strides)
{
	int64_t inline_v[2 * MAX_DIMS], *v;
	Py_ssize_t n = ranges_dims_of(sizes, strides, inline_v, &v);
	int ret;

	if (n < 0)
		return -1;
	ret = ranges_add_dims(r, ptr, elem, n, v, v + n);
	if (ret < 0)
		PyErr_NoMemory();
	if (v != inline_v)
		PyMem_Free(v);
	return ret < 0 ? -1 : 0;
}

/* The bytes of contiguous tensor t: t.nbytes where tensors have it
 * (PyTorch 2), one call where numel() and element_size() are two. */
static int ranges_contiguous_bytes(Core *c, PyObject *t, uint64_t *out)
{
	uint64_t numel, elem;
	PyObject *n;

	if (c->has_nbytes) {
		n = PyObject_GetAttr(t, s_nbytes);
		if (n == NULL)
			return -1;
		*out = PyLong_AsUnsignedLongLong(n);
		Py_DECREF(n);
		return *out == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
	}
	if (ranges_call_u64(t, s_numel, &numel) < 0 ||
	    ranges_call_u64(t, s_element_size, &elem) < 0)
		return -1;
	*out = numel * elem;
	return 0;
}

/* The ranges of strided tensor t at p. */
static int ranges_add_noncontiguous(struct ranges *r, PyObject *t, uint64_t p)
{
	PyObject *sizes, *strides;
	uint64_t elem;
	int ret;

	if (ranges_call_u64(t, s_element_size, &elem) < 0)
		return -1;
	sizes = PyObject_CallMethodNoArgs(t, s_size);
	if (sizes == NULL)
		return -1;
	strides = PyObject_CallMethodNoArgs(t, s_stride);
	ret = strides ? ranges_add_strided(r, p, elem, sizes, strides) : -1;
	Py_DECREF(sizes);
	Py_XDECREF(strides);
	return ret;
}

/* The ranges of tensor t (on this device): its data pointer in *ptr and,
 * when it is contiguous, its bytes in *bytes (else 0). 0, or -1 with an
 * exception. */
int ranges_add_tensor(Core *c, struct ranges *r, PyObject *t, uint64_t *ptr,
		      uint64_t *bytes)
{
	uint64_t p;
	PyObject *contig;
	int is_contig;

	*bytes = 0;
	if (ranges_call_u64(t, s_data_ptr, &p) < 0)
		return -1;
	*ptr = p;
	if (p == 0)
		return 0;
	contig = PyObject_CallMethodNoArgs(t, s_is_contiguous);
	if (contig == NULL)
		return -1;
	is_contig = contig == Py_True;
	Py_DECREF(contig);
	if (!is_contig)
		return ranges_add_noncontiguous(r, t, p);
	if (ranges_contiguous_bytes(c, t, bytes) < 0)
		return -1;
	return *bytes ? ranges_push(r, p, *bytes) : 0;
}

/* The elements from a tensor's first to its last one's end, of sizes
 * and strides of n dimensions (0 for a tensor with none): the extent of
 * _adapter._extent(), in elements. Needs no GIL. */
uint64_t ranges_span_elems(int64_t n, const int64_t *sizes,
			   const int64_t *strides)
{
	uint64_t elems = 1;

	for (int64_t i = 0; i < n; i++) {
		if (sizes[i] == 0)
			return 0;
		elems += (uint64_t)(sizes[i] - 1) * (uint64_t)strides[i];
	}
	return elems;
}

/* As _adapter._extent(), for a tensor that starts its storage: the bytes
 * from there to its last element's end. */
int ranges_extent(PyObject *t, uint64_t *out)
{
	PyObject *sizes, *strides = NULL;
	int64_t inline_v[2 * MAX_DIMS], *v;
	Py_ssize_t n = -1;
	uint64_t elem;

	if (ranges_call_u64(t, s_element_size, &elem) < 0)
		return -1;
	sizes = PyObject_CallMethodNoArgs(t, s_size);
	if (sizes != NULL)
		strides = PyObject_CallMethodNoArgs(t, s_stride);
	if (strides != NULL)
		n = ranges_dims_of(sizes, strides, inline_v, &v);
	if (n >= 0) {
		*out = ranges_span_elems(n, v, v + n) * elem;
		if (v != inline_v)
			PyMem_Free(v);
	}
	Py_XDECREF(sizes);
	Py_XDECREF(strides);
	return n < 0 ? -1 : 0;
}

/* The device index of the first device tensor, kept in *device where
 * devices have streams of their own. */
int ranges_note_device(Core *c, PyObject *t, int64_t *device)
{
	if (!c->per_device || *device != -2)
		return 0;
	return ranges_call_i64(t, s_get_device, device);
}

/* The ranges of the device tensors in v, nest levels of lists deep, as
 * _adapter._collect(). */
int ranges_collect(Core *c, PyObject *v, int nest, struct ranges *r,
		   int64_t *device)
{
	uint64_t p, bytes;
	PyObject *seq;
	int ok;

	if (nest == 0) {
		ok = ranges_is_device(c, v);
		if (ok <= 0)
			return ok;
		if (ranges_add_tensor(c, r, v, &p, &bytes) < 0)
			return -1;
		return ranges_note_device(c, v, device);
	}
	seq = PySequence_Fast(v, "a tensor list");
	if (seq == NULL)
		return -1;
	for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
		PyObject *e = PySequence_Fast_GET_ITEM(seq, i);

		if (e != Py_None && ranges_collect(c, e, nest - 1, r, device) < 0) {
			Py_DECREF(seq);
			return -1;
		}
	}
	Py_DECREF(seq);
	return 0;
}
