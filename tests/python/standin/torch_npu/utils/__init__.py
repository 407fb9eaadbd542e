"""The stand-in's ``torch_npu.utils``: only ``_npu_trace``."""
