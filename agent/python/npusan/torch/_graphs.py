"""Graph capture and replay followed (trace format version 2).

The framework's graph classes (``torch.cuda.CUDAGraph``, torch_npu's
``NPUGraph``, the emulation's ``Graph``) get their ``capture_begin``,
``capture_end``, ``replay`` and ``reset`` wrapped: ``torch.cuda.graph``,
``make_graphed_callables`` and torch_npu's ``npu.graph`` all go through
them. PyTorch 2.6 has no process-wide graph hooks to register instead (its
``torch.cuda.graphs`` has none), so the methods are wrapped on the class,
which covers every graph object, made before enable() or after.

- A graph's id is a number taken from a counter the first time the adapter
  sees the object, kept on it (or, for an object that takes no attribute,
  by its id()); ``reset()`` and the object's death destroy the graph.
- ``capture_begin`` is reported on the current stream once the framework
  has begun the capture; ``capture_end`` on the stream that capture began
  on, before the framework ends it, so that a capture the runtime refuses
  (an unjoined stream) still reaches npusan, which names the stream.
  ``replay`` is reported on the current stream, before it runs.
- Which streams are in a capture: its origin, and a stream that waits on an
  event recorded on a stream in it (``wait_stream`` is that), as the
  spec's join rule says. An allocation for a stream in a capture comes
  from the graph's private pool, as the caching allocator hands it out
  (``npusan_alloc_graph``).

Any failure turns the adapter off with one line; the framework's own
method always runs, once, and its exceptions pass through untouched.
"""

import functools
import itertools
import weakref
from typing import Dict

ATTR = "_npusan_graph"
METHODS = ("capture_begin", "capture_end", "replay", "reset")

_ids = itertools.count(1)
# The Graphs the wrapped methods report to: the running adapter's (a class
# is wrapped once, whichever adapter wrapped it).
_active = None


class Graphs:
    """The captures in progress and the graph ids, for one adapter."""

    def __init__(self, adapter):
        self.adapter = adapter
        self.agent = adapter.agent
        # Stream -> graph id, for the streams in an active capture; the
        # origin stream of each capturing graph; event -> graph id for
        # events whose latest record was made by a capture.
        self.capturing: Dict[int, int] = adapter.capturing
        self.origin: Dict[int, int] = {}
        self.events: Dict[int, int] = {}
        self.by_object: Dict[int, int] = {}

    # ---- the wrapped methods ------------------------------------------

    def graph_id(self, obj) -> int:
        gid = getattr(obj, ATTR, None)
        if gid is None:
            gid = self.by_object.get(id(obj))
        if gid is not None:
            return gid
        gid = next(_ids)
        try:
            setattr(obj, ATTR, gid)
        except (AttributeError, TypeError):
            self.by_object[id(obj)] = gid
        try:
            weakref.finalize(obj, self.destroyed, gid).atexit = False
        except TypeError:
            pass  # no weak references: reset() alone destroys it
        return gid

    def capture_begin(self, obj) -> None:
        gid = self.graph_id(obj)
        stream = self.adapter.current_stream(-1)
        self.end(gid)
        self.origin[gid] = stream
        self.capturing[stream] = gid
        self.agent.capture_begin(stream, gid)

    def capture_end(self, obj) -> None:
        gid = self.graph_id(obj)
        stream = self.origin.get(gid)
        if stream is None:
            return
        self.agent.capture_end(stream, gid)
        self.end(gid)

    def replay(self, obj) -> None:
        self.agent.graph_replay(self.graph_id(obj),
                                self.adapter.current_stream(-1))

    def reset(self, obj) -> None:
        self.destroyed(self.graph_id(obj))

    def end(self, gid: int) -> None:
        """Graph gid's capture, if any, is over: its streams leave it."""
        if self.origin.pop(gid, None) is None:
            return
        for table in (self.capturing, self.events):
            for key in [k for k, g in table.items() if g == gid]:
                del table[key]

    def destroyed(self, gid: int) -> None:
        if not self.adapter.on:
            return
        try:
            self.end(gid)
            self.agent.graph_destroy(gid)
        except Exception as err:
            self.adapter.fail(err)

    # ---- joins (called from the event callbacks, captures active) -------

    def event_record(self, event: int, stream: int) -> None:
        gid = self.capturing.get(stream)
        if gid is None:
            self.events.pop(event, None)
        else:
            self.events[event] = gid

    def event_wait(self, event: int, stream: int) -> None:
        gid = self.events.get(event)
        if gid is not None and stream not in self.capturing:
            self.capturing[stream] = gid

    # ---- installing ---------------------------------------------------

    def follow(self, cls: type) -> None:
        """Wraps cls's graph methods (once per class)."""
        global _active
        _active = self
        for name in METHODS:
            method = getattr(cls, name, None)
            if method is None or getattr(method, ATTR, False):
                continue
            setattr(cls, name, _wrap(name, method))


def _wrap(name: str, method):
    # capture_end is reported first (the runtime may refuse the capture),
    # capture_begin and reset once the framework has done them.
    first = name in ("capture_end", "replay")

    def call_report(obj) -> None:
        graphs = _active
        if graphs is None:
            return
        a = graphs.adapter
        if a.on:
            try:
                getattr(graphs, name)(obj)
            except Exception as err:
                a.fail(err)

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if first:
            call_report(self)
            return method(self, *args, **kwargs)
        out = method(self, *args, **kwargs)
        call_report(self)
        return out

    setattr(wrapper, ATTR, True)
    return wrapper
