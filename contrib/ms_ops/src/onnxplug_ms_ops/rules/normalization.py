"""Normalization fusions into onnxruntime's contrib ops.

- ``FuseRmsNormalization``: the RMS norm torch writes for LLaMA/T5-style models (optional Cast to
  the compute type, Pow 2, ReduceMean, Add epsilon, Sqrt, Reciprocal or ``1 / ...``, Mul, optional
  Cast back, Mul weight) → ``SimplifiedLayerNormalization`` (default domain, as onnxruntime has it).
- ``SkipLayerNormalization``: ``LayerNormalization(Add(x, skip) [+ bias])`` → the contrib op, from
  onnxscript's ``ort_fusions.skip_normalization`` rules with a stricter shape check.
- ``SkipSimplifiedLayerNormalization``: the same over ``SimplifiedLayerNormalization``.

The skip fusions expect the layer norms already fused (``cpu.layer_norm``, ``ms_ops.rms_norm``).
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript.rewriter import pattern
from onnxscript.rewriter.ort_fusions import skip_normalization

from onnxplug_cpu.rule_values import constant_array, static_shape, trailing_reduce_axis

__all__ = ["rms_norm_rules", "skip_layer_norm_rules", "skip_rms_norm_rules"]

_FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE, ir.DataType.BFLOAT16})
_COMPUTE = frozenset({ir.DataType.FLOAT, ir.DataType.DOUBLE})


class FuseRmsNormalization(pattern.RewriteRuleClassBase):
    """``weight * (x / sqrt(mean(x ** 2) + eps))`` → ``SimplifiedLayerNormalization``."""

    def __init__(self, name: str, *, weight_first: bool):
        super().__init__(name)
        self._weight_first = weight_first

    def pattern(self, op, x, compute_type, target_type, epsilon, weight):
        wide = pattern.OrValue([op.Cast(x, to=compute_type), x], tag_var="cast_in", tag_values=[True, False])
        mean_square = op.ReduceMean(op.Pow(wide, 2.0), _allow_other_inputs=True, _outputs=["mean_square"])
        rms = op.Sqrt(op.Add(mean_square, epsilon))
        inverse = pattern.OrValue([op.Reciprocal(rms), op.Div(1.0, rms)])
        normalized = op.Mul(wide, inverse)
        normalized = pattern.OrValue([op.Cast(normalized, to=target_type), normalized])
        return op.Mul(weight, normalized) if self._weight_first else op.Mul(normalized, weight)

    def check(self, context, x, compute_type, epsilon, weight, mean_square, cast_in, **_):
        result = pattern.MatchResult()
        shape = static_shape(x)
        if shape is None or x.dtype not in _FLOATS:
            return result.fail("X's rank or float type is unknown", x)
        axis = trailing_reduce_axis(mean_square.producer(), len(shape))
        if axis is None:
            return result.fail("the mean is not taken over trailing axes with keepdims=1", mean_square)
        eps = constant_array(epsilon)
        if eps is None or eps.size != 1 or eps.ndim > 1:
            return result.fail("epsilon is not a scalar constant", epsilon)
        array = constant_array(weight)
        if array is None or tuple(array.shape) != shape[axis:] or weight.dtype not in _FLOATS:
            return result.fail(f"the weight is not a float constant of shape {shape[axis:]}", weight)
        stash = ir.DataType(compute_type.as_int()) if cast_in else x.dtype
        if stash not in _COMPUTE:
            stash = ir.DataType.FLOAT  # computing a float16 norm in float32, as onnxruntime does
        self._attrs = {"axis": axis, "epsilon": float(eps.reshape(())), "stash_type": int(stash)}
        return result

    def rewrite(self, op, x, weight, **_):
        return op.SimplifiedLayerNormalization(x, weight, **self._attrs)


def _same_shape(*values: ir.Value) -> bool:
    shapes = [static_shape(v) for v in values]
    return shapes[0] is not None and all(s == shapes[0] for s in shapes)


class FuseSkipLayerNorm(skip_normalization.SkipLayerNormFusion):
    """onnxscript's rule; also requires input and skip of the same known shape (no broadcast),
    where onnxscript lets two unnamed dimensions pass as equal."""

    def check(self, op, **bindings):  # onnxscript binds the pattern's `input` by that name
        result = super().check(op, **bindings)
        if result and not _same_shape(bindings["input"], bindings["skip"]):
            return result.fail("input and skip are not known to have the same shape", bindings["skip"])
        return result


class FuseSkipRmsNorm(skip_normalization.SkipRmsNormFusion):
    """onnxscript's rule with the same shape check, and gamma of the input's type (the contrib op
    has one type for all)."""

    def check(self, op, **bindings):
        result = super().check(op, **bindings)
        x, skip, gamma = bindings["input"], bindings["skip"], bindings["gamma"]
        if result and not _same_shape(x, skip):
            return result.fail("input and skip are not known to have the same shape", skip)
        if result and gamma.dtype != x.dtype:
            return result.fail("gamma's type differs from the input's", gamma)
        return result


def _skip_rules(cls) -> list:
    return [
        cls.rule("pre_bias", has_bias=True, bias_pre_add=True),
        cls.rule("bias", has_bias=True, bias_pre_add=False),
        cls.rule("plain", has_bias=False),
    ]


def rms_norm_rules() -> list:
    return [
        FuseRmsNormalization.rule(f"rms_norm_{o}", weight_first=o == "weight_first")
        for o in ("weight_first", "weight_last")
    ]


def skip_layer_norm_rules() -> list:
    return _skip_rules(FuseSkipLayerNorm)


def skip_rms_norm_rules() -> list:
    return _skip_rules(FuseSkipRmsNorm)
