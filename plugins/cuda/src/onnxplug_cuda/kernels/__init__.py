"""The CUDA provider's kernels, written against the array API standard (see ``_common``).

``registry`` holds every kernel; importing this package registers them all.  Modules:
``elementwise`` (arithmetic, activations), ``logic`` (comparisons, Where, Cast, Identity,
Dropout), ``linalg`` (MatMul, Gemm, Conv), ``normalization`` (Softmax, LayerNormalization,
BatchNormalization, InstanceNormalization), ``reductions``, ``pooling``, ``shape``, ``resize``
and ``attention``.

:func:`decline_reason` is what the provider asks before claiming a node: the checks that the
registry's types cannot express (attributes, ranks, float16 on a backend without it).
"""

from __future__ import annotations

from typing import Any

from . import attention, elementwise, linalg, logic, normalization, pooling, reductions, resize, shape  # noqa: F401
from ._common import ALL, BOOL, DECLINES, FLOATS, INTS, NUMBERS, registry

__all__ = ["ALL", "BOOL", "FLOATS", "INTS", "NUMBERS", "decline_reason", "registry"]


def decline_reason(node: Any, has_half: bool) -> str | None:
    """Why the kernels cannot take a node their registry has, or ``None`` when they can."""
    types = [t for name, t in zip(node.inputs, node.input_types) if name]
    if not types or any(t is None for t in types):
        return "input types unknown: the CUDA kernels need known tensor types"
    types += [t for name, t in zip(node.outputs, node.output_types) if name and t is not None]
    unknown = sorted({t for t in types if t not in ALL})
    if unknown:
        return f"types {unknown}: the CUDA kernels take float, integer and bool tensors"
    if not has_half and "tensor(float16)" in types:
        return "the array API standard has no float16 (array-api-strict refuses it; CuPy has it)"
    for check in DECLINES.get(node.op_type, ()):
        reason = check(node)
        if reason is not None:
            return reason
    return None
