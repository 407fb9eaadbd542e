"""The adapter: PyTorch's trace callbacks and a dispatch mode, forwarded to
the agent one call per operation.

Nothing is analysed here; the daemon does that. Per operator the dispatch
mode does only what the agent needs: the operator's cached classification
(``_classify``), the byte ranges of its tensors, the current stream, the
Python stack's cached id, and one ``npusan_launch_args()`` that names the
schema's argument of each range, as PyTorch's CUDA Sanitizer does (a fresh
output by its return's name, else ``output``), or ``npusan_launch()``
where the library predates it.

Allocations: the frameworks' allocation callbacks give the block's address
only, with neither size nor stream. The adapter keeps the address with the
current stream (the caching allocator allocates for the current stream)
until the operator that allocated it returns; the tensor it returns on that
storage gives the size (the bytes from the storage's start to the tensor's
end), and the allocation reaches the agent just before that operator's
launch, with its stack. An allocation no returned tensor claims (an
operator's scratch memory) is never reported, nor is its free.

Host synchronizations: an operator that hands a value to the host (item(),
a copy to the CPU) waits for its stream inside the operator, and the
framework reports that wait while the operator runs, before its launch
has been pushed. A wait that the thread running an operator reports is
therefore held until that operator's launch is pushed, and then follows
it, as it followed the kernel on the device.

Where npusan._torchhook (the adapter's C++ hook in PyTorch's dispatcher,
agent/python/README.md) loads, it takes the operators in the dispatch
mode's place, on npusan._speedups' C path; the mode is the fallback.

Any failure in here turns the adapter off with one line on stderr; the
user's operators always run exactly once, and their own exceptions pass
through untouched.
"""

import errno
import functools
import operator
import os
import stat
import sys
import threading
import time
from array import array
from threading import get_ident
from types import ModuleType, SimpleNamespace
from typing import Dict, Optional, Set, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import _lib
from .._log import say
from .._stack import Stacks
from . import _classify
from ._backends import Backend, add_callback
from ._classify import WRITE, OpSpec, strided_ranges
from ._graphs import Graphs

_Tensor = torch.Tensor
_OpOverload = torch._ops.OpOverload

# The operator start() runs through the mode: a view, which reports nothing.
_PROBE = torch.ops.aten.detach.default

# At exit: how long to wait for the daemon to take the ring's last
# records, and for a registration still in flight to finish.
DRAIN_MS = 10000
REGISTER_WAIT_S = 2.0


def _add(t, out: list) -> None:
    """Appends the (pointer, length) pairs of the bytes tensor `t` touches."""
    p = t.data_ptr()
    if not p:
        return
    if t.is_contiguous():
        n = t.numel() * t.element_size()
        if n:
            out += (p, n)
    else:
        strided_ranges(p, t.element_size(), t.size(), t.stride(), out)


def _extent(t) -> int:
    """The bytes from the start of `t`'s storage to the end of `t`."""
    elems = t.storage_offset() + 1
    for size, stride in zip(t.size(), t.stride()):
        if size == 0:
            return t.storage_offset() * t.element_size()
        elems += (size - 1) * stride
    return elems * t.element_size()


def _storage_start(t) -> int:
    return t.data_ptr() - t.storage_offset() * t.element_size()


def _daemon_expected() -> bool:
    """Whether NPUSAN_SOCKET names a socket that exists (a daemon is
    there, so a registration still in flight is worth waiting for)."""
    path = os.environ.get("NPUSAN_SOCKET")
    if not path:
        return False
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


class Adapter:
    """The state shared by the dispatch mode and the trace callbacks.

    With `speedups` (npusan._speedups), its Core runs the dispatch mode and
    the allocation callbacks in C, on this object's state; DispatchMode
    and the methods below are the same path in Python.
    """

    def __init__(self, agent: _lib.Agent, backend: Backend, stacks: Stacks,
                 speedups: Optional[ModuleType] = None,
                 hook: Optional[ModuleType] = None):
        self.on = True
        self.agent = agent
        self.backend = backend
        self.stacks = stacks
        self.launch = agent.launch
        self.launch_args = agent.launch_args
        self.is_device = operator.attrgetter(backend.device_attr)
        self.current_stream = backend.current_stream
        self.per_device = backend.per_device
        self.specs: Dict[object, tuple] = {}
        # id(func) -> the C path's plan of func (npusan._speedups).
        self.plans: Dict[int, object] = {}
        # Storage start -> allocation stream, for allocations no operator
        # has returned yet; and the starts the agent has been told of.
        self.pending: Dict[int, int] = {}
        self.live: Set[int] = set()
        # Stream -> graph id for the streams in an active capture: their
        # allocations come from that graph's pool (_graphs.py).
        self.capturing: Dict[int, int] = {}
        self.graphs = Graphs(self)
        # Thread id -> None while that thread runs an operator, then the
        # host synchronizations it held (see host_sync()).
        self.inside: Dict[int, Optional[list]] = {}
        self.speedups = speedups
        # With speedups, the mode is the Core: torch calls its C
        # __torch_dispatch__, bound to the mode, with no Python frame in
        # between.
        self.core = None
        # With speedups on PyTorch 1.13, what runs the mode stack in C
        # while the mode is on top (run_stack_in_c()).
        self.mode_stack = None
        # With speedups and the dispatcher hook (npusan._torchhook), the
        # hook in PyTorch's C++ dispatcher, in the dispatch mode's place.
        self.hook = None
        if speedups is not None:
            self.core = _c_mode_class(speedups)(self, stacks,
                                                agent.pointers())
            self.hook = self.install_hook(hook)
        if self.hook is not None:
            self.mode = _HookMode(self.hook)
        elif speedups is not None:
            self.mode = self.core
            self.mode_stack = _c_mode_stack(speedups, self.core)
        else:
            self.mode = DispatchMode(self)
        # The threading profile hook that was there before ours, and the
        # modes each thread enters (start()).
        self.thread_profile = None
        self.thread_modes: list = []
        self.thread_local = threading.local()

    def install_hook(self, hook: Optional[ModuleType]) -> Optional[
            ModuleType]:
        """The dispatcher hook installed for the Core, or None (then the
        dispatch mode runs), with one line saying why where the hook is
        there but cannot be used."""
        if hook is None or not _device_type_known(self.backend.name):
            return None
        try:
            built = tuple(hook.TORCH_VERSION)
            running = tuple(int(v) for v in
                            torch.__version__.split("+")[0].split(".")[:2])
            if built != running:
                raise RuntimeError(
                    f"built for PyTorch {built[0]}.{built[1]}, "
                    f"running {torch.__version__}")
            hook.install(self.core, self.speedups.hook_api,
                         self.backend.name)
        except Exception as err:
            say_hook_unused(str(err))
            return None
        return hook

    def overload(self, name: str, overload: str):
        """The OpOverload of operator `name` (``aten::add``) and overload
        (``Tensor``; "" for the default), as the dispatcher hook names
        an operator it sees for the first time."""
        namespace, _, op = name.partition("::")
        packet = getattr(getattr(torch.ops, namespace), op)
        return getattr(packet, overload or "default")

    def start(self) -> bool:
        """Enters the dispatch mode in this thread and proves it: one
        operator (a view, which reports nothing) must reach the adapter
        through it. Then covers the process's other threads. True when
        on; else npusan is off, with one line said, and the mode left."""
        probe = torch.empty(0)
        self.specs.pop(_PROBE, None)
        self.plans.pop(id(_PROBE), None)
        try:
            self.mode.__enter__()
            self.run_stack_in_c()
            probe.detach()
            if self.on and _PROBE not in self.specs:
                raise RuntimeError("the dispatch mode saw no operator")
        except Exception as err:
            self.fail(err)
        if not self.on:
            self.leave()
            return False
        # npusan's modes in this thread (the emulation's too, under ours),
        # which every thread enters.
        self.thread_modes = [m for m in mode_stack()
                             if type(m).__module__.startswith("npusan.")]
        if self.hook is not None:
            self.thread_modes.append(self.mode)
        self.watch_threads()
        return self.on

    def leave(self) -> None:
        """Leaves the dispatch mode in this thread, where it is on top;
        turns the dispatcher hook off, where it runs instead."""
        if self.hook is not None:
            self.hook.off()
            return
        try:
            stack = mode_stack()
            if stack and stack[-1] is self.mode:
                self.mode.__exit__(None, None, None)
        except Exception as err:
            say(f"leaving the dispatch mode: {type(err).__name__}: {err}")

    # ---- threads --------------------------------------------------------
    #
    # A dispatch mode covers the thread that entered it (PyTorch keeps the
    # mode stack per thread). Threads started later enter npusan's modes as
    # they start, through threading's profile hook; threads already running
    # do at their next Python event, through a profile function that
    # npusan._speedups sets on each of them and that removes itself.

    def cover_thread(self) -> None:
        """Enters npusan's modes in the calling thread, those it has not
        entered yet, to be left as the thread ends."""
        if not self.on:
            return
        try:
            present = mode_stack()
            entered = []
            for mode in self.thread_modes:
                if mode is self.mode and self.hook is not None:
                    self.hook.enter(True)  # not a mode: no stack to be on
                elif all(m is not mode for m in present):
                    mode.__enter__()
                    entered.append(mode)
            if entered:
                self.thread_local.leave = _LeaveAtThreadEnd(entered)
                self.run_stack_in_c()
        except Exception as err:
            self.fail(err)

    def run_stack_in_c(self) -> None:
        """Where PyTorch runs its dispatch-mode stack in Python (1.13) and
        the mode is on this thread's stack: has the C path's ModeStack run
        it, which does what PyTorch's does, in C while the mode is on top
        (npusan/_speedups_mode.c)."""
        if self.mode_stack is None:
            return
        if any(m is self.mode for m in mode_stack()):
            torch._C._set_torch_dispatch_mode(self.mode_stack)

    def on_thread_start(self, frame, event, arg):
        """threading's profile hook: the first event of each new thread."""
        sys.setprofile(self.thread_profile)
        self.cover_thread()
        if self.thread_profile is not None:
            return self.thread_profile(frame, event, arg)
        return None

    def watch_threads(self) -> None:
        """Covers the threads started from now on and, where Python lets a
        thread set another's profile function (with npusan._speedups), those
        already running; says how many are not covered."""
        self.thread_profile = threading.getprofile()
        threading.setprofile(self.on_thread_start)
        watch = getattr(self.speedups, "watch_threads", None)
        if watch is not None:
            _, missed = watch(self.cover_thread)
            why = "a profiler runs there"
        else:
            missed = len(sys._current_frames()) - 1
            why = "the adapter's C path (npusan._speedups) is not loaded"
        if missed > 0:
            say(f"{missed} thread(s) started before npusan.torch.enable() "
                f"are not watched: {why}")

    def fail(self, err: BaseException) -> None:
        if self.on:
            self.on = False
            if self.hook is not None:
                self.hook.off()
            say(f"off: {type(err).__name__}: {err}")

    def spec(self, func) -> Tuple[OpSpec, int, tuple, tuple, object]:
        """func's classification and operator id, cached per overload,
        with the ids of the names of spec.args and spec.returns, and what
        runs it: an OpOverload's C++ callable, which its __call__ only
        forwards to, else func."""
        schema = func._schema
        spec = _classify.classify(schema)
        intern = self.agent.intern
        op = intern(spec.name.encode())
        args = tuple(intern(name.encode()) for _, name, _, _ in spec.args)
        rets = tuple(intern(_classify.return_name(schema, i).encode())
                     for i, _ in spec.returns)
        run = func
        if type(func) is _OpOverload:
            run = getattr(func, "_op", func)
        entry = (spec, op, args, rets, run)
        self.specs[func] = entry
        return entry

    # ---- trace callbacks ------------------------------------------------

    def register(self) -> None:
        handlers = {
            "stream_creation": self.on_stream_creation,
            "stream_synchronization": self.on_stream_synchronization,
            "event_creation": self.on_event_creation,
            "event_deletion": self.on_event_deletion,
            "event_record": self.on_event_record,
            "event_wait": self.on_event_wait,
            "event_synchronization": self.on_event_synchronization,
            "device_synchronization": self.on_device_synchronization,
            "memory_allocation": self.on_memory_allocation,
            "memory_deallocation": self.on_memory_deallocation,
            "record_stream": self.on_record_stream,
        }
        if self.core is not None:
            handlers["memory_allocation"] = self.core.on_memory_allocation
            handlers["memory_deallocation"] = (
                self.core.on_memory_deallocation)
        for kind, registry in self.backend.registries.items():
            add_callback(registry, handlers[kind])
        self.stacks.add_machinery(registry_files(
            self.backend.registries.values()))
        if getattr(self.agent, "graphs", False):
            for cls in self.backend.graph_classes():
                self.graphs.follow(cls)

    def on_stream_creation(self, stream: int) -> None:
        if self.on:
            try:
                self.agent.stream_create(stream)
            except Exception as err:
                self.fail(err)

    def host_sync(self, fn, *args) -> None:
        """fn(*args), a synchronization of the host, now; or, when this
        thread is running an operator, once that operator's launch is
        pushed (see release())."""
        tid = get_ident()
        if tid in self.inside or (self.hook is not None and self.hook.hold()):
            held = self.inside.get(tid)
            if held is None:
                held = self.inside[tid] = []
            held.append((fn, args))
        else:
            fn(*args)

    def release(self, tid: int) -> None:
        """Thread `tid`'s operator has been pushed: the synchronizations
        it held go to the agent."""
        held = self.inside.pop(tid, None)
        if held and self.on:
            for fn, args in held:
                fn(*args)

    def on_stream_synchronization(self, stream: int) -> None:
        if self.on:
            try:
                self.host_sync(self.agent.stream_sync, stream)
            except Exception as err:
                self.fail(err)

    def on_event_creation(self, event: int) -> None:
        if self.on:
            try:
                self.agent.event_create(event)
            except Exception as err:
                self.fail(err)

    def on_event_deletion(self, event: int) -> None:
        if self.on:
            try:
                self.agent.event_destroy(event)
            except Exception as err:
                self.fail(err)

    def on_event_record(self, event: int, stream: int) -> None:
        if self.on:
            try:
                self.agent.event_record(event, stream)
                if self.capturing or self.graphs.events:
                    self.graphs.event_record(event, stream)
            except Exception as err:
                self.fail(err)

    def on_event_wait(self, event: int, stream: int) -> None:
        if self.on:
            try:
                self.agent.event_wait(event, stream)
                if self.graphs.events:
                    self.graphs.event_wait(event, stream)
            except Exception as err:
                self.fail(err)

    def on_event_synchronization(self, event: int) -> None:
        if self.on:
            try:
                self.host_sync(self.agent.event_sync, event)
            except Exception as err:
                self.fail(err)

    def on_device_synchronization(self) -> None:
        if self.on:
            try:
                self.host_sync(self.agent.device_sync)
            except Exception as err:
                self.fail(err)

    def on_memory_allocation(self, ptr: int) -> None:
        if self.on:
            try:
                self.pending[ptr] = self.current_stream(-1)
            except Exception as err:
                self.fail(err)

    def on_memory_deallocation(self, ptr: int) -> None:
        if self.on:
            try:
                if ptr in self.pending:
                    del self.pending[ptr]
                elif ptr in self.live:
                    self.live.discard(ptr)
                    if self.agent.free_at is not None:
                        # Where it was freed: where a missing
                        # record_stream's fix goes.
                        self.agent.free_at(ptr, self.stacks.capture(1))
                    else:
                        self.agent.free(ptr)
            except Exception as err:
                self.fail(err)

    def on_record_stream(self, ptr: int, stream: int) -> None:
        if self.on:
            try:
                self.agent.record_stream(ptr, stream)
            except Exception as err:
                self.fail(err)

    # ---- operators ------------------------------------------------------

    def alloc(self, start: int, size: int, stream: int, stack: int) -> None:
        """An allocation for `stream`: from a graph's pool while that
        stream is in the graph's capture."""
        graph = self.capturing.get(stream) if self.capturing else None
        if graph is None:
            self.agent.alloc(start, size, stream, stack)
        else:
            self.agent.alloc_graph(start, size, stream, graph)
        self.live.add(start)

    def claim(self, value, stack: int) -> None:
        """Reports the pending allocations whose storage a returned tensor
        of `value` starts, with that tensor's extent."""
        if isinstance(value, _Tensor):
            start = _storage_start(value)
            stream = self.pending.pop(start, None)
            if stream is not None:
                self.alloc(start, _extent(value), stream, stack)
        elif isinstance(value, (list, tuple)):
            for v in value:
                self.claim(v, stack)

    def record_stream(self, func, args, kwargs):
        """aten::record_stream(Tensor(a!) self, Stream s): no kernel; tells
        the agent, where no registry reports it already."""
        out = func(*args, **kwargs)
        handle = self.backend.stream_handle
        if handle is not None and self.on:
            try:
                t, s = args[0], args[1]
                if self.is_device(t):
                    self.agent.record_stream(_storage_start(t), handle(s))
            except Exception as err:
                self.fail(err)
        return out

    def record_stream_ids(self, start: int, stream_id: int,
                          device_index: int, device_type: int) -> None:
        """aten::record_stream as the dispatcher hook sees it: the
        storage's start and the ids of its c10::Stream."""
        handle = self.backend.stream_handle
        if handle is not None:
            # What stream_handle reads of a torch.Stream.
            stream = SimpleNamespace(stream_id=stream_id,
                                     device_index=device_index,
                                     device_type=device_type)
            self.agent.record_stream(start, handle(stream))

    def finish(self) -> None:
        """At exit: stops reporting (what the interpreter frees while it
        tears down cannot be reused) and waits for the daemon to take what
        the ring holds."""
        if not self.on:
            return
        self.on = False
        if self.hook is not None:
            self.hook.off()
        try:
            deadline = time.monotonic() + REGISTER_WAIT_S
            while (self.agent.wait_drained(DRAIN_MS) == -errno.ENOTCONN
                   and _daemon_expected() and time.monotonic() < deadline):
                time.sleep(0.01)
        except Exception as err:
            say(f"at exit: {type(err).__name__}: {err}")


class _HookMode:
    """The dispatcher hook where the dispatch mode would be: entering it
    has the hook watch the calling thread, leaving it not."""

    def __init__(self, hook: ModuleType):
        self.hook = hook

    def __enter__(self):
        self.hook.enter(True)
        return self

    def __exit__(self, *exc) -> None:
        self.hook.enter(False)


class _LeaveAtThreadEnd:
    """Leaves the modes a thread entered as the thread ends: when Python
    clears its thread state, which drops its threading.local values, in the
    thread itself. PyTorch keeps a thread's modes in C++ thread-local
    storage, whose destructors run after that, with the interpreter perhaps
    finalizing: releasing a Python object there takes the GIL, and a thread
    that takes the GIL while the interpreter finalizes is ended on the spot
    (pthread_exit), which aborts the process from inside a C++ destructor
    ("terminate called without an active exception")."""

    def __init__(self, modes: list):
        self.modes = modes

    def __del__(self):
        try:
            for mode in reversed(self.modes):
                stack = mode_stack()
                if not stack or stack[-1] is not mode:
                    break
                mode.__exit__(None, None, None)
        except Exception as err:
            say(f"leaving a thread's dispatch modes: "
                f"{type(err).__name__}: {err}")


def say_hook_unused(why: str) -> None:
    """The one line that says the dispatcher hook is there but not used,
    and why: the dispatch mode runs instead."""
    say(f"the dispatcher hook (npusan._torchhook) is not used ({why}): "
        f"the dispatch mode runs instead")


def _device_type_known(name: str) -> bool:
    """Whether `name` is a device type of this PyTorch, which the
    dispatcher hook tells device tensors by. Where it is not (``npu``
    without a torch_npu that names PyTorch's PrivateUse1 device so, the
    tests' stand-in among them), the dispatch mode runs, which asks each
    tensor's ``is_npu``."""
    try:
        torch.device(name)
    except RuntimeError:
        return False
    return True


def registry_files(registries) -> set:
    """The files of the registries' fire_callbacks: a callback's caller,
    machinery, not the user's code that freed the memory."""
    files = set()
    for registry in registries:
        fire = getattr(type(registry), "fire_callbacks", None)
        code = getattr(fire, "__code__", None)
        if code is not None:
            files.add(code.co_filename)
    return files


def mode_stack() -> list:
    """This thread's dispatch mode stack, innermost last."""
    get = torch._C._get_dispatch_stack_at
    return [get(i) for i in range(torch._C._len_torch_dispatch_stack())]


def _collect(value, nest: int, out: list, is_device, per_device) -> int:
    """Appends the ranges of the device tensors in `value`, a tensor or
    (nest levels of) lists of them; returns the device index of the first
    one (with `per_device`), or -2 when there is none."""
    device = -2
    if nest == 0:
        if isinstance(value, _Tensor) and is_device(value):
            _add(value, out)
            if per_device:
                device = value.get_device()
        return device
    for v in value:
        if v is not None:
            d = _collect(v, nest - 1, out, is_device, per_device)
            if device == -2:
                device = d
    return device


@functools.lru_cache(maxsize=None)
def _c_mode_class(speedups: ModuleType) -> type:
    """The dispatch mode in npusan._speedups' C: a Core that is a
    TorchDispatchMode too, so that the __torch_dispatch__ torch finds on it
    is bound to the mode itself (PyTorch 2 rejects any other binding)."""

    class CDispatchMode(speedups.Core, TorchDispatchMode):
        """DispatchMode, its __torch_dispatch__ in C."""

        def __init__(self, adapter, stacks, pointers):
            speedups.Core.__init__(self, adapter, stacks, _Tensor, pointers)
            TorchDispatchMode.__init__(self)

    return CDispatchMode


def _c_mode_stack(speedups: ModuleType, mode) -> Optional[object]:
    """A ModeStack for `mode` where PyTorch runs its mode stack in Python,
    through a _TorchDispatchStackMode (1.13); else None."""
    stack_mode = getattr(torch.utils._python_dispatch,
                         "_TorchDispatchStackMode", None)
    c = torch._C
    names = ("_len_torch_dispatch_stack", "_pop_torch_dispatch_stack",
             "_push_on_torch_dispatch_stack", "_set_torch_dispatch_mode")
    make = getattr(speedups, "ModeStack", None)  # None: an older build
    if (make is None or stack_mode is None
            or not all(hasattr(c, n) for n in names)):
        return None
    return make(mode, stack_mode(), *(getattr(c, n) for n in names))


class DispatchMode(TorchDispatchMode):
    """One launch per operator that touches device memory.

    The common cases are inlined (a contiguous tensor argument, a fresh
    tensor return, its allocation claimed by address): every call here is
    paid on every operator of the job.
    """

    def __init__(self, adapter: Adapter):
        super().__init__()
        self._adapter = adapter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        a = self._adapter
        if not a.on:
            return func(*args, **kwargs)
        try:
            entry = a.specs.get(func)
            if entry is None:
                entry = a.spec(func)
            spec, op, arg_ids, ret_ids, _ = entry
            if spec.record_stream:
                return a.record_stream(func, args, kwargs)
            is_device = a.is_device
            per_device = a.per_device
            reads: list = []
            writes: list = []
            # The argument of each range pair, in step with reads, writes.
            rnames: list = []
            wnames: list = []
            device = -2
            nargs = len(args)
            for (pos, name, kind, nest), aid in zip(spec.args, arg_ids):
                v = args[pos] if pos < nargs else kwargs.get(name)
                if v is None:
                    continue
                if kind == WRITE:
                    out, names = writes, wnames
                else:
                    out, names = reads, rnames
                if nest == 0:
                    # A Tensor argument may come as a Python number.
                    if isinstance(v, _Tensor) and is_device(v):
                        p = v.data_ptr()
                        if v.is_contiguous():
                            n = v.numel() * v.element_size()
                            if n and p:
                                out += (p, n)
                        elif p:
                            strided_ranges(p, v.element_size(), v.size(),
                                           v.stride(), out)
                        if device == -2 and per_device:
                            device = v.get_device()
                else:
                    d = _collect(v, nest, out, is_device, per_device)
                    if device == -2:
                        device = d
                names += (aid,) * ((len(out) >> 1) - len(names))
            stack = a.stacks.capture(1)
        except Exception as err:
            a.fail(err)
            return func(*args, **kwargs)
        tid = get_ident()
        a.inside[tid] = None
        try:
            result = func(*args, **kwargs)
        except BaseException:
            a.release(tid)
            raise
        try:
            pending = a.pending
            if spec.returns:
                values = (result,) if spec.single_return else result
                for (i, nest), rid in zip(spec.returns, ret_ids):
                    v = values[i]
                    if nest == 0 and isinstance(v, _Tensor):
                        if not is_device(v):
                            continue
                        p = v.data_ptr()
                        if v.is_contiguous():
                            n = v.numel() * v.element_size()
                            if n and p:
                                writes += (p, n)
                        elif p:
                            n = _extent(v)
                            strided_ranges(p, v.element_size(), v.size(),
                                           v.stride(), writes)
                        if device == -2 and per_device:
                            device = v.get_device()
                        # A pending allocation that starts where a fresh
                        # output does is that output's storage.
                        if p in pending:
                            a.alloc(p, n, pending.pop(p), stack)
                    elif v is not None:
                        d = _collect(v, nest, writes, is_device, per_device)
                        if device == -2:
                            device = d
                    wnames += (rid,) * ((len(writes) >> 1) - len(wnames))
            if pending:
                a.claim(result, stack)
            if reads or writes:
                nr = len(reads) >> 1
                nw = len(writes) >> 1
                reads += writes
                buf = array("Q", reads)
                addr = buf.buffer_info()[0]
                stream = a.current_stream(device)
                if a.launch_args is not None:
                    ids = array("I", rnames + wnames)
                    iaddr = ids.buffer_info()[0]
                    a.launch_args(stream, op, addr, iaddr, nr,
                                  addr + (nr << 4), iaddr + (nr << 2), nw,
                                  stack)
                else:
                    a.launch(stream, op, addr, nr, addr + (nr << 4), nw,
                             stack)
        except Exception as err:
            a.fail(err)
        a.release(tid)
        return result
