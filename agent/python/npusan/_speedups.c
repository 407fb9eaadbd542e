/*
 * _speedups.c - npusan._speedups: the adapter's per-operator path in C;
 * this file holds the module and its Core type.
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
 * 7. Each operator overload is read once into a plan, kept by id(func)
 *    (_speedups_dispatch.c), and runs through what Adapter.spec() names
 *    to run it: OpOverload's own C++ callable, without the Python frame
 *    of OpOverload.__call__, which only forwards to it.
 * 8. On PyTorch 1.13, whose mode stack runs in Python, ModeStack runs it
 *    in C while npusan's mode is on top (_speedups_mode.c).
 *
 * 9. Where the dispatcher hook (_torchhook.cpp, the one C++ file) is
 *    loaded, it takes the dispatch mode's place: it reads each operator's
 *    tensors inside PyTorch's C++ dispatcher and calls the functions here
 *    through the table of _speedups_hook.h (_speedups_hook.c).
 *
 * FILES: _speedups.c the module and Core; _speedups_dispatch.c the
 * dispatch mode and allocation callbacks; _speedups_hook.c the hook's
 * table; _speedups_ranges.c the bytes a
 * tensor touches; _speedups_stack.c stacks; _speedups_threads.c threads
 * already running; _speedups_mode.c ModeStack; _speedups.h what they
 * share.
 */
#include "_speedups.h"

/* Interned names of the tensor methods and adapter attributes used. */
PyObject *s_data_ptr, *s_is_contiguous, *s_numel, *s_element_size,
	*s_get_device, *s_size, *s_stride, *s_on, *s_fail, *s_spec, *s_claim,
	*s_record_stream, *s_classify, *s_name, *s_torch_dispatch, *s_nbytes,
	*s_stream_reader;

/* ---- the adapter's state ------------------------------------------------ */

/* Whether the adapter is on; an error counts as off. adapter.on is read
 * from the adapter's __dict__, where Python keeps it, without the
 * attribute lookup through its class; from the attribute where the
 * dictionary does not have it. */
int core_on(Core *c)
{
	PyObject *on = PyDict_GetItemWithError(c->adapter_dict, s_on);
	int r;

	if (on != NULL) {
		r = PyObject_IsTrue(on);
	} else {
		on = PyErr_Occurred() ? NULL : PyObject_GetAttr(c->adapter, s_on);
		r = on != NULL ? PyObject_IsTrue(on) : -1;
		Py_XDECREF(on);
	}
	if (r < 0) {
		PyErr_Clear();
		return 0;
	}
	return r;
}

/* Hands the pending exception to adapter.fail() (DESIGN 2). */
void core_fail(Core *c)
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

/* The current stream of `device` as an object, a new reference; NULL
 * with an exception. Where the backend has a stream_reader, (table,
 * default), table's entry for this thread, else default; else
 * adapter.current_stream(device). */
static PyObject *core_stream_object(Core *c, int64_t device)
{
	PyObject *d, *s;

	if (c->stream_reader != Py_None) {
		d = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
		if (d == NULL)
			return NULL;
		s = PyDict_GetItemWithError(PyTuple_GET_ITEM(c->stream_reader, 0),
					    d);
		Py_DECREF(d);
		if (s == NULL && PyErr_Occurred())
			return NULL;
		return Py_NewRef(s ? s : PyTuple_GET_ITEM(c->stream_reader, 1));
	}
	d = PyLong_FromLongLong(device);
	if (d == NULL)
		return NULL;
	s = PyObject_CallOneArg(c->current_stream, d);
	Py_DECREF(d);
	return s;
}

/* The current stream of `device` (-1: the current device); 0, or -1
 * with an exception. */
int core_stream(Core *c, int64_t device, uint64_t *out)
{
	PyObject *s = core_stream_object(c, device);
	unsigned long long v;

	if (s == NULL)
		return -1;
	v = PyLong_AsUnsignedLongLong(s);
	Py_DECREF(s);
	if (v == (unsigned long long)-1 && PyErr_Occurred())
		return -1;
	*out = v;
	return 0;
}

/* ---- the type ------------------------------------------------------- */

static int core_traverse(PyObject *self, visitproc visit, void *arg)
{
	Core *c = (Core *)self;

	Py_VISIT(c->adapter);
	Py_VISIT(c->stacks);
	Py_VISIT(c->specs);
	Py_VISIT(c->plans);
	Py_VISIT(c->pending);
	Py_VISIT(c->capturing);
	Py_VISIT(c->inside);
	Py_VISIT(c->live);
	Py_VISIT(c->current_stream);
	Py_VISIT(c->adapter_dict);
	Py_VISIT(c->stream_reader);
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
	Py_CLEAR(c->plans);
	Py_CLEAR(c->pending);
	Py_CLEAR(c->capturing);
	Py_CLEAR(c->inside);
	Py_CLEAR(c->live);
	Py_CLEAR(c->current_stream);
	Py_CLEAR(c->adapter_dict);
	Py_CLEAR(c->stream_reader);
	Py_CLEAR(c->device_attr);
	Py_CLEAR(c->tensor_type);
	Py_CLEAR(c->stack_ids);
	Py_CLEAR(c->stack_skip);
	stack_cache_free(&c->seen);
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

/* The scalars the Core keeps of adapter and stacks; -1 with an exception. */
static int core_read_settings(Core *c, PyObject *adapter, PyObject *stacks)
{
	PyObject *max = attr(stacks, "_max"), *per_device;
	long frames;

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
	c->has_nbytes = PyObject_HasAttr(c->tensor_type, s_nbytes);
	return 0;
}

/* The containers the Core shares with adapter and stacks; -1 with an
 * exception. */
static int core_read_state(Core *c, PyObject *adapter, PyObject *stacks)
{
	PyObject *backend;

	if (!(c->specs = attr(adapter, "specs")) ||
	    !(c->plans = attr(adapter, "plans")) ||
	    !(c->pending = attr(adapter, "pending")) ||
	    !(c->inside = attr(adapter, "inside")) ||
	    !(c->live = attr(adapter, "live")) ||
	    !(c->capturing = attr(adapter, "capturing")) ||
	    !(c->current_stream = attr(adapter, "current_stream")) ||
	    !(c->adapter_dict = attr(adapter, "__dict__")) ||
	    !(c->stack_ids = attr(stacks, "_ids")) ||
	    !(c->stack_skip = attr(stacks, "_skip")) ||
	    !(backend = attr(adapter, "backend")))
		return -1;
	c->device_attr = attr(backend, "device_attr");
	if (c->device_attr != NULL)
		c->stream_reader = PyObject_GetAttr(backend, s_stream_reader);
	if (c->device_attr != NULL && c->stream_reader == NULL &&
	    PyErr_ExceptionMatches(PyExc_AttributeError)) {
		PyErr_Clear();
		c->stream_reader = Py_NewRef(Py_None);
	}
	Py_DECREF(backend);
	if (c->device_attr == NULL || c->stream_reader == NULL)
		return -1;
	if (c->stream_reader != Py_None &&
	    (!PyTuple_Check(c->stream_reader) ||
	     PyTuple_GET_SIZE(c->stream_reader) != 2 ||
	     !PyDict_Check(PyTuple_GET_ITEM(c->stream_reader, 0)))) {
		PyErr_SetString(PyExc_TypeError, "backend.stream_reader: "
				"(table, default) or None");
		return -1;
	}
	if (!PyDict_Check(c->specs) || !PyDict_Check(c->plans) ||
	    !PyDict_Check(c->pending) || !PyDict_Check(c->inside) ||
	    !PySet_Check(c->live) || !PyDict_Check(c->capturing) ||
	    !PyUnicode_Check(c->device_attr) ||
	    !PyDict_Check(c->stack_ids) || !PyDict_Check(c->stack_skip) ||
	    !PyDict_Check(c->adapter_dict)) {
		PyErr_SetString(PyExc_TypeError, "adapter or stacks");
		return -1;
	}
	return 0;
}

/* The library's entry points, (launch, alloc, free[, launch_args[,
 * free_at]]); -1 with an exception. */
static int core_read_pointers(Core *c, PyObject *pointers)
{
	Py_ssize_t n = PyTuple_GET_SIZE(pointers);

	if (n < 3 || n > 5) {
		PyErr_SetString(PyExc_ValueError, "pointers: (launch, alloc, "
				"free[, launch_args[, free_at]])");
		return -1;
	}
	c->launch = (launch_fn)pointer(pointers, 0);
	c->alloc = (alloc_fn)pointer(pointers, 1);
	c->free = (free_fn)pointer(pointers, 2);
	c->launch_args = (launch_args_fn)(n >= 4 ? pointer(pointers, 3) : NULL);
	c->free_at = (free_at_fn)(n >= 5 ? pointer(pointers, 4) : NULL);
	if (PyErr_Occurred())
		return -1;
	if (!c->launch || !c->alloc || !c->free) {
		PyErr_SetString(PyExc_ValueError, "a null function pointer");
		return -1;
	}
	return 0;
}

/* Has stacks.add_machinery() call c.forget_machinery(), as it changes
 * what is machinery; -1 with an exception. */
static int core_follow_stacks(Core *c, PyObject *stacks)
{
	PyObject *forgetters = attr(stacks, "forgetters"), *fn;
	int r;

	if (forgetters == NULL)
		return -1;
	fn = PyObject_GetAttrString((PyObject *)c, "forget_machinery");
	r = fn != NULL && PyList_Check(forgetters) ?
		    PyList_Append(forgetters, fn) : -1;
	if (r < 0 && !PyErr_Occurred())
		PyErr_SetString(PyExc_TypeError, "stacks.forgetters");
	Py_XDECREF(fn);
	Py_DECREF(forgetters);
	return r;
}

/* Core(adapter, stacks, tensor_type,
 *      (launch, alloc, free[, launch_args[, free_at]])),
 * launch_args and free_at 0 when the library predates them */
static int core_init(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = { "adapter", "stacks", "tensor_type",
				 "pointers", NULL };
	Core *c = (Core *)self;
	PyObject *adapter, *stacks, *tensor_type, *pointers;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO!O!", names, &adapter,
					 &stacks, &PyType_Type, &tensor_type,
					 &PyTuple_Type, &pointers))
		return -1;
	core_clear(self);
	c->adapter = Py_NewRef(adapter);
	c->stacks = Py_NewRef(stacks);
	c->tensor_type = Py_NewRef(tensor_type);
	if (core_read_pointers(c, pointers) < 0 ||
	    core_read_state(c, adapter, stacks) < 0 ||
	    core_read_settings(c, adapter, stacks) < 0)
		return -1;
	return core_follow_stacks(c, stacks);
}

static PyMethodDef core_methods[] = {
	{ "__torch_dispatch__", (PyCFunction)(void (*)(void))dispatch_torch_dispatch,
	  METH_FASTCALL,
	  "__torch_dispatch__(func, types, args=(), kwargs=None)" },
	{ "on_memory_allocation", dispatch_on_memory_allocation, METH_O,
	  "The allocation callback: keeps ptr pending." },
	{ "on_memory_deallocation", dispatch_on_memory_deallocation, METH_O,
	  "The deallocation callback: npusan_free() of a known ptr." },
	{ "forget_machinery", stack_forget_machinery, METH_NOARGS,
	  "Forgets which code is machinery: Stacks.add_machinery() calls it." },
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
	if (ranges_add_strided(&r, ptr, elem, sizes, strides) < 0)
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

static PyMethodDef module_methods[] = {
	{ "watch_threads", threads_watch, METH_O,
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
	PyObject *m, *api;

	if (intern(&s_data_ptr, "data_ptr") < 0 ||
	    intern(&s_is_contiguous, "is_contiguous") < 0 ||
	    intern(&s_numel, "numel") < 0 ||
	    intern(&s_element_size, "element_size") < 0 ||
	    intern(&s_get_device, "get_device") < 0 ||
	    intern(&s_size, "size") < 0 || intern(&s_stride, "stride") < 0 ||
	    intern(&s_on, "on") < 0 || intern(&s_fail, "fail") < 0 ||
	    intern(&s_spec, "spec") < 0 || intern(&s_claim, "claim") < 0 ||
	    intern(&s_record_stream, "record_stream") < 0 ||
	    intern(&s_classify, "_classify") < 0 ||
	    intern(&s_name, "_name") < 0 ||
	    intern(&s_torch_dispatch, "__torch_dispatch__") < 0 ||
	    intern(&s_nbytes, "nbytes") < 0 ||
	    intern(&s_stream_reader, "stream_reader") < 0)
		return NULL;
	if (PyType_Ready(&core_type) < 0 || PyType_Ready(&mode_stack_type) < 0)
		return NULL;
	m = PyModule_Create(&module);
	api = m ? hook_api_capsule() : NULL;
	if (api == NULL ||
	    PyModule_AddObjectRef(m, "hook_api", api) < 0 ||
	    PyModule_AddObjectRef(m, "Core", (PyObject *)&core_type) < 0 ||
	    PyModule_AddObjectRef(m, "ModeStack",
				  (PyObject *)&mode_stack_type) < 0) {
		Py_XDECREF(api);
		Py_XDECREF(m);
		return NULL;
	}
	Py_DECREF(api);
	return m;
}
