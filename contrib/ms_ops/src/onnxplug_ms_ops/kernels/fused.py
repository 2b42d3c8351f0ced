"""FusedConv, FusedGemm and FusedMatMul: a linear op with what onnxruntime folded into it.

The convolution is the CPU provider's Conv (``onnxplug_cpu.numerics.Convolution``: the compiled
tiles, or im2col and one batched matmul for all groups, or its pointwise, depthwise and Winograd
paths); constant weights are prepared once per node.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug_cpu.numerics import Convolution, Gemm, sigmoid, silu

from ._common import widen
from ._registry import kernel


def _param(params, i, default):
    """Activation parameter ``i``, or onnxruntime's ``default`` where it is absent or ``None``."""
    return default if len(params) <= i or params[i] is None else params[i]


def _activation(name, params, op):
    """The element-wise function ``name`` with its parameters (``None`` = onnxruntime's default)."""

    def p(i, default):
        return _param(params, i, default)

    def hard_sigmoid(x):
        return np.clip(p(0, 0.2) * x + p(1, 0.5), 0, 1)

    def leaky(x):
        return np.where(x >= 0, x, p(0, 0.01) * x)

    def elu(x):
        return np.where(x >= 0, x, p(0, 1.0) * np.expm1(np.minimum(x, 0)))

    def selu(x):
        alpha, gamma = p(0, 1.6732632423543772), p(2, 1.0507009873554805)
        return gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))

    def clip(x):
        low, high = p(0, -np.inf), p(1, np.inf)
        return np.clip(x, low, high)

    table = {
        None: lambda x: x,
        "": lambda x: x,
        "Identity": lambda x: x,
        "Relu": lambda x: np.maximum(x, 0),
        "Tanh": np.tanh,
        "Sigmoid": lambda x: np.exp(-np.logaddexp(0, -x)),
        "LeakyRelu": leaky,
        "HardSigmoid": hard_sigmoid,
        "Clip": clip,
        "Elu": elu,
        "Selu": selu,
        "Softplus": lambda x: np.logaddexp(0, x),
        "Softsign": lambda x: x / (1 + np.abs(x)),
        "ThresholdedRelu": lambda x: np.where(x > p(0, 1.0), x, 0),
        "ScaledTanh": lambda x: p(0, 1.0) * np.tanh(p(1, 1.0) * x),
        "ParametricSoftplus": lambda x: p(0, 1.0) * np.logaddexp(0, p(1, 1.0) * x),
        # onnxplug's own: the optimizer folds com.microsoft QuickGelu (SiLU) into FusedConv
        # (ms_ops.fused_conv); onnxruntime's FusedConv has no such activation.
        "QuickGelu": lambda x: silu(widen(x), p(0, 1.0)),
    }
    if name not in table:
        raise Fail(f"{op}: unsupported activation {name!r}; supported: {sorted(k for k in table if k)}")
    fn = table[name]
    return lambda x: fn(x).astype(x.dtype, copy=False)


@kernel("FusedGemm", since=(1,), factory=True)
def fused_gemm(
    ctx, *, alpha, beta, transA, transB, activation, activation_alpha=None, activation_beta=None, activation_gamma=None
):
    """The CPU provider's Gemm (``onnxplug_cpu.numerics.Gemm``: constant weights on its tiles, a
    single row split over the run's team), then the activation."""
    act = _activation(activation, (activation_alpha, activation_beta, activation_gamma), "FusedGemm")
    gemm = Gemm(ctx.constant(1), alpha, beta, transA, transB)

    def run(a, b, c=None):
        if a.ndim != 2 or b.ndim != 2:
            raise Fail(f"FusedGemm: A and B must be 2-D, got {a.shape} and {b.shape}")
        inner_a, inner_b = a.shape[0 if transA else 1], b.shape[1 if transB else 0]
        if inner_a != inner_b:
            a_shape = a.shape[::-1] if transA else a.shape
            b_shape = b.shape[::-1] if transB else b.shape
            raise Fail(f"FusedGemm: inner dimensions differ: {a_shape} x {b_shape}")
        try:
            y = gemm(a, b, c if beta != 0.0 else None)
        except InvalidArgument as error:
            raise Fail(f"FusedGemm: {error}") from None
        return act(y)

    return run


def _batch_transposed(x: np.ndarray, trans_batch: int, trans: int) -> np.ndarray:
    """onnxruntime's FusedMatMul operand layout: transBatch moves axis 0 behind the batch axes
    (just before the last one); trans then swaps the last two axes."""
    if trans_batch and x.ndim >= 3:
        x = np.moveaxis(x, 0, -2)
    if trans and x.ndim >= 2:
        x = np.swapaxes(x, -1, -2)
    return x


@kernel("FusedMatMul", since=(1,))
def fused_matmul(a, b, *, alpha, transA, transB, transBatchA, transBatchB):
    a2 = _batch_transposed(a, transBatchA, transA)
    b2 = _batch_transposed(b, transBatchB, transB)
    try:
        y = np.matmul(widen(a2), widen(b2))
    except ValueError as error:
        raise Fail(f"FusedMatMul: shapes {a.shape} and {b.shape} do not multiply ({error})") from None
    if alpha != 1.0:
        y = y * y.dtype.type(alpha)
    return y.astype(a.dtype, copy=False)


def _clamp(name, params, dtype):
    """Relu and Clip as the ``(low, high)`` clamp the convolution applies in its epilogue (one
    pass with the bias and Z, or in the depthwise kernels' store), for float32 and float64."""
    if dtype not in (np.float32, np.float64):
        return None
    if name == "Relu":
        return (0.0, np.inf)
    if name == "Clip":
        return (_param(params, 0, -np.inf), _param(params, 1, np.inf))
    return None


def _in_place_activation(name):
    """Sigmoid and Tanh written into the convolution's fresh output instead of new arrays (a
    memory-bound pointwise convolution otherwise pays more passes than its matmul; the table's
    Sigmoid goes through a slow ``logaddexp``)."""
    if name == "Sigmoid":
        return lambda y: sigmoid(y, out=y)
    if name == "Tanh":
        return lambda y: np.tanh(y, out=y)
    return None


def _then_in_place(binding, in_place):
    """``binding`` followed by the activation written into its output (a YOLO head's Sigmoid):
    what :func:`fused_conv`'s ``run`` does after the convolution, the same bits."""
    layer = binding.call

    def call(out, *inputs):
        layer(out, *inputs)
        in_place(out)

    binding.call = call
    return binding


@kernel("FusedConv", since=(1,), factory=True)
def fused_conv(
    ctx,
    *,
    auto_pad,
    dilations=None,
    group,
    kernel_shape=None,
    pads=None,
    strides=None,
    activation=None,
    activation_params=None,
):
    params = tuple(activation_params or ())
    act = _activation(activation, params, "FusedConv")
    in_place = _in_place_activation(activation)
    silu_alpha = _param(params, 0, 1.0)  # (QuickGelu's)
    geometry = dict(auto_pad=auto_pad, dilations=dilations, kernel_shape=kernel_shape, pads=pads, strides=strides)
    convolution = Convolution(ctx.constant(1), group, "FusedConv", **geometry)

    clamps: dict = {}  # per input dtype: the same tuple each call (the layer keeps its arguments for it)

    def clamp_for(dtype):
        clamp = clamps.get(dtype, False)
        if clamp is False:
            clamp = clamps[dtype] = _clamp(activation, params, dtype)
        return clamp

    def run(x, w, b=None, z=None, *, out=None):
        clamp = clamp_for(x.dtype)
        if clamp is not None and (z is None or z.dtype == x.dtype):
            # bias, Z and the clamp in the convolution's epilogue (a residual block's end)
            return convolution(x, w, b, z, clamp, None, out)  # (positional: ~0.1 µs less)
        if not activation and z is not None and z.dtype == x.dtype:
            # a residual with no activation (ms_ops.fused_conv's FuseConvAdd): added in the store
            return convolution(x, w, b, z, out=out)
        if activation == "QuickGelu" and (z is None or z.dtype == x.dtype):
            # SiLU in the convolution tiles' store (onnxplug's own activation: see _activation)
            return convolution(x, w, b, z, None, silu_alpha, out=out)
        y = convolution(x, w, b)  # a fresh array
        if z is not None:
            if np.broadcast_shapes(y.shape, z.shape) == y.shape and np.can_cast(z.dtype, y.dtype, "same_kind"):
                y += z
            else:
                y = y + z
        return in_place(y) if in_place is not None else act(y)

    def bind(inputs, output, scratch):
        """The node's layer bound for the plan's segments where :func:`run` would take the
        convolution's compiled store alone (no separate activation pass), else ``None``."""
        x, b = inputs[0], inputs[2] if len(inputs) > 2 else None
        z = inputs[3] if len(inputs) > 3 else None
        if z is not None and z.dtype != x.dtype:
            return None
        clamp = clamp_for(x.dtype)
        residual_index = None if z is None else 3
        if clamp is None and activation and activation != "QuickGelu":
            if in_place is None or z is not None:
                return None  # (LeakyRelu, HardSigmoid...: act's own array; Z: run() adds it apart)
            binding = convolution.bind_layer(x, b, z, None, None, output, scratch, residual_index)
            return None if binding is None else _then_in_place(binding, in_place)
        silu = silu_alpha if activation == "QuickGelu" else None
        return convolution.bind_layer(x, b, z, clamp, silu, output, scratch, residual_index)

    # The plan may pass a view of a Concat's output as ``out`` (``Convolution``'s ``out``): the
    # compiled tiles store there; the other paths return their own array.
    run.accepts_out = True
    run.bind = bind
    return run
