/*
 * _speedups_stack.c - the calling Python stack as an agent stack id, as
 * npusan._stack.Stacks.capture() finds it (DESIGN 5 in _speedups.c): the
 * frames walked and keyed by (code object address, f_lasti), the key
 * looked up in Stacks' own cache, and only a stack never seen before
 * named by Python (Stacks._name()).
 */
#include "_speedups.h"

#include <string.h>

/* Whether frames of `code` are machinery, per Stacks._skip, asking
 * Stacks._classify() the first time; 1, 0, or -1 with an exception. The
 * answer is kept in c->skip_seen, which a code object's address names for
 * as long as Stacks keeps it (in Stacks._codes, for good). */
static int stack_machinery(Core *c, PyCodeObject *code)
{
	struct skip_slot *slot =
		&c->skip_seen[((uintptr_t)code >> 4) & (SKIP_SLOTS - 1)];
	PyObject *key, *v;
	int r;

	if (slot->code == code)
		return slot->machinery;
	key = PyLong_FromVoidPtr(code);
	if (key == NULL)
		return -1;
	v = PyDict_GetItemWithError(c->stack_skip, key);
	Py_DECREF(key);
	if (v != NULL) {
		r = v == Py_True;
	} else {
		if (PyErr_Occurred())
			return -1;
		v = PyObject_CallMethodOneArg(c->stacks, s_classify,
					      (PyObject *)code);
		if (v == NULL)
			return -1;
		r = PyObject_IsTrue(v);
		Py_DECREF(v);
		if (r < 0)
			return -1;
	}
	slot->code = code;
	slot->machinery = r;
	return r;
}

/* Core.forget_machinery(): Stacks forgot what it classified. */
PyObject *stack_forget_machinery(PyObject *self, PyObject *unused)
{
	Core *c = (Core *)self;

	(void)unused;
	memset(c->skip_seen, 0, sizeof(c->skip_seen));
	Py_RETURN_NONE;
}

/* The first frame from f (a reference, taken) that is not machinery, as a
 * new reference, or NULL: in *top; 0, or -1 with an exception. */
static int stack_top(Core *c, PyFrameObject *f, PyFrameObject **top)
{
	PyFrameObject *next;
	int m;

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
	*top = f;
	return 0;
}

/* The key of the stack from `top`: (code address, f_lasti) of each of up
 * to max_frames frames, into key; returns the frames keyed. */
static int stack_key(Core *c, PyFrameObject *top, uint64_t *key)
{
	PyFrameObject *f = top, *next;
	int n = 0;

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
	return n;
}

/* The id of the n-frame stack `key` from `top` in Stacks' cache, named by
 * Stacks._name() the first time; -1 with an exception. */
static int64_t stack_python_id(Core *c, PyFrameObject *top,
			       const uint64_t *key, int n)
{
	PyObject *k, *id;
	int64_t sid;

	k = PyBytes_FromStringAndSize((const char *)key,
				      (Py_ssize_t)(2 * n * sizeof(key[0])));
	if (k == NULL)
		return -1;
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
	if (id == NULL)
		return -1;
	sid = PyLong_AsLongLong(id);
	Py_DECREF(id);
	if (sid == -1 && PyErr_Occurred())
		return -1;
	return sid;
}

/* ---- the stacks seen ------------------------------------------------ */
/*
 * Stacks' cache keys a stack by bytes, which costs an object, its hash and
 * a dictionary lookup per capture. The ids it holds are kept here too, by
 * a hash of the key's words, in an open-addressed table that never
 * forgets (as Stacks' cache never does) and stops taking stacks when half
 * full, Stacks' cache answering for the rest. An id comes here only from
 * Stacks' cache, which keeps alive every code object its keys name, so a
 * code address in a key here stays that code's.
 */

#define STACKS_SEEN 4096 /* slots, a power of two */

struct stack_slot {
	uint64_t hash; /* 0: empty */
	int64_t id;
	int n;
	uint64_t *key; /* 2 * n words, owned */
};

static uint64_t stack_hash(const uint64_t *key, int n)
{
	uint64_t h = 0x9e3779b97f4a7c15u;

	for (int i = 0; i < 2 * n; i++)
		h = (h ^ key[i]) * 0x100000001b3u;
	h ^= h >> 29;
	return h != 0 ? h : 1; /* 0 marks an empty slot */
}

/* The slot holding key, or the empty slot where it would go. */
static struct stack_slot *stack_slot(struct stack_cache *sc, uint64_t h,
				     const uint64_t *key, int n)
{
	size_t mask = STACKS_SEEN - 1, i = (size_t)h & mask;

	for (;; i = (i + 1) & mask) {
		struct stack_slot *s = &sc->slots[i];

		if (s->hash == 0 ||
		    (s->hash == h && s->n == n &&
		     memcmp(s->key, key, 2 * (size_t)n * sizeof(*key)) == 0))
			return s;
	}
}

/* Keeps id for key, where the table has room (else Stacks' cache alone
 * answers for it). */
static void stack_remember(struct stack_cache *sc, uint64_t h,
			   const uint64_t *key, int n, int64_t id)
{
	struct stack_slot *s;

	if (sc->slots == NULL) {
		sc->slots = PyMem_Calloc(STACKS_SEEN, sizeof(*sc->slots));
		if (sc->slots == NULL)
			return;
	}
	if (sc->used >= STACKS_SEEN / 2)
		return;
	s = stack_slot(sc, h, key, n);
	if (s->hash != 0)
		return;
	s->key = PyMem_Malloc(2 * (size_t)(n ? n : 1) * sizeof(*key));
	if (s->key == NULL)
		return;
	memcpy(s->key, key, 2 * (size_t)n * sizeof(*key));
	s->n = n;
	s->id = id;
	s->hash = h;
	sc->used++;
}

void stack_cache_free(struct stack_cache *sc)
{
	if (sc->slots == NULL)
		return;
	for (size_t i = 0; i < STACKS_SEEN; i++)
		PyMem_Free(sc->slots[i].key);
	PyMem_Free(sc->slots);
	sc->slots = NULL;
	sc->used = 0;
}

/* The stack id of the calling Python code, as Stacks.capture(): leading
 * machinery frames skipped, up to max_frames keyed, a new key named by
 * Stacks._name(). 0 when stacks are off; -1 with an exception. */
int64_t stack_capture(Core *c)
{
	uint64_t key[2 * MAX_FRAMES], h;
	PyFrameObject *top;
	struct stack_slot *seen;
	int64_t sid;
	int n;

	if (c->max_frames == 0)
		return 0;
	if (stack_top(c, (PyFrameObject *)Py_XNewRef(PyEval_GetFrame()),
		      &top) < 0)
		return -1;
	n = stack_key(c, top, key);
	h = stack_hash(key, n);
	if (c->seen.slots != NULL) {
		seen = stack_slot(&c->seen, h, key, n);
		if (seen->hash != 0) {
			Py_XDECREF(top);
			return seen->id;
		}
	}
	sid = stack_python_id(c, top, key, n);
	Py_XDECREF(top);
	if (sid >= 0)
		stack_remember(&c->seen, h, key, n, sid);
	return sid;
}
