"""The stand-in's ACL runtime: the handles its streams and events have.

torch_npu reports ``aclrtStream`` and ``aclrtEvent`` pointers; here they
are made-up numbers, large like pointers and told apart from small ids, so
that nothing can confuse a handle with the emulation's ids. This file
imports nothing, so that a test can compute a handle without torch.
"""

_STREAM_BASE = 0xAC10_0000_0000
_EVENT_BASE = 0xAC1E_0000_0000
_STRIDE = 0x40


def stream_handle(emulated_id: int) -> int:
    """The aclrtStream of the emulation's stream `emulated_id` (0 is the
    device's default stream)."""
    return _STREAM_BASE + emulated_id * _STRIDE


def event_handle(emulated_id: int) -> int:
    """The aclrtEvent of the emulation's event `emulated_id`."""
    return _EVENT_BASE + emulated_id * _STRIDE
