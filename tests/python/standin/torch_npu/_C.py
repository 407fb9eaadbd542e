"""The stand-in's ``torch_npu._C``: trace activation and the current raw
stream, as torch_npu's C++ module has them, over npusan.torch.emulate."""

import importlib

from npusan.torch import emulate

from . import _acl

# SanitizerMode (PyCallbackTrigger.h): which callbacks the trace fires.
STREAM, KERNEL = 0, 1

# The stream-check registry each of the emulation's reports goes to, and
# which of its arguments are stream or event ids.
_REPORTS = {
    "stream_creation": ("NPUStreamCreationCallbacks", "s"),
    "stream_synchronization": ("NPUStreamSynchronizationCallbacks", "s"),
    "event_creation": ("NPUEventCreationCallbacks", "e"),
    "event_deletion": ("NPUEventDeletionCallbacks", "e"),
    "event_record": ("NPUEventRecordCallbacks", "es"),
    "event_wait": ("NPUEventWaitCallbacks", "es"),
    "event_synchronization": ("NPUEventSynchronizationCallbacks", "e"),
    "device_synchronization": ("NPUDeviceSynchronizationCallbacks", ""),
    "memory_allocation": ("NPUMemoryAllocationCallbacks", "p"),
    "memory_deallocation": ("NPUMemoryDeallocationCallbacks", "p"),
    "record_stream": ("NPURecordStreamCallbacks", "ps"),
}
_CONVERT = {"s": _acl.stream_handle, "e": _acl.event_handle, "p": int}

# NPUTrace's state: the mode of the first activation, None before it.
_mode = None


def _trace(kind: str, *args) -> None:
    """PyCallbackTrigger: fires ``torch_npu.utils._npu_trace.<registry>``
    by name, as CONCRETE_TRACE_NPU does, in stream-check mode only."""
    if _mode != STREAM:
        return
    name, kinds = _REPORTS[kind]
    handles = [_CONVERT[k](a) for k, a in zip(kinds, args)]
    trace = importlib.import_module("torch_npu.utils._npu_trace")
    getattr(trace, name).fire_callbacks(*handles)


emulate.report_to(_trace)


def _activate_npu_trace(*args) -> None:
    """``_activate_npu_trace(mode)``: METH_VARARGS parsed with "i", so one
    int and nothing else; the first call's mode stays (call_once)."""
    global _mode
    if len(args) != 1 or not isinstance(args[0], int):
        raise TypeError(f"function takes exactly 1 argument ({len(args)} "
                        "given)")
    if _mode is None:
        _mode = args[0]
        # The allocator reports from now on (its tensors are the CPU's).
        emulate.start()


# How many times the host drained the task queue: torch_npu's launches go
# through a queue that these calls empty first, a cost a tracer must not
# add to every operator.
task_queue_drains = 0


def _npu_getCurrentRawStreamNoWait(device: int) -> int:
    """The aclrtStream current on `device` for this thread."""
    return _acl.stream_handle(emulate.current_stream_id(device))


def _npu_getCurrentRawStream(device: int) -> int:
    """The same, once the task queue is drained."""
    global task_queue_drains
    task_queue_drains += 1
    return _npu_getCurrentRawStreamNoWait(device)
