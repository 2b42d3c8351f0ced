"""The CPU provider's per-channel folds after Conv and BatchNormalization (onnxruntime's
ConvMulFusion, ConvAddFusion) and a pool moved behind a narrowing pointwise Conv (basic level,
standard ops in and out).

- ``FoldMulIntoConv``: ``Mul(Conv(x, W[, B]), s)`` with a constant per-output-channel (or scalar)
  ``s`` → ``Conv(x, W·s, B·s)``.
- ``FoldAddIntoConv``: ``Add(Conv(x, W[, B]), t)`` with a constant per-channel ``t`` →
  ``Conv(x, W, B + t)``.
- ``FoldMulIntoBatchNorm`` / ``FoldAddIntoBatchNorm``: the same after an inference
  ``BatchNormalization`` (its scale and bias absorb ``s`` and ``t``).

Caffe2-converted models (the onnx wheel's light densenet121 and inception_v2) write every
normalization as BatchNormalization followed by such a Mul and Add; folded, each costs nothing
after a Conv and one pass instead of three after a Concat.  Both operands may come in either order.

- ``PoolAfterPointwiseConv``: ``Conv(AveragePool(x), W[, B])`` with a 1×1 ``W`` of fewer output
  than input channels and a pool that keeps the map's size → ``AveragePool(Conv(x, W[, B]))``.
  Both are linear and one acts across channels, the other within each channel, so they commute;
  an average of the bias is the bias where the pool counts only the cells it reads
  (``count_include_pad`` 0, or no padding).  The pool then runs on the narrower output:
  Inception's pool branches (576 channels pooled, then projected to 128) pool a quarter to a
  sixth of what they did.  Not for a pool that shrinks the map, which would leave the Conv more
  positions to compute than the pool saves.  Float32 sums in another order:
  within rounding of the original.  (onnxruntime does not do this.)
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern

from .rule_values import FreshNames, constant_array, static_shape

__all__ = ["bn_mul_add_rules", "conv_mul_add_rules", "pool_after_pointwise_rules"]


def _per_channel(array: np.ndarray | None, rank: int, channels: int) -> np.ndarray | None:
    """``array`` as a ``(channels,)`` vector when it broadcasts against ``(N, channels, ...)`` of
    rank ``rank`` along the channel axis only (a scalar included), else ``None``."""
    if array is None or array.ndim > rank or array.dtype.kind != "f":
        return None
    shape = (1,) * (rank - array.ndim) + array.shape
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(array.reshape(-1), (channels,))


class _FoldIntoConv(pattern.RewriteRuleClassBase):
    """``op(Conv(x, W[, B]), c)`` with a constant per-channel ``c`` folded into W and B."""

    def __init__(self, name: str, *, op_type: str):
        super().__init__(name)
        self._fresh_names = FreshNames()
        self._op_type = op_type

    def pattern(self, op, x, w, c):
        conv = op.Conv(x, w, _allow_other_inputs=True, _outputs=["conv_out"])
        return getattr(op, self._op_type)(conv, c)

    def check(self, context, w, c, conv_out, **_):
        result = pattern.MatchResult()
        conv = conv_out.producer()
        weights = constant_array(w)
        if weights is None or weights.ndim < 3 or weights.dtype.kind != "f":
            return result.fail("Conv weights are not a constant float tensor", w)
        bias_value = conv.inputs[2] if len(conv.inputs) > 2 else None
        bias = None if bias_value is None else constant_array(bias_value)
        if bias_value is not None and bias is None:
            return result.fail("the Conv bias is not constant", bias_value)
        operand = constant_array(c)
        vector = _per_channel(operand, weights.ndim, weights.shape[0])
        if vector is None or operand.dtype != weights.dtype:
            return result.fail("not a constant per-output-channel tensor of the weights' type", c)
        self._arrays = (weights, vector, bias)
        graph = context.graph_or_function
        base = f"{w.name or 'W'}_{self._op_type.lower()}"
        self._names = self._fresh_names(graph, base, f"{base}_bias")
        return result

    def rewrite(self, op, x, w, conv_out, **_):
        weights, vector, bias = self._arrays
        dtype = weights.dtype
        v = vector.astype(np.float64)
        b = np.zeros(weights.shape[0]) if bias is None else bias.astype(np.float64)
        if self._op_type == "Mul":
            w_value = op.initializer(
                ir.Tensor((weights * v.reshape((-1,) + (1,) * (weights.ndim - 1))).astype(dtype), name=self._names[0])
            )
            b = b * v
        else:
            w_value = w
            b = b + v
        b_value = op.initializer(ir.Tensor(b.astype(dtype), name=self._names[1]))
        return op.Conv(x, w_value, b_value, **conv_out.producer().attributes)


class _FoldIntoBatchNorm(pattern.RewriteRuleClassBase):
    """``op(BatchNormalization(x, scale, bias, mean, var), c)`` (inference) with a constant
    per-channel ``c``: ``Mul`` scales ``scale`` and ``bias``, ``Add`` shifts ``bias``."""

    def __init__(self, name: str, *, op_type: str):
        super().__init__(name)
        self._fresh_names = FreshNames()
        self._op_type = op_type

    def pattern(self, op, x, scale, bias, mean, var, c):
        bn = op.BatchNormalization(x, scale, bias, mean, var, _outputs=["bn_out"])
        return getattr(op, self._op_type)(bn, c)

    def check(self, context, x, scale, bias, c, bn_out, **_):
        result = pattern.MatchResult()
        bn = bn_out.producer()
        if bn.attributes.get_int("training_mode", 0) != 0 or bn.attributes.get_int("spatial", 1) != 1:
            return result.fail("BatchNormalization is not spatial inference normalization")
        if bn.attributes.get_int("is_test", 1) != 1:
            return result.fail("BatchNormalization is in training mode (is_test=0)")
        arrays = (constant_array(scale), constant_array(bias))
        if any(a is None or a.ndim != 1 for a in arrays):
            return result.fail("BatchNormalization's scale and bias are not constant vectors")
        rank = len(x.shape) if x.shape is not None else None
        operand = constant_array(c)
        vector = None if rank is None else _per_channel(operand, rank, arrays[0].shape[0])
        if vector is None or operand.dtype != arrays[0].dtype or arrays[1].dtype != arrays[0].dtype:
            return result.fail("not a constant per-channel tensor of the parameters' type (or unknown rank)", c)
        self._arrays = (*arrays, vector)
        graph = context.graph_or_function
        suffix = self._op_type.lower()
        bases = (f"{scale.name or 'scale'}_{suffix}", f"{bias.name or 'bias'}_{suffix}")
        self._names = self._fresh_names(graph, *bases)
        return result

    def rewrite(self, op, x, scale, mean, var, bn_out, **_):
        s, b, v = (a.astype(np.float64) for a in self._arrays)
        dtype = self._arrays[0].dtype
        if self._op_type == "Mul":
            s, b = s * v, b * v
            scale = op.initializer(ir.Tensor(s.astype(dtype), name=self._names[0]))
        else:
            b = b + v
        bias = op.initializer(ir.Tensor(b.astype(dtype), name=self._names[1]))
        return op.BatchNormalization(x, scale, bias, mean, var, **bn_out.producer().attributes)


def conv_mul_add_rules() -> list:
    """Per-channel Mul or Add after a Conv, folded into its weights and bias."""
    return [
        *_FoldIntoConv.rule("conv_mul", op_type="Mul").commute(),
        *_FoldIntoConv.rule("conv_add", op_type="Add").commute(),
    ]


def bn_mul_add_rules() -> list:
    """Per-channel Mul or Add after an inference BatchNormalization, folded into it."""
    return [
        *_FoldIntoBatchNorm.rule("bn_mul", op_type="Mul").commute(),
        *_FoldIntoBatchNorm.rule("bn_add", op_type="Add").commute(),
    ]


#: Ops after a Conv that the basic stage's folds may still take into it: the pool waits for them
#: (behind the pool, the Conv would no longer be theirs to fold into).
_FOLDED_AFTER_CONV = frozenset({"BatchNormalization", "Mul", "Add"})


class PoolAfterPointwiseConv(pattern.RewriteRuleClassBase):
    """``Conv(AveragePool(x), W[, B])`` → ``AveragePool(Conv(x, W[, B]))`` for a narrowing 1×1
    Conv (see the module's docstring)."""

    def pattern(self, op, x, w):
        pooled = op.AveragePool(x, _outputs=["pool_out"])
        return op.Conv(pooled, w, _allow_other_inputs=True, _outputs=["conv_out"])

    def check(self, context, x, w, pool_out, conv_out, **_):
        result = pattern.MatchResult()
        pool, conv = pool_out.producer(), conv_out.producer()
        weights = constant_array(w)
        if weights is None or weights.ndim != 4 or weights.shape[2:] != (1, 1) or weights.dtype.kind != "f":
            return result.fail("not a constant 2-D pointwise Conv", w)
        if weights.shape[0] >= weights.shape[1]:
            return result.fail("the Conv does not narrow: the pool would not run on fewer channels", w)
        if len(conv.inputs) > 2 and conv.inputs[2] is not None and constant_array(conv.inputs[2]) is None:
            return result.fail("the Conv bias is not constant", conv.inputs[2])
        plain = {"group": 1, "strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0]}
        for name, default in plain.items():
            attribute = conv.attributes.get(name)
            value = None if attribute is None else attribute.value
            if value is not None and (list(value) if isinstance(value, (list, tuple)) else value) != default:
                return result.fail(f"the Conv's {name} is not {default}")
        before, after = static_shape(x), static_shape(pool_out)
        if before is None or after is None or before[2:] != after[2:]:
            # a pool that shrinks the map (strides, a global average) would leave the Conv more
            # positions than it saves channels
            return result.fail("the pool does not keep the map's size (or the sizes are unknown)", pool_out)
        if len(pool_out.uses()) != 1 or pool_out.is_graph_output():
            return result.fail("the pool's output is read elsewhere too", pool_out)
        if any(use.node.op_type in _FOLDED_AFTER_CONV for use in conv_out.uses()):
            return result.fail("a fold after the Conv may still take it", conv_out)
        padded = any(pool.attributes.get_ints("pads", [0])) or pool.attributes.get_string("auto_pad", "NOTSET") in (
            "SAME_UPPER",
            "SAME_LOWER",
        )
        if pool.attributes.get_int("count_include_pad", 0) != 0 and (padded or pool.attributes.get_int("ceil_mode", 0)):
            return result.fail("the pool counts padding cells: an average of the bias would not be the bias")
        return result

    def rewrite(self, op, x, w, pool_out, conv_out, **_):
        conv = conv_out.producer()
        narrowed = op.Conv(x, *conv.inputs[1:], **conv.attributes)
        # the new value between them has the Conv's old output's type and shape (the pool keeps
        # the map's size): providers that take only nodes of known shapes still take both
        narrowed.type = conv_out.type
        narrowed.shape = None if conv_out.shape is None else ir.Shape(list(conv_out.shape))
        return op.AveragePool(narrowed, **pool_out.producer().attributes)


def pool_after_pointwise_rules() -> list:
    """A narrowing pointwise Conv moved in front of the AveragePool that feeds it."""
    return [PoolAfterPointwiseConv.rule("pool_after_pointwise")]
