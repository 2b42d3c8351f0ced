"""Gelu fusions into onnxruntime's contrib ops.

- ``FuseErfGelu``: ``0.5 * x * (1 + erf(x / sqrt(2)))`` in any grouping and operand order torch
  writes it → ``com.microsoft.Gelu``.
- ``FuseTanhGelu``: ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))`` (GPT-2's
  ``NewGELUActivation``, torch's ``approximate="tanh"``) → ``com.microsoft.FastGelu``.
- ``FuseFastGeluBias``: ``FastGelu(Add(x, bias))`` → ``FastGelu(x, bias)`` (GPT-2's MLP: the Linear's
  bias, a vector of x's last dimension).
- ``FuseQuickGelu``: ``x * Sigmoid(x)`` (SiLU, torch's ``nn.SiLU`` export; YOLO-style detectors
  have one after every convolution) → ``com.microsoft.QuickGelu(x, alpha=1)``, as onnxruntime's
  QuickGeluFusion: one pass and one array where Sigmoid and Mul each made a pass and an array.
- ``BiasGelu``: ``Gelu(Add(x, bias))`` (contrib or ONNX exact Gelu) → ``com.microsoft.BiasGelu``,
  from onnxscript's ``ort_fusions.bias_gelu`` with the bias checked against x's last dimension.
"""

from __future__ import annotations

import math

import onnx_ir as ir
from onnxscript.rewriter import pattern
from onnxscript.rewriter.ort_fusions import bias_gelu

from onnxplug_cpu.rule_values import static_shape

from .. import DOMAIN

__all__ = ["bias_gelu_rules", "fast_gelu_rules", "gelu_rules", "quick_gelu_rules"]

_FLOATS = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.DOUBLE, ir.DataType.BFLOAT16})


def _either(op, op_type, a, b):
    """``op_type(a, b)`` or ``op_type(b, a)`` (Add and Mul commute)."""
    return pattern.OrValue([getattr(op, op_type)(a, b), getattr(op, op_type)(b, a)])


def _half_x_times(op, x, term, grouping, swap):
    """``0.5 * x * term``: ``(x * term) * 0.5``, ``(0.5 * x) * term`` or ``x * (0.5 * term)``.

    The root cannot be an OrValue (onnxscript's matcher), so a rule is made per root operand
    order (``swap``); onnxscript's ``commute()`` cannot copy patterns that hold OrValues."""
    if grouping == "x_term":
        left, right = _either(op, "Mul", x, term), 0.5
    elif grouping == "half_x":
        left, right = _either(op, "Mul", x, 0.5), term
    else:
        left, right = x, _either(op, "Mul", term, 0.5)
    return op.Mul(right, left) if swap else op.Mul(left, right)


class _GeluForm(pattern.RewriteRuleClassBase):
    def __init__(self, name: str, *, grouping: str, swap: bool):
        super().__init__(name)
        self._grouping = grouping
        self._swap = swap

    def check(self, context, x, **_):
        result = pattern.MatchResult()
        if x.dtype not in _FLOATS:
            return result.fail("x is not a float tensor", x)
        return result


class FuseErfGelu(_GeluForm):
    def pattern(self, op, x):
        scaled = pattern.OrValue([op.Div(x, math.sqrt(2.0)), op.Mul(x, 1.0 / math.sqrt(2.0))])
        return _half_x_times(op, x, _either(op, "Add", op.Erf(scaled), 1.0), self._grouping, self._swap)

    def rewrite(self, op, x, **_):
        return op.Gelu(x, _domain=DOMAIN)


class FuseTanhGelu(_GeluForm):
    def pattern(self, op, x):
        cube = pattern.OrValue([op.Pow(x, 3.0), _either(op, "Mul", x, op.Mul(x, x))])
        inner = _either(op, "Add", x, _either(op, "Mul", cube, 0.044715))
        tanh = op.Tanh(_either(op, "Mul", inner, math.sqrt(2.0 / math.pi)))
        return _half_x_times(op, x, _either(op, "Add", tanh, 1.0), self._grouping, self._swap)

    def rewrite(self, op, x, **_):
        return op.FastGelu(x, _domain=DOMAIN)


def _bias_vector_of(x: ir.Value, bias: ir.Value) -> bool:
    """Whether ``bias`` is a vector of ``x``'s (known) last dimension: adding it cannot broadcast x."""
    x_shape, b_shape = static_shape(x), static_shape(bias)
    return bool(x_shape) and b_shape is not None and x_shape[-1:] == b_shape


class FuseFastGeluBias(pattern.RewriteRuleClassBase):
    def pattern(self, op, x, bias):
        return op.FastGelu(op.Add(x, bias), _domain=DOMAIN)

    def check(self, context, x, bias, **_):
        result = pattern.MatchResult()
        if not _bias_vector_of(x, bias) or bias.dtype != x.dtype:
            return result.fail("bias is not a vector of x's type and last dimension", bias)
        return result

    def rewrite(self, op, x, bias, **_):
        return op.FastGelu(x, bias, _domain=DOMAIN)


class FuseQuickGelu(pattern.RewriteRuleClassBase):
    def pattern(self, op, x):
        return op.Mul(x, op.Sigmoid(x))

    def check(self, context, x, **_):
        result = pattern.MatchResult()
        if x.dtype != ir.DataType.FLOAT:  # onnxruntime's QuickGelu CPU kernel is float32 only
            return result.fail("x is not float32", x)
        return result

    def rewrite(self, op, x, **_):
        return op.QuickGelu(x, alpha=1.0, _domain=DOMAIN)


def _gelu_rules(cls) -> list:
    rules = []
    for grouping in ("x_term", "half_x", "term_half"):
        for swap in (False, True):
            rules.append(
                cls.rule(f"{cls.__name__}_{grouping}{'_swapped' if swap else ''}", grouping=grouping, swap=swap)
            )
    return rules


class FuseBiasGelu(bias_gelu.BiasGeluFusion):
    """onnxscript's rule; also requires the bias to have x's (known) last dimension, since
    ``BiasGelu`` does not broadcast x up to the bias."""

    def check(self, op, **bindings):  # onnxscript binds the pattern's `input` by that name
        result = super().check(op, **bindings)
        if result and not _bias_vector_of(bindings["input"], bindings["bias"]):
            return result.fail("bias is not a vector of x's last dimension", bindings["bias"])
        return result


def gelu_rules() -> list:
    return _gelu_rules(FuseErfGelu)


def fast_gelu_rules() -> list:
    return [*_gelu_rules(FuseTanhGelu), *FuseFastGeluBias.rule().commute()]


def bias_gelu_rules() -> list:
    return [
        *FuseBiasGelu.rule("bias_gelu_onnx", contrib_op=False).commute(),
        *FuseBiasGelu.rule("bias_gelu_contrib", contrib_op=True).commute(),
    ]


def quick_gelu_rules() -> list:
    return FuseQuickGelu.rule().commute()
