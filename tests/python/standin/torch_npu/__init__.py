"""A stand-in for torch_npu, for npusan's tests only: CPU tensors play the
NPU's tensors, and npusan.torch.emulate plays its streams, events and
caching allocator, reported the way torch_npu's C++ side reports them to
its stream sanitizer. It lets the adapter's ``npu`` backend run end to end
on a machine with neither an NPU nor torch_npu (put the ``standin``
directory on PYTHONPATH, and ask for ``NPUSAN_TORCH_DEVICE=npu``).

Followed from Ascend/pytorch (https://gitee.com/ascend/pytorch, mirrored at
github.com/Ascend/pytorch), read at these commits:

- ``torch_npu/utils/_npu_trace.py`` (8476724730 in npusan's reading of the
  mirror; the stream-check registries ``NPU*Callbacks``, each a
  ``CallbackRegistry(name)`` whose ``add_callback(cb, cb_name)`` takes a
  name and whose ``fire_callbacks`` logs and swallows a callback's
  exception): see ``utils/_npu_trace.py``;
- ``torch_npu/npu/_sanitizer.py`` at 1f3e6a4 / ``_stream_check.py`` at
  00926aa18db9 and its later revision: ``SanitizerMode.STREAM = 0``,
  ``torch_npu._C._activate_npu_trace(mode)``, the registrations
  ``register_callback_for_npu_record_stream`` and ``..._erase_stream``, and
  ``NPURecordStreamCallbacks`` fired by ``NpuCachingAllocator::recordStream``
  with the block's pointer (the storage's start) and the stream;
- ``torch_npu/csrc/sanitizer/PyCallbackTrigger.h`` at 4bed4ac4f80b and
  ``NPUTrace.cpp`` at a7dd885dda62: each trace imports
  ``torch_npu.utils._npu_trace`` and calls ``<registry>.fire_callbacks``
  with ``uintptr_t`` handles; only in the mode first activated
  (``call_once``), stream-check callbacks only in mode 0;
- the callers: ``NPUCachingAllocator.cpp`` (allocation after the block is
  taken, deallocation before it is given back; ``recordStream``),
  ``NPUEvent.cpp`` (the ACL event created at its first record, event
  record after the record task, wait only on a created event, event
  synchronization), ``AclInterface.cpp`` (stream creation as each ACL
  stream is created; stream synchronization), ``NPUFunctions.cpp`` (device
  synchronization), the copy to the host (stream synchronization once the
  copy has synchronized, inside the operator);
- ``torch_npu/npu/streams.py`` at aa998995b649: ``Stream(device=None,
  priority=0, **kwargs)``, ``.npu_stream`` (the ``aclrtStream``),
  ``wait_event``, ``wait_stream``, ``record_event``, ``synchronize``;
  ``Event(enable_timing=False, blocking=False, interprocess=False)``,
  ``record``, ``wait``, ``synchronize``; ``torch_npu._C``'s
  ``_npu_getCurrentRawStream(device)``; pool streams from a pool of 32 per
  device created whole the first time one is asked for
  (``kStreamsPerPoolBits = 5``) and handed out in turn.

Where this differs from torch_npu, on purpose:

- ``Tensor.record_stream(stream)`` goes straight to the allocator's
  ``recordStream`` (and its trace). torch_npu reaches it through the
  operator ``aten::record_stream``'s NPU kernel; a CPU tensor has no such
  kernel, and torch 1.13 cannot hand that operator's Stream to Python.
- Handles are made-up numbers from ``_acl.py``, not pointers; events are
  destroyed when their Python object is collected.
"""

import torch

from . import _C, npu, utils  # noqa: F401
from ._acl import STANDIN  # noqa: F401

# torch_npu gives tensors is_npu; here the CPU's tensors are the NPU's.
torch.Tensor.is_npu = property(lambda t: t.device.type == "cpu")
# torch_npu registers its device module as torch.npu.
torch.npu = npu
npu._patch_record_stream()
