"""Comparisons (Equal, Greater, GreaterOrEqual, Less, LessOrEqual) and boolean logic
(And, Or, Xor, Not); all produce bool tensors with numpy broadcasting, except opset 1's
legacy ``broadcast``/``axis`` alignment (see :func:`elementwise.legacy_broadcast`)."""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument

from ._registry import kernel
from .elementwise import legacy_broadcast


def _checked(op, a, b, *, boolean=False):
    if a.dtype != b.dtype:
        raise InvalidArgument(f"{op}: input types differ ({a.dtype} and {b.dtype})")
    if boolean and a.dtype != np.bool_:
        raise InvalidArgument(f"{op}: inputs must be bool, got {a.dtype}")


def _register(op, ufunc, modern, *, legacy=(), boolean=False):
    def compute(a, b):
        _checked(op, a, b, boolean=boolean)
        # Object (string) arrays compare to object arrays unless told otherwise.
        return np.asarray(ufunc(a, b, dtype=np.bool_) if a.dtype == object else ufunc(a, b))

    compute.__qualname__ = compute.__name__ = op.lower()
    kernel(op, since=modern)(compute)
    if legacy:

        def legacy_kernel(a, b, *, axis=None, broadcast):
            return compute(*legacy_broadcast(op, a, b, broadcast, axis))

        legacy_kernel.__qualname__ = legacy_kernel.__name__ = f"{op.lower()}_legacy"
        kernel(op, since=legacy)(legacy_kernel)


_register("Equal", np.equal, (7, 11, 13, 19), legacy=(1,))
_register("Greater", np.greater, (7, 9, 13), legacy=(1,))
_register("Less", np.less, (7, 9, 13), legacy=(1,))
_register("GreaterOrEqual", np.greater_equal, (12, 16))
_register("LessOrEqual", np.less_equal, (12, 16))
_register("And", np.logical_and, (7,), legacy=(1,), boolean=True)
_register("Or", np.logical_or, (7,), legacy=(1,), boolean=True)
_register("Xor", np.logical_xor, (7,), legacy=(1,), boolean=True)


@kernel("Not", since=(1,))
def logical_not(x):
    if x.dtype != np.bool_:
        raise InvalidArgument(f"Not: input must be bool, got {x.dtype}")
    return np.asarray(np.logical_not(x))
