"""Broadcasting arithmetic: Add, Sub, Mul, Div."""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument

from ._registry import kernel


def _same_dtype(a, b, op):
    if a.dtype != b.dtype:
        raise InvalidArgument(f"{op}: input types differ ({a.dtype} and {b.dtype})")


@kernel("Add", since=(7, 13, 14))
def add(a, b):
    _same_dtype(a, b, "Add")
    return np.add(a, b)


@kernel("Sub", since=(7, 13, 14))
def sub(a, b):
    _same_dtype(a, b, "Sub")
    return np.subtract(a, b)


@kernel("Mul", since=(7, 13, 14))
def mul(a, b):
    _same_dtype(a, b, "Mul")
    return np.multiply(a, b)


@kernel("Div", since=(7, 13, 14))
def div(a, b):
    _same_dtype(a, b, "Div")
    if a.dtype.kind in "iu":
        if np.any(b == 0):
            raise InvalidArgument("Div: integer division by zero")
        # ONNX integer division truncates toward zero (C semantics), unlike numpy's floor.
        quotient = np.abs(a) // np.abs(b)
        with np.errstate(over="ignore"):
            return np.where((a < 0) != (b < 0), -quotient, quotient).astype(a.dtype)
    return np.divide(a, b)
