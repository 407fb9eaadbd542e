"""Two-stream PyTorch programs for test_torch_e2e.py, on CPU tensors and the
streams of npusan.torch.emulate; each runs in a process of its own:

    python3 -m npusan.torch torch_scenarios.py NAME

With NPUSAN_TORCH_DEVICE=npu they use torch_npu's API instead (torch.npu's
streams, Tensor.record_stream), which tests/python/standin's torch_npu
provides on top of the same emulation.

The comments "# line: TAG" mark the lines the expected findings' stacks
point at; test_torch_e2e.py finds them by their tag.
"""

import os
import sys

import torch
import torch.distributed as dist

if os.environ.get("NPUSAN_TORCH_DEVICE") == "npu":
    import torch_npu  # noqa: F401  (it makes torch.npu)

    dev = torch.npu

    def record_stream(t: torch.Tensor, s) -> None:
        t.record_stream(s)
else:
    from npusan.torch import emulate as dev

    record_stream = dev.record_stream

N = 256


def race():
    """A read on the side stream of what the default stream wrote."""
    x = torch.ones(N)  # line: race-write
    side = dev.Stream()
    with dev.stream(side):
        y = x * 2  # line: race-read
    dev.synchronize()
    return y


def race_fixed():
    """The same, with the side stream waiting for the default one."""
    x = torch.ones(N)
    side = dev.Stream()
    side.wait_stream(dev.current_stream())
    with dev.stream(side):
        y = x * 2
    dev.synchronize()
    return y


def missing_record_stream():
    """Memory of the default stream used on the side stream, then freed
    with neither record_stream nor the default stream waiting for it."""
    side = dev.Stream()
    x = torch.ones(N)  # line: mrs-alloc
    side.wait_stream(dev.current_stream())
    with dev.stream(side):
        y = x.sum()  # line: mrs-use
    del x  # line: mrs-free
    dev.synchronize()
    return y


def record_stream_fix():
    """The same, with record_stream."""
    side = dev.Stream()
    x = torch.ones(N)
    side.wait_stream(dev.current_stream())
    with dev.stream(side):
        y = x.sum()
    record_stream(x, side)
    del x
    dev.synchronize()
    return y


def wait_fix():
    """The same, with the allocation stream waiting for the side stream
    before the free."""
    side = dev.Stream()
    x = torch.ones(N)
    side.wait_stream(dev.current_stream())
    with dev.stream(side):
        y = x.sum()
    dev.current_stream().wait_stream(side)
    del x
    dev.synchronize()
    return y


def side_result_to_host():
    """A sum the side stream computed, handed to the host on the default
    stream, which waited for it: item() waits for the copy, so the sum's
    memory is free to go."""
    side = dev.Stream()
    x = torch.ones(N)
    side.wait_stream(dev.current_stream())
    with dev.stream(side):
        s = x.sum()
    dev.current_stream().wait_stream(side)
    value = s.item()
    del s
    return value


def collective_race():
    """An all-reduce (c10d::allreduce_, a launch on its stream writing its
    tensors) on the side stream, of what the default stream wrote."""
    # The loopback interface: gloo would otherwise look the host name up,
    # and warn on stderr where it does not resolve.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0,
                            world_size=1)
    x = torch.ones(N)  # line: coll-write
    side = dev.Stream()
    with dev.stream(side):
        dist.all_reduce(x)  # line: coll-reduce
    dev.synchronize()
    return x


def views():
    """Halves of one buffer written on two streams touch different bytes:
    no race; the view operators themselves touch nothing."""
    x = torch.zeros(8, 8)
    side = dev.Stream()
    side.wait_stream(dev.current_stream())
    left, right = x[:, :4], x[:, 4:]
    left.add_(1)
    with dev.stream(side):
        right.add_(2)
    dev.synchronize()
    return x


if __name__ == "__main__":
    globals()[sys.argv[1]]()
