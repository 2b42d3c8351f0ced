"""Comparisons, boolean logic, Where, Cast, Identity and inference-time Dropout.

These are type-agnostic, so they claim integers and bool as well as floats: a mask computed on
the GPU stays there for the Where that reads it.
"""

from __future__ import annotations

from onnxplug.errors import InvalidArgument

from ._common import ALL, BOOL, NUMBERS, declines, namespace, onnx_dtype, registry


def _compare(op: str, since: tuple[int, ...], fn, types=NUMBERS) -> None:
    def kernel(a, b):
        if a.dtype != b.dtype:
            raise InvalidArgument(f"{op}: input types differ ({a.dtype} and {b.dtype})")
        return fn(namespace(a, b), a, b)

    kernel.__name__ = kernel.__qualname__ = op.lower()
    registry.kernel(op, since=since, types={"T": types})(kernel)


_compare("Equal", (7, 11, 13, 19), lambda xp, a, b: xp.equal(a, b), ALL)
_compare("Less", (7, 9, 13), lambda xp, a, b: xp.less(a, b))
_compare("Greater", (7, 9, 13), lambda xp, a, b: xp.greater(a, b))
_compare("LessOrEqual", (12, 16), lambda xp, a, b: xp.less_equal(a, b))
_compare("GreaterOrEqual", (12, 16), lambda xp, a, b: xp.greater_equal(a, b))
_compare("And", (7,), lambda xp, a, b: xp.logical_and(a, b), BOOL)
_compare("Or", (7,), lambda xp, a, b: xp.logical_or(a, b), BOOL)
_compare("Xor", (7,), lambda xp, a, b: xp.logical_xor(a, b), BOOL)


@registry.kernel("Not", since=(1,), types={"T": BOOL})
def logical_not(x):
    return namespace(x).logical_not(x)


@registry.kernel("Where", since=(9, 16), types={"T": ALL})
def where(condition, x, y):
    xp = namespace(condition, x, y)
    if condition.dtype != xp.bool:
        raise InvalidArgument(f"Where: condition must be bool, got {condition.dtype}")
    return xp.where(condition, x, y)


@registry.kernel("Cast", since=(6, 9, 13, 19, 21, 23, 24, 25, 28), types={"T1": ALL, "T2": ALL})
def cast(x, *, to, **_float8_options):
    """``saturate`` and ``round_mode`` only concern float8/float4 targets, which are not claimed."""
    xp = namespace(x)
    dtype = onnx_dtype(xp, to)
    if dtype is None:
        raise InvalidArgument(f"Cast: target type {to} has no dtype in {xp.__name__}")
    return xp.astype(x, dtype)


@registry.kernel("CastLike", since=(15, 19, 21, 23, 24, 25), types={"T1": ALL, "T2": ALL})
def cast_like(x, like, **_float8_options):
    """Cast to ``like``'s dtype; the options only concern float8/float4, which are not claimed."""
    xp = namespace(x, like)
    return x if x.dtype == like.dtype else xp.astype(x, like.dtype)


@registry.kernel("Identity", since=(1, 13, 14, 16, 19, 21, 23, 24, 25), types={"V": ALL, "T": ALL})
def identity(x):
    return x


@registry.kernel("Dropout", since=(7,), types={"T": NUMBERS[:3]})
def dropout_7(data, *, ratio):
    """Opset 7's mask has the data's type."""
    xp = namespace(data)
    return data, xp.ones(data.shape, dtype=data.dtype)


@registry.kernel("Dropout", since=(10,), types={"T": NUMBERS[:3], "T1": BOOL})
def dropout_10(data, *, ratio):
    """Inference: the identity and an all-true mask (every runtime ignores ratio here)."""
    xp = namespace(data)
    return data, xp.ones(data.shape, dtype=xp.bool)


@registry.kernel("Dropout", since=(12, 13, 22), types={"T": NUMBERS[:3], "T1": NUMBERS[:3], "T2": BOOL})
def dropout(data, ratio=None, training_mode=None, *, seed=None):
    xp = namespace(data)
    return data, xp.ones(data.shape, dtype=xp.bool)


@declines("Dropout")
def _dropout_inference_only(node):
    if len(node.inputs) > 2 and node.inputs[2]:
        return "a training_mode input may turn on random masks: Dropout then runs on the CPU provider"
    return None
