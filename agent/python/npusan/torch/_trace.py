"""The frameworks' trace-callback registries, as the backends and the CPU
emulation both need them: the kinds of operation they report, how to find
them in a framework's trace module, and how to register with them.

A registry is an object with ``add_callback(cb)`` (torch_npu's also takes
a name) and ``fire_callbacks(*args)``; its callbacks get stream and event
handles as integers, and storage starts for allocations.
"""

import importlib
import inspect
from typing import Callable, Dict

# Registry kinds, and the name each has after its prefix ("NPU", "CUDA" or
# none) and before "Callbacks".
KINDS = {
    "stream_creation": "StreamCreation",
    "stream_synchronization": "StreamSynchronization",
    "event_creation": "EventCreation",
    "event_deletion": "EventDeletion",
    "event_record": "EventRecord",
    "event_wait": "EventWait",
    "event_synchronization": "EventSynchronization",
    "device_synchronization": "DeviceSynchronization",
    "memory_allocation": "MemoryAllocation",
    "memory_deallocation": "MemoryDeallocation",
    "record_stream": "RecordStream",
}


class Unavailable(Exception):
    """The backend asked for is not there; the message says why."""


def module(*names: str):
    """The first of the modules `names` that imports, or None."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    return None


def find_registries(mod, prefixes) -> Dict[str, object]:
    """The registries of `mod` by kind, each under the first prefix that
    names one."""
    found = {}
    for kind, stem in KINDS.items():
        for prefix in prefixes:
            reg = getattr(mod, f"{prefix}{stem}Callbacks", None)
            if reg is not None and hasattr(reg, "add_callback"):
                found[kind] = reg
                break
    return found


def add_callback(registry, cb: Callable) -> None:
    """Registers `cb`; torch_npu's registries also take a name."""
    params = inspect.signature(registry.add_callback).parameters
    if len(params) >= 2:
        registry.add_callback(cb, "npusan")
    else:
        registry.add_callback(cb)


def torch_trace_registries() -> Dict[str, object]:
    """The registries of this PyTorch's own (CUDA) trace module."""
    mod = module("torch.cuda._gpu_trace", "torch.utils._cuda_trace")
    if mod is None:
        raise Unavailable("this PyTorch has no GPU trace module "
                          "(torch.cuda._gpu_trace or torch.utils._cuda_trace)")
    found = find_registries(mod, ("", "CUDA"))
    if "memory_allocation" not in found:
        raise Unavailable(f"{mod.__name__} has no trace registries")
    return found
