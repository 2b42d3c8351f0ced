"""The registry every kernel module writes into, type lists, and shared helpers.

Kernels ask their inputs for their namespace (``array_api_compat.array_namespace``), so one
function runs on CuPy arrays, array-api-strict arrays (the tests' stand-in for device memory) and
numpy arrays.  Only what the standard defines is used: no ``as_strided``, no in-place ``out=``,
no fancy indexing beyond ``take``.

A kernel that cannot do every case of its op says so at claim time through :func:`declines`:
the provider asks before claiming a node, so an unsupported attribute sends the node to the CPU
provider instead of failing at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from onnxplug.errors import InvalidArgument
from onnxplug.kernels import KernelRegistry

__all__ = [
    "ALL",
    "BOOL",
    "FLOATS",
    "INTS",
    "NUMBERS",
    "SIGNED_INTS",
    "DECLINES",
    "declines",
    "host_ints",
    "namespace",
    "onnx_dtype",
    "registry",
    "wide_float",
]

registry = KernelRegistry("cuda")

FLOATS = ("tensor(float)", "tensor(double)", "tensor(float16)")
INTS = tuple(f"tensor({t})" for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"))
SIGNED_INTS = tuple(f"tensor({t})" for t in ("int8", "int16", "int32", "int64"))
BOOL = ("tensor(bool)",)
NUMBERS = FLOATS + INTS
#: Every type the array API standard (and CuPy) has a dtype for, float16 aside where it lacks one.
ALL = NUMBERS + BOOL

#: op_type -> checks run at claim time; each returns a reason to decline, or ``None``.
DECLINES: dict[str, list[Callable[[Any], str | None]]] = {}


def declines(*op_types: str) -> Callable[[Callable[[Any], str | None]], Callable[[Any], str | None]]:
    """Register ``check(node) -> reason | None`` for the ops named (a NodeView is passed)."""

    def register(check: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
        for op in op_types:
            DECLINES.setdefault(op, []).append(check)
        return check

    return register


def namespace(*arrays: Any) -> Any:
    """The array namespace of the non-``None`` arrays among ``arrays``."""
    return array_namespace(*(a for a in arrays if a is not None))


def host_ints(value: Any, what: str) -> list[int]:
    """A host input (numpy, never a device array: no sync) as a flat list of Python ints."""
    if value is None:
        return []
    array = np.asarray(value)
    if array.dtype.kind not in "iu":
        raise InvalidArgument(f"{what} must be an integer tensor, got {array.dtype}")
    return [int(v) for v in array.reshape(-1)]


_ONNX_TO_NAME = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
}


def onnx_dtype(xp: Any, elem_type: int) -> Any | None:
    """The namespace's dtype for an ONNX element type, ``None`` where it has none."""
    name = _ONNX_TO_NAME.get(int(elem_type))
    return None if name is None else getattr(xp, name, None)


def wide_float(xp: Any, x: Any) -> Any:
    """float16 widened to float32 for accumulation (float16 is not in the standard: only CuPy
    and numpy have it), other dtypes unchanged."""
    half = getattr(xp, "float16", None)
    return xp.astype(x, xp.float32) if half is not None and x.dtype == half else x
