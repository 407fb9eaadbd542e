"""A script for test_torch_e2e.py whose findings must not depend on how
npusan was turned on: run as ``python3 -m npusan.torch torch_exit.py`` or
as ``python3 torch_exit.py --enable``, which calls npusan.torch.enable() at
its top.

It races (a read on a side stream of what the default stream wrote), and
leaves a tensor that the side stream used in a global it never frees:
that memory is freed only as the interpreter ends, when nothing can reuse
it, so no missing record_stream may be reported for it either way.
"""

import sys

if "--enable" in sys.argv:
    import npusan.torch

    npusan.torch.enable()

import torch  # noqa: E402

from npusan.torch import emulate as em  # noqa: E402

x = torch.ones(256)
side = em.Stream()
with em.stream(side):
    y = x * 2  # line: exit-read

# As many scripts end: the interpreter exits through SystemExit.
sys.exit(0)
