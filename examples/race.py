#!/usr/bin/python3
"""A two-stream race for npusan to find, on a machine with no accelerator:

    npusanctl run -- python3 -m npusan.torch examples/race.py

The default stream fills a tensor and a side stream reads it with nothing
in between that makes the side stream wait: on a device the read may run
before the fill has finished, and the sum comes out wrong, or only
sometimes. npusan reports the race with the Python stacks of both accesses.
Uncomment the wait_stream line and the finding goes away.

Without an NPU or a GPU, npusan.torch counts CPU tensors as device tensors
on the streams of npusan.torch.emulate, which this script uses; on a
machine with one, ask for that with NPUSAN_TORCH_DEVICE=cpu (this script
sets it when run on its own: NPUSAN=1 python3 examples/race.py, with the
npusan package on PYTHONPATH).
"""

import os

os.environ.setdefault("NPUSAN_TORCH_DEVICE", "cpu")

import torch  # noqa: E402

import npusan.torch  # noqa: E402
from npusan.torch import emulate  # noqa: E402


def fill(n: int) -> torch.Tensor:
    return torch.full((n,), 3.0)  # written on the default stream


def total(x: torch.Tensor, side: emulate.Stream) -> float:
    with emulate.stream(side):
        # side.wait_stream(emulate.default_stream())  # the fix
        y = x * 2  # read on the side stream: nothing orders it after fill
    emulate.synchronize()
    return y.sum().item()


def main() -> None:
    npusan.torch.enable()  # already on under python3 -m npusan.torch
    side = emulate.Stream()
    x = fill(1 << 10)
    print(f"total: {total(x, side)}")


if __name__ == "__main__":
    main()
