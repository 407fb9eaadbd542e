"""The frameworks the adapter can watch, each found by feature detection.

A backend says which tensors are device tensors, what a device's current
stream is, which trace-callback registries report streams, events,
synchronizations, allocations and ``record_stream``, and how to make the
framework's C++ side fire them:

- ``npu``: torch_npu's ``torch_npu.utils._npu_trace`` (the module its C++
  side fires by name), registries ``NPU*Callbacks`` of its stream check,
  including ``NPURecordStreamCallbacks`` from its caching allocator where
  the release has it;
- ``cuda``: ``torch.cuda._gpu_trace`` (PyTorch 2) or
  ``torch.utils._cuda_trace`` (1.13), registries ``*Callbacks`` or
  ``CUDA*Callbacks``; CUDA reports ``record_stream`` only as the operator
  ``aten::record_stream``, which the dispatch mode sees;
- ``cpu``: the emulation of ``npusan.torch.emulate``, which fires the
  registries of this PyTorch's own trace module, as a CUDA build would, and
  its own record-stream registry, as torch_npu's allocator does.

The registries' callbacks get stream and event handles (``cudaStream_t``,
``aclrtStream``, ... as integers), the same numbers the current-stream
functions return, so they are the agent's stream and event ids as they are.
"""

from typing import Callable, Dict, List, Optional, Tuple

import torch

from ._trace import (KINDS, Unavailable, add_callback, find_registries,
                     module, torch_trace_registries)

__all__ = ["Backend", "Unavailable", "add_callback", "select"]


# torch_npu's SanitizerMode::STREAM: the trace mode that fires the stream
# check's registries (torch_npu/csrc/sanitizer/PyCallbackTrigger.h).
STREAM_CHECK = 0


class Backend:
    """One framework's device as the adapter sees it."""

    def __init__(self, name: str, registries: Dict[str, object],
                 device_attr: str, current_stream: Callable[[int], int],
                 stream_handle: Optional[Callable[[object], int]],
                 activate: Callable[[], None],
                 graph_classes: Callable[[], List[type]] = list,
                 stream_reader: Optional[Tuple[Dict[int, int], int]] = None):
        self.name = name
        self.registries = registries
        # Whether each device has streams of its own (the emulation's one
        # device does not need the tensors' device asked).
        self.per_device = name != "cpu"
        # The tensor attribute that says whether it lives on this device.
        self.device_attr = device_attr
        # The current stream of a device index (-1: the current device).
        self.current_stream = current_stream
        # Where the current stream is one whatever the device and kept by
        # thread: (table, default), current_stream(-1) being table's entry
        # for threading.get_ident(), else default, which the adapter's C
        # path reads without calling current_stream(); else None.
        self.stream_reader = stream_reader
        # The stream handle of the torch.Stream that aten::record_stream
        # gets; None where a registry reports record_stream instead.
        self.stream_handle = stream_handle
        # Makes the framework fire its trace callbacks.
        self.activate = activate
        # The graph classes whose capture and replay are followed
        # (_graphs.py): those this framework release has.
        self.graph_classes = graph_classes


def _first_attr(obj, *names):
    for name in names:
        fn = getattr(obj, name, None)
        if fn is not None:
            return fn
    return None


def npu() -> Backend:
    torch_npu = module("torch_npu")
    if torch_npu is None:
        raise Unavailable("torch_npu is not installed")
    if not torch_npu.npu.is_available():
        raise Unavailable("torch_npu finds no NPU")
    trace = module("torch_npu.utils._npu_trace")
    if trace is None:
        raise Unavailable("this torch_npu has no torch_npu.utils._npu_trace")
    registries = find_registries(trace, ("NPU",))
    # Releases before the stream check have only the kernel check's
    # registries: watching with them would see no stream, event or
    # allocation, and find nothing.
    missing = [kind for kind in KINDS
               if kind != "record_stream" and kind not in registries]
    if missing:
        raise Unavailable(f"this torch_npu's _npu_trace has no stream-check "
                          f"registries for {', '.join(missing)}")
    # The NoWait spelling hands the stream over without draining
    # torch_npu's task queue first, which the other does on every call.
    raw = _first_attr(torch_npu._C, "_npu_getCurrentRawStreamNoWait",
                      "_npu_getCurrentRawStream")
    current_device = torch_npu.npu.current_device

    def current_stream(device: int) -> int:
        if device < 0:
            device = current_device()
        if raw is not None:
            return raw(device)
        return torch_npu.npu.current_stream(device).npu_stream

    def activate() -> None:
        # Mode 0 is torch_npu's stream check (its SanitizerMode::STREAM),
        # the mode every release with the stream check's registries takes.
        torch_npu._C._activate_npu_trace(STREAM_CHECK)

    def stream_handle(stream) -> int:
        return torch_npu.npu.Stream(
            stream_id=stream.stream_id, device_index=stream.device_index,
            device_type=stream.device_type).npu_stream

    def graph_classes() -> List[type]:
        cls = getattr(torch_npu.npu, "NPUGraph", None)
        return [cls] if isinstance(cls, type) else []

    return Backend("npu", registries, "is_npu", current_stream,
                   None if "record_stream" in registries else stream_handle,
                   activate, graph_classes)


def cuda() -> Backend:
    if not torch.cuda.is_available():
        raise Unavailable("torch.cuda finds no GPU")
    registries = torch_trace_registries()
    raw = _first_attr(torch._C, "_cuda_getCurrentRawStream")
    current_device = torch.cuda.current_device

    def current_stream(device: int) -> int:
        if device < 0:
            device = current_device()
        if raw is not None:
            return raw(device)
        return torch.cuda.current_stream(device).cuda_stream

    def activate() -> None:
        _first_attr(torch._C, "_activate_gpu_trace", "_activate_cuda_trace")()

    def stream_handle(stream) -> int:
        return torch.cuda.Stream(
            stream_id=stream.stream_id, device_index=stream.device_index,
            device_type=stream.device_type).cuda_stream

    def graph_classes() -> List[type]:
        cls = getattr(torch.cuda, "CUDAGraph", None)
        return [cls] if isinstance(cls, type) else []

    return Backend("cuda", registries, "is_cuda", current_stream,
                   stream_handle, activate, graph_classes)


def cpu() -> Backend:
    # Imported here, not at the top: importing the emulation builds it (its
    # default stream, its registries), which only the cpu backend wants.
    from . import emulate

    return Backend("cpu", dict(emulate.REGISTRIES), "is_cpu",
                   emulate.current_stream_id, None, emulate.start,
                   lambda: [emulate.Graph], emulate.STREAM_READER)


def select(device: str) -> Backend:
    """The backend `device` names ("npu", "cuda", "cpu"), or for "" and
    "auto" the first of npu and cuda that finds a device, else cpu."""
    makers = {"npu": npu, "cuda": cuda, "cpu": cpu}
    if device in makers:
        return makers[device]()
    if device not in ("", "auto"):
        raise Unavailable(f"NPUSAN_TORCH_DEVICE={device}: not one of "
                          "npu, cuda, cpu, auto")
    for maker in (npu, cuda):
        try:
            return maker()
        except Unavailable:
            continue
    return cpu()
