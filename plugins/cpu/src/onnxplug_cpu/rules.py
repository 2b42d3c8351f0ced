"""The CPU provider's fusions: standard ONNX ops in, standard ONNX ops out.

- ``FoldBatchNormIntoConv``: ``BatchNormalization(Conv(x, W, B))`` (inference mode, constant
  parameters) → ``Conv(x, W', B')`` with the normalization folded into the weights and bias.
- ``FuseMatMulAddToGemm``: ``Add(MatMul(A, B), C)`` with 2-D ``A``, constant 2-D ``B`` and a ``C``
  that Gemm can broadcast → ``Gemm(A, B, C)``.
- ``FuseLayerNormalization``: the decomposition torch writes for a layer norm (ReduceMean, Sub,
  Pow or Mul, ReduceMean, Add epsilon, Sqrt, Div or Mul by Reciprocal, Mul scale, optionally
  Add bias) → ``LayerNormalization`` (opset 17 and above, where the op exists).

The first two are "basic" rewrites (onnxruntime applies them from ORT_ENABLE_BASIC on, writing
standard ops only); the layer norm is "extended".  The sets themselves are listed in
:mod:`onnxplug_cpu.rule_sets`, which builds these rules only when a graph could use them.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern

from .rule_values import FreshNames, constant_array, static_shape, trailing_reduce_axis

__all__ = ["conv_bn_rules", "layer_norm_rules", "matmul_add_gemm_rules"]

#: Gemm's types at every opset MatMul + Add models use (integer and bfloat16 Gemm came later).
_GEMM_TYPES = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE})
_LAYER_NORM_TYPES = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE, ir.DataType.BFLOAT16})


class FoldBatchNormIntoConv(pattern.RewriteRuleClassBase):
    """``BatchNormalization(Conv(x, W[, B]))`` → ``Conv(x, W * s, (B - mean) * s + beta)``,
    ``s = scale / sqrt(var + epsilon)``, per output channel."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self._fresh_names = FreshNames()

    def pattern(self, op, x, w, scale, beta, mean, var):
        conv = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.BatchNormalization(conv, scale, beta, mean, var, _outputs=["bn_out"])

    def check(self, context, w, scale, beta, mean, var, conv_out, bn_out, **_):
        result = pattern.MatchResult()
        bn = bn_out.producer()
        if bn.attributes.get_int("training_mode", 0) != 0:
            return result.fail("BatchNormalization is in training mode (uses batch statistics)")
        if bn.attributes.get_int("spatial", 1) != 1 or bn.attributes.get_int("is_test", 1) != 1:
            return result.fail("BatchNormalization is not spatial inference normalization")
        conv = conv_out.producer()
        bias = conv.inputs[2] if len(conv.inputs) > 2 else None
        weights = constant_array(w)
        if weights is None or weights.ndim < 3 or weights.dtype.kind != "f":
            return result.fail("Conv weights are not a constant float tensor", w)
        params = [constant_array(v) for v in (scale, beta, mean, var)]
        if bias is not None:
            params.append(constant_array(bias))
        channels = weights.shape[0]
        for value, array in zip((scale, beta, mean, var, bias), params):
            if array is None:
                return result.fail("a BatchNormalization parameter or the Conv bias is not constant", value)
            if array.shape != (channels,):
                return result.fail(f"expected shape ({channels},), got {array.shape}", value)
        self._arrays = (weights, *params)
        base = f"{w.name or 'W'}_bn"
        self._names = self._fresh_names(context.graph_or_function, base, f"{base}_bias")
        self._epsilon = bn.attributes.get_float("epsilon", 1e-5)
        return result

    def rewrite(self, op, x, conv_out, **_):
        # The per-channel factor and bias in float64 (a few values); the weights are scaled in
        # their own precision, as onnxruntime does: a float64 copy of every weight was most of
        # this rule's cost on ResNet-50 (25 M weights), for a difference of one rounding.
        weights = self._arrays[0]
        scale, beta, mean, var, *bias = (a.astype(np.float64) for a in self._arrays[1:])
        factor = scale / np.sqrt(var + self._epsilon)
        dtype = weights.dtype
        work = dtype if dtype.itemsize >= 4 else np.dtype(np.float32)  # float16: scaled in float32
        folded_w = weights.astype(work, copy=False) * factor.astype(work).reshape((-1,) + (1,) * (weights.ndim - 1))
        folded_w = folded_w.astype(dtype, copy=False)
        folded_b = ((bias[0] if bias else 0.0) - mean) * factor + beta
        w_value = op.initializer(ir.Tensor(folded_w, name=self._names[0]))
        b_value = op.initializer(ir.Tensor(folded_b.astype(dtype), name=self._names[1]))
        conv = conv_out.producer()
        return op.Conv(x, w_value, b_value, **conv.attributes)


class FuseMatMulAddToGemm(pattern.RewriteRuleClassBase):
    """``Add(MatMul(A, B), C)`` → ``Gemm(A, B, C)`` where Gemm means the same thing: ``A`` 2-D,
    ``B`` a constant 2-D tensor, and ``C`` unidirectionally broadcastable to ``(M, N)``."""

    def pattern(self, op, a, b, c):
        return op.Add(op.MatMul(a, b), c)

    def check(self, context, a, b, c, **_):
        result = pattern.MatchResult()
        if context.model.opset_imports.get("", 0) < 7:
            return result.fail("Gemm broadcasts C from opset 7 on")
        a_shape, c_shape = static_shape(a), static_shape(c)
        weights = constant_array(b)
        if a_shape is None or len(a_shape) != 2:
            return result.fail("A is not known to be 2-D", a)
        if weights is None or weights.ndim != 2:
            return result.fail("B is not a constant 2-D tensor", b)
        if a.dtype not in _GEMM_TYPES or c.dtype != a.dtype:
            return result.fail(f"Gemm does not take {a.dtype} with C of {c.dtype}", a)
        if c_shape is None or len(c_shape) > 2:
            return result.fail("C's shape is unknown or has more than 2 dimensions", c)
        out = (a_shape[0], weights.shape[1])
        for dim, target in zip(c_shape[::-1], out[::-1]):
            if dim != 1 and dim != target:
                return result.fail(f"C of shape {c_shape} does not broadcast to (M, N) = {out}", c)
        return result

    def rewrite(self, op, a, b, c, **_):
        return op.Gemm(a, b, c)


class FuseLayerNormalization(pattern.RewriteRuleClassBase):
    """The layer norm decomposition → ``LayerNormalization(x, scale)`` over the trailing axes it reduces."""

    def __init__(self, name: str, *, scale_first: bool):
        super().__init__(name)
        self._scale_first = scale_first

    def pattern(self, op, x, epsilon, scale):
        mean = op.ReduceMean(x, _allow_other_inputs=True, _outputs=["mean"])
        deviation = op.Sub(x, mean)
        squared = pattern.OrValue([op.Pow(deviation, 2.0), op.Mul(deviation, deviation)])
        variance = op.ReduceMean(squared, _allow_other_inputs=True, _outputs=["variance"])
        std = op.Sqrt(op.Add(variance, epsilon))
        normalized = pattern.OrValue([op.Div(deviation, std), op.Mul(deviation, op.Reciprocal(std))])
        return op.Mul(scale, normalized) if self._scale_first else op.Mul(normalized, scale)

    def check(self, context, x, epsilon, scale, mean, variance, **_):
        result = pattern.MatchResult()
        if context.model.opset_imports.get("", 0) < 17:
            return result.fail("LayerNormalization needs opset 17")
        shape = static_shape(x)
        if shape is None or x.dtype not in _LAYER_NORM_TYPES:
            return result.fail("X's rank or float type is unknown", x)
        axis = trailing_reduce_axis(mean.producer(), len(shape))
        if axis is None:
            return result.fail("the mean is not taken over trailing axes with keepdims=1", mean)
        if trailing_reduce_axis(variance.producer(), len(shape)) != axis:
            return result.fail("the variance is not taken over the mean's axes", variance)
        eps = constant_array(epsilon)
        if eps is None or eps.size != 1 or eps.ndim > 1:
            return result.fail("epsilon is not a scalar constant", epsilon)
        normalized_shape = tuple(shape[axis:])
        weights = constant_array(scale)
        if weights is None or scale.dtype != x.dtype or tuple(weights.shape) != normalized_shape:
            return result.fail(f"scale is not a constant of X's type and shape {normalized_shape}", scale)
        self._axis = axis
        self._epsilon = float(eps.reshape(()))
        self._stash_type = ir.DataType.DOUBLE if x.dtype == ir.DataType.DOUBLE else ir.DataType.FLOAT
        return result

    def rewrite(self, op, x, scale, **_):
        return op.LayerNormalization(x, scale, axis=self._axis, epsilon=self._epsilon, stash_type=self._stash_type)


class FuseLayerNormalizationBias(pattern.RewriteRuleClassBase):
    """``Add(LayerNormalization(x, scale), bias)`` → ``LayerNormalization(x, scale, bias)`` for a
    constant bias of the scale's shape and type."""

    def pattern(self, op, x, scale, bias):
        return op.Add(op.LayerNormalization(x, scale, _outputs=["normalized"]), bias)

    def check(self, context, scale, bias, **_):
        result = pattern.MatchResult()
        array = constant_array(bias)
        if array is None or bias.dtype != scale.dtype or bias.shape is None or scale.shape is None:
            return result.fail("bias is not a constant of the scale's type", bias)
        if tuple(array.shape) != tuple(scale.shape):
            return result.fail(f"bias of shape {array.shape} is not the scale's {scale.shape}", bias)
        return result

    def rewrite(self, op, x, scale, bias, normalized):
        return op.LayerNormalization(x, scale, bias, **normalized.producer().attributes)


def conv_bn_rules() -> list:
    return [FoldBatchNormIntoConv.rule()]


def matmul_add_gemm_rules() -> list:
    return [*FuseMatMulAddToGemm.rule().commute()]


def layer_norm_rules() -> list:
    return [
        FuseLayerNormalization.rule("layer_norm_scale_last", scale_first=False),
        FuseLayerNormalization.rule("layer_norm_scale_first", scale_first=True),
        *FuseLayerNormalizationBias.rule().commute(),
    ]
