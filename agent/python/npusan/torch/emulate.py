"""A CPU stand-in for an accelerator's streams, events and caching
allocator, for tests and demos on machines without one.

With ``NPUSAN_TORCH_DEVICE=cpu`` the adapter counts CPU tensors as device
tensors and takes the current stream from here. Everything below fires the
trace callbacks a real framework fires, at the moments it fires them, so
the adapter's real callback path runs:

- ``Stream()`` is a fresh stream (stream creation), ``Stream(id)`` the
  stream with that id (created the first time the id is seen) and
  ``Stream(0)`` the default stream, which exists from the start;
- ``Event.record()`` creates the event on its first record (event creation,
  as CUDA and ACL events are created lazily), then records (event record);
  ``Event.wait()`` waits on the device (event wait), and an event never
  recorded is waited for by no one, as in torch.cuda; ``synchronize()``
  blocks the host (event synchronization); a recorded event that is garbage
  collected is destroyed (event deletion);
- ``Stream.wait_stream(other)`` is, as in torch.cuda, an event recorded on
  `other` and waited for on this stream;
- ``Stream.synchronize()`` and ``synchronize()`` are stream and device
  synchronization, and an operator that hands a tensor's value to the host
  (``aten::_local_scalar_dense``: ``item()``, ``bool()``, ``int()`` of a
  tensor) synchronizes the current stream once it has it, as a device's
  copy to the host does;
- ``Graph()`` stands in for ``torch.cuda.CUDAGraph``: ``capture_begin()``,
  ``capture_end()``, ``replay()``, ``reset()``, ``pool()``; and
  ``graph(g, pool=None, stream=None)`` for ``torch.cuda.graph``: it
  synchronizes, makes `stream` (default: one side stream kept for
  captures, as torch's) current and captures into `g` in its block. The
  CPU captures nothing: the operators of the block run once, as they are
  issued, and the adapter, which follows this class as it follows
  ``CUDAGraph``, reports them as captured; ``replay()`` runs nothing and
  is reported as the graph's replay. While a capture is active on the
  current stream, the allocations made are from the graph's pool, as
  the caching allocator's are;
- ``record_stream(tensor, stream)`` tells the allocator that the tensor's
  storage is used on `stream`, through ``RecordStreamCallbacks`` with the
  storage's start, as torch_npu's caching allocator reports it. (torch.cuda
  reports it only as the operator ``aten::record_stream``, and torch 1.13
  cannot pass that operator's Stream argument to Python.)

The allocator: CPU storages have no allocation hook in torch 1.13, and the
Python storage objects are made afresh on each access, so a weak reference
to one says nothing about the storage. ``start()`` therefore
installs a dispatch mode that looks at the tensors each operator returns:
a tensor whose storage starts at an address no live storage has is an
allocation, made on the current stream (memory allocation, with the
storage's start). Each tensor object returned gets a weak reference, and
when the last one on a storage dies the storage counts as freed (memory
deallocation). PyTorch keeps a tensor object alive as long as C++ holds the
tensor (autograd's saved tensors, for one), so this follows the storage
closely. Data made outside the dispatcher (``torch.tensor(data)``,
``torch.from_numpy``) counts when the ``lift_fresh`` that hands it to Python
returns it; a tensor that reaches Python through no dispatched operator at
all (one a C++ extension builds) never counts, and ``resize_`` or ``set_``
moving a tensor to other memory is not followed.

Stream and event ids are small integers: 0 the default stream, fresh
streams from 1, events from 1.
"""

import atexit
import itertools
import threading
import weakref
from typing import Callable, Dict, Optional, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ._trace import torch_trace_registries

# The registries this PyTorch's trace module fires (stream, event, sync,
# allocation), by kind; and record_stream's, which it lacks.
REGISTRIES = torch_trace_registries()
RecordStreamCallbacks = type(REGISTRIES["stream_creation"])(
    "npusan emulated record_stream")
REGISTRIES["record_stream"] = RecordStreamCallbacks

_fresh_streams = itertools.count(1)
_fresh_events = itertools.count(1)
_streams_seen = {0}
_lock = threading.Lock()


def _fire_registries(kind: str, *args) -> None:
    REGISTRIES[kind].fire_callbacks(*args)


# Where each report goes, as fn(kind, *args) with a kind of _trace.KINDS
# and the emulation's stream and event ids: REGISTRIES unless report_to()
# says otherwise.
_report: Callable[..., None] = _fire_registries


def report_to(fn: Callable[..., None]) -> None:
    """From now on the emulation reports each stream and event operation,
    synchronization, allocation, free and record_stream as fn(kind, *args)
    rather than through REGISTRIES: a stand-in for a framework passes them
    on as that framework's C++ side would."""
    global _report
    _report = fn


def _fire(kind: str, *args) -> None:
    _report(kind, *args)


class Stream:
    """A stream: ``Stream()`` a fresh one, ``Stream(id)`` the given one."""

    def __init__(self, id: Optional[int] = None):
        with _lock:
            if id is None:
                id = next(_fresh_streams)
                while id in _streams_seen:
                    id = next(_fresh_streams)
            created = id not in _streams_seen
            _streams_seen.add(id)
        self.id = id
        if created:
            _fire("stream_creation", id)

    def wait_stream(self, other: "Stream") -> None:
        """Later work on this stream waits for the work on `other` so far."""
        self.wait_event(other.record_event())

    def wait_event(self, event: "Event") -> None:
        event.wait(self)

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        if event is None:
            event = Event()
        event.record(self)
        return event

    def synchronize(self) -> None:
        """The host waits until this stream has drained."""
        _fire("stream_synchronization", self.id)

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<npusan.torch.emulate.Stream id={self.id}>"


def _destroy_event(id: int) -> None:
    _fire("event_deletion", id)


class Event:
    """An event, created on the device at its first record."""

    def __init__(self):
        self.id = next(_fresh_events)
        self._created = False

    def record(self, stream: Optional[Stream] = None) -> None:
        """Captures the work submitted to `stream` (default: the current
        one) so far."""
        if stream is None:
            stream = current_stream()
        if not self._created:
            self._created = True
            _fire("event_creation", self.id)
            weakref.finalize(self, _destroy_event, self.id).atexit = False
        _fire("event_record", self.id, stream.id)

    def wait(self, stream: Optional[Stream] = None) -> None:
        """Later work on `stream` (default: the current one) waits for
        this event."""
        if stream is None:
            stream = current_stream()
        if self._created:
            _fire("event_wait", self.id, stream.id)

    def synchronize(self) -> None:
        """The host waits for this event."""
        if self._created:
            _fire("event_synchronization", self.id)

    def __repr__(self) -> str:
        return f"<npusan.torch.emulate.Event id={self.id}>"


_DEFAULT = Stream(0)


# Each thread's current stream, where it is not the default stream, by
# thread id (threading.get_ident()), and its id likewise: a dictionary,
# not a threading.local, so that the adapter's C path reads the id with
# one lookup (STREAM_READER), as a framework's current stream is one
# thread-local read in C++. A thread has an entry only inside a
# ``with stream(s)`` block, whose end takes it out again, so that an id
# reused by a later thread finds none.
_current: Dict[int, "Stream"] = {}
_current_ids: Dict[int, int] = {}


def _set_current(s: "Stream") -> None:
    tid = threading.get_ident()
    if s is _DEFAULT:
        _current.pop(tid, None)
        _current_ids.pop(tid, None)
    else:
        _current[tid] = s
        _current_ids[tid] = s.id


def default_stream() -> Stream:
    return _DEFAULT


def current_stream() -> Stream:
    """This thread's current stream (the default stream at first)."""
    return _current.get(threading.get_ident(), _DEFAULT)


def current_stream_id(device: int = -1) -> int:
    """The current stream's id; `device` is there for the adapter, which
    asks a real backend for the current stream of a device."""
    return _current_ids.get(threading.get_ident(), _DEFAULT.id)


# current_stream_id() as (table, default): the id is table's entry for
# this thread's id, else default (Backend.stream_reader).
STREAM_READER = (_current_ids, _DEFAULT.id)


class stream:
    """``with stream(s):`` makes `s` the current stream of this thread in
    its block, like ``torch.cuda.stream``; ``stream(None)`` changes
    nothing."""

    def __init__(self, s: Optional[Stream]):
        self._stream = s
        self._saved: Optional[Stream] = None

    def __enter__(self) -> Optional[Stream]:
        if self._stream is not None:
            self._saved = current_stream()
            _set_current(self._stream)
        return self._stream

    def __exit__(self, *exc) -> None:
        if self._stream is not None:
            _set_current(self._saved)


def synchronize() -> None:
    """The host waits until every stream has drained."""
    _fire("device_synchronization")


class Graph:
    """A stand-in for ``torch.cuda.CUDAGraph`` (see the module's doc)."""

    def __init__(self):
        self._stream: Optional[Stream] = None
        self._captured = False

    def capture_begin(self, pool=None, capture_error_mode="global") -> None:
        if self._stream is not None:
            raise RuntimeError("this graph is already capturing")
        self._captured = False
        self._stream = current_stream()

    def capture_end(self) -> None:
        if self._stream is None:
            raise RuntimeError("this graph is not capturing")
        self._stream = None
        self._captured = True

    def replay(self) -> None:
        """The captured work would run again, on the current stream; the
        CPU has nothing to run."""
        if not self._captured:
            raise RuntimeError("replay() of a graph not captured")

    def reset(self) -> None:
        self._captured = False

    def pool(self) -> int:
        return id(self)


class graph:
    """``with graph(g):`` captures the block into Graph `g`, like
    ``torch.cuda.graph``: `stream` is the capture stream (default: one
    side stream kept for all captures); `pool` is accepted and unused."""

    default_capture_stream: Optional[Stream] = None

    def __init__(self, cuda_graph: Graph, pool=None,
                 stream: Optional[Stream] = None,
                 capture_error_mode: str = "global"):
        if stream is None:
            if graph.default_capture_stream is None:
                graph.default_capture_stream = Stream()
            stream = graph.default_capture_stream
        self.graph = cuda_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode
        self.stream_ctx = globals()["stream"](stream)

    def __enter__(self) -> None:
        synchronize()
        self.stream_ctx.__enter__()
        self.graph.capture_begin(self.pool, self.capture_error_mode)

    def __exit__(self, *exc) -> None:
        try:
            self.graph.capture_end()
        finally:
            self.stream_ctx.__exit__(*exc)


def _storage_start(t: torch.Tensor) -> int:
    return t.data_ptr() - t.storage_offset() * t.element_size()


def record_stream(tensor: torch.Tensor, s: Stream) -> None:
    """The caching allocator is told `tensor`'s storage is used on `s`."""
    _fire("record_stream", _storage_start(tensor), s.id)


# The allocator's books: live storages by start, with how many tracked
# tensor objects use each; and each tracked tensor object by id, with its
# weak reference and its storage's start.
_live: Dict[int, int] = {}
_tracked: Dict[int, Tuple[weakref.ref, int]] = {}
_by_ref: Dict[weakref.ref, int] = {}
# Closed at exit: tensors that die while the interpreter tears itself down
# free nothing that could be reused, and this module may be half gone (its
# globals None).
_books_open = True


def _close_books() -> None:
    global _books_open
    _books_open = False


atexit.register(_close_books)


def _released(ref: weakref.ref) -> None:
    if not _books_open:
        return
    tid = _by_ref.pop(ref)
    _, start = _tracked.pop(tid)
    left = _live[start] - 1
    if left:
        _live[start] = left
    else:
        del _live[start]
        _fire("memory_deallocation", start)


def _track(t: torch.Tensor) -> None:
    tid = id(t)
    if tid in _tracked:
        return
    start = _storage_start(t)
    if start == 0:
        return
    if start not in _live:
        _live[start] = 0
        _fire("memory_allocation", start)
    _live[start] += 1
    ref = weakref.ref(t, _released)
    _tracked[tid] = (ref, start)
    _by_ref[ref] = tid


def _track_all(value) -> None:
    if isinstance(value, torch.Tensor):
        _track(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _track_all(v)


_TO_HOST = torch.ops.aten._local_scalar_dense.default


class _Device(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        _track_all(out)
        if func is _TO_HOST:
            _fire("stream_synchronization", current_stream_id())
        return out


_device: Optional[_Device] = None


def start() -> None:
    """From now on, operators on CPU tensors allocate, free and synchronize
    as on a device: the storages of the tensors they return are reported
    as allocations and their deaths as frees, and a value handed to the
    host synchronizes the current stream. Idempotent."""
    global _device
    if _device is None:
        _device = _Device()
        _device.__enter__()
