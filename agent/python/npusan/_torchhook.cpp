/*
 * _torchhook.cpp - npusan._torchhook: the adapter's operators taken inside
 * PyTorch's C++ dispatcher, with no Python frame per operator.
 *
 * This is npusan's only C++, because PyTorch's dispatcher has only a C++
 * API: a kernel is registered, and reads its operator's arguments, as C++
 * objects (c10::OperatorHandle, c10::IValue, at::Tensor). Everything the
 * adapter does with an operator beyond reading it stays in C, in
 * npusan._speedups, called through the table of _speedups_hook.h.
 *
 * DESIGN
 *
 * 1. The hook is a boxed fallback on DispatchKey::Fake, a key PyTorch (1.13
 *    and 2.6 alike) reserves for an out-of-tree project (torchdistx) and
 *    uses none of itself. It sits directly above Python in the dispatch
 *    order, below autograd, ADInplaceOrView and functionalization, so it
 *    sees the operators a TorchDispatchMode sees (PyTorch's CUDA
 *    Sanitizer's, and the adapter's own dispatch mode): the decomposed
 *    ones and backward's, before any Python mode.
 * 2. The key is in the TLS included set of each thread npusan watches
 *    (enter()), as a dispatch mode is on each thread's mode stack. The
 *    autograd engine hands a graph task's TLS to the worker threads that
 *    run its backward, so they are watched with the thread that called
 *    backward().
 * 3. While an operator runs below the key, the key is excluded: the
 *    operators it runs inside are not seen, as a dispatch mode does not
 *    see them (PyTorch pops the mode while it runs).
 * 4. The tensors are read without the GIL. The GIL is taken once for an
 *    operator that touched device memory, or whose thread had a host
 *    synchronization held: _speedups_hook.c's finish() then names the
 *    stack, reads the current stream, claims allocations and launches.
 * 5. No exception of ours reaches PyTorch: a failure here turns npusan off
 *    (the operator still runs exactly once); the operator's own
 *    exceptions pass through untouched.
 * 6. Off, the fallback stays registered and only runs the operator below
 *    it: PyTorch cannot swap a fallback for a fallthrough atomically, and
 *    an operator dispatched between the two, on a thread with the key,
 *    would find no kernel. off() also takes the key out of the calling
 *    thread.
 * 7. Plans (what an operator reads and writes) are _speedups' own, kept
 *    here by the address of the operator's schema, which the dispatcher
 *    keeps as long as the operator is registered, in a table read without
 *    a lock and written under the GIL. A plan outlives npusan turning off
 *    (another thread may be reading it): its capsule is kept for good.
 */
#include <Python.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/api/include/torch/version.h>

#include <atomic>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "_speedups_hook.h"

namespace {

constexpr c10::DispatchKey kKey = c10::DispatchKey::Fake;
constexpr size_t kPlanSlots = 4096; /* a power of two */
constexpr size_t kPlanProbes = 16;

struct PlanSlot {
	std::atomic<const void *> key{nullptr};
	const struct plan *plan = nullptr;
};

/* The state of the one hook a process has. */
struct Hook {
	/* Stored true with release by install() once core, api and device
	 * are set; the fallback loads it with acquire before reading them.
	 * Under the GIL, which orders install() itself, relaxed suffices. */
	std::atomic<bool> active{false};
	PyObject *core = nullptr; /* npusan._speedups.Core, owned */
	const struct hook_api *api = nullptr;
	c10::DeviceType device = c10::DeviceType::CPU;
	c10::RegistrationHandleRAII *registration = nullptr;
	PlanSlot plans[kPlanSlots];
	std::vector<PyObject *> capsules; /* kept for good (DESIGN 7) */
};

/* Never destroyed: deregistering the fallback at exit would leave a
 * thread still dispatching with the key without a kernel for it. */
Hook &hook = *new Hook;

/* Whether this thread runs an operator through the hook, and whether
 * Adapter.host_sync() held a synchronization meanwhile (hold()). */
thread_local bool t_inside = false;
thread_local bool t_syncs_held = false;

/* The GIL, for a scope, with the key excluded meanwhile: an operator
 * that npusan's Python runs (naming a stack, reading a stream) is npusan's
 * own, not the job's. */
class Gil {
public:
	Gil() : state_(PyGILState_Ensure()) {}
	~Gil() { PyGILState_Release(state_); }
	Gil(const Gil &) = delete;
	Gil &operator=(const Gil &) = delete;

private:
	c10::impl::ExcludeDispatchKeyGuard own_{kKey};
	PyGILState_STATE state_;
};

/* What went wrong, in one line: c10::Error's what() adds a backtrace. */
const char *why(const std::exception &e)
{
	const c10::Error *c = dynamic_cast<const c10::Error *>(&e);

	return c != nullptr ? c->what_without_backtrace() : e.what();
}

/* Whether Python can take a thread now: not while it finalizes. */
bool python_alive()
{
#if PY_VERSION_HEX >= 0x030D0000
	return Py_IsInitialized() && !Py_IsFinalizing();
#else
	return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

/* ---- plans ---------------------------------------------------------- */

size_t plan_index(const void *key)
{
	return (reinterpret_cast<uintptr_t>(key) >> 4) * 0x9e3779b97f4a7c15u;
}

/* The plan kept for `key`, or NULL; no lock (DESIGN 7). */
const struct plan *plan_kept(const void *key)
{
	size_t i = plan_index(key);

	for (size_t n = 0; n < kPlanProbes; n++, i++) {
		PlanSlot &s = hook.plans[i & (kPlanSlots - 1)];
		/* Pairs with the release store in plan_keep(). */
		const void *k = s.key.load(std::memory_order_acquire);

		if (k == key)
			return s.plan;
		if (k == nullptr)
			return nullptr;
	}
	return nullptr;
}

/* Keeps `p` for `key` where a slot is free (else it is found again under
 * the GIL next time). GIL held: the only writer. */
void plan_keep(const void *key, const struct plan *p)
{
	size_t i = plan_index(key);

	for (size_t n = 0; n < kPlanProbes; n++, i++) {
		PlanSlot &s = hook.plans[i & (kPlanSlots - 1)];

		if (s.key.load(std::memory_order_relaxed) != nullptr)
			continue;
		s.plan = p;
		s.key.store(key, std::memory_order_release);
		return;
	}
}

/* Forgets the plans, made for another Core. GIL held, hook inactive. */
void plan_forget_all()
{
	for (PlanSlot &s : hook.plans)
		s.key.store(nullptr, std::memory_order_relaxed);
}

/* The plan of `op`, made by _speedups the first time; NULL when npusan is
 * off or failed. Throws nothing. */
const struct plan *plan_of(const c10::OperatorHandle &op)
{
	const void *key = &op.schema();
	const struct plan *p = plan_kept(key);

	if (p != nullptr || !python_alive())
		return p;
	try {
		const c10::FunctionSchema &schema = op.schema();
		Gil gil;
		PyObject *capsule = nullptr;

		if (!hook.active.load(std::memory_order_relaxed))
			return nullptr;
		p = plan_kept(key); /* another thread's, meanwhile */
		if (p != nullptr)
			return p;
		p = hook.api->plan(hook.core, schema.name().c_str(),
				   schema.overload_name().c_str(), &capsule);
		if (p != nullptr) {
			hook.capsules.push_back(capsule);
			plan_keep(key, p);
		}
		return p;
	} catch (...) {
		/* Keeping the capsule failed (memory): the operator runs
		 * unwatched, and its plan is asked for again next time. */
		return nullptr;
	}
}

/* ---- one operator ---------------------------------------------------- */

/* The ranges an operator touched, freed at the end of its scope. */
struct Call {
	struct ranges reads, writes, claims;
	int64_t device = -2;

	Call()
	{
		hook.api->ranges_init(&reads);
		hook.api->ranges_init(&writes);
		hook.api->ranges_init(&claims);
	}
	~Call()
	{
		hook.api->ranges_fini(&reads);
		hook.api->ranges_fini(&writes);
		hook.api->ranges_fini(&claims);
	}
	Call(const Call &) = delete;
	Call &operator=(const Call &) = delete;
};

/* Runs the operator below the key, the key excluded (DESIGN 3). */
void run_below(const c10::OperatorHandle &op, c10::DispatchKeySet ks,
	       torch::jit::Stack *stack)
{
	c10::impl::ExcludeDispatchKeyGuard guard(kKey);

	op.redispatchBoxed(ks & c10::DispatchKeySet(
				       c10::DispatchKeySet::FULL_AFTER, kKey),
			   stack);
}

/* t as _speedups reads it, when it is a tensor of the device; else
 * false. Its sizes and strides stay t's. A wrapped number (a Python
 * number that PyTorch made a tensor for the operator) is none: a
 * dispatch mode gets it back as the number. */
bool device_tensor(const at::Tensor &t, struct hook_tensor *h)
{
	if (!t.defined() || t.device().type() != hook.device ||
	    t.unsafeGetTensorImpl()->is_wrapped_number())
		return false;
	h->data = 0;
	if (t.has_storage())
#if TORCH_VERSION_MAJOR >= 2
		h->data = reinterpret_cast<uintptr_t>(t.const_data_ptr());
#else
		h->data = reinterpret_cast<uintptr_t>(t.data_ptr());
#endif
	h->elem = static_cast<uint64_t>(t.element_size());
	h->offset = t.storage_offset();
	h->sizes = t.sizes().data();
	h->strides = t.strides().data();
	h->ndim = t.dim();
	h->contiguous = t.is_contiguous();
	return true;
}

/* The ranges of the device tensors in v (nest levels of lists deep) into
 * r, the first one's device into k.device. Throws c10::Error, or
 * std::bad_alloc where ranges cannot grow. */
void collect(Call &k, const c10::IValue &v, int nest, struct ranges *r)
{
	struct hook_tensor h;
	uint64_t bytes;

	if (v.isTensor()) {
		const at::Tensor &t = v.toTensor();

		if (!device_tensor(t, &h))
			return;
		if (hook.api->ranges_add(r, &h, &bytes) < 0)
			throw std::bad_alloc();
		if (k.device == -2)
			k.device = t.get_device();
		return;
	}
	if (nest > 0 && v.isList()) {
		for (const c10::IValue &e : v.toListRef())
			collect(k, e, nest - 1, r);
	}
}

/* Where the storage of tensor h starts: the pending allocation it may
 * claim, or the one record_stream names. */
uint64_t storage_start(const struct hook_tensor &h)
{
	return h.data - static_cast<uint64_t>(h.offset) * h.elem;
}

/* The (storage start, extent) of each device tensor in v, to claim. */
void collect_claims(Call &k, const c10::IValue &v)
{
	struct hook_tensor h;

	if (v.isTensor()) {
		if (!device_tensor(v.toTensor(), &h) || h.data == 0)
			return;
		if (hook.api->ranges_push(&k.claims, storage_start(h),
					  hook.api->extent(&h)) < 0)
			throw std::bad_alloc();
		return;
	}
	if (v.isList()) {
		for (const c10::IValue &e : v.toListRef())
			collect_claims(k, e);
	}
}

/* The ranges the operator's arguments read and write, from the arguments
 * at the top of the dispatcher's stack. */
void collect_inputs(Call &k, const struct plan *p, const c10::OperatorHandle &op,
		    const torch::jit::Stack &stack)
{
	size_t n = op.schema().arguments().size(), base;

	if (stack.size() < n)
		throw std::length_error("fewer arguments than the schema's");
	base = stack.size() - n;
	for (ptrdiff_t i = 0; i < p->nargs; i++) {
		const struct arg_plan &a = p->args[i];
		struct ranges *r = a.write ? &k.writes : &k.reads;

		if (a.pos < 0 || static_cast<size_t>(a.pos) >= n)
			continue;
		r->name = a.name_id;
		collect(k, stack[base + static_cast<size_t>(a.pos)], a.nest, r);
	}
}

/* The fresh outputs as writes, and every device tensor returned as a
 * claim, from the returns at the top of the dispatcher's stack. */
void collect_outputs(Call &k, const struct plan *p,
		     const c10::OperatorHandle &op,
		     const torch::jit::Stack &stack)
{
	size_t n = op.schema().returns().size(), base;

	if (stack.size() < n)
		throw std::length_error("fewer returns than the schema's");
	base = stack.size() - n;
	for (ptrdiff_t i = 0; i < p->nrets; i++) {
		const struct ret_plan &r = p->rets[i];

		if (r.pos < 0 || static_cast<size_t>(r.pos) >= n)
			continue;
		k.writes.name = r.name_id;
		collect(k, stack[base + static_cast<size_t>(r.pos)], r.nest,
			&k.writes);
	}
	for (size_t i = 0; i < n; i++)
		collect_claims(k, stack[base + i]);
}

/* Hands our own failure to npusan (off), under the GIL. */
void fail(const char *why)
{
	if (!python_alive())
		return;
	Gil gil;

	hook.api->fail(hook.core, why);
}

/* The synchronizations the thread held while the operator ran go out,
 * under the GIL. */
void release_held()
{
	if (!t_syncs_held || !python_alive())
		return;
	t_syncs_held = false;
	Gil gil;

	hook.api->release(hook.core);
}

/* What the operator touched goes to npusan, under the GIL, where it
 * touched device memory or its thread held synchronizations. */
void report(Call &k, const struct plan *p)
{
	struct hook_call hc = { p, &k.reads, &k.writes, &k.claims, k.device,
				t_syncs_held };

	t_syncs_held = false;
	if ((k.reads.n == 0 && k.writes.n == 0 && k.claims.n == 0 &&
	     !hc.syncs_held) ||
	    !python_alive())
		return;
	Gil gil;

	hook.api->finish(hook.core, &hc);
}

/* aten::record_stream(Tensor(a!) self, Stream s): run, then told to
 * npusan with the storage's start and the stream's ids. */
void watch_record_stream(const c10::OperatorHandle &op, c10::DispatchKeySet ks,
			 torch::jit::Stack *stack)
{
	struct hook_tensor h = {};
	bool device = false;
	c10::Stream s(c10::Stream::DEFAULT, c10::Device(c10::DeviceType::CPU));

	try {
		size_t base;

		if (stack->size() < 2)
			throw std::length_error("record_stream's arguments");
		base = stack->size() - 2;
		device = (*stack)[base].isTensor() && (*stack)[base + 1].isStream() &&
			 device_tensor((*stack)[base].toTensor(), &h) &&
			 h.data != 0;
		if (device)
			s = (*stack)[base + 1].toStream();
	} catch (const std::exception &e) {
		fail(why(e));
	}
	run_below(op, ks, stack);
	if (!device || !python_alive())
		return;
	Gil gil;

	hook.api->record_stream(hook.core, storage_start(h), s.id(),
				s.device_index(),
				static_cast<int64_t>(s.device_type()));
}

/* The operator, watched: its inputs read before it runs, its outputs
 * after, reported once it returned. It runs exactly once whatever fails
 * here (DESIGN 5). */
void watch(const c10::OperatorHandle &op, c10::DispatchKeySet ks,
	   torch::jit::Stack *stack, const struct plan *p)
{
	Call k;
	bool ok = true;

	try {
		collect_inputs(k, p, op, *stack);
	} catch (const std::exception &e) {
		fail(why(e));
		ok = false;
	}
	t_inside = true;
	t_syncs_held = false;
	try {
		run_below(op, ks, stack);
	} catch (...) {
		t_inside = false;
		release_held();
		throw; /* the operator's own */
	}
	t_inside = false;
	try {
		if (ok)
			collect_outputs(k, p, op, *stack);
	} catch (const std::exception &e) {
		fail(why(e));
		ok = false;
	}
	if (ok)
		report(k, p);
	else
		release_held();
}

/* The fallback: every operator of a watched thread comes here. */
void hook_fallback(const c10::OperatorHandle &op, c10::DispatchKeySet ks,
		   torch::jit::Stack *stack)
{
	const struct plan *p = nullptr;

	if (hook.active.load(std::memory_order_acquire))
		p = plan_of(op);
	if (p == nullptr)
		run_below(op, ks, stack);
	else if (p->record_stream)
		watch_record_stream(op, ks, stack);
	else
		watch(op, ks, stack, p);
}

/* ---- the module ------------------------------------------------------ */

/* Registers the fallback, once per process (DESIGN 6). */
void register_fallback()
{
	if (hook.registration)
		return;
	hook.registration = new c10::RegistrationHandleRAII(
		c10::Dispatcher::singleton().registerFallback(
			kKey,
			c10::KernelFunction::makeFromBoxedFunction<&hook_fallback>(),
			"npusan: npusan._torchhook"));
}

/* install(core, hook_api, device): watches the threads that enter()
 * from now on for `core` (a npusan._speedups.Core), on tensors of
 * `device` ("cpu", "cuda", ...). */
PyObject *py_install(PyObject *, PyObject *args)
{
	PyObject *core, *capsule;
	const char *device;
	const struct hook_api *api;

	if (!PyArg_ParseTuple(args, "OOs", &core, &capsule, &device))
		return nullptr;
	api = static_cast<const struct hook_api *>(
		PyCapsule_GetPointer(capsule, HOOK_API_CAPSULE));
	if (api == nullptr)
		return nullptr;
	try {
		c10::DeviceType type = c10::Device(std::string(device)).type();

		hook.active.store(false, std::memory_order_relaxed);
		register_fallback();
		plan_forget_all();
		Py_INCREF(core);
		Py_XSETREF(hook.core, core);
		hook.api = api;
		hook.device = type;
	} catch (const std::exception &e) {
		PyErr_SetString(PyExc_RuntimeError, why(e));
		return nullptr;
	}
	hook.active.store(true, std::memory_order_release);
	Py_RETURN_NONE;
}

/* off(): the hook only runs operators from now on (DESIGN 6), and the
 * calling thread is no longer watched. */
PyObject *py_off(PyObject *, PyObject *)
{
	hook.active.store(false, std::memory_order_relaxed);
	c10::impl::tls_set_dispatch_key_included(kKey, false);
	Py_RETURN_NONE;
}

/* enter(on): whether the calling thread is watched (DESIGN 2). */
PyObject *py_enter(PyObject *, PyObject *on)
{
	int r = PyObject_IsTrue(on);

	if (r < 0)
		return nullptr;
	c10::impl::tls_set_dispatch_key_included(kKey, r != 0);
	Py_RETURN_NONE;
}

/* entered(): whether the calling thread is watched. */
PyObject *py_entered(PyObject *, PyObject *)
{
	return PyBool_FromLong(c10::impl::tls_is_dispatch_key_included(kKey));
}

/* hold(): whether the calling thread runs an operator through the hook;
 * if so Adapter.host_sync() holds its synchronization, which the hook
 * pushes once the operator's launch is. */
PyObject *py_hold(PyObject *, PyObject *)
{
	if (!t_inside)
		Py_RETURN_FALSE;
	t_syncs_held = true;
	Py_RETURN_TRUE;
}

PyMethodDef methods[] = {
	{ "install", py_install, METH_VARARGS,
	  "install(core, hook_api, device): the hook on, for core" },
	{ "off", py_off, METH_NOARGS, "off(): the hook only runs operators" },
	{ "enter", py_enter, METH_O, "enter(on): watch this thread or not" },
	{ "entered", py_entered, METH_NOARGS,
	  "entered(): whether this thread is watched" },
	{ "hold", py_hold, METH_NOARGS,
	  "hold(): whether this thread is inside an operator; holds its "
	  "synchronizations if so" },
	{ nullptr, nullptr, 0, nullptr },
};

PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "npusan._torchhook",
	"npusan.torch's operators, taken in PyTorch's C++ dispatcher", -1,
	methods, nullptr, nullptr, nullptr, nullptr,
};

} // namespace

extern "C" PyMODINIT_FUNC PyInit__torchhook(void);

extern "C" PyMODINIT_FUNC PyInit__torchhook(void)
{
	PyObject *m = PyModule_Create(&module);
	/* The PyTorch it was built against: the adapter uses it only with
	 * that one (the dispatcher's layout is compiled in). */
	PyObject *version = m ? Py_BuildValue("(ii)", TORCH_VERSION_MAJOR,
					      TORCH_VERSION_MINOR)
			      : nullptr;

	if (version == nullptr ||
	    PyModule_AddObjectRef(m, "TORCH_VERSION", version) < 0)
		Py_CLEAR(m);
	Py_XDECREF(version);
	return m;
}
