"""QDQ convolutions as QLinearConv, where the CPU provider computes those in int8 (extended level).

``QuantizeLinear(Conv(DequantizeLinear(x), DequantizeLinear(w)[, DequantizeLinear(b)]))`` is how
a QDQ model writes a quantized convolution (onnxplug's and onnxruntime's ``quantize_static``).
Run as written it is a float convolution of dequantized values; onnxruntime rewrites it into
``QLinearConv`` (its QDQ selector/action transformers), and so does this rule, for the same
reason: with AVX-512 VNNI the CPU provider computes ``QLinearConv`` exactly in int8
(``kernels._int8_conv``) at several times the float convolution's multiply-adds per cycle.

The two forms agree up to the rounding of the float one: the integer sum ``sum (x - zx)(w - zw)
+ b`` scaled by ``sx·sw/sy`` is what the float convolution approximates (Winograd included), so
an output may move by one quantization step where the float sum fell near a rounding boundary,
as it does in onnxruntime.

The rule fires only where the int8 path will take the node (``Int8Conv.accepts``: VNNI present,
a 2-D ungrouped convolution, centred weights within int8) and the pieces are what QLinearConv
can express: an 8-bit input with scalar constant scale and zero point, constant 8-bit weights
with per-tensor or per-output-channel (axis 0) parameters, a bias that is either absent or
``DequantizeLinear`` of constant int32 values at scale ``sx·sw`` with zero point 0, and an 8-bit
``QuantizeLinear`` output with scalar constant parameters.  Because the weights' dequantization
must still be there to match, the set keeps ``DequantizeLinear`` out of the basic level's
constant folding (:attr:`onnxplug.optimizer.RuleSet.keeps_unfolded`); what it does not take is
folded after the rule stages, as before.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript.rewriter import pattern

from .kernels._int8_conv import Int8Conv
from .rule_values import constant_array

__all__ = ["qdq_conv_rules"]

_EIGHT_BIT = (ir.DataType.UINT8, ir.DataType.INT8)
_INT32_LIMIT = 2**31 - 1


def _scalar(value: ir.Value | None, kind: str) -> np.ndarray | None:
    """A constant one-element array whose dtype kind is ``kind`` ("f" float32, "u"/"i" 8-bit)."""
    array = constant_array(value)
    if array is None or array.size != 1:
        return None
    if kind == "f" and array.dtype != np.float32:
        return None
    if kind == "q" and array.dtype not in (np.uint8, np.int8):
        return None
    return array


def _bias(value: ir.Value | None, x_scale: np.ndarray, w_scale: np.ndarray, channels: int):
    """The int32 bias behind ``DequantizeLinear(b, sx·sw[, 0])`` (``()`` when there is no bias),
    or ``None`` when the bias is anything else."""
    if value is None:
        return ()
    node = value.producer()
    if node is None or node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
        return None
    ints = constant_array(node.inputs[0])
    scale = constant_array(node.inputs[1]) if len(node.inputs) > 1 else None
    zero = constant_array(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
    if ints is None or ints.dtype != np.int32 or ints.shape != (channels,) or scale is None:
        return None
    if zero is not None and np.any(zero != 0):
        return None
    expected = np.broadcast_to((x_scale.astype(np.float32) * w_scale.astype(np.float32)).reshape(-1), (channels,))
    if scale.dtype != np.float32 or scale.size not in (1, channels):
        return None
    if not np.allclose(np.broadcast_to(scale.reshape(-1), (channels,)), expected, rtol=1e-5, atol=0):
        return None
    return (node.inputs[0],)


class _QdqConv(pattern.RewriteRuleClassBase):
    """``Q(Conv(DQ(x), DQ(w)[, DQ(b)]))`` → ``QLinearConv(x, ..., w, ..., [b])``."""

    def pattern(self, op, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero):
        dq_x = op.DequantizeLinear(x, x_scale, x_zero)
        dq_w = op.DequantizeLinear(w, w_scale, w_zero, _outputs=["w_float"])
        conv = op.Conv(dq_x, dq_w, _allow_other_inputs=True, _outputs=["conv_out"])
        return op.QuantizeLinear(conv, y_scale, y_zero, _outputs=["q_out"])

    def check(self, context, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, w_float, conv_out, q_out, **_):
        result = pattern.MatchResult()
        if x.dtype not in _EIGHT_BIT:
            return result.fail("the input is not 8-bit", x)
        sx, zx, sy, zy = _scalar(x_scale, "f"), _scalar(x_zero, "q"), _scalar(y_scale, "f"), _scalar(y_zero, "q")
        if sx is None or zx is None or sy is None or zy is None:
            return result.fail("input and output scales and zero points are not scalar float32/8-bit constants")
        weights = constant_array(w)
        sw, zw = constant_array(w_scale), constant_array(w_zero)
        if weights is None or weights.dtype not in (np.uint8, np.int8) or weights.ndim != 4:
            return result.fail("the weights are not constant 8-bit 2-D convolution weights", w)
        channels = weights.shape[0]
        if sw is None or zw is None or sw.dtype != np.float32 or zw.dtype != weights.dtype:
            return result.fail("the weights' scale and zero point are not constants of the expected types")
        if sw.size != 1 or zw.size != 1:
            axis = w_float.producer().attributes.get_int("axis", 1)
            if sw.shape != (channels,) or zw.shape not in ((channels,), ()) or axis not in (0, -4):
                return result.fail("the weights' parameters are neither per-tensor nor per output channel")
        quantize = q_out.producer()
        if quantize.attributes.get_int("block_size", 0) or w_float.producer().attributes.get_int("block_size", 0):
            return result.fail("blocked quantization")
        conv = conv_out.producer()
        group = conv.attributes.get_int("group", 1)
        centred = weights.astype(np.int64) - zw.astype(np.int64).reshape((-1,) + (1,) * 3 if zw.size > 1 else ())
        if not Int8Conv.accepts(centred, np.dtype(x.dtype.numpy()), {"group": group}):
            return result.fail("the CPU provider would not compute this QLinearConv in int8 (no VNNI, grouped, wide)")
        bias = _bias(conv.inputs[2] if len(conv.inputs) > 2 else None, sx, sw, channels)
        if bias is None:
            return result.fail("the bias is not DequantizeLinear of int32 values at the input × weight scale")
        largest_bias = int(np.abs(constant_array(bias[0]).astype(np.int64)).max()) if bias else 0
        if int(np.abs(centred).reshape(channels, -1).sum(axis=1).max()) * 255 + largest_bias > _INT32_LIMIT:
            return result.fail("the int32 accumulator could overflow")
        self._bias = bias
        return result

    def rewrite(self, op, x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, conv_out, **_):
        return op.QLinearConv(
            x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, *self._bias, **conv_out.producer().attributes
        )


def qdq_conv_rules() -> list:
    """The QDQ convolution → QLinearConv rule."""
    # remove_nodes=False: a DequantizeLinear read by another node too (a residual Add, a second
    # Conv) must stay for that reader; dead-code removal drops what nothing reads any more.
    return [_QdqConv.rule("qdq_conv", remove_nodes=False)]
