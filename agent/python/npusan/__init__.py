"""npusan's Python side: feeds the npusan agent (libnpusan) from Python.

``npusan.torch`` watches a PyTorch job (torch_npu or torch.cuda, or CPU
tensors in ``npusan.torch.emulate``'s emulation); ``python3 -m npusan.torch
script.py args...`` runs a script under it. Importing this package loads
nothing: the library is loaded by ``npusan.torch.enable()``.
"""

__version__ = "0.1.0"
