"""The stand-in's ``torch_npu.npu.streams``: Stream and Event with
torch_npu's signatures, each one of npusan.torch.emulate's underneath.

``Stream()`` hands out the device's pool streams in turn; the pool's 32
streams are created together the first time one is asked for, as
NPUStream.cpp's getStreamFromPool does, and each creation is traced.
"""

import threading
from typing import Dict, List, Optional

from npusan.torch import emulate

from .. import _C, _acl

POOL_SIZE = 32

_pool: List[emulate.Stream] = []
_next = 0
_wrappers: Dict[int, "Stream"] = {}
_lock = threading.Lock()


def _wrap(em: emulate.Stream) -> "Stream":
    with _lock:
        s = _wrappers.get(em.id)
        if s is None:
            s = object.__new__(Stream)
            s._emulated = em
            _wrappers[em.id] = s
    return s


def _from_pool() -> emulate.Stream:
    global _next
    with _lock:
        if not _pool:
            _pool.extend(emulate.Stream() for _ in range(POOL_SIZE))
        em = _pool[_next % POOL_SIZE]
        _next += 1
    return em


class Stream:
    """A stream of the device; ``Stream(stream_id=ID, device_index=...,
    device_type=...)`` the existing stream with that id."""

    def __new__(cls, device=None, priority=0, **kwargs):
        if "stream_id" in kwargs:
            return _wrap(emulate.Stream(kwargs["stream_id"]))
        return _wrap(_from_pool())

    @property
    def npu_stream(self) -> int:
        """The aclrtStream, once the task queue is drained."""
        _C.task_queue_drains += 1
        return _acl.stream_handle(self._emulated.id)

    @property
    def stream_id(self) -> int:
        return self._emulated.id

    @property
    def device_index(self) -> int:
        return 0

    def wait_event(self, event: "Event") -> None:
        event.wait(self)

    def wait_stream(self, stream: "Stream") -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: Optional["Event"] = None) -> "Event":
        if event is None:
            event = Event()
        event.record(self)
        return event

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        self._emulated.synchronize()

    def __eq__(self, other) -> bool:
        return (isinstance(other, Stream) and
                other._emulated.id == self._emulated.id)

    def __hash__(self) -> int:
        return hash(self._emulated.id)

    def __repr__(self) -> str:
        return (f"<torch_npu.npu.Stream device=npu:0 "
                f"npu_stream={_acl.stream_handle(self._emulated.id):#x}>")


class Event:
    """An event, created on the device at its first record."""

    def __init__(self, enable_timing=False, blocking=False,
                 interprocess=False):
        self._emulated = emulate.Event()

    def record(self, stream: Optional[Stream] = None) -> None:
        if stream is None:
            stream = _wrap(emulate.current_stream())
        self._emulated.record(stream._emulated)

    def wait(self, stream: Optional[Stream] = None) -> None:
        if stream is None:
            stream = _wrap(emulate.current_stream())
        self._emulated.wait(stream._emulated)

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        self._emulated.synchronize()

    @property
    def npu_event(self) -> int:
        return _acl.event_handle(self._emulated.id)
