"""Schemas of the com.microsoft operators this library runs.

Each operator is declared once in a table with a compact spelling (see :mod:`._spec`): the
float ops in :data:`_OPS` here, onnxruntime's quantization ops in :mod:`._quant_ops`, and the
ops of skl2onnx's converters in :mod:`._ml_ops`; :func:`op_schemas` turns the tables into
``onnx.defs.OpSchema`` objects.  Names, input order, type constraints and
attribute defaults follow onnxruntime's registrations, so that models saved by onnxruntime's
optimizer pass onnx's checker unchanged and attribute defaults mean the same thing.

Type and shape inference is declared per op (in :mod:`._inference`): element types always, and
shapes where they follow from input shapes alone.  The core runs onnx's shape inference when it
loads a model, so a session reports typed outputs even behind these ops.

Two ops live in the default ONNX domain, as onnxruntime registers them there:
``SimplifiedLayerNormalization`` (what its optimizer emits for RMS norms) and the opset-1
``LayerNormalization`` (selected by models whose default opset is below 17).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import onnx
import onnx.defs

from . import DOMAIN
from . import _inference as inf
from ._ml_ops import ML_OPS
from ._quant_ops import QUANT_OPS
from ._spec import FLOAT, FLOATS, INT, INTS, STRING, Optional, Required
from ._spec import FLOATS3 as _FLOATS
from ._spec import FLOATS4 as _FLOATS4
from ._spec import INT8 as _INT8
from ._spec import opt as _opt
from ._spec import req as _req

__all__ = ["op_schemas", "OP_NAMES"]

_Option = onnx.defs.OpSchema.FormalParameterOption


_CONV_ATTRS = {
    "auto_pad": "NOTSET",
    "kernel_shape": _opt(INTS),
    "dilations": _opt(INTS),
    "strides": _opt(INTS),
    "pads": _opt(INTS),
    "group": 1,
}

_QLINEAR_BINARY = [
    "A:T",
    "A_scale:tensor(float)",
    "A_zero_point:T?",
    "B:T",
    "B_scale:tensor(float)",
    "B_zero_point:T?",
    "C_scale:tensor(float)",
    "C_zero_point:T?",
]
_QLINEAR_UNARY = ["X:T", "X_scale:tensor(float)", "X_zero_point:T?", "Y_scale:tensor(float)", "Y_zero_point:T?"]

# name -> (inputs, outputs, type constraints, attributes, inference, doc[, domain])
_OPS: dict[str, tuple] = {
    # -- fused linear algebra ------------------------------------------------------------------
    "FusedConv": (
        ["X:T", "W:T", "B:T?", "Z:T?"],
        ["Y:T"],
        {"T": ["tensor(float16)", "tensor(float)", "tensor(double)"]},
        {**_CONV_ATTRS, "activation": _opt(STRING), "activation_params": _opt(FLOATS)},
        inf.conv,
        "Conv, plus an optional residual Z added before an activation (Relu, Tanh, "
        "Sigmoid, LeakyRelu, Clip, HardSigmoid; and onnxplug's QuickGelu, alpha in "
        "activation_params) whose parameters come from activation_params.",
    ),
    "FusedGemm": (
        ["A:T", "B:T", "C:T?"],
        ["Y:T"],
        {
            "T": [
                "tensor(float16)",
                "tensor(float)",
                "tensor(double)",
                "tensor(uint32)",
                "tensor(uint64)",
                "tensor(int32)",
                "tensor(int64)",
            ]
        },
        {
            "alpha": 1.0,
            "beta": 1.0,
            "transA": 0,
            "transB": 0,
            "activation": _opt(STRING),
            "activation_alpha": _opt(FLOAT),
            "activation_beta": _opt(FLOAT),
            "activation_gamma": _opt(FLOAT),
        },
        inf.gemm,
        "Gemm followed by an element-wise activation named by `activation`.",
    ),
    "FusedMatMul": (
        ["A:T", "B:T"],
        ["Y:T"],
        {"T": _FLOATS4},
        {"alpha": 1.0, "transA": 0, "transB": 0, "transBatchA": 0, "transBatchB": 0},
        inf.fused_matmul,
        "alpha * MatMul(op(A), op(B)), op transposing the last two axes (transA/B) "
        "and/or moving the first axis behind the batch axes (transBatchA/B).",
    ),
    # -- activations ---------------------------------------------------------------------------
    "Gelu": (["X:T"], ["Y:T"], {"T": _FLOATS4}, {}, inf.same_as(0), "x * Phi(x) with the exact (erf) CDF."),
    "FastGelu": (
        ["X:T", "bias:T?"],
        ["Y:T"],
        {"T": ["tensor(float)", "tensor(double)", "tensor(float16)", "tensor(bfloat16)"]},
        {},
        inf.same_as(0),
        "tanh approximation of Gelu, with an optional bias added to X first.",
    ),
    "BiasGelu": (["A:T", "B:T"], ["C:T"], {"T": _FLOATS4}, {}, inf.same_as(0), "Gelu(A + B)."),
    "QuickGelu": (["X:T"], ["Y:T"], {"T": _FLOATS4}, {"alpha": 1.702}, inf.same_as(0), "x * sigmoid(alpha * x)."),
    "BiasAdd": (
        ["X:T", "bias:T", "skip:T"],
        ["Y:T"],
        {"T": ["tensor(float16)", "tensor(float)"]},
        {},
        inf.same_as(0),
        "X + bias + skip.",
    ),
    # -- normalization -------------------------------------------------------------------------
    "SkipLayerNormalization": (
        ["input:T", "skip:T", "gamma:T", "beta:T?", "bias:T?"],
        ["output:T", "mean:U?", "inv_std_var:U?", "input_skip_bias_sum:T?"],
        {"T": _FLOATS, "U": ["tensor(float)"]},
        {"epsilon": 1e-12},
        inf.skip_norm,
        "LayerNormalization(input + skip + bias) over the last axis.",
    ),
    "SkipSimplifiedLayerNormalization": (
        ["input:T", "skip:T", "gamma:T", "bias:T?"],
        ["output:T", "mean:U?", "inv_std_var:U?", "input_skip_bias_sum:T?"],
        {"T": _FLOATS, "U": ["tensor(float)"]},
        {"epsilon": 1e-12},
        inf.skip_norm,
        "RMS normalization of input + skip + bias over the last axis.",
    ),
    "EmbedLayerNormalization": (
        [
            "input_ids:T1",
            "segment_ids:T1?",
            "word_embedding:T",
            "position_embedding:T",
            "segment_embedding:T?",
            "gamma:T",
            "beta:T",
            "mask:T1?",
            "position_ids:T1?",
        ],
        ["output:T", "mask_index:T1?", "embedding_sum:T?"],
        {"T1": ["tensor(int32)"], "T": ["tensor(float)", "tensor(float16)"]},
        {"epsilon": 1e-12, "mask_index_type": _opt(INT)},
        inf.embed_norm,
        "Word + position (+ segment) embedding lookups, summed, then layer-normalized; "
        "mask_index counts each row's mask.",
    ),
    "SimplifiedLayerNormalization": (
        ["X:T", "scale:V"],
        ["Y:V", "inv_std_var:U?"],
        {"T": _FLOATS4, "U": ["tensor(float)", "tensor(double)"], "V": _FLOATS4},
        {"axis": -1, "epsilon": 1e-5, "stash_type": 1},
        inf.layer_norm(1),
        "RMS normalization over the axes from `axis` on.",
        "",
    ),
    "LayerNormalization": (
        ["X:T", "Scale:V", "B:V?"],
        ["Y:V", "Mean:U?", "InvStdDev:U?"],
        {"T": _FLOATS4, "U": ["tensor(float)", "tensor(double)"], "V": _FLOATS4},
        {"axis": -1, "epsilon": 1e-5, "stash_type": 1},
        inf.layer_norm(2),
        "Layer normalization over the axes from `axis` on (onnxruntime's opset-1 "
        "version, before ONNX standardized it in opset 17).",
        "",
    ),
    # -- attention -----------------------------------------------------------------------------
    "Attention": (
        ["input:T", "weights:T", "bias:T?", "mask_index:M?", "past:T?", "attention_bias:T?", "past_sequence_length:M?"],
        ["output:T", "present:T?"],
        {"T": _FLOATS, "M": ["tensor(int32)"]},
        {
            "num_heads": _req(INT),
            "qkv_hidden_sizes": _opt(INTS),
            "unidirectional": 0,
            "scale": _opt(FLOAT),
            "mask_filter_value": _opt(FLOAT),
            "do_rotary": _opt(INT),
            "rotary_embedding_dim": _opt(INT),
            "past_present_share_buffer": _opt(INT),
        },
        inf.attention,
        "Multi-head self attention with the Q/K/V projection merged into one weight.",
    ),
    "MultiHeadAttention": (
        [
            "query:T",
            "key:T?",
            "value:T?",
            "bias:T?",
            "key_padding_mask:M?",
            "attention_bias:T?",
            "past_key:T?",
            "past_value:T?",
            "past_sequence_length:M?",
            "cache_indirection:M?",
        ],
        ["output:T", "present_key:T?", "present_value:T?", "qk:QK?"],
        {"T": _FLOATS, "QK": _FLOATS, "M": ["tensor(int32)"]},
        {"num_heads": _req(INT), "unidirectional": 0, "scale": _opt(FLOAT), "mask_filter_value": _opt(FLOAT)},
        inf.mha,
        "Multi-head self or cross attention on projected Q, K, V (separate, packed KV or packed QKV).",
    ),
    "GroupQueryAttention": (
        [
            "query:T",
            "key:T?",
            "value:T?",
            "past_key:T_CACHE?",
            "past_value:T_CACHE?",
            "seqlens_k:M",
            "total_sequence_length:M",
            "cos_cache:T?",
            "sin_cache:T?",
            "position_ids:tensor(int64)?",
            "attention_bias:T?",
            "head_sink:T?",
            "k_scale:T_KV_SCALE?",
            "v_scale:T_KV_SCALE?",
            "q_norm_weight:T?",
            "k_norm_weight:T?",
            "query_seqlens:M?",
        ],
        ["output:T", "present_key:T_CACHE?", "present_value:T_CACHE?", "output_qk:T?"],
        {
            "T": ["tensor(float16)", "tensor(bfloat16)", "tensor(float)"],
            "T_CACHE": [
                "tensor(float)",
                "tensor(float16)",
                "tensor(bfloat16)",
                "tensor(uint8)",
                "tensor(int8)",
                "tensor(float8e4m3fn)",
            ],
            "T_KV_SCALE": ["tensor(float)"],
            "M": ["tensor(int32)"],
        },
        {
            "num_heads": _req(INT),
            "kv_num_heads": _req(INT),
            "scale": _opt(FLOAT),
            "softcap": _opt(FLOAT),
            "local_window_size": -1,
            "do_rotary": _opt(INT),
            "rotary_interleaved": _opt(INT),
            "causal": 1,
            "smooth_softmax": -1,
            "qk_output": 0,
            "sliding_window_cache": 0,
            "k_quant_type": "NONE",
            "v_quant_type": "NONE",
            "kv_cache_bit_width": _opt(INT),
            "qk_norm_epsilon": 1e-6,
            "q_norm_epsilon": _opt(FLOAT),
            "k_norm_epsilon": _opt(FLOAT),
        },
        inf.gqa,
        "Causal attention where groups of query heads share a key/value head, with a BNSH "
        "KV cache and optional rotary embedding.",
    ),
    "RotaryEmbedding": (
        ["input:T", "position_ids:M", "cos_cache:T", "sin_cache:T"],
        ["output:T"],
        {"T": _FLOATS, "M": ["tensor(int64)"]},
        {
            "num_heads": _opt(INT),
            "rotary_embedding_dim": _opt(INT),
            "interleaved": _opt(INT),
            "is_packed_batching": _opt(INT),
            "scale": _opt(FLOAT),
        },
        inf.same_as(0),
        "Rotary positional embedding of a BSH or BNSH tensor from cos/sin caches.",
    ),
    # -- quantized -----------------------------------------------------------------------------
    "MatMulNBits": (
        ["A:T1", "B:T2", "scales:T1", "zero_points:T3?", "g_idx:T4?", "bias:T1?"],
        ["Y:T1"],
        {
            "T1": _FLOATS,
            "T2": ["tensor(uint8)"],
            "T3": ["tensor(uint8)", "tensor(float16)", "tensor(float)", "tensor(bfloat16)"],
            "T4": ["tensor(int32)"],
        },
        {
            "K": _req(INT),
            "N": _req(INT),
            "bits": 4,
            "block_size": _req(INT),
            "accuracy_level": 0,
            "weight_prepacked": 0,
        },
        inf.matmul_nbits,
        "A @ dequantize(B).T with B block-quantized to `bits` bits along K.",
    ),
    "DynamicQuantizeMatMul": (
        ["A:T1", "B:T2", "b_scale:T1", "b_zero_point:T2?", "bias:T1?"],
        ["Y:T1"],
        {"T1": ["tensor(float)"], "T2": ["tensor(int8)", "tensor(uint8)"]},
        {},
        inf.matmul_to(0),
        "A quantized to uint8 on the fly, integer MatMul with B, rescaled to float.",
    ),
    "MatMulIntegerToFloat": (
        ["A:T1", "B:T2", "a_scale:T3", "b_scale:T3", "a_zero_point:T1?", "b_zero_point:T2?", "bias:T3?"],
        ["Y:T3"],
        {
            "T1": ["tensor(int8)", "tensor(uint8)"],
            "T2": ["tensor(int8)", "tensor(uint8)"],
            "T3": ["tensor(float)", "tensor(float16)"],
        },
        {},
        inf.matmul_to(2),
        "(A - a_zero_point) @ (B - b_zero_point) * a_scale * b_scale + bias.",
    ),
    "QLinearAdd": (_QLINEAR_BINARY, ["C:T"], {"T": _INT8}, {}, inf.broadcast(0, 3), "Quantized element-wise Add."),
    "QLinearMul": (_QLINEAR_BINARY, ["C:T"], {"T": _INT8}, {}, inf.broadcast(0, 3), "Quantized element-wise Mul."),
    "QLinearSigmoid": (_QLINEAR_UNARY, ["Y:T"], {"T": _INT8}, {}, inf.same_as(0), "Quantized Sigmoid."),
    "QLinearLeakyRelu": (
        _QLINEAR_UNARY,
        ["Y:T"],
        {"T": _INT8},
        {"alpha": 0.01},
        inf.same_as(0),
        "Quantized LeakyRelu.",
    ),
    "QLinearGlobalAveragePool": (
        ["X:T", "x_scale:tensor(float)", "x_zero_point:T", "y_scale:tensor(float)", "y_zero_point:T"],
        ["Y:T"],
        {"T": _INT8},
        {"channels_last": 0},
        inf.global_pool,
        "Quantized GlobalAveragePool (NCHW or NHWC).",
    ),
    "QLinearConcat": (
        ["Y_scale:TF", "Y_zero_point:T8", "inputs:TV*"],
        ["Y:T8"],
        {"T8": _INT8, "TF": ["tensor(float)"], "TV": ["tensor(uint8)", "tensor(int8)", "tensor(float)"]},
        {"axis": _req(INT)},
        inf.qlinear_concat,
        "Concat of (tensor, scale, zero point) triples, each requantized to Y's scale and zero point.",
    ),
    "NhwcMaxPool": (
        ["x:T"],
        ["y:T"],
        {"T": ["tensor(int8)", "tensor(uint8)"]},
        {
            "auto_pad": "NOTSET",
            "kernel_shape": _req(INTS),
            "dilations": _opt(INTS),
            "strides": _opt(INTS),
            "pads": _opt(INTS),
            "ceil_mode": 0,
        },
        inf.same_elem(0),
        "MaxPool on channels-last 8-bit tensors.",
    ),
    # -- other ---------------------------------------------------------------------------------
    "Trilu": (
        ["X:T", "k:tensor(int64)?"],
        ["Y:T"],
        {
            "T": [
                "tensor(float16)",
                "tensor(float)",
                "tensor(double)",
                "tensor(bfloat16)",
                "tensor(uint8)",
                "tensor(uint16)",
                "tensor(uint32)",
                "tensor(uint64)",
                "tensor(int8)",
                "tensor(int16)",
                "tensor(int32)",
                "tensor(int64)",
                "tensor(bool)",
            ]
        },
        {"upper": 1},
        inf.same_as(0),
        "Upper or lower triangle of the last two axes (as ONNX Trilu-14).",
    ),
}

_OPS.update(QUANT_OPS)
_OPS.update(ML_OPS)

#: ``(domain, name)`` of every op this library declares.
OP_NAMES: tuple[tuple[str, str], ...] = tuple(
    ((spec[6] if len(spec) > 6 else DOMAIN), name) for name, spec in _OPS.items()
)


def _formal(spec: str) -> onnx.defs.OpSchema.FormalParameter:
    name, type_str = spec.split(":", 1)
    option = _Option.Single
    if type_str.endswith("?"):
        type_str, option = type_str[:-1], _Option.Optional
    elif type_str.endswith("*"):
        type_str, option = type_str[:-1], _Option.Variadic
    return onnx.defs.OpSchema.FormalParameter(
        name, type_str, "", param_option=option, is_homogeneous=option != _Option.Variadic
    )


def _attribute(name: str, value: Any) -> onnx.defs.OpSchema.Attribute:
    if isinstance(value, Required):
        return onnx.defs.OpSchema.Attribute(name, value.kind, "", required=True)
    if isinstance(value, Optional):
        return onnx.defs.OpSchema.Attribute(name, value.kind, "", required=False)
    return onnx.defs.OpSchema.Attribute(name, onnx.helper.make_attribute(name, value), "")


def _schema(name: str, spec: tuple) -> onnx.defs.OpSchema:
    inputs, outputs, constraints, attributes, infer, doc = spec[:6]
    domain = spec[6] if len(spec) > 6 else DOMAIN
    schema = onnx.defs.OpSchema(
        name,
        domain,
        1,
        doc,
        inputs=[_formal(s) for s in inputs],
        outputs=[_formal(s) for s in outputs],
        type_constraints=[(param, list(types), "") for param, types in constraints.items()],
        attributes=[_attribute(n, v) for n, v in attributes.items()],
    )
    schema.set_type_and_shape_inference_function(_guarded(infer))
    return schema


def _guarded(fn: Callable[[Any], None]) -> Callable[[Any], None]:
    # Inference is advisory: an odd model must not make onnx's inference (and so model loading)
    # fail inside our code; the kernels check shapes when they run.
    def infer(ctx: Any) -> None:
        try:
            fn(ctx)
        except Exception:  # noqa: BLE001
            pass

    return infer


@functools.cache
def _build() -> tuple[onnx.defs.OpSchema, ...]:
    return tuple(_schema(name, spec) for name, spec in _OPS.items())


def op_schemas() -> list[onnx.defs.OpSchema]:
    """Every schema of this library (built once per process)."""
    return list(_build())
