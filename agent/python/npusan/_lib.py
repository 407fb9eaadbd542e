"""The ctypes binding of libnpusan: agent/npusan.h's functions, typed once.

The library is the first of these that loads:

1. ``$NPUSAN_LIBRARY``, an absolute path (``npusanctl run`` sets it and
   also preloads that file); when set, nothing else is tried;
2. ``libnpusan.so.0`` through the dynamic linker, which finds a preloaded
   copy, ``LD_LIBRARY_PATH`` and the ld.so cache;
3. the path ``cmake --install`` recorded in ``npusan/_installed.py``, for a
   prefix the ld.so cache does not know yet (``/usr/local`` before
   ``ldconfig``).

The hot functions are bound through ``ctypes.PyDLL``: each call keeps the
GIL, which saves releasing and taking it again around a call that costs
tens of nanoseconds and never blocks. ``npusan_wait_drained()`` may wait,
so it alone goes through ``ctypes.CDLL`` and lets other threads run.
"""

import ctypes
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType
from typing import List, Optional, Tuple

SONAME = "libnpusan.so.0"

# npusan.h's constants.
NO_STREAM = (1 << 64) - 1
STACK_NONE = 0
LOST_UNKNOWN = (1 << 64) - 1
# npusan_intern_stack() takes at most this many frames.
MAX_STACK_FRAMES = 256

_u64 = ctypes.c_uint64
_u32 = ctypes.c_uint32
_ptr = ctypes.c_void_p
_size = ctypes.c_size_t

# name: (restype, argtypes), as npusan.h declares them.
_SIGNATURES = {
    "npusan_init": (ctypes.c_int, ()),
    "npusan_enabled": (ctypes.c_int, ()),
    "npusan_intern": (_u32, (ctypes.c_char_p,)),
    "npusan_intern_stack": (_u32, (_ptr, _size)),
    "npusan_stream_create": (None, (_u64,)),
    "npusan_event_create": (None, (_u64,)),
    "npusan_event_destroy": (None, (_u64,)),
    "npusan_event_record": (None, (_u64, _u64)),
    "npusan_event_wait": (None, (_u64, _u64)),
    "npusan_event_sync": (None, (_u64,)),
    "npusan_stream_wait": (None, (_u64, _u64)),
    "npusan_stream_sync": (None, (_u64,)),
    "npusan_device_sync": (None, ()),
    "npusan_alloc": (None, (_u64, _u64, _u64, _u32)),
    "npusan_free": (None, (_u64,)),
    "npusan_record_stream": (None, (_u64, _u64)),
    "npusan_launch": (None, (_u64, _u32, _ptr, _size, _ptr, _size, _u32)),
    "npusan_flush": (None, ()),
    "npusan_gap": (None, (_u64,)),
}

# NPUSAN_1.2's graph calls: an older library lacks them, and then graphs
# are not followed (Agent.graphs is False), the rest works as before.
_GRAPH_SIGNATURES = {
    "npusan_capture_begin": (None, (_u64, _u64)),
    "npusan_capture_end": (None, (_u64, _u64)),
    "npusan_graph_replay": (None, (_u64, _u64)),
    "npusan_graph_destroy": (None, (_u64,)),
    "npusan_alloc_graph": (None, (_u64, _u64, _u64, _u64)),
}


# NPUSAN_1.3's calls: an older library lacks them, and then launches name
# no arguments and frees no stack (Agent.launch_args and Agent.free_at are
# None), the rest works as before.
_ARGS_SIGNATURES = {
    "npusan_launch_args": (None, (_u64, _u32, _ptr, _ptr, _size, _ptr, _ptr,
                                  _size, _u32)),
    "npusan_free_at": (None, (_u64, _u32)),
}


class Agent:
    """libnpusan's functions as attributes named without the ``npusan_``
    prefix (``agent.launch(...)``), with npusan.h's argument types.

    Ranges (``struct npusan_range``) are passed as the address of an array
    of uint64 pairs, pointer then length, which is that struct's layout.
    """

    def __init__(self, path: str, fast: ctypes.PyDLL, blocking: ctypes.CDLL):
        self.path = path
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(fast, name)
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name[len("npusan_"):], fn)
        self.graphs = True
        for name, (restype, argtypes) in _GRAPH_SIGNATURES.items():
            fn = getattr(fast, name, None)
            if fn is None:
                self.graphs = False
                break
            fn.restype = restype
            fn.argtypes = argtypes
            setattr(self, name[len("npusan_"):], fn)
        for name, (restype, argtypes) in _ARGS_SIGNATURES.items():
            fn = getattr(fast, name, None)
            if fn is not None:
                fn.restype = restype
                fn.argtypes = argtypes
            setattr(self, name[len("npusan_"):], fn)
        wait = blocking.npusan_wait_drained
        wait.restype = ctypes.c_int
        wait.argtypes = (ctypes.c_uint,)
        self.wait_drained = wait
        self._state = ctypes.c_int.in_dll(fast, "npusan_state_")

    def active(self) -> bool:
        """npusan_active(): whether calling the agent can do anything (it
        is off, for one, under NPUSAN=0). Unlike npusan_enabled(), also
        true for an agent that has registered but pushes only lifetimes
        until a daemon attaches it."""
        return self._state.value != 0

    def pointers(self) -> Tuple[int, int, int, int, int]:
        """The addresses of npusan_launch, npusan_alloc, npusan_free,
        npusan_launch_args and npusan_free_at (0 where the library lacks
        one), for npusan._speedups to call directly."""
        fns = (self.launch, self.alloc, self.free, self.launch_args,
               self.free_at)
        return tuple(ctypes.cast(fn, ctypes.c_void_p).value or 0
                     if fn is not None else 0 for fn in fns)


def _installed_path() -> Optional[str]:
    try:
        from . import _installed  # written by cmake --install only
    except ImportError:
        return None
    return _installed.LIBRARY


def candidates() -> List[str]:
    """The paths or names tried, in order."""
    explicit = os.environ.get("NPUSAN_LIBRARY")
    if explicit:
        return [explicit]
    found = [SONAME]
    installed = _installed_path()
    if installed:
        found.append(installed)
    return found


def load() -> Tuple[Optional[Agent], str]:
    """(the agent, "") or (None, why none of the candidates loaded)."""
    errors = []
    for path in candidates():
        try:
            fast = ctypes.PyDLL(path)
            blocking = ctypes.CDLL(path)
            return Agent(path, fast, blocking), ""
        except (OSError, AttributeError) as err:
            errors.append(f"{path}: {err}")
    return None, "; ".join(errors)


def load_speedups(agent_path: str) -> Optional[ModuleType]:
    """npusan._speedups, the adapter's per-operator path in C, or None
    (then the same path runs in Python): installed beside this package, or
    built beside the library `agent_path` names (a build tree).
    ``NPUSAN_PYTHON_SPEEDUPS=0`` keeps it out."""
    if os.environ.get("NPUSAN_PYTHON_SPEEDUPS") == "0":
        return None
    return _load_extension("_speedups", agent_path)[0]


def load_torchhook(agent_path: str) -> Tuple[Optional[ModuleType], str]:
    """(npusan._torchhook, "") or (None, why not): the adapter's hook in
    PyTorch's C++ dispatcher, found as npusan._speedups is. Where it is
    missing, the adapter's dispatch mode runs instead.
    ``NPUSAN_TORCH_HOOK=0`` keeps it out, with "" as the reason."""
    if os.environ.get("NPUSAN_TORCH_HOOK") == "0":
        return None, ""
    return _load_extension("_torchhook", agent_path)


def _load_extension(name: str,
                    agent_path: str) -> Tuple[Optional[ModuleType], str]:
    """(npusan.<name>, "") or (None, why not): installed beside this
    package, or built beside the library `agent_path` names."""
    errors = []
    try:
        return importlib.import_module(__package__ + "." + name), ""
    except ImportError as err:
        if getattr(err, "name", None) != __package__ + "." + name:
            errors.append(str(err))  # there, but it did not load
    where = os.path.dirname(agent_path)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(where, name + suffix)
        if not where or not os.path.exists(path):
            continue
        try:
            spec = importlib.util.spec_from_file_location(
                __package__ + "." + name, path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except ImportError as err:
            errors.append(f"{path}: {err}")  # built for another Python
            continue
        sys.modules[spec.name] = module
        return module, ""
    return None, "; ".join(errors) or "not built"
