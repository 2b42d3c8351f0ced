"""Integer bit operations: BitShift, BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot."""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument

from ._registry import kernel


def _same_dtype(op, a, b):
    if a.dtype != b.dtype:
        raise InvalidArgument(f"{op}: input types differ ({a.dtype} and {b.dtype})")


@kernel("BitShift", since=(11, 28))
def bitshift(x, y, *, direction):
    """Shifts by a negative amount or by the bit width or more are defined (opset 28) as what
    the fill alone gives: the sign for a right shift of a negative value, else 0; C leaves them
    undefined, so they are masked out before shifting."""
    _same_dtype("BitShift", x, y)
    if direction not in ("LEFT", "RIGHT"):
        raise InvalidArgument(f"BitShift: direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    bits = x.dtype.itemsize * 8
    amount = y.astype(np.int64)  # a uint64 shift of 2**63 or more turns negative: still out of range
    out_of_range = (amount < 0) | (amount >= bits)
    safe = np.where(out_of_range, 0, amount).astype(x.dtype)
    with np.errstate(all="ignore"):
        if direction == "LEFT":
            shifted = np.left_shift(x, safe)
            fill = np.zeros((), dtype=x.dtype)
        else:
            shifted = np.right_shift(x, safe)  # arithmetic for signed types
            fill = np.where(x < 0, x.dtype.type(-1), x.dtype.type(0)) if x.dtype.kind == "i" else x.dtype.type(0)
    return np.asarray(np.where(out_of_range, fill, shifted)).astype(x.dtype, copy=False)


def _binary(op, ufunc):
    def compute(a, b):
        _same_dtype(op, a, b)
        return np.asarray(ufunc(a, b))

    compute.__qualname__ = compute.__name__ = op.lower()
    kernel(op, since=(18,))(compute)


_binary("BitwiseAnd", np.bitwise_and)
_binary("BitwiseOr", np.bitwise_or)
_binary("BitwiseXor", np.bitwise_xor)


@kernel("BitwiseNot", since=(18,))
def bitwise_not(x):
    return np.asarray(np.invert(x))
