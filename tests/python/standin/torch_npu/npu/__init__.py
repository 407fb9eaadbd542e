"""The stand-in's ``torch_npu.npu`` (also ``torch.npu``): one device, its
streams and events, on npusan.torch.emulate."""

import contextlib
from typing import Optional

import torch

from npusan.torch import emulate

from .streams import Event, Stream, _wrap

__all__ = ["Event", "Stream", "current_device", "current_stream",
           "default_stream", "device", "device_count", "is_available",
           "set_device", "stream", "synchronize"]


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def set_device(device) -> None:
    if _index(device) != 0:
        raise RuntimeError("the stand-in has one NPU, device 0")


def _index(device) -> int:
    if device is None:
        return 0
    if isinstance(device, torch.device):
        return 0 if device.index is None else device.index
    if isinstance(device, str):
        return int(device.partition(":")[2] or 0)
    return 0 if device < 0 else device


@contextlib.contextmanager
def device(dev):
    set_device(dev)
    yield


def current_stream(device=None) -> Stream:
    """This thread's current stream on the device."""
    return _wrap(emulate.current_stream())


def default_stream(device=None) -> Stream:
    return _wrap(emulate.default_stream())


class stream:
    """``with torch.npu.stream(s):`` makes `s` the current stream of this
    thread in its block; ``stream(None)`` changes nothing."""

    def __init__(self, s: Optional[Stream]):
        self._inner = emulate.stream(None if s is None else s._emulated)

    def __enter__(self):
        self._inner.__enter__()

    def __exit__(self, *exc) -> None:
        self._inner.__exit__(*exc)


def synchronize(device=None) -> None:
    """The host waits for every stream of the device."""
    emulate.synchronize()


def _patch_record_stream() -> None:
    """Tensor.record_stream(s) of a stand-in stream goes to the
    allocator's recordStream (see the package's docstring)."""
    original = torch.Tensor.record_stream

    def record_stream(self, s):
        if isinstance(s, Stream):
            emulate.record_stream(self, s._emulated)
        else:
            original(self, s)

    torch.Tensor.record_stream = record_stream
