"""Python stacks as agent stack ids, formatted once per distinct stack.

A stack is captured by walking the interpreter's frames with
``sys._getframe`` and keyed by each frame's code object and bytecode offset
(``f_lasti``), which fixes its line: reading ``f_lineno`` instead would make
CPython 3.11 decode the line table of every frame on every call, several
times the cost of the walk. Only a key never seen before is formatted
("file:line in function", innermost first) and interned with
``npusan_intern()`` / ``npusan_intern_stack()``; every later capture of the
same stack is the walk and one dictionary lookup.

Keys hold ``id(code)`` rather than the code object, because hashing a code
object hashes its bytecode and constants on every lookup; the cache keeps a
reference to every code object its keys name, so no id can be reused by
another code object while a key holds it.
"""

import ctypes
import os
import sys
from typing import Callable, Dict, Iterable, List, Tuple

from . import _lib

_getframe = sys._getframe

DEFAULT_FRAMES = 32


def frames_from_env() -> int:
    """``NPUSAN_PYTHON_STACKS``: Python frames per stack, 0 (off) to 256;
    a value that is not a number there gives the default."""
    raw = os.environ.get("NPUSAN_PYTHON_STACKS", "")
    try:
        n = int(raw)
    except ValueError:
        return DEFAULT_FRAMES
    return max(0, min(n, _lib.MAX_STACK_FRAMES))


class Stacks:
    """Captures the calling Python stack as an agent stack id.

    ``skip_files`` are path prefixes (directories or files) of frames that
    belong to machinery (this package, PyTorch's dispatch-mode stack, the
    runner): leading frames from them are left out, so that a stack starts
    at the line that called the operator, and so are trailing ones, so that
    it ends at the user's outermost frame.
    """

    def __init__(self, agent: "_lib.Agent", max_frames: int,
                 skip_files: Iterable[str]):
        self._intern = agent.intern
        self._intern_stack = agent.intern_stack
        self._max = max_frames
        self._skip_files = tuple(skip_files)
        self._ids: Dict[Tuple[int, ...], int] = {}
        self._frame_ids: Dict[str, int] = {}
        # id(code) -> whether its frames are machinery; and id(code) -> code
        # for every code object either cache names, kept alive so that
        # their ids stay theirs.
        self._skip: Dict[int, bool] = {}
        self._codes: Dict[int, object] = {}
        # What to call when what is machinery changes: the C path's
        # copies of _skip (npusan._speedups' Core.forget_machinery).
        self.forgetters: List[Callable[[], None]] = []

    def capture(self, depth: int = 1) -> int:
        """The id of the stack of the caller `depth` frames up from the
        caller of capture(), machinery frames first skipped;
        ``_lib.STACK_NONE`` when stacks are off or the agent could not
        intern it."""
        n = self._max
        if n == 0:
            return _lib.STACK_NONE
        f = _getframe(depth + 1)
        skip = self._skip
        while f is not None:
            machinery = skip.get(id(f.f_code))
            if machinery is None:
                machinery = self._classify(f.f_code)
            if not machinery:
                break
            f = f.f_back
        top = f
        key: List[int] = []
        add = key.append
        while f is not None and n:
            add(id(f.f_code))
            add(f.f_lasti)
            f = f.f_back
            n -= 1
        k = tuple(key)
        sid = self._ids.get(k)
        if sid is None:
            sid = self._name(k, top, len(key) // 2)
        return sid

    def add_machinery(self, files: Iterable[str]) -> None:
        """Counts the frames of `files` as machinery too (the trace
        registries' fire_callbacks, between the code that freed memory and
        the deallocation callback); forgets what was classified before, in
        place, since npusan._speedups holds the cache, and has the C path
        forget its copies."""
        self._skip_files += tuple(f for f in files
                                  if f not in self._skip_files)
        self._skip.clear()
        for forget in self.forgetters:
            forget()

    def _classify(self, code) -> bool:
        machinery = code.co_filename.startswith(self._skip_files)
        self._skip[id(code)] = machinery
        self._codes[id(code)] = code
        return machinery

    def _name(self, key, top, count: int) -> int:
        """Formats and interns the stack of `count` frames from frame `top`,
        and remembers its id under `key`."""
        frames = []
        f = top
        for _ in range(count):
            self._codes[id(f.f_code)] = f.f_code
            frames.append(f)
            f = f.f_back
        while frames and frames[-1].f_code.co_filename.startswith(
                self._skip_files):
            frames.pop()
        ids = []
        for f in frames:
            code = f.f_code
            text = f"{code.co_filename}:{f.f_lineno} in {code.co_name}"
            fid = self._frame_ids.get(text)
            if fid is None:
                fid = self._intern(text.encode("utf-8", "backslashreplace"))
                self._frame_ids[text] = fid
            ids.append(fid)
        if not ids or 0 in ids:
            sid = _lib.STACK_NONE
        else:
            arr = (ctypes.c_uint32 * len(ids))(*ids)
            sid = self._intern_stack(ctypes.addressof(arr), len(ids))
        self._ids[key] = sid
        return sid
