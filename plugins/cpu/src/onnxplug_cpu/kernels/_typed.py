"""Which nodes may run a bare numpy call: kernel factories that look at the declared input types.

Why: a plain kernel checks its inputs' dtypes on every call (narrow floats are computed in
float32, integer results cast back, numpy scalars turned into arrays), and on a small tensor
those checks cost as much as the ufunc itself.  Where the model declares the inputs' element
types and ranks, the checks are settled once, when the session is created: the model's types
are checked at load, feeds at ``run()``, and every kernel returns its schema's type, so a node
whose inputs are declared float32 receives float32 arrays.  Such a node runs the bare call; a
node with undeclared or other types keeps the checking kernel.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from onnx import TensorProto

__all__ = ["FLOAT_TYPES", "WIDE_TYPES", "typed_alike", "typed_single", "when_typed_alike", "when_typed_single"]

#: ONNX element types numpy computes as they are (no widening, no cast back).
WIDE_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT32, TensorProto.INT64})
#: The float types among them: float-only ops (Exp, Sqrt, Sigmoid, ...) run these bare.
FLOAT_TYPES = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE})


def _ranked(shape: tuple | None) -> bool:
    return shape is not None and len(shape) > 0


def typed_alike(ctx: Any) -> bool:
    """Whether a two-input node's inputs are declared with one wide element type and at least one
    of them has a known rank above 0, so the bare ufunc computes the ONNX result: same dtypes,
    and an ndarray (ufuncs return numpy scalars only when every operand is 0-d)."""
    types = ctx.input_types
    if len(types) != 2 or types[0] is None or types[1] is None:
        return False
    (first, first_shape), (second, second_shape) = types
    return first == second and first in WIDE_TYPES and (_ranked(first_shape) or _ranked(second_shape))


def typed_single(ctx: Any, element_types: Collection[int] = WIDE_TYPES) -> bool:
    """Whether a one-input node's input is declared with one of ``element_types`` and a known
    rank above 0 (so a ufunc returns an ndarray of the input's dtype)."""
    types = ctx.input_types
    if len(types) != 1 or types[0] is None:
        return False
    element_type, shape = types[0]
    return element_type in element_types and _ranked(shape)


def _choose(checked: Callable[..., Any], bare: Callable[..., Any], accepts: Callable[[Any], bool]):
    """A kernel factory: ``bare`` for a node ``accepts`` says may run it, else ``checked``."""

    def build(ctx: Any) -> Callable[..., Any]:
        return bare if accepts(ctx) else checked

    build.__qualname__ = build.__name__ = f"{checked.__name__}_for_types"
    return build


def when_typed_alike(checked: Callable[..., Any], bare: Callable[..., Any]) -> Callable[[Any], Any]:
    """A kernel factory: ``bare`` for two :func:`typed_alike` inputs, else ``checked``."""
    return _choose(checked, bare, typed_alike)


def when_typed_single(
    checked: Callable[..., Any], bare: Callable[..., Any], element_types: Collection[int] = WIDE_TYPES
) -> Callable[[Any], Any]:
    """A kernel factory: ``bare`` for an input that is :func:`typed_single` (of
    ``element_types``), else ``checked``."""
    return _choose(checked, bare, lambda ctx: typed_single(ctx, element_types))
