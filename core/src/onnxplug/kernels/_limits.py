"""The per-tensor allocation limit kernels check before allocating from user-controlled shapes.

ConstantOfShape, Expand, Tile, Range, Pad, Resize and friends compute an output size from input
values; a hostile model or feed can ask for terabytes.  Such kernels call :func:`check_allocation`
with the shape they are about to create, before creating it.

The limit is ``ONNXPLUG_MAX_TENSOR_BYTES`` (bytes) when set, else 16 GiB.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable

import numpy as np

from ..errors import InvalidArgument

__all__ = ["check_allocation", "max_tensor_bytes"]

_DEFAULT_LIMIT = 16 << 30


def max_tensor_bytes() -> int:
    """The largest tensor a kernel may allocate, in bytes."""
    value = os.environ.get("ONNXPLUG_MAX_TENSOR_BYTES", "")
    try:
        return int(value) if value else _DEFAULT_LIMIT
    except ValueError:
        return _DEFAULT_LIMIT


def check_allocation(shape: Iterable[int], dtype: np.dtype | type, what: str = "output") -> tuple[int, ...]:
    """Return ``shape`` as a tuple of ints after checking it is non-negative and within the limit.

    :param what: names the tensor in the error (e.g. ``"Expand output"``).
    :raises InvalidArgument: a negative dimension, or more bytes than :func:`max_tensor_bytes`.
    """
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise InvalidArgument(f"{what}: negative dimension in shape {list(dims)}")
    itemsize = np.dtype(dtype).itemsize or 8
    nbytes = math.prod(dims) * itemsize
    limit = max_tensor_bytes()
    if nbytes > limit:
        raise InvalidArgument(
            f"{what}: shape {list(dims)} would need {nbytes} bytes, over the limit of {limit} "
            "(set ONNXPLUG_MAX_TENSOR_BYTES to raise it)"
        )
    return dims
