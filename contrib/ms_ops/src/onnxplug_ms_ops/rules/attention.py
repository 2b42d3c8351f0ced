"""Scaled dot-product attention as torch exports it, fused into com.microsoft MultiHeadAttention.

onnxscript's ``ort_fusions`` fuse no attention in torch's exports of BERT, GPT-2 or ViT, so these
rules match the chain the TorchScript exporter writes for transformers' eager attention::

    q, k, v   (B, S, D) projections (MatMul+Add, or a Split of a packed projection)
    Reshape to (B, S, N, H) and Transpose to (B, N, S, H)  (K straight to (B, N, H, S), or
              Concat'ed after a past cache and then transposed: GPT-2 with past)
    MatMul(Q, Kᵀ) · Mul(1/√H) or Div(√H)   [+ additive mask]   Softmax(-1)   [Cast to float]…
    MatMul(·, V)  Transpose back to (B, S, N, H)

and replace it with ``MultiHeadAttention(q, k, v, attention_bias=mask[, past_key, past_value])``
followed by a Reshape to (B, S, N, H), so the rest of the graph (which reshapes to (B, S, D),
sometimes through a Shape of that value) is untouched.  The additive mask goes in unchanged as
``attention_bias``: whatever it encodes (padding, causal, both) is added exactly as before, so
the rewrite keeps results within float rounding.  With a past cache the Concat outputs (GPT-2's
``present``) become MultiHeadAttention's ``present_key`` / ``present_value``.

The checks make sure a match really is attention: Q, K and V are float32 with a static hidden
size ``D``, the Reshape's last entry is the head size ``H`` (``D % H == 0``, and an explicit head
count must be ``D / H``), the scale is 1/√H, and a mask is 4-D with a head dimension of 1 or N.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern

from onnxplug_cpu.rule_values import FreshNames

__all__ = ["attention_bias_rules", "attention_rules"]

_MS = "com.microsoft"
_FLOAT = ir.DataType.FLOAT.value


def _softmax_cast(op, probs):
    """The exporter writes Softmax(dtype=float32) as Softmax then Cast(to=float), sometimes twice."""
    once = op.Cast(probs, to=_FLOAT)
    return pattern.OrValue([probs, once, op.Cast(once, to=_FLOAT)])


def _const_ints(value: ir.Value | None) -> list[int] | None:
    tensor = ir.convenience.get_const_tensor(value) if value is not None else None
    if tensor is None:
        return None
    return [int(x) for x in np.asarray(tensor.numpy()).reshape(-1)]


def _shape_tail(shape: ir.Value) -> tuple[int, int] | None:
    """The last two entries of a Reshape target (heads or -1, head size), constant or a Concat of parts."""
    whole = _const_ints(shape)
    if whole is not None:
        return (whole[-2], whole[-1]) if len(whole) >= 2 else None
    node = shape.producer()
    if node is None or node.op_type != "Concat" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
        return None
    if node.attributes.get_int("axis", 0) not in (0, -1):
        return None
    parts = [_const_ints(v) for v in node.inputs[-2:]]
    if parts[1] is None:
        return None
    if len(parts[1]) >= 2:
        return parts[1][-2], parts[1][-1]
    if parts[0] is None or len(parts[0]) < 1 or len(parts[1]) != 1:
        return None
    return parts[0][-1], parts[1][0]


def _scalar(value: ir.Value) -> float | None:
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is None:
        return None
    array = np.asarray(tensor.numpy())
    return float(array.reshape(-1)[0]) if array.size == 1 else None


def _hidden_size(value: ir.Value) -> int | None:
    """The static last dimension of a (B, S, D) projection.

    Shape inference loses it after a Split whose sizes come from a Constant node (GPT-2's packed
    projection), so a constant split size, or the static last dimension of a MatMul/Add operand
    of rank 1 or 2 (the weight or bias), stands in for it.
    """
    if value.shape is not None and value.shape.rank() == 3 and isinstance(value.shape[2], int):
        return value.shape[2]
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    if node.op_type == "Split" and len(node.inputs) > 1:
        sizes = _const_ints(node.inputs[1])
        axis = node.attributes.get_int("axis", 0)
        if sizes is not None and len(sizes) == len(node.outputs) and axis in (2, -1):
            return sizes[value.index()]
        return None
    if node.op_type in ("Add", "MatMul"):
        for operand in node.inputs:
            dims = operand.shape if operand is not None else None
            if (
                dims is not None
                and dims.rank() in (1, 2)
                and isinstance(dims[-1], int)
                and operand.const_value is not None
            ):
                return dims[-1]
    return None


class _SdpaToMha(pattern.RewriteRuleClassBase):
    """One attention layer; ``masked``: an additive mask before Softmax; ``past``: K/V concatenated after a cache."""

    def __init__(self, *, masked: bool, past: bool):
        super().__init__(f"SdpaToMultiHeadAttention{'Masked' if masked else ''}{'Past' if past else ''}")
        self._masked = masked
        self._past = past

    def pattern(self, op, q, k, v, q_shape, k_shape, v_shape, scale, mask, past_key, past_value):
        q_heads = op.Transpose(op.Reshape(q, q_shape, _allow_other_attributes=True), perm=[0, 2, 1, 3])
        k_bsnh = op.Reshape(k, k_shape, _allow_other_attributes=True)
        v_heads = op.Transpose(op.Reshape(v, v_shape, _allow_other_attributes=True), perm=[0, 2, 1, 3])
        if self._past:
            present_key = op.Concat(past_key, op.Transpose(k_bsnh, perm=[0, 2, 1, 3]), axis=-2)
            present_value = op.Concat(past_value, v_heads, axis=-2)
            k_t = op.Transpose(present_key, perm=[0, 1, 3, 2])
            v_heads = present_value
        else:
            k_t = pattern.OrValue(
                [
                    op.Transpose(k_bsnh, perm=[0, 2, 3, 1]),
                    op.Transpose(op.Transpose(k_bsnh, perm=[0, 2, 1, 3]), perm=[0, 1, 3, 2]),
                ]
            )
        scores = op.MatMul(q_heads, k_t)
        scaled = pattern.OrValue(
            [op.Mul(scores, scale), op.Div(scores, scale)], tag_var="scale_op", tag_values=["mul", "div"]
        )
        if self._masked:
            scaled = op.Add(scaled, mask)
        probs = _softmax_cast(op, op.Softmax(scaled, axis=-1))
        out = op.Transpose(op.MatMul(probs, v_heads), perm=[0, 2, 1, 3])
        if self._past:
            return out, present_key, present_value
        return out

    def check(self, context, q, k, v, q_shape, k_shape, v_shape, scale, scale_op, mask=None, **_):
        result = pattern.MatchResult()
        sizes = []
        for name, value in (("query", q), ("key", k), ("value", v)):
            if value.dtype is not None and value.dtype != ir.DataType.FLOAT:
                return result.fail(f"{name} is {value.dtype}, not float32", value)
            if value.shape is not None and value.shape.rank() != 3:
                return result.fail(f"{name} must be 3-D (B, S, D), got {value.shape}", value)
            sizes.append(_hidden_size(value))
            if sizes[-1] is None:
                return result.fail(f"{name}'s hidden size is not known statically", value)
        hidden = sizes[0]
        if sizes[1] != hidden or sizes[2] != hidden:
            return result.fail(f"query, key and value hidden sizes differ: {sizes}")
        tails = [_shape_tail(s) for s in (q_shape, k_shape, v_shape)]
        if any(t is None for t in tails) or len({t[1] for t in tails}) != 1:
            return result.fail(f"Reshape targets do not end in one constant head size: {tails}")
        head_size = tails[0][1]
        if head_size <= 0 or hidden % head_size:
            return result.fail(f"head size {head_size} does not divide hidden size {hidden}")
        num_heads = hidden // head_size
        if any(t[0] not in (-1, num_heads) for t in tails):
            return result.fail(f"Reshape head counts {tails} are not {num_heads} = {hidden} / {head_size}")
        factor = _scalar(scale)
        expected = 1.0 / math.sqrt(head_size) if scale_op == "mul" else math.sqrt(head_size)
        if factor is None or not math.isclose(factor, expected, rel_tol=1e-6):
            return result.fail(f"scale {factor} ({scale_op}) is not {expected} for head size {head_size}", scale)
        if self._masked:
            dims = mask.shape
            if dims is None or dims.rank() != 4:
                return result.fail(f"mask must be 4-D (B or 1, 1 or N, S, T), got {dims}", mask)
            if isinstance(dims[1], int) and dims[1] not in (1, num_heads):
                return result.fail(f"mask head dimension {dims[1]} is neither 1 nor {num_heads}", mask)
            if mask.dtype is not None and mask.dtype != ir.DataType.FLOAT:
                return result.fail(f"mask is {mask.dtype}, not float32", mask)
            # onnxruntime's MultiHeadAttention takes a bias of (B or 1, N or 1, S, T): a mask known
            # to broadcast over the query positions, (B, 1, 1, T), is left unfused.
            seq = None if q.shape is None else q.shape[1]
            if isinstance(dims[2], int) and dims[2] != seq:
                return result.fail(f"mask's query dimension {dims[2]} is not the query length {seq}", mask)
        self._num_heads = num_heads
        self._head_size = head_size
        return result

    def rewrite(self, op, q, k, v, mask=None, past_key=None, past_value=None, **_):
        n, h = self._num_heads, self._head_size
        inputs = [q, k, v, None, None, mask if self._masked else None]
        if self._past:
            out, present_key, present_value = op.MultiHeadAttention(
                *inputs, past_key, past_value, num_heads=n, _domain=_MS, _outputs=3
            )
        else:
            out = op.MultiHeadAttention(*inputs, num_heads=n, _domain=_MS)
        heads = op.Reshape(out, op.Constant(value_ints=[0, 0, n, h]))
        if self._past:
            return heads, present_key, present_value
        return heads


def attention_rules() -> list:
    """Every attention rule, the more specific (past, masked) first."""
    return [
        _SdpaToMha.rule(masked=True, past=True),
        _SdpaToMha.rule(masked=False, past=True),
        _SdpaToMha.rule(masked=True, past=False),
        _SdpaToMha.rule(masked=False, past=False),
    ]


def _split_bias(a: ir.Value, b: ir.Value, hidden: int) -> tuple[ir.Value, np.ndarray] | None:
    """``(projection, bias)`` of the terms of ``Add(a, b)`` (either order) where one is a constant
    float32 vector of ``hidden`` values and the other a (B, S, hidden) projection."""
    for bias, projection in ((b, a), (a, b)):
        if bias.const_value is None or bias.is_graph_input():  # (a feed may replace an input's default)
            continue
        array = bias.const_value.numpy()
        if array.dtype != np.float32 or array.shape != (hidden,):
            continue
        if projection.shape is not None and projection.shape.rank() == 3 and projection.shape[-1] == hidden:
            return projection, array
    return None


class _MhaBias(pattern.RewriteRuleClassBase):
    """``MultiHeadAttention(q + bq, k + bk, v + bv, ...)`` without a bias of its own, the three
    biases constant vectors (either term of their Add) and the sums read by nothing else →
    ``MultiHeadAttention(q, k, v, bias=[bq, bk, bv], ...)``: the projections' bias Adds (BERT's
    and ViT's, three a layer) become part of the attention, which adds them before it splits the
    heads (``kernels.attention``): 36 nodes fewer a BERT-base run, the graph onnxruntime's
    attention fusion writes; the same arithmetic, not measurably faster.
    onnxruntime's MultiHeadAttention takes the same bias input."""

    def __init__(self) -> None:
        super().__init__("MultiHeadAttentionProjectionBias")
        self._fresh_names = FreshNames()

    def pattern(self, op, qa, qb, ka, kb, va, vb):
        return op.MultiHeadAttention(
            op.Add(qa, qb),
            op.Add(ka, kb),
            op.Add(va, vb),
            _domain=_MS,
            _allow_other_inputs=True,
            _allow_other_attributes=True,
            _outputs=["out"],
        )

    def check(self, context, qa, qb, ka, kb, va, vb, out, **_):
        result = pattern.MatchResult()
        node = out.producer()
        if len(node.outputs) != 1:
            return result.fail("the attention has outputs besides its result (a cache)")
        if len(node.inputs) > 3 and node.inputs[3] is not None:
            return result.fail("the attention has a bias already")
        hidden = _hidden_size(node.inputs[0])
        if hidden is None:
            return result.fail("the query's hidden size is not known", node.inputs[0])
        found = [_split_bias(a, b, hidden) for a, b in ((qa, qb), (ka, kb), (va, vb))]
        if any(f is None for f in found):
            return result.fail("Q, K and V are not each a projection plus a constant bias vector of their width")
        self._found = found
        (self._name,) = self._fresh_names(context.graph_or_function, f"{node.name or 'attention'}_qkv_bias")
        return result

    def rewrite(self, op, out, **_):
        node = out.producer()
        (q, bq), (k, bk), (v, bv) = self._found
        bias = op.initializer(ir.Tensor(np.concatenate([bq, bk, bv]), name=self._name))
        return op.MultiHeadAttention(q, k, v, bias, *node.inputs[4:], _domain=_MS, **node.attributes)


def attention_bias_rules() -> list:
    return [_MhaBias.rule()]
