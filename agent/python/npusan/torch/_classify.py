"""Which memory an operator reads and writes: from its schema, once per
operator overload, and from each tensor's strides, per call.

An argument is classified from the alias annotations of the operator's
schema, as PyTorch's CUDA Sanitizer does:

- ``Tensor(a!)`` (``is_write``): written (in-place and ``out=`` arguments);
- ``Tensor(a)`` without ``!``: the output is a view of it, which touches no
  memory; so is a return annotated that way (``view``, ``split``,
  ``detach``);
- the tensor arguments of a factory (``new_*``, ``*_like``) give only their
  shape and dtype;
- any other tensor argument is read, and every unannotated tensor return is
  a fresh output, written.

c10d collectives reach the dispatcher without alias annotations
(``c10d::allreduce_(Tensor[] tensors, ...)``); by c10d's convention an
operator whose name ends in ``_`` writes its first argument (the tensors
reduced in place, or the outputs of ``allgather_``, ``recv_``, ...) and
reads the others, and returns its first argument again.

``aten::record_stream`` is no kernel: the adapter tells the agent about
the stream instead of launching anything.
"""

import re
from typing import List, NamedTuple, Tuple

NONE, READ, WRITE = 0, 1, 2

# A tensor whose memory is split into more contiguous runs than this is
# reported as the one range from its first to its last byte.
MAX_RUNS = 16

_FACTORY = re.compile(r"new_.*|.*_like")


class OpSpec(NamedTuple):
    """What the adapter needs of one operator overload. A "nest" is how
    many list levels hold the tensors: 0 for ``Tensor`` and ``Tensor?``, 1
    for ``Tensor[]``, 2 for ``Tensor[][]``."""

    name: str
    # (position, name, READ or WRITE, nest) of each argument that can hold
    # tensors whose memory the operator touches.
    args: Tuple[Tuple[int, str, int, int], ...]
    # (position, nest) of each return that is a fresh output (written).
    returns: Tuple[Tuple[int, int], ...]
    # Whether the operator returns one value rather than a tuple.
    single_return: bool
    record_stream: bool


def _nest(arg) -> int:
    """-1 when `arg` cannot hold a tensor, else its nest."""
    text = str(arg.type)
    if "Tensor" not in text:
        return -1
    return text.count("List[")


def op_name(schema) -> str:
    """``aten::add.Tensor``: the schema's name and overload."""
    if schema.overload_name:
        return f"{schema.name}.{schema.overload_name}"
    return schema.name


def classify(schema) -> OpSpec:
    """The OpSpec of a ``torch._C.FunctionSchema``."""
    name = op_name(schema)
    namespace, _, base = schema.name.partition("::")
    if schema.name == "aten::record_stream":
        return OpSpec(name, (), (), False, True)
    factory = _FACTORY.fullmatch(base) is not None
    collective_inplace = namespace == "c10d" and base.endswith("_")
    args: List[Tuple[int, str, int, int]] = []
    for pos, arg in enumerate(schema.arguments):
        nest = _nest(arg)
        if nest < 0:
            continue
        alias = arg.alias_info
        if collective_inplace:
            kind = WRITE if pos == 0 else READ
        elif alias is not None and alias.is_write:
            kind = WRITE
        elif alias is not None or factory:
            kind = NONE
        else:
            kind = READ
        if kind != NONE:
            args.append((pos, arg.name, kind, nest))
    returns: Tuple[Tuple[int, int], ...] = ()
    if not collective_inplace:
        returns = tuple((i, _nest(ret)) for i, ret in enumerate(schema.returns)
                        if ret.alias_info is None and _nest(ret) >= 0)
    return OpSpec(name, tuple(args), returns, len(schema.returns) == 1,
                  False)


def return_name(schema, i: int) -> str:
    """The name a finding gives to the memory of return `i`: the schema's
    name for it, else ``output`` (``output0``, ``output1`` … when the
    operator returns several), as PyTorch's CUDA Sanitizer says "the
    output"."""
    name = schema.returns[i].name
    if name:
        return name
    return "output" if len(schema.returns) == 1 else f"output{i}"


def strided_ranges(ptr: int, elem: int, sizes, strides, out: list) -> None:
    """Appends (pointer, length) pairs, flattened, of the bytes a
    non-contiguous tensor at `ptr` with elements of `elem` bytes touches.

    Dimensions of one element or of stride 0 (broadcast) add no bytes. The
    innermost dimensions that are dense form runs of contiguous memory; up
    to MAX_RUNS runs are listed one by one, so that ``x[:, :4]`` and
    ``x[:, 4:]`` do not overlap, and more are given as their span.
    """
    dims = []
    for size, stride in zip(sizes, strides):
        if size == 0:
            return
        if size > 1 and stride > 0:
            dims.append((stride, size))
    dims.sort()
    run = 1
    i = 0
    while i < len(dims) and dims[i][0] == run:
        run *= dims[i][1]
        i += 1
    outer = dims[i:]
    count = 1
    for _, size in outer:
        count *= size
    if count > MAX_RUNS:
        span = 1
        for stride, size in dims:
            span += (size - 1) * stride
        out += (ptr, span * elem)
        return
    offsets = [0]
    for stride, size in outer:
        offsets = [o + k * stride for o in offsets for k in range(size)]
    offsets.sort()
    for o in offsets:
        out += (ptr + o * elem, run * elem)
