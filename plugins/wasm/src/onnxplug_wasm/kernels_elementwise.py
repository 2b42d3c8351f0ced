"""Element-wise ops and activations, Softmax, LayerNormalization, and the shape ops (Transpose,
Concat; Reshape and its relatives only relabel a tensor's block, with no copy and no call)."""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._common import (
    K_BINARY,
    K_LAYERNORM,
    K_SOFTMAX,
    K_UNARY,
    broadcast_strides,
    contiguous_strides,
    copy,
    memory_of,
    normalize_axis,
    registry,
    strided_params,
)
from .memory import PARAMS_ARG, WasmTensor

# -- binary ops with numpy broadcasting ------------------------------------------------------------

ADD, SUB, MUL, DIV, MAX, MIN, PRELU = range(7)


def binary(op: str, code: int, a: WasmTensor, b: WasmTensor) -> WasmTensor:
    memory = memory_of(op, a, b)
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise InvalidArgument(f"{op}: shapes {list(a.shape)} and {list(b.shape)} do not broadcast") from None
    out = memory.tensor(shape, np.float32, f"{op}'s output")
    if out.size:
        params = strided_params(shape, [broadcast_strides(a.shape, shape), broadcast_strides(b.shape, shape)])
        memory.call(K_BINARY, code, PARAMS_ARG, a.offset, b.offset, out.offset, params=params)
    return out


def _binary_kernel(op: str, code: int, since: tuple[int, ...]) -> None:
    def kernel(a, b):
        return binary(op, code, a, b)

    kernel.__name__ = kernel.__qualname__ = op.lower()
    registry.kernel(op, since=since)(kernel)


for _op, _code in (("Add", ADD), ("Sub", SUB), ("Mul", MUL), ("Div", DIV)):
    _binary_kernel(_op, _code, (7, 13, 14))


@registry.kernel("PRelu", since=(7, 9, 16))
def prelu(x, slope):
    out = binary("PRelu", PRELU, x, slope)
    if out.shape != x.shape:
        raise InvalidArgument(f"PRelu: slope {list(slope.shape)} must broadcast to X {list(x.shape)}")
    return out


def _variadic(op: str, code: int, since: tuple[int, ...]) -> None:
    def kernel(*inputs):
        if not inputs:
            raise InvalidArgument(f"{op}: needs at least one input")
        result = inputs[0]
        memory_of(op, *inputs)
        for value in inputs[1:]:
            result = binary(op, code, result, value)
        return result

    kernel.__name__ = kernel.__qualname__ = op.lower()
    registry.kernel(op, since=since)(kernel)


_variadic("Sum", ADD, (8, 13))
_variadic("Max", MAX, (8, 12, 13))
_variadic("Min", MIN, (8, 12, 13))

# -- unary ops ---------------------------------------------------------------------------------------

(
    RELU,
    LEAKY_RELU,
    SIGMOID,
    TANH,
    EXP,
    LOG,
    ABS,
    NEG,
    SQRT,
    RECIPROCAL,
    CLIP,
    HARD_SIGMOID,
    ELU,
    SOFTPLUS,
    ERF,
    GELU,
    HARD_SWISH,
    SELU,
    IDENTITY,
    AFFINE,
) = range(20)


def unary(op: str, code: int, x: WasmTensor, alpha: float = 0.0, beta: float = 0.0) -> WasmTensor:
    memory = memory_of(op, x)
    out = memory.tensor(x.shape, np.float32, f"{op}'s output")
    if out.size:
        memory.call(K_UNARY, code, x.size, x.offset, float(alpha), float(beta), out.offset)
    return out


def _unary_kernel(op: str, code: int, since: tuple[int, ...]) -> None:
    def kernel(x):
        return unary(op, code, x)

    kernel.__name__ = kernel.__qualname__ = op.lower()
    registry.kernel(op, since=since)(kernel)


for _op, _code, _since in (
    ("Relu", RELU, (6, 13, 14)),
    ("Sigmoid", SIGMOID, (6, 13)),
    ("Tanh", TANH, (6, 13)),
    ("Exp", EXP, (6, 13)),
    ("Log", LOG, (6, 13)),
    ("Abs", ABS, (6, 13)),
    ("Neg", NEG, (6, 13)),
    ("Sqrt", SQRT, (6, 13)),
    ("Reciprocal", RECIPROCAL, (6, 13)),
    ("Erf", ERF, (9, 13)),
    ("HardSwish", HARD_SWISH, (14, 22)),
    ("Softplus", SOFTPLUS, (1, 22)),
):
    _unary_kernel(_op, _code, _since)


@registry.kernel("LeakyRelu", since=(6, 16))
def leaky_relu(x, *, alpha):
    return unary("LeakyRelu", LEAKY_RELU, x, alpha)


@registry.kernel("Elu", since=(6, 22))
def elu(x, *, alpha):
    return unary("Elu", ELU, x, alpha)


@registry.kernel("Selu", since=(6, 22))
def selu(x, *, alpha, gamma):
    return unary("Selu", SELU, x, alpha, gamma)


@registry.kernel("HardSigmoid", since=(6, 22))
def hard_sigmoid(x, *, alpha, beta):
    return unary("HardSigmoid", HARD_SIGMOID, x, alpha, beta)


@registry.kernel("Gelu", since=(20,))
def gelu(x, *, approximate):
    if approximate != "none":
        raise InvalidArgument(f"Gelu: the wasm kernel computes approximate='none', not {approximate!r}")
    return unary("Gelu", GELU, x)


@registry.kernel("Clip", since=(6,))
def clip_6(x, *, min, max):  # noqa: A002 - the schema's attribute names
    return unary("Clip", CLIP, x, min, max)


@registry.kernel("Clip", since=(11, 12, 13), host_inputs=(1, 2))
def clip(x, low=None, high=None):
    lo = -np.inf if low is None else float(np.asarray(low).reshape(()))
    hi = np.inf if high is None else float(np.asarray(high).reshape(()))
    return unary("Clip", CLIP, x, lo, hi)


# -- normalisations ----------------------------------------------------------------------------------


def softmax_rows(op: str, x: WasmTensor, outer: int, n: int, inner: int, log: bool) -> WasmTensor:
    memory = memory_of(op, x)
    out = memory.tensor(x.shape, np.float32, f"{op}'s output")
    if out.size:
        memory.call(K_SOFTMAX, outer, n, inner, x.offset, out.offset, int(log))
    return out


def _softmax_kernels(op: str, log: bool) -> None:
    def coerced(x, *, axis):
        # Before opset 13 the input is read as 2-D: [prod(shape[:axis]), prod(shape[axis:])].
        a = normalize_axis(axis, x.ndim, op) if x.ndim else 0
        return softmax_rows(op, x, math.prod(x.shape[:a]), math.prod(x.shape[a:]), 1, log)

    def single_axis(x, *, axis):
        a = normalize_axis(axis, x.ndim, op)
        return softmax_rows(op, x, math.prod(x.shape[:a]), x.shape[a], math.prod(x.shape[a + 1 :]), log)

    name = op.lower()
    coerced.__name__ = coerced.__qualname__ = f"{name}_1"
    single_axis.__name__ = single_axis.__qualname__ = name
    registry.kernel(op, since=(1, 11))(coerced)
    registry.kernel(op, since=(13,))(single_axis)


_softmax_kernels("Softmax", False)
_softmax_kernels("LogSoftmax", True)


@registry.kernel("LayerNormalization", since=(17,))
def layer_normalization(x, scale, bias=None, *, axis, epsilon, stash_type):
    if stash_type != 1:
        raise InvalidArgument(f"LayerNormalization: stash_type {stash_type} is not supported (only 1, float)")
    memory = memory_of("LayerNormalization", x, scale, bias)
    a = normalize_axis(axis, x.ndim, "LayerNormalization")
    outer, n = math.prod(x.shape[:a]), math.prod(x.shape[a:])
    params = [
        _full(memory, value, x.shape[a:], "LayerNormalization") if value is not None else None
        for value in (scale, bias)
    ]
    out = memory.tensor(x.shape, np.float32, "LayerNormalization's output")
    stats = (*x.shape[:a], *([1] * (x.ndim - a)))
    mean = memory.tensor(stats, np.float32, "LayerNormalization's mean")
    inv = memory.tensor(stats, np.float32, "LayerNormalization's inverse deviation")
    if out.size:
        memory.call(
            K_LAYERNORM,
            outer,
            n,
            x.offset,
            params[0].offset,
            params[1].offset if params[1] else 0,
            float(epsilon),
            out.offset,
            mean.offset,
            inv.offset,
        )
    return out, mean, inv


def _full(memory, value: WasmTensor, shape: tuple[int, ...], op: str) -> WasmTensor:
    """``value`` broadcast to ``shape`` (a copy only when it is smaller)."""
    if value.shape == shape:
        return value
    try:
        np.broadcast_shapes(value.shape, shape)
    except ValueError:
        raise InvalidArgument(f"{op}: {list(value.shape)} does not broadcast to {list(shape)}") from None
    if len(value.shape) > len(shape) or np.broadcast_shapes(value.shape, shape) != shape:
        raise InvalidArgument(f"{op}: {list(value.shape)} does not broadcast to {list(shape)}")
    out = memory.tensor(shape, np.float32, f"{op}'s broadcast parameter")
    copy(memory, value, broadcast_strides(value.shape, shape), out, shape)
    return out


# -- layout ------------------------------------------------------------------------------------------


_LATEST = (21, 23, 24, 25)


@registry.kernel("Transpose", since=(1, 13, *_LATEST))
def transpose(x, *, perm=None):
    memory = memory_of("Transpose", x)
    order = list(reversed(range(x.ndim))) if perm is None else [int(p) for p in perm]
    if sorted(order) != list(range(x.ndim)):
        raise InvalidArgument(f"Transpose: perm {order} is not a permutation of {x.ndim} axes")
    shape = [x.shape[p] for p in order]
    own = contiguous_strides(x.shape)
    out = memory.tensor(shape, np.float32, "Transpose's output")
    copy(memory, x, [own[p] for p in order], out, shape)
    return out


def _concat(inputs, axis: int) -> WasmTensor:
    memory = memory_of("Concat", *inputs)
    first = inputs[0]
    a = normalize_axis(axis, first.ndim, "Concat")
    for value in inputs:
        if value.ndim != first.ndim or value.shape[:a] + value.shape[a + 1 :] != first.shape[:a] + first.shape[a + 1 :]:
            raise InvalidArgument(f"Concat: input shapes {[list(v.shape) for v in inputs]} differ off axis {a}")
    shape = list(first.shape)
    shape[a] = sum(v.shape[a] for v in inputs)
    out = memory.tensor(shape, np.float32, "Concat's output")
    y_strides = contiguous_strides(shape)
    start = 0
    for value in inputs:
        copy(memory, value, contiguous_strides(value.shape), out, value.shape, y_strides, start * y_strides[a])
        start += value.shape[a]
    return out


@registry.kernel("Concat", since=(4, 11, 13))
def concat(*inputs, axis):
    return _concat(inputs, axis)


def _relabel(x: WasmTensor, shape, op: str) -> WasmTensor:
    memory_of(op, x)
    if math.prod(shape) != x.size:
        raise InvalidArgument(f"{op}: cannot reshape {list(x.shape)} to {list(shape)}")
    return x.reshape(shape)


@registry.kernel("Reshape", since=(5, 13), host_inputs=(1,))
def reshape_5(x, shape):
    return reshape(x, shape, allowzero=0)


@registry.kernel("Reshape", since=(14, 19, *_LATEST), host_inputs=(1,))
def reshape(x, shape, *, allowzero):
    target = [int(d) for d in np.asarray(shape).reshape(-1)]
    if not allowzero:
        target = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(target)]
    if target.count(-1) > 1:
        raise InvalidArgument(f"Reshape: more than one -1 in {target}")
    if -1 in target:
        known = math.prod(d for d in target if d != -1)
        if known == 0 or x.size % known:
            raise InvalidArgument(f"Reshape: cannot reshape {list(x.shape)} to {target}")
        target[target.index(-1)] = x.size // known
    return _relabel(x, target, "Reshape")


@registry.kernel("Flatten", since=(1, 9, 11, 13, *_LATEST))
def flatten(x, *, axis):
    if not -x.ndim <= axis <= x.ndim:
        raise InvalidArgument(f"Flatten: axis {axis} is out of range [{-x.ndim}, {x.ndim}]")
    a = axis + x.ndim if axis < 0 else axis
    return _relabel(x, (math.prod(x.shape[:a]), math.prod(x.shape[a:])), "Flatten")


def _squeeze(x: WasmTensor, axes) -> WasmTensor:
    if axes is None:
        return _relabel(x, [d for d in x.shape if d != 1], "Squeeze")
    axes = {normalize_axis(int(a), x.ndim, "Squeeze") for a in axes}
    for a in axes:
        if x.shape[a] != 1:
            raise Fail(f"Squeeze: dimension {a} of shape {list(x.shape)} is not 1")
    return _relabel(x, [d for i, d in enumerate(x.shape) if i not in axes], "Squeeze")


def _unsqueeze(x: WasmTensor, axes) -> WasmTensor:
    rank = x.ndim + len(axes)
    chosen = {normalize_axis(int(a), rank, "Unsqueeze") for a in axes}
    if len(chosen) != len(axes):
        raise InvalidArgument(f"Unsqueeze: repeated axes {list(axes)}")
    dims = iter(x.shape)
    return _relabel(x, [1 if i in chosen else next(dims) for i in range(rank)], "Unsqueeze")


@registry.kernel("Squeeze", since=(1, 11))
def squeeze_1(x, *, axes=None):
    return _squeeze(x, axes)


@registry.kernel("Squeeze", since=(13, *_LATEST), host_inputs=(1,))
def squeeze(x, axes=None):
    return _squeeze(x, None if axes is None else np.asarray(axes).reshape(-1).tolist())


@registry.kernel("Unsqueeze", since=(1, 11))
def unsqueeze_1(x, *, axes):
    return _unsqueeze(x, list(axes))


@registry.kernel("Unsqueeze", since=(13, *_LATEST), host_inputs=(1,))
def unsqueeze(x, axes):
    return _unsqueeze(x, np.asarray(axes).reshape(-1).tolist())


@registry.kernel("Identity", since=(1, 13, 14, 16, 19, *_LATEST))
def identity(x):
    memory_of("Identity", x)
    return x


@registry.kernel("Dropout", since=(7, 10))
def dropout_7(x, *, ratio):
    # Inference: the identity, as in every runtime (the mask output is declined by capability).
    memory_of("Dropout", x)
    return (x,)  # the mask output is declined by capability


@registry.kernel("Dropout", since=(12, 13, 22), host_inputs=(1, 2))
def dropout(x, ratio=None, training_mode=None, *, seed=None):
    if training_mode is not None and bool(np.asarray(training_mode).reshape(())):
        raise InvalidArgument("Dropout: the wasm provider runs inference only (training_mode is true)")
    memory_of("Dropout", x)
    return (x,)  # the mask output is declined by capability
