/*
 * _speedups_mode.c - ModeStack: PyTorch 1.13's dispatch-mode stack run in
 * C while npusan's mode is on top of it.
 *
 * PyTorch 1.13 keeps the modes entered (`with mode:`) on a stack in its
 * C++ side, but its dispatcher calls one object only, the C++ "current
 * mode", which torch.utils._python_dispatch makes a _TorchDispatchStackMode
 * whenever the stack goes from empty to not. The C++ side disables the
 * current mode while calling its __torch_dispatch__ and restores it after.
 * _TorchDispatchStackMode's (Python, with a context manager per operator)
 * pops the top mode, makes itself the current mode again when modes remain
 * below (so that operators run inside reach them), calls the popped mode's
 * __torch_dispatch__, and pushes it back.
 *
 * A ModeStack, made the current mode by the adapter once its mode is on the
 * stack (Adapter.run_stack_in_c()), does the same in C when the popped mode
 * is npusan's own with the C __torch_dispatch__; on any other mode it puts
 * the mode back and hands the call to a _TorchDispatchStackMode of
 * PyTorch's, which then runs as it always does. It owns a reference to each
 * object it is made with. PyTorch 2 runs its mode stack in C++ and has no
 * _TorchDispatchStackMode: there the adapter makes no ModeStack.
 */
#include "_speedups.h"

typedef struct {
	PyObject_HEAD
	PyObject *mode;     /* npusan's dispatch mode, a Core */
	PyObject *fallback; /* a _TorchDispatchStackMode */
	PyObject *length;   /* torch._C._len_torch_dispatch_stack */
	PyObject *pop;      /* torch._C._pop_torch_dispatch_stack */
	PyObject *push;     /* torch._C._push_on_torch_dispatch_stack */
	PyObject *set_mode; /* torch._C._set_torch_dispatch_mode */
} ModeStack;

/* Whether `mode` is npusan's with its C __torch_dispatch__, not one that a
 * caller set on the object (1, 0, or -1 with an exception). */
static int mode_is_ours(ModeStack *m, PyObject *mode)
{
	PyObject *fn;
	int ours;

	if (mode != m->mode)
		return 0;
	fn = PyObject_GetAttr(mode, s_torch_dispatch);
	if (fn == NULL)
		return -1;
	ours = PyCFunction_Check(fn) && PyCFunction_GET_SELF(fn) == mode &&
	       PyCFunction_GET_FUNCTION(fn) ==
		       (PyCFunction)(void (*)(void))dispatch_torch_dispatch;
	Py_DECREF(fn);
	return ours;
}

/* fn(arg) for its effect; 0, or -1 with an exception. */
static int mode_call(PyObject *fn, PyObject *arg)
{
	PyObject *r = arg ? PyObject_CallOneArg(fn, arg) : PyObject_CallNoArgs(fn);

	if (r == NULL)
		return -1;
	Py_DECREF(r);
	return 0;
}

/* Puts `mode` back on the stack, keeping a pending exception. 0, or -1
 * with an exception of its own when there was none. */
static int mode_push_back(ModeStack *m, PyObject *mode)
{
	PyObject *type, *value, *tb;
	int r;

	PyErr_Fetch(&type, &value, &tb);
	r = mode_call(m->push, mode);
	if (type == NULL)
		return r;
	if (r < 0)
		PyErr_WriteUnraisable(m->push);
	PyErr_Restore(type, value, tb);
	return 0;
}

/* npusan's mode, popped: the operator runs through it, PyTorch's own
 * _TorchDispatchStackMode being the current mode while other modes remain
 * below, for the operators run inside to reach them (PyTorch restores
 * this stack as the current mode after). */
static PyObject *mode_run_ours(ModeStack *m, PyObject *mode,
			       PyObject *const *a, Py_ssize_t na)
{
	PyObject *n = PyObject_CallNoArgs(m->length);
	int below;

	if (n == NULL)
		return NULL;
	below = PyObject_IsTrue(n);
	Py_DECREF(n);
	if (below < 0 || (below && mode_call(m->set_mode, m->fallback) < 0))
		return NULL;
	return dispatch_torch_dispatch(mode, a, na);
}

/* __torch_dispatch__(func, types, args=(), kwargs=None) */
static PyObject *mode_torch_dispatch(PyObject *self, PyObject *const *a,
				     Py_ssize_t na)
{
	ModeStack *m = (ModeStack *)self;
	PyObject *mode = PyObject_CallNoArgs(m->pop), *result;
	PyObject *call[5];
	int ours;

	if (mode == NULL)
		return NULL;
	ours = mode_is_ours(m, mode);
	if (ours > 0) {
		result = mode_run_ours(m, mode, a, na);
		if (mode_push_back(m, mode) < 0)
			Py_CLEAR(result);
		Py_DECREF(mode);
		return result;
	}
	if (mode_push_back(m, mode) < 0 || ours < 0) {
		Py_DECREF(mode);
		return NULL;
	}
	Py_DECREF(mode);
	if (na > 4) {
		PyErr_SetString(PyExc_TypeError,
				"__torch_dispatch__(func, types, args, kwargs)");
		return NULL;
	}
	call[0] = m->fallback;
	for (Py_ssize_t i = 0; i < na; i++)
		call[i + 1] = a[i];
	return PyObject_VectorcallMethod(s_torch_dispatch, call,
					 (size_t)(na + 1), NULL);
}

static int mode_traverse(PyObject *self, visitproc visit, void *arg)
{
	ModeStack *m = (ModeStack *)self;

	Py_VISIT(m->mode);
	Py_VISIT(m->fallback);
	Py_VISIT(m->length);
	Py_VISIT(m->pop);
	Py_VISIT(m->push);
	Py_VISIT(m->set_mode);
	return 0;
}

static int mode_clear(PyObject *self)
{
	ModeStack *m = (ModeStack *)self;

	Py_CLEAR(m->mode);
	Py_CLEAR(m->fallback);
	Py_CLEAR(m->length);
	Py_CLEAR(m->pop);
	Py_CLEAR(m->push);
	Py_CLEAR(m->set_mode);
	return 0;
}

static void mode_dealloc(PyObject *self)
{
	PyObject_GC_UnTrack(self);
	mode_clear(self);
	Py_TYPE(self)->tp_free(self);
}

/* ModeStack(mode, fallback, length, pop, push, set_mode) */
static int mode_init(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = { "mode", "fallback", "length", "pop", "push",
				 "set_mode", NULL };
	ModeStack *m = (ModeStack *)self;
	PyObject *o[6];

	if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOO", names, &o[0],
					 &o[1], &o[2], &o[3], &o[4], &o[5]))
		return -1;
	for (int i = 2; i < 6; i++) {
		if (!PyCallable_Check(o[i])) {
			PyErr_Format(PyExc_TypeError, "ModeStack: %s is not "
				     "callable", names[i]);
			return -1;
		}
	}
	mode_clear(self);
	m->mode = Py_NewRef(o[0]);
	m->fallback = Py_NewRef(o[1]);
	m->length = Py_NewRef(o[2]);
	m->pop = Py_NewRef(o[3]);
	m->push = Py_NewRef(o[4]);
	m->set_mode = Py_NewRef(o[5]);
	return 0;
}

static PyMethodDef mode_methods[] = {
	{ "__torch_dispatch__", (PyCFunction)(void (*)(void))mode_torch_dispatch,
	  METH_FASTCALL,
	  "__torch_dispatch__(func, types, args=(), kwargs=None)" },
	{ NULL, NULL, 0, NULL },
};

PyTypeObject mode_stack_type = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "npusan._speedups.ModeStack",
	.tp_basicsize = sizeof(ModeStack),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.tp_doc = "ModeStack(mode, fallback, length, pop, push, set_mode): "
		  "PyTorch 1.13's dispatch-mode stack, run in C while npusan's "
		  "mode is on top",
	.tp_traverse = mode_traverse,
	.tp_clear = mode_clear,
	.tp_dealloc = mode_dealloc,
	.tp_methods = mode_methods,
	.tp_init = mode_init,
	.tp_new = PyType_GenericNew,
};
