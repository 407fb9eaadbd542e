/*
 * _speedups_dispatch.c - the dispatch mode's __torch_dispatch__ and the
 * allocation callbacks, as DispatchMode.__torch_dispatch__,
 * Adapter.on_memory_allocation and Adapter.on_memory_deallocation do in
 * _adapter.py.
 *
 * Each operator overload is read once into a plan: Adapter.spec()'s entry
 * in C, so that an operator costs no conversion of its classification.
 * Plans live in adapter.plans, keyed by id(func) (an OpOverload hashes in
 * Python), each a capsule that owns its plan and holds func, whose id is
 * therefore its own for as long as the key is there.
 *
 * One operator's state (struct call) lives on the C stack of its call
 * (DESIGN 3); the plan's capsule is held for the call, adapter.plans
 * being a dictionary that Python may change while the operator runs.
 */
#include "_speedups.h"

#include <string.h>

#define PLAN_CAPSULE "npusan._speedups.plan"

/* struct plan, arg_plan, ret_plan: in _speedups_hook.h, which the
 * dispatcher hook shares. */

/* One operator going through the mode. */
struct call {
	Core *c;
	struct plan *plan;
	PyObject *func, *args, *kwargs; /* args: owned; kwargs NULL for none */
	struct ranges reads, writes;
	int64_t device, stack;
	PyObject *tid; /* owned while adapter.inside holds this thread */
};

/* ---- plans ---------------------------------------------------------- */

static void plan_free(PyObject *capsule)
{
	struct plan *p = PyCapsule_GetPointer(capsule, PLAN_CAPSULE);

	if (p == NULL)
		return;
	Py_XDECREF(p->entry);
	Py_XDECREF(p->func);
	Py_XDECREF(p->run);
	PyMem_Free(p);
}

/* Item `i` of tuple `t` as a C long, checked; -1 with an exception. */
static int plan_long(PyObject *t, Py_ssize_t i, long *out)
{
	if (!PyTuple_Check(t) || i >= PyTuple_GET_SIZE(t)) {
		PyErr_SetString(PyExc_TypeError, "a malformed operator spec");
		return -1;
	}
	*out = PyLong_AsLong(PyTuple_GET_ITEM(t, i));
	return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The name id at `i` of `ids` (a tuple of ints; else none) into *out, 0
 * for none; -1 with an exception set. */
static int plan_name_at(PyObject *ids, Py_ssize_t i, uint32_t *out)
{
	unsigned long v = 0;

	if (ids != NULL && PyTuple_Check(ids) && i < PyTuple_GET_SIZE(ids))
		v = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(ids, i));
	*out = (uint32_t)v;
	return v == (unsigned long)-1 && PyErr_Occurred() ? -1 : 0;
}

/* OpSpec.args into p->args; 0, or -1 with an exception. */
static int plan_read_args(struct plan *p, PyObject *argspecs, PyObject *ids)
{
	for (Py_ssize_t i = 0; i < p->nargs; i++) {
		PyObject *as = PyTuple_GET_ITEM(argspecs, i);
		struct arg_plan *a = &p->args[i];
		long pos, kind, nest;

		if (plan_long(as, 0, &pos) < 0 || plan_long(as, 2, &kind) < 0 ||
		    plan_long(as, 3, &nest) < 0 ||
		    plan_name_at(ids, i, &a->name_id) < 0)
			return -1;
		a->pos = pos;
		a->name = PyTuple_GET_ITEM(as, 1);
		a->write = kind == WRITE;
		a->nest = (int)nest;
	}
	return 0;
}

/* OpSpec.returns into p->rets; 0, or -1 with an exception. */
static int plan_read_returns(struct plan *p, PyObject *returns, PyObject *ids)
{
	for (Py_ssize_t i = 0; i < p->nrets; i++) {
		PyObject *rs = PyTuple_GET_ITEM(returns, i);
		struct ret_plan *r = &p->rets[i];
		long pos, nest;

		if (plan_long(rs, 0, &pos) < 0 || plan_long(rs, 1, &nest) < 0 ||
		    plan_name_at(ids, i, &r->name_id) < 0)
			return -1;
		r->pos = pos;
		r->nest = (int)nest;
	}
	return 0;
}

/* The flags of OpSpec `spec` and its op id into `p`; -1 with an
 * exception. */
static int plan_read_flags(struct plan *p, PyObject *spec, PyObject *op)
{
	unsigned long id = PyLong_AsUnsignedLong(op);

	if (id == (unsigned long)-1 && PyErr_Occurred())
		return -1;
	p->op = (uint32_t)id;
	p->single_return = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 3));
	p->record_stream = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 4));
	return p->single_return < 0 || p->record_stream < 0 ? -1 : 0;
}

/* A plan of Adapter.spec()'s `entry`, (OpSpec, op id[, arg name ids, return
 * name ids[, runner]]), as a new capsule; NULL with an exception. */
static PyObject *plan_make(Core *c, PyObject *func, PyObject *entry)
{
	PyObject *spec, *argspecs, *returns, *arg_ids = NULL, *ret_ids = NULL;
	struct plan *p;
	PyObject *capsule;
	Py_ssize_t nargs, nrets;

	if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) < 2 ||
	    !PyTuple_Check(spec = PyTuple_GET_ITEM(entry, 0)) ||
	    PyTuple_GET_SIZE(spec) < 5 ||
	    !PyTuple_Check(argspecs = PyTuple_GET_ITEM(spec, 1)) ||
	    !PyTuple_Check(returns = PyTuple_GET_ITEM(spec, 2))) {
		PyErr_SetString(PyExc_TypeError, "a malformed operator spec");
		return NULL;
	}
	/* Adapter.spec()'s names, used where the library takes them. */
	if (c->launch_args != NULL && PyTuple_GET_SIZE(entry) >= 4) {
		arg_ids = PyTuple_GET_ITEM(entry, 2);
		ret_ids = PyTuple_GET_ITEM(entry, 3);
	}
	nargs = PyTuple_GET_SIZE(argspecs);
	nrets = PyTuple_GET_SIZE(returns);
	p = PyMem_Calloc(1, sizeof(*p) + (size_t)nargs * sizeof(*p->args) +
				    (size_t)nrets * sizeof(*p->rets));
	if (p == NULL)
		return PyErr_NoMemory();
	p->args = (struct arg_plan *)(p + 1);
	p->rets = (struct ret_plan *)(p->args + nargs);
	p->nargs = nargs;
	p->nrets = nrets;
	p->entry = Py_NewRef(entry);
	p->func = Py_NewRef(func);
	p->run = Py_NewRef(PyTuple_GET_SIZE(entry) >= 5 ?
				   PyTuple_GET_ITEM(entry, 4) : func);
	capsule = PyCapsule_New(p, PLAN_CAPSULE, plan_free);
	if (capsule == NULL) {
		Py_DECREF(p->entry);
		Py_DECREF(p->func);
		Py_DECREF(p->run);
		PyMem_Free(p);
		return NULL;
	}
	if (plan_read_flags(p, spec, PyTuple_GET_ITEM(entry, 1)) < 0 ||
	    plan_read_args(p, argspecs, arg_ids) < 0 ||
	    plan_read_returns(p, returns, ret_ids) < 0)
		Py_CLEAR(capsule);
	return capsule;
}

/* func's entry: adapter.specs' or, the first time, Adapter.spec()'s. */
static PyObject *plan_entry(Core *c, PyObject *func)
{
	PyObject *entry = PyDict_GetItemWithError(c->specs, func);

	if (entry != NULL)
		return Py_NewRef(entry);
	if (PyErr_Occurred())
		return NULL;
	return PyObject_CallMethodOneArg(c->adapter, s_spec, func);
}

/* func's plan into *out, its capsule returned (a new reference) for the
 * caller to hold; NULL with an exception. */
PyObject *dispatch_plan(Core *c, PyObject *func, struct plan **out)
{
	PyObject *key = PyLong_FromVoidPtr(func), *capsule, *entry;

	if (key == NULL)
		return NULL;
	capsule = PyDict_GetItemWithError(c->plans, key);
	if (capsule != NULL) {
		Py_INCREF(capsule);
	} else if (!PyErr_Occurred()) {
		entry = plan_entry(c, func);
		capsule = entry ? plan_make(c, func, entry) : NULL;
		Py_XDECREF(entry);
		if (capsule != NULL && PyDict_SetItem(c->plans, key, capsule) < 0)
			Py_CLEAR(capsule);
	}
	Py_DECREF(key);
	if (capsule != NULL) {
		*out = PyCapsule_GetPointer(capsule, PLAN_CAPSULE);
		if (*out == NULL)
			Py_CLEAR(capsule);
	}
	return capsule;
}

/* What runs func while the adapter is off: its plan's runner where it has
 * a plan, else func (borrowed; NULL with an exception). Nothing is
 * classified while off. */
static PyObject *plan_runner_if_known(Core *c, PyObject *func)
{
	PyObject *key = PyLong_FromVoidPtr(func), *capsule;
	struct plan *p;

	if (key == NULL)
		return NULL;
	capsule = PyDict_GetItemWithError(c->plans, key);
	Py_DECREF(key);
	if (capsule == NULL)
		return PyErr_Occurred() ? NULL : func;
	p = PyCapsule_GetPointer(capsule, PLAN_CAPSULE);
	return p != NULL ? p->run : NULL;
}

/* ---- one operator ----------------------------------------------------- */

/* The argument `a` names, borrowed; NULL for none, or with an exception. */
static PyObject *call_arg(struct call *k, const struct arg_plan *a)
{
	if (a->pos < PyTuple_GET_SIZE(k->args))
		return PyTuple_GET_ITEM(k->args, a->pos);
	if (k->kwargs == NULL)
		return NULL;
	return PyDict_GetItemWithError(k->kwargs, a->name);
}

/* The ranges the operator's arguments read and write. */
static int call_inputs(struct call *k)
{
	for (Py_ssize_t i = 0; i < k->plan->nargs; i++) {
		const struct arg_plan *a = &k->plan->args[i];
		struct ranges *r = a->write ? &k->writes : &k->reads;
		PyObject *v = call_arg(k, a);

		if (v == NULL && PyErr_Occurred())
			return -1;
		if (v == NULL || v == Py_None)
			continue;
		r->name = a->name_id;
		if (ranges_collect(k->c, v, a->nest, r, &k->device) < 0)
			return -1;
	}
	return 0;
}

/* The operator is about to run: its stack, and its thread marked inside
 * it (DESIGN 4). */
static int call_enter(struct call *k)
{
	k->stack = stack_capture(k->c);
	if (k->stack < 0)
		return -1;
	k->tid = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
	if (k->tid == NULL)
		return -1;
	return PyDict_SetItem(k->c->inside, k->tid, Py_None);
}

/* Ends the operator of thread `tid` and pushes the synchronizations it
 * held, as Adapter.release() (DESIGN 4); a pending exception is kept. */
void dispatch_release(Core *c, PyObject *tid)
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

static void call_release(struct call *k)
{
	if (k->tid == NULL)
		return;
	dispatch_release(k->c, k->tid);
	Py_CLEAR(k->tid);
}

/* The pending allocation that starts at `start`, if any, goes to the
 * agent with `extent` bytes and the operator's stack: the fast claim in
 * _adapter.py. One in a graph's pool is left to adapter.claim() (1 is
 * returned for it where `graph_too` is 0), else reported here through
 * adapter.alloc(). 0, or -1 with an exception. */
int dispatch_claim(Core *c, uint64_t start, uint64_t extent, int64_t stack,
		   int graph_too)
{
	PyObject *key = PyLong_FromUnsignedLongLong(start), *stream, *r;
	uint64_t s;
	int ret = -1, in_capture = 0;

	if (key == NULL)
		return -1;
	stream = PyDict_GetItemWithError(c->pending, key);
	if (stream == NULL) {
		ret = PyErr_Occurred() ? -1 : 0;
		Py_DECREF(key);
		return ret;
	}
	Py_INCREF(stream); /* adapter.alloc() may change pending */
	s = PyLong_AsUnsignedLongLong(stream);
	if (s == (uint64_t)-1 && PyErr_Occurred())
		goto out;
	if (PyDict_GET_SIZE(c->capturing) != 0)
		in_capture = PyDict_Contains(c->capturing, stream);
	if (in_capture != 0) {
		if (in_capture < 0 || !graph_too) {
			ret = in_capture < 0 ? -1 : 1;
			goto out;
		}
		r = PyObject_CallMethod(c->adapter, "alloc", "KKOL", start,
					extent, stream, (long long)stack);
		ret = r != NULL && PyDict_DelItem(c->pending, key) == 0 ? 0 : -1;
		Py_XDECREF(r);
		goto out;
	}
	if (PyDict_DelItem(c->pending, key) < 0)
		goto out;
	c->alloc(start, extent, s, (uint32_t)stack);
	ret = PySet_Add(c->live, key);
out:
	Py_DECREF(stream);
	Py_DECREF(key);
	return ret;
}

/* The pending allocation at `ptr`, where fresh output t starts, if any,
 * goes to the agent with t's extent (`bytes` when t is contiguous). */
static int call_claim_fresh(struct call *k, PyObject *t, uint64_t ptr,
			    uint64_t bytes)
{
	uint64_t extent = bytes;
	PyObject *key;
	int known;

	if (extent == 0) {
		key = PyLong_FromUnsignedLongLong(ptr);
		if (key == NULL)
			return -1;
		known = PyDict_Contains(k->c->pending, key);
		Py_DECREF(key);
		if (known <= 0)
			return known;
		if (ranges_extent(t, &extent) < 0)
			return -1;
	}
	return dispatch_claim(k->c, ptr, extent, k->stack, 0) < 0 ? -1 : 0;
}

/* Return `r` of `result`, borrowed; NULL with an exception. */
static PyObject *call_return(struct call *k, PyObject *result,
			     const struct ret_plan *r)
{
	if (k->plan->single_return)
		return result;
	if (!PyTuple_Check(result) || r->pos >= PyTuple_GET_SIZE(result)) {
		PyErr_SetString(PyExc_TypeError, "returns");
		return NULL;
	}
	return PyTuple_GET_ITEM(result, r->pos);
}

/* A fresh output tensor `v` as a write, claiming its pending allocation. */
static int call_fresh_tensor(struct call *k, PyObject *v)
{
	uint64_t p, bytes;
	int ok = ranges_is_device(k->c, v);

	if (ok <= 0)
		return ok;
	if (ranges_add_tensor(k->c, &k->writes, v, &p, &bytes) < 0 ||
	    ranges_note_device(k->c, v, &k->device) < 0)
		return -1;
	return p != 0 ? call_claim_fresh(k, v, p, bytes) : 0;
}

/* The fresh outputs of `result` (OpSpec.returns) as writes. */
static int call_outputs(struct call *k, PyObject *result)
{
	for (Py_ssize_t i = 0; i < k->plan->nrets; i++) {
		const struct ret_plan *r = &k->plan->rets[i];
		PyObject *v = call_return(k, result, r);

		if (v == NULL)
			return -1;
		k->writes.name = r->name_id;
		if (r->nest == 0) {
			if (call_fresh_tensor(k, v) < 0)
				return -1;
		} else if (v != Py_None &&
			   ranges_collect(k->c, v, r->nest, &k->writes,
					  &k->device) < 0) {
			return -1;
		}
	}
	return 0;
}

/* Pending allocations a fresh output did not claim: adapter.claim(). */
static int call_claim_rest(struct call *k, PyObject *result)
{
	PyObject *sid, *r;

	if (PyDict_GET_SIZE(k->c->pending) == 0)
		return 0;
	sid = PyLong_FromLongLong(k->stack);
	r = sid ? PyObject_CallMethodObjArgs(k->c->adapter, s_claim, result,
					     sid, NULL)
		: NULL;
	Py_XDECREF(sid);
	if (r == NULL)
		return -1;
	Py_DECREF(r);
	return 0;
}

/* The launch of an operator that touched memory, on the current stream
 * of `device` (-2: none known); 0, or -1 with an exception. */
int dispatch_launch(Core *c, uint32_t op, const struct ranges *rd,
		    const struct ranges *wr, int64_t device, int64_t stack)
{
	uint64_t stream;

	if (rd->n == 0 && wr->n == 0)
		return 0;
	if (core_stream(c, device, &stream) < 0)
		return -1;
	if (c->launch_args != NULL) /* names every range */
		c->launch_args(stream, op, rd->v, rd->names, rd->n, wr->v,
			       wr->names, wr->n, (uint32_t)stack);
	else
		c->launch(stream, op, rd->v, rd->n, wr->v, wr->n,
			  (uint32_t)stack);
	return 0;
}

static int call_launch(struct call *k)
{
	return dispatch_launch(k->c, k->plan->op, &k->reads, &k->writes,
			       k->device, k->stack);
}

/* aten::record_stream: Adapter.record_stream() runs it. */
static PyObject *call_record_stream(struct call *k)
{
	PyObject *kw = k->kwargs ? Py_NewRef(k->kwargs) : PyDict_New(), *r;

	if (kw == NULL)
		return NULL;
	r = PyObject_CallMethodObjArgs(k->c->adapter, s_record_stream, k->func,
				       k->args, kw, NULL);
	Py_DECREF(kw);
	return r;
}

/* The operator, run once whatever fails in here (DESIGN 2). */
static PyObject *call_run(struct call *k)
{
	PyObject *result;

	if (k->plan->record_stream)
		return call_record_stream(k);
	if (call_inputs(k) < 0 || call_enter(k) < 0) {
		core_fail(k->c);
		call_release(k);
		return PyObject_Call(k->func, k->args, k->kwargs);
	}
	result = PyObject_Call(k->plan->run, k->args, k->kwargs);
	if (result != NULL &&
	    (call_outputs(k, result) < 0 || call_claim_rest(k, result) < 0 ||
	     call_launch(k) < 0))
		core_fail(k->c);
	call_release(k);
	return result;
}

/* (func, types, args=(), kwargs=None) into the call; -1 with an
 * exception. */
static int call_parse(struct call *k, PyObject *const *a, Py_ssize_t na)
{
	PyObject *args;

	if (na < 2 || na > 4) {
		PyErr_SetString(PyExc_TypeError,
				"__torch_dispatch__(func, types, args, kwargs)");
		return -1;
	}
	k->func = a[0];
	args = na > 2 ? a[2] : NULL;
	/* No keywords as NULL: PyTorch passes an empty dict, which the
	 * operator's call would otherwise go through. */
	k->kwargs = na > 3 && a[3] != Py_None &&
				    (!PyDict_Check(a[3]) || PyDict_GET_SIZE(a[3]) != 0)
			    ? a[3]
			    : NULL;
	if (args != NULL && PyTuple_Check(args))
		k->args = Py_NewRef(args);
	else
		k->args = args ? PySequence_Tuple(args) : PyTuple_New(0);
	return k->args ? 0 : -1;
}

/* __torch_dispatch__(func, types, args=(), kwargs=None) */
PyObject *dispatch_torch_dispatch(PyObject *self, PyObject *const *a,
				  Py_ssize_t na)
{
	struct call k = { .c = (Core *)self, .device = -2 };
	PyObject *capsule, *result;

	if (call_parse(&k, a, na) < 0)
		return NULL;
	if (!core_on(k.c)) {
		PyObject *run = plan_runner_if_known(k.c, k.func);

		if (run == NULL) {
			PyErr_Clear();
			run = k.func;
		}
		/* The plan, and its runner, may go while the operator runs. */
		Py_INCREF(run);
		result = PyObject_Call(run, k.args, k.kwargs);
		Py_DECREF(run);
		Py_DECREF(k.args);
		return result;
	}
	capsule = dispatch_plan(k.c, k.func, &k.plan);
	if (capsule == NULL) {
		core_fail(k.c);
		result = PyObject_Call(k.func, k.args, k.kwargs);
	} else {
		ranges_init(&k.reads);
		ranges_init(&k.writes);
		result = call_run(&k);
		ranges_fini(&k.reads);
		ranges_fini(&k.writes);
		Py_DECREF(capsule);
	}
	Py_DECREF(k.args);
	return result;
}

/* ---- allocation callbacks ------------------------------------------- */

PyObject *dispatch_on_memory_allocation(PyObject *self, PyObject *ptr)
{
	Core *c = (Core *)self;
	PyObject *s = NULL;
	uint64_t stream;

	if (!core_on(c))
		Py_RETURN_NONE;
	if (core_stream(c, -1, &stream) == 0)
		s = PyLong_FromUnsignedLongLong(stream);
	if (s == NULL || PyDict_SetItem(c->pending, ptr, s) < 0)
		core_fail(c);
	Py_XDECREF(s);
	Py_RETURN_NONE;
}

/* npusan_free_at() of `ptr` with the stack of the Python code that freed
 * it (where a missing record_stream's fix goes), or npusan_free() with an
 * older library. 0; -1 with an exception. */
static int dispatch_free(Core *c, PyObject *ptr)
{
	uint64_t p = PyLong_AsUnsignedLongLong(ptr);
	int64_t stack;

	if (PyErr_Occurred())
		return -1;
	if (c->free_at == NULL) {
		c->free(p);
		return 0;
	}
	stack = stack_capture(c);
	if (stack < 0)
		return -1;
	c->free_at(p, (uint32_t)stack);
	return 0;
}

PyObject *dispatch_on_memory_deallocation(PyObject *self, PyObject *ptr)
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
			r = dispatch_free(c, ptr);
	}
	if (r < 0)
		core_fail(c);
	Py_RETURN_NONE;
}
