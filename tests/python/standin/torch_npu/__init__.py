"""A stand-in for torch_npu, for npusan's tests only: CPU tensors play the
NPU's tensors, and npusan.torch.emulate plays its streams, events and
caching allocator, reported the way torch_npu's C++ side reports them to
its stream sanitizer. It lets the adapter's ``npu`` backend run end to end
on a machine with neither an NPU nor torch_npu (put the ``standin``
directory on PYTHONPATH, and ask for ``NPUSAN_TORCH_DEVICE=npu``).

Followed from Ascend/pytorch (github.com/Ascend/pytorch, the mirror of
gitee.com/ascend/pytorch), as the code-search index used for npusan holds
it; where the index gave a file without its commit, this says so:

- ``torch_npu/utils/_npu_trace.py``: its stream-check revision (no commit
  given; earlier ones, 48e32dbdf652 and 242f5730c164, have only the kernel
  check's ``NPUACL*Callbacks``): ``CallbackRegistry(name)``,
  ``add_callback(cb, cb_name)``, ``fire_callbacks`` logging and swallowing
  a callback's exception, the registries ``NPU{EventCreation,
  EventDeletion, EventRecord, EventWait, MemoryAllocation,
  MemoryDeallocation, StreamCreation, DeviceSynchronization,
  StreamSynchronization, EventSynchronization}Callbacks`` and their
  ``register_callback_for_npu_*`` functions: see ``utils/_npu_trace.py``;
- ``torch_npu/npu/_sanitizer.py`` at a6e615ee59b3 and its later revision
  (no commit given), ``torch_npu/npu/_stream_check.py`` at 00926aa18db9
  and its later revision (no commit given): ``SanitizerMode.STREAM = 0``,
  ``torch_npu._C._activate_npu_trace(mode)``,
  ``register_callback_for_npu_record_stream`` and ``..._erase_stream``,
  and ``NPURecordStreamCallbacks(data_ptr, stream)`` fired from the
  caching allocator's ``recordStream`` with the storage's start;
- ``torch_npu/csrc/sanitizer/PyCallbackTrigger.h`` at 4bed4ac4f80b and
  ``NPUTrace.cpp`` at a7dd885dda62: each trace imports
  ``torch_npu.utils._npu_trace`` and calls ``<registry>.fire_callbacks``
  by name with ``uintptr_t`` handles, in the mode of the first activation
  (``call_once``), the stream check's registries in mode 0 only;
- the ``PyCallbackTrigger`` calls (``torch_npu/csrc/core/npu/``:
  ``NPUCachingAllocator.cpp``, index copy at 165f15da0eb0;
  ``NPUEvent.cpp`` at 4be291a16182; ``interface/AclInterface.cpp`` at
  03de2ced27d6; ``NPUFunctions.cpp`` and the copy to the host, no commit
  given): allocation once the block is taken, deallocation before it is
  given back; the ACL event created at its first record, event record
  after the record task, wait only on a created event, event
  synchronization; stream creation as each ACL stream is created; stream
  synchronization, also inside a copy to the host once it has synchronized;
  device synchronization;
- ``torch_npu/npu/streams.py`` at aa998995b649: ``Stream(device=None,
  priority=0, **kwargs)``, ``.npu_stream`` (the ``aclrtStream``, which
  drains the task queue first), ``wait_event``, ``wait_stream``,
  ``record_event``, ``synchronize``; ``Event(enable_timing=False,
  blocking=False, interprocess=False)``, ``record``, ``wait``,
  ``synchronize``; ``torch_npu._C._npu_getCurrentRawStream(device)`` and
  ``_npu_getCurrentRawStreamNoWait(device)``; pool streams handed out in
  turn from a pool of 32 per device created whole the first time one is
  asked for (``kStreamsPerPoolBits = 5`` in NPUStream.cpp).

Where this differs from torch_npu, on purpose:

- ``Tensor.record_stream(stream)`` goes straight to the allocator's
  ``recordStream`` (and its trace). torch_npu reaches it through the
  operator ``aten::record_stream``'s NPU kernel; a CPU tensor has no such
  kernel, and torch 1.13 cannot hand that operator's Stream to Python.
- Handles are made-up numbers from ``_acl.py``, not pointers; events are
  destroyed when their Python object is collected; there is no HCCL, so
  ``NPUEraseStreamCallbacks`` never fires.
"""

import torch

from . import _C, npu, utils  # noqa: F401

# torch_npu gives tensors is_npu; here the CPU's tensors are the NPU's.
torch.Tensor.is_npu = property(lambda t: t.device.type == "cpu")
# torch_npu registers its device module as torch.npu.
torch.npu = npu
npu._patch_record_stream()
