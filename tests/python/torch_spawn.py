"""A job for test_torch_e2e.py that races only in a child process which
torch.multiprocessing.spawn starts: a new interpreter that never runs the
parent's code, so that only npusan's start-up hook can watch it.

    npusanctl run -- python3 torch_spawn.py
"""

import torch
import torch.multiprocessing as mp

from npusan.torch import emulate as em


def worker(rank: int) -> None:
    x = torch.ones(256)  # line: spawn-write
    side = em.Stream()
    with em.stream(side):
        y = x * 2  # line: spawn-read
    em.synchronize()
    del y


if __name__ == "__main__":
    mp.spawn(worker, nprocs=1)
