"""What every kernel module shares: the registry, the kernel numbers of ``dispatch.c``,
operand checks and the stride arithmetic that turns broadcasts and transposes into one call."""

from __future__ import annotations

import math
from collections.abc import Sequence

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import KernelRegistry

from .memory import (  # noqa: F401 - the kernel numbers, re-exported for the kernel modules
    K_BATCHNORM,
    K_BINARY,
    K_CONV2D,
    K_COPY,
    K_LAYERNORM,
    K_MATMUL,
    K_MATMUL_NT,
    K_POOL2D,
    K_SOFTMAX,
    K_UNARY,
    PARAMS_ARG,
    LinearMemory,
    WasmTensor,
)

registry = KernelRegistry("wasm")
#: Most axes a strided kernel takes (after collapsing).
MAX_DIMS = 8


def memory_of(op: str, *values: WasmTensor | None) -> LinearMemory:
    """The memory all of a node's tensor operands live in; anything else is a missing copy."""
    memory = None
    for value in values:
        if value is None:
            continue
        if not isinstance(value, WasmTensor):
            raise TypeError(f"{op}: expected a tensor in wasm linear memory, got {type(value).__name__}")
        if value.dtype.name != "float32":
            raise InvalidArgument(f"{op}: the wasm kernels take float32 tensors, got {value.dtype}")
        if memory is None:
            memory = value.memory
        elif value.memory is not memory:
            raise TypeError(f"{op}: operands live in two different wasm memories")
    if memory is None:
        raise TypeError(f"{op}: no tensor operand")
    return memory


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= int(d)
    return strides[::-1]


def broadcast_strides(shape: Sequence[int], out: Sequence[int]) -> list[int]:
    """Element strides of a contiguous ``shape`` read as ``out`` (0 along broadcast axes)."""
    own = contiguous_strides(shape)
    pad = len(out) - len(shape)
    return [0 if i < pad or shape[i - pad] == 1 else own[i - pad] for i in range(len(out))]


def collapse(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> tuple[list[int], list[list[int]]]:
    """Drop unit axes and merge neighbours that every operand steps through contiguously, so a
    kernel's inner loop is as long as it can be.  Never empty: a scalar becomes one axis of 1."""
    keep = [i for i, d in enumerate(shape) if d != 1]
    dims = [int(shape[i]) for i in keep]
    lists = [[int(s[i]) for i in keep] for s in strides]
    i = len(dims) - 2
    while i >= 0:
        if all(s[i] == s[i + 1] * dims[i + 1] for s in lists):
            dims[i] *= dims.pop(i + 1)
            for s in lists:
                s[i] = s.pop(i + 1)
        i -= 1
    if not dims:
        return [1], [[0] for _ in lists]
    if len(dims) > MAX_DIMS:
        raise Fail(f"the wasm kernels take at most {MAX_DIMS} non-mergeable axes, got shape {list(shape)}")
    return dims, lists


def strided_params(shape: Sequence[int], strides: Sequence[Sequence[int]]) -> list[int]:
    dims, lists = collapse(shape, strides)
    return [len(dims), *dims, *(s for stride in lists for s in stride)]


def copy(
    memory: LinearMemory,
    x: WasmTensor,
    x_strides: Sequence[int],
    out: WasmTensor,
    shape: Sequence[int],
    y_strides: Sequence[int] | None = None,
    y_offset: int = 0,
) -> None:
    """``out`` (at element ``y_offset``, with ``y_strides``, contiguous by default) gets ``x``
    viewed through ``x_strides`` over ``shape``."""
    if math.prod(shape) == 0:
        return
    params = strided_params(shape, [x_strides, contiguous_strides(shape) if y_strides is None else y_strides])
    memory.call(K_COPY, PARAMS_ARG, x.offset, out.offset + 4 * y_offset, params=params)


def normalize_axis(axis: int, rank: int, op: str) -> int:
    if not -rank <= axis < max(rank, 1):
        raise InvalidArgument(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis
