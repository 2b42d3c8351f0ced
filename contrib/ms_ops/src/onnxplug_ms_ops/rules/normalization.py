"""Normalization fusions into onnxruntime's contrib ops.

- ``FuseRmsNormalization``: the RMS norm torch writes for LLaMA/T5-style models (optional Cast to
  the compute type, Pow 2, ReduceMean, Add epsilon, Sqrt, Reciprocal or ``1 / ...``, Mul, optional
  Cast back, Mul weight) → ``SimplifiedLayerNormalization`` (default domain, as onnxruntime has it).
- ``SkipLayerNormalization``: ``LayerNormalization(Add(x, skip) [+ bias])`` → the contrib op, from
  onnxscript's ``ort_fusions.skip_normalization`` patterns (plus a bias added first:
  ``Add(bias, x)``) with a shape check of its own: the same shapes, or a skip broadcast over the
  batch, the terms swapped where the broadcast one came first.
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


def _skip_roles(a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value] | None:
    """``(input, skip)`` of SkipLayerNormalization for the two terms of a sum: the input of the
    sum's 3-D shape, the skip of that shape or broadcast over its batch (``(1, S, D)`` or
    ``(S, D)``, as the kernel takes it); the terms in the order given where both fit.  ``None``
    where neither order is known to fit.  (A BERT's feed-forward sum adds a ``(1, 128, 768)``
    product to a ``(batch, 128, 768)`` residual: as given that was no SkipLayerNormalization.)"""
    for x, skip in ((a, b), (b, a)):
        x_shape, skip_shape = static_shape(x, symbolic=True), static_shape(skip, symbolic=True)
        if x_shape is None or skip_shape is None or len(x_shape) != 3:
            continue
        if skip_shape == x_shape or skip_shape in (x_shape[1:], (1, *x_shape[1:])):
            return x, skip
    return None


def _vector_of(value: ir.Value | None, size: int) -> bool:
    return value is not None and static_shape(value) == (size,)


class FuseSkipLayerNorm(skip_normalization.SkipLayerNormFusion):
    """onnxscript's rule (``LayerNormalization(Add(input, skip) [+ bias])``, the bias added before
    or after the skip) with a check of its own: the terms' shapes as :func:`_skip_roles` has them
    (onnxscript wants both ``(B, S, D)`` with the same ``B``, and lets two unnamed dimensions pass
    as equal), ``gamma``, ``beta`` and the bias ``(D,)``.  ``bias_first``: the pre-added bias is
    the Add's first input (``Add(bias, MatMul(...))``), as some exporters write it."""

    def __init__(self, name: str, has_bias: bool = False, bias_pre_add: bool = False, bias_first: bool = False):
        super().__init__(name, has_bias=has_bias, bias_pre_add=bias_pre_add)
        self._bias_first = bias_first

    def pattern(self, op, input, skip, gamma, beta, bias):  # noqa: A002 - onnxscript binds by these names
        if not self._bias_first:
            return super().pattern(op, input, skip, gamma, beta, bias)
        summed = op.Add(bias, input)
        skip_sum = pattern.OrValue([op.Add(skip, summed), op.Add(summed, skip)], name="skip_sum")
        normalized = op.LayerNormalization(
            skip_sum, gamma, beta, axis=-1, _allow_other_attributes=True, _outputs=["layer_norm"]
        )
        return normalized, skip_sum

    def check(self, op, input, skip, gamma, beta, bias, layer_norm, **_):  # noqa: A002 - onnxscript's names
        result = pattern.MatchResult()
        roles = _skip_roles(input, skip)
        if roles is None:
            return result.fail("input and skip are not known to have shapes SkipLayerNormalization takes", skip)
        hidden = static_shape(roles[0], symbolic=True)[-1]
        if not isinstance(hidden, int):
            return result.fail("the hidden size is not known", input)
        if not _vector_of(gamma, hidden) or (beta is not None and not _vector_of(beta, hidden)):
            return result.fail(f"gamma or beta is not known to have shape ({hidden},)", gamma)
        if self._has_bias and not _vector_of(bias, hidden):
            return result.fail(f"the bias is not known to have shape ({hidden},)", bias)
        if layer_norm.producer().attributes.get_int("stash_type", 1) != 1:
            return result.fail("stash_type other than 1 (float32 statistics)")
        self._swapped = roles[0] is not input
        return result

    def rewrite(self, op, input, skip, gamma, beta, bias, layer_norm, **_):  # noqa: A002
        if self._swapped:  # the sum is the same either way: float addition is commutative
            input, skip = skip, input  # noqa: A001
        return super().rewrite(op, input, skip, gamma, beta, bias, layer_norm)


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
    # the bias-first form before the plain one, which would otherwise take its sum and leave
    # the bias's Add
    pre_bias, bias, plain = _skip_rules(FuseSkipLayerNorm)
    return [pre_bias, FuseSkipLayerNorm.rule("bias_first", True, True, True), bias, plain]


def skip_rms_norm_rules() -> list:
    return _skip_rules(FuseSkipRmsNorm)
