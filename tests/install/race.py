"""A two-stream race in npusan.torch's CPU emulation, run by
install_prefix.sh under the installed npusanctl with the installed
package: it says on stderr where the package and the agent came from."""

import os
import sys

os.environ.setdefault("NPUSAN_TORCH_DEVICE", "cpu")

import torch  # noqa: E402

import npusan  # noqa: E402
import npusan.torch  # noqa: E402
from npusan.torch import emulate  # noqa: E402

print(f"package: {os.path.dirname(npusan.__file__)}", file=sys.stderr)
print(f"library: {os.environ.get('NPUSAN_LIBRARY')}", file=sys.stderr)
npusan.torch.enable()
side = emulate.Stream()
x = torch.full((1024,), 3.0)  # written on the default stream
with emulate.stream(side):
    y = x * 2  # read on the side stream: nothing orders it after the fill
emulate.synchronize()
print(f"total: {y.sum().item()}")
