/*
 * _speedups_threads.c - watch_threads(): the adapter's hook run once in
 * each thread that was already running when npusan turned on, through a
 * profile function set on that thread that removes itself at the
 * thread's next Python event.
 */
#include "_speedups.h"

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
PyObject *threads_watch(PyObject *self, PyObject *hook)
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
