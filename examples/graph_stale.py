#!/usr/bin/python3
"""A captured graph replayed on memory that is gone, for npusan to find:

    npusanctl run -- python3 -m npusan.torch examples/graph_stale.py
    npusanctl run -- python3 -m npusan.torch examples/graph_stale.py --fixed

A graph replays its kernels at the addresses they had when it was
captured. The loop below rebinds the graph's static input to each new
batch (`static_x = batch`) instead of copying the batch into it
(`static_x.copy_(batch)`): the captured tensor's memory goes back to the
allocator, which may hand it to anything, and every replay still reads it.
npusan reports one stale_graph_address, at the replay, with the stack of
the captured read and of the freed allocation. --fixed copies into the
static input and is clean.

With a GPU (torch.cuda) it uses torch.cuda.graph; without one, the
streams and graphs of npusan.torch.emulate on the CPU (NPUSAN_TORCH_DEVICE
=cpu, which it sets when no GPU is there).
"""

import os
import sys

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("NPUSAN_TORCH_DEVICE", "cpu")

import npusan.torch  # noqa: E402


if os.environ.get("NPUSAN_TORCH_DEVICE") == "cpu":
    from npusan.torch import emulate as dev  # noqa: E402
    DEVICE = "cpu"
else:
    dev = torch.cuda
    DEVICE = "cuda"


def model(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, w)  # the captured read of the static input


def main(fixed: bool) -> None:
    npusan.torch.enable()  # already on under python3 -m npusan.torch
    w = torch.ones(64, 64, device=DEVICE)
    static_x = torch.zeros(64, 64, device=DEVICE)
    # Warm-up on a side stream, as torch.cuda.graph's documentation does.
    side = dev.Stream()
    side.wait_stream(dev.current_stream())
    with dev.stream(side):
        model(static_x, w)
    dev.current_stream().wait_stream(side)
    g = dev.CUDAGraph() if DEVICE == "cuda" else dev.Graph()
    with dev.graph(g):
        static_y = model(static_x, w)
    total = 0.0
    for step in range(3):
        batch = torch.full((64, 64), float(step), device=DEVICE)
        if fixed:
            static_x.copy_(batch)
        else:
            static_x = batch  # the mistake: the captured input is freed
        g.replay()
        total += static_y.sum().item()
    print(f"total: {total}")


if __name__ == "__main__":
    main("--fixed" in sys.argv[1:])
