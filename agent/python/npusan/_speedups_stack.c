/*
 * _speedups_stack.c - the calling Python stack as an agent stack id, as
 * npusan._stack.Stacks.capture() finds it (DESIGN 5 in _speedups.c): the
 * frames walked and keyed by (code object address, f_lasti), the key
 * looked up in Stacks' own cache, and only a stack never seen before
 * named by Python (Stacks._name()).
 */
#include "_speedups.h"

/* Whether frames of `code` are machinery, per Stacks._skip, asking
 * Stacks._classify() the first time. 1, 0, or -1 with an exception. */
static int stack_machinery(Core *c, PyCodeObject *code)
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
int64_t stack_capture(Core *c)
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

		m = stack_machinery(c, code);
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
