"""quantize_dynamic's transformer ops: QAttention and QEmbedLayerNormalization.

QAttention projects its 8-bit input with its 8-bit merged QKV weight in integers (accumulated
exactly in float64), rescales by input_scale * weight_scale (per tensor or per column) and adds
the bias, then runs Attention's heads (:func:`.attention.attention_from_qkv`).
QEmbedLayerNormalization dequantizes its tables, gamma and beta and is EmbedLayerNormalization.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail
from onnxplug.errors import NotImplemented as NotImplementedError_

from ._common import per_column, scalar
from ._registry import kernel
from .attention import attention_from_qkv
from .normalization import embed_layer_norm


@kernel("QAttention", since=(1,), factory=True)
def qattention(
    ctx,
    *,
    num_heads,
    unidirectional,
    scale=None,
    mask_filter_value=None,
    do_rotary=None,
    past_present_share_buffer=None,
):
    op = "QAttention"
    if do_rotary:
        raise NotImplementedError_(f"{op}: do_rotary=1 is not supported (onnxruntime's CPU kernel has none either)")
    if past_present_share_buffer:
        raise NotImplementedError_(
            f"{op}: past_present_share_buffer=1 is not supported (it has no past_sequence_length)"
        )
    filter_value = -10000.0 if mask_filter_value is None else float(mask_filter_value)
    want_present = ctx.num_outputs > 1 and ctx.outputs_used[1]

    def run(
        x,
        weight,
        bias,
        input_scale,
        weight_scale,
        mask_index=None,
        input_zero_point=None,
        weight_zero_point=None,
        past=None,
    ):
        if x.ndim != 3 or weight.ndim != 2 or weight.shape[0] != x.shape[2] or weight.shape[1] % 3:
            raise Fail(f"{op}: input {x.shape} and weight {weight.shape} must be (B, S, D) and (D, 3*hidden)")
        columns = weight.shape[1]
        hidden = columns // 3
        if hidden % num_heads:
            raise Fail(f"{op}: hidden size {hidden} is not a multiple of num_heads={num_heads}")
        if bias.shape != (columns,):
            raise Fail(f"{op}: bias must have shape ({columns},), got {bias.shape}")
        x_zero = scalar(input_zero_point, "input_zero_point")
        w_zero = per_column(weight_zero_point, "weight_zero_point", columns, 0, op)
        acc = np.matmul(x.astype(np.float64) - x_zero, weight.astype(np.float64) - w_zero)
        multiplier = np.float32(scalar(input_scale, "input_scale")) * per_column(
            weight_scale, "weight_scale", columns, 1, op
        ).astype(np.float32)
        qkv = acc.astype(np.float32) * multiplier + bias.astype(np.float32)
        return attention_from_qkv(
            qkv,
            bias.dtype,
            (hidden,) * 3,
            num_heads,
            mask_index=mask_index,
            past=past,
            attention_bias=None,
            past_sequence_length=None,
            unidirectional=unidirectional,
            scale=scale,
            filter_value=filter_value,
            share_buffer=False,
            want_present=want_present,
            op=op,
        )

    return run


def _dequantize(q, scale, zero, name):
    if q is None:
        return None
    s = np.float32(scalar(scale, f"{name}_scale"))
    z = scalar(zero, f"{name}_zero_point")
    return (q.astype(np.float32) - np.float32(z)) * s


@kernel("QEmbedLayerNormalization", since=(1,))
def qembed_layer_norm(
    input_ids,
    segment_ids,
    word_embedding_quant,
    position_embedding_quant,
    segment_embedding,
    gamma_quant,
    beta_quant,
    mask,
    word_embedding_scale,
    position_embedding_scale,
    segment_embedding_scale,
    gamma_scale,
    beta_scale,
    word_embedding_zero_point,
    position_embedding_zero_point,
    segment_embedding_zero_point,
    gamma_zero_point,
    beta_zero_point,
    *,
    epsilon,
):
    word = _dequantize(word_embedding_quant, word_embedding_scale, word_embedding_zero_point, "word_embedding")
    position = _dequantize(
        position_embedding_quant, position_embedding_scale, position_embedding_zero_point, "position_embedding"
    )
    segment = _dequantize(segment_embedding, segment_embedding_scale, segment_embedding_zero_point, "segment_embedding")
    gamma = _dequantize(gamma_quant, gamma_scale, gamma_zero_point, "gamma")
    beta = _dequantize(beta_quant, beta_scale, beta_zero_point, "beta")
    output, mask_index, _ = embed_layer_norm(
        input_ids, segment_ids, word, position, segment, gamma, beta, mask, epsilon=epsilon
    )
    return output, mask_index
