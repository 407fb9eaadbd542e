#!/usr/bin/python3
"""Two branches of a graph capture with no edge between them, for npusan
to find:

    npusanctl run -- python3 -m npusan.torch examples/graph_branches.py
    npusanctl run -- python3 -m npusan.torch examples/graph_branches.py --fixed

The capture forks a side stream (side.wait_stream) before the main branch
writes `h`, and the side branch reads `h`: eagerly the order of issue may
hide it, but the graph runs the branches concurrently, so the read may see
`h` before it is written (a data_race found in the capture). Nor does the
capture stream wait for the side branch before the capture ends: that
work is not part of the graph's end (an unjoined_capture; CUDA refuses the
capture, naming no stream). --fixed forks after `h` is written and joins
the side branch before the end, and is clean.

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


def branches(x, w, side, fixed: bool) -> torch.Tensor:
    main = dev.current_stream()
    if not fixed:
        side.wait_stream(main)  # the fork, too early
    h = torch.mm(x, w)  # the main branch writes h
    if fixed:
        side.wait_stream(main)  # the fork, once h is written
    with dev.stream(side):
        z = h * 2  # the side branch reads h
    if fixed:
        main.wait_stream(side)  # the join
    return z


def main(fixed: bool) -> None:
    npusan.torch.enable()  # already on under python3 -m npusan.torch
    x = torch.ones(64, 64, device=DEVICE)
    w = torch.ones(64, 64, device=DEVICE)
    side = dev.Stream()
    dev.synchronize()
    g = dev.CUDAGraph() if DEVICE == "cuda" else dev.Graph()
    try:
        with dev.graph(g):
            z = branches(x, w, side, fixed)
    except RuntimeError as err:
        # CUDA refuses a capture with an unjoined stream.
        print(f"capture failed: {err}", file=sys.stderr)
        return
    g.replay()
    print(f"total: {z.sum().item()}")


if __name__ == "__main__":
    main("--fixed" in sys.argv[1:])
