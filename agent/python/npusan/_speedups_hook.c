/*
 * _speedups_hook.c - what the dispatcher hook (_torchhook.cpp) calls: the
 * C path's own plans, ranges, stacks, claims and launches, behind the
 * plain C table of _speedups_hook.h, which npusan._speedups hands the hook
 * as a capsule (hook_api). The hook reads the tensors of each operator
 * from PyTorch's dispatcher without the GIL, and takes it once per
 * operator that touched memory to call finish() here.
 */
#include "_speedups.h"

/* t's ranges, contiguous or strided; its bytes into *bytes when it is
 * contiguous, else 0. 0, or -ENOMEM. */
static int hook_ranges_add(struct ranges *r, const struct hook_tensor *t,
			   uint64_t *bytes)
{
	uint64_t n = 1;

	*bytes = 0;
	if (t->data == 0)
		return 0;
	if (!t->contiguous)
		return ranges_add_dims(r, t->data, t->elem, t->ndim, t->sizes,
				       t->strides);
	for (int64_t i = 0; i < t->ndim; i++)
		n *= (uint64_t)t->sizes[i];
	*bytes = n * t->elem;
	return *bytes ? ranges__push(r, t->data, *bytes) : 0;
}

/* As _adapter._extent(): from the storage's start to t's last byte. */
static uint64_t hook_extent(const struct hook_tensor *t)
{
	return ((uint64_t)t->offset +
		ranges_span_elems(t->ndim, t->sizes, t->strides)) *
	       t->elem;
}

/* The plan of operator `name`.`overload`, found as Adapter.overload()
 * names it; NULL when off or failing (npusan then off). */
static const struct plan *hook_plan(PyObject *core, const char *name,
				    const char *overload, PyObject **capsule)
{
	Core *c = (Core *)core;
	struct plan *p = NULL;
	PyObject *func;

	*capsule = NULL;
	if (!core_on(c))
		return NULL;
	func = PyObject_CallMethod(c->adapter, "overload", "ss", name,
				   overload);
	if (func != NULL)
		*capsule = dispatch_plan(c, func, &p);
	Py_XDECREF(func);
	if (*capsule == NULL) {
		core_fail(c);
		return NULL;
	}
	return p;
}

/* The synchronizations this thread held while its operator ran. */
static void hook_release(PyObject *core)
{
	PyObject *tid = PyLong_FromUnsignedLong(PyThread_get_thread_ident());

	if (tid == NULL) {
		core_fail((Core *)core);
		return;
	}
	dispatch_release((Core *)core, tid);
	Py_DECREF(tid);
}

/* The claims of k, then its launch; -1 with an exception. */
static int hook_report(Core *c, const struct hook_call *k)
{
	int64_t stack = 0;
	int claim = k->claims->n != 0 && PyDict_GET_SIZE(c->pending) != 0;

	if (k->reads->n == 0 && k->writes->n == 0 && !claim)
		return 0;
	stack = stack_capture(c);
	if (stack < 0)
		return -1;
	for (size_t i = 0; claim && i < k->claims->n; i++) {
		const struct npusan_range *a = &k->claims->v[i];

		if (dispatch_claim(c, a->ptr, a->len, stack, 1) < 0)
			return -1;
	}
	return dispatch_launch(c, k->plan->op, k->reads, k->writes,
			       c->per_device ? k->device : -2, stack);
}

static void hook_finish(PyObject *core, const struct hook_call *k)
{
	Core *c = (Core *)core;

	if (core_on(c) && hook_report(c, k) < 0)
		core_fail(c);
	if (k->syncs_held)
		hook_release(core);
}

/* aten::record_stream through Adapter.record_stream_ids(). */
static void hook_record_stream(PyObject *core, uint64_t start,
			       int64_t stream_id, int64_t device_index,
			       int64_t device_type)
{
	Core *c = (Core *)core;
	PyObject *r;

	if (!core_on(c))
		return;
	r = PyObject_CallMethod(c->adapter, "record_stream_ids", "KLLL", start,
				(long long)stream_id, (long long)device_index,
				(long long)device_type);
	if (r == NULL)
		core_fail(c);
	Py_XDECREF(r);
}

static void hook_fail(PyObject *core, const char *why)
{
	PyErr_SetString(PyExc_RuntimeError, why);
	core_fail((Core *)core);
}

static int hook_on(PyObject *core)
{
	return core_on((Core *)core);
}

static int hook_per_device(PyObject *core)
{
	return ((Core *)core)->per_device;
}

static const struct hook_api hook_api = {
	.ranges_add = hook_ranges_add,
	.ranges_push = ranges__push,
	.extent = hook_extent,
	.ranges_init = ranges_init,
	.ranges_fini = ranges_fini,
	.plan = hook_plan,
	.finish = hook_finish,
	.record_stream = hook_record_stream,
	.release = hook_release,
	.fail = hook_fail,
	.on = hook_on,
	.per_device = hook_per_device,
};

/* The table, for npusan._speedups.hook_api. */
PyObject *hook_api_capsule(void)
{
	return PyCapsule_New((void *)&hook_api, HOOK_API_CAPSULE, NULL);
}
