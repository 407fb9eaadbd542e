"""The stand-in's ``torch_npu.utils._npu_trace``: the stream sanitizer's
registries, by the names, callback signatures and registration functions
of torch_npu's file of that name (see the package's docstring)."""

import logging
from typing import Callable

logger = logging.getLogger(__name__)


class CallbackRegistry:
    def __init__(self, name: str):
        self.name = name
        self.callback_list = []

    def add_callback(self, cb: Callable, cb_name: str) -> None:
        self.callback_list.append((cb, cb_name))

    def fire_callbacks(self, *args, **kwargs) -> None:
        for cb, cb_name in self.callback_list:
            try:
                cb(*args, **kwargs)
            except Exception:
                logger.exception("Exception in callback %s for %s registered "
                                 "with NPU trace", cb_name, self.name)


def _registry(what: str) -> CallbackRegistry:
    return CallbackRegistry(f"[stream check] NPU {what}")


NPUACLStartExecuteCallbacks = CallbackRegistry(
    "[kernel check] NPU acl start execution")
NPUACLFinishExecuteCallbacks = CallbackRegistry(
    "[kernel check] NPU acl finish execution")
# cb(event)
NPUEventCreationCallbacks = _registry("event creation")
NPUEventDeletionCallbacks = _registry("event deletion")
# cb(event, stream)
NPUEventRecordCallbacks = _registry("event record")
NPUEventWaitCallbacks = _registry("event wait")
# cb(data_ptr)
NPUMemoryAllocationCallbacks = _registry("memory allocation")
NPUMemoryDeallocationCallbacks = _registry("memory deallocation")
# cb(stream)
NPUStreamCreationCallbacks = _registry("stream creation")
# cb()
NPUDeviceSynchronizationCallbacks = _registry("device synchronization")
# cb(stream)
NPUStreamSynchronizationCallbacks = _registry("stream synchronization")
# cb(event)
NPUEventSynchronizationCallbacks = _registry("event synchronization")
# cb(data_ptr, stream)
NPURecordStreamCallbacks = _registry("record stream")
NPUEraseStreamCallbacks = _registry("erase stream")


def register_callback_for_npu_event_creation(cb, cb_name: str) -> None:
    NPUEventCreationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_deletion(cb, cb_name: str) -> None:
    NPUEventDeletionCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_record(cb, cb_name: str) -> None:
    NPUEventRecordCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_wait(cb, cb_name: str) -> None:
    NPUEventWaitCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_memory_allocation(cb, cb_name: str) -> None:
    NPUMemoryAllocationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_memory_deallocation(cb, cb_name: str) -> None:
    NPUMemoryDeallocationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_stream_creation(cb, cb_name: str) -> None:
    NPUStreamCreationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_device_synchronization(cb, cb_name: str) -> None:
    NPUDeviceSynchronizationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_stream_synchronization(cb, cb_name: str) -> None:
    NPUStreamSynchronizationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_event_synchronization(cb, cb_name: str) -> None:
    NPUEventSynchronizationCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_record_stream(cb, cb_name: str) -> None:
    NPURecordStreamCallbacks.add_callback(cb, cb_name)


def register_callback_for_npu_erase_stream(cb, cb_name: str) -> None:
    NPUEraseStreamCallbacks.add_callback(cb, cb_name)
