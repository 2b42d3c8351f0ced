"""Schemas of the quantized ops onnxruntime's tools write (see :mod:`._spec` for the spelling).

``onnxruntime.quantization.quantize_static`` (QOperator format, or QDQ format that
onnxruntime's optimizer then fuses) writes QGemm, QLinearSoftmax, QLinearAveragePool,
QLinearWhere and (with ``UseQDQContribOps``) the com.microsoft QuantizeLinear/DequantizeLinear;
``quantize_dynamic`` writes DynamicQuantizeLSTM, QAttention and QEmbedLayerNormalization.
onnxruntime's NHWC transformer (ORT_ENABLE_ALL) writes the channels-last com.microsoft
QLinearConv, ``matmul_nbits_quantizer`` GatherBlockQuantized and ``matmul_bnb4_quantizer``
MatMulBnb4.  QLinearReduceMean is declared by onnxruntime without a CPU kernel; it is here by
its definition.  TransposeMatMul
(FusedMatMul's older name, in models optimized by older onnxruntime versions) sits here with
GatherBlockQuantized, whose module runs it.  The declarations follow onnxruntime's registered
schemas (names, order, types and defaults).
"""

from __future__ import annotations

from . import _inference as inf
from ._spec import FLOAT, FLOATS, FLOATS4, INT, INT8, INTS, STRINGS, opt, req

_INTEGERS = ["tensor(int8)", "tensor(uint8)", "tensor(int16)", "tensor(uint16)", "tensor(int4)", "tensor(uint4)"]
_QLINEAR_IO = ["X:T", "x_scale:tensor(float)", "x_zero_point:T?", "y_scale:tensor(float)", "y_zero_point:T?"]

_FLOAT_CODES = [
    "tensor(float8e4m3fn)",
    "tensor(float8e4m3fnuz)",
    "tensor(float8e5m2)",
    "tensor(float8e5m2fnuz)",
    "tensor(float4e2m1)",
]

QUANT_OPS: dict[str, tuple] = {
    "GatherBlockQuantized": (
        ["data:T1", "indices:Tind", "scales:T2", "zero_points:T1?"],
        ["output:T2"],
        {
            "T1": ["tensor(int4)", "tensor(uint4)", "tensor(uint8)"] + _FLOAT_CODES,
            "T2": ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"],
            "Tind": ["tensor(int32)", "tensor(int64)"],
        },
        {"gather_axis": 0, "quantize_axis": 1, "block_size": 128, "bits": 4},
        inf.gather_block,
        "Gather from a table block-quantized along quantize_axis, dequantized (matmul_nbits_quantizer "
        "writes it for embedding Gathers).",
    ),
    "MatMulBnb4": (
        ["A:T1", "B:T2", "absmax:T1"],
        ["Y:T1"],
        {"T1": ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"], "T2": ["tensor(uint8)"]},
        {"K": req(INT), "N": req(INT), "block_size": req(INT), "quant_type": req(INT), "transB": 1, "training_mode": 0},
        inf.bnb4,
        "A @ dequantize(B).T (transB=1) with B [N, K] in 4-bit FP4 (quant_type 0) or NF4 (1) blocks.",
    ),
    "TransposeMatMul": (
        ["A:T", "B:T"],
        ["Y:T"],
        {"T": FLOATS4},
        {"alpha": 1.0, "transA": 0, "transB": 0},
        inf.fused_matmul,
        "FusedMatMul's older name (no batch transposes).",
    ),
    "QLinearConv": (
        [
            "x:T1",
            "x_scale:tensor(float)",
            "x_zero_point:T1",
            "w:T2",
            "w_scale:tensor(float)",
            "w_zero_point:T2",
            "y_scale:tensor(float)",
            "y_zero_point:T3",
            "B:T4?",
        ],
        ["y:T3"],
        {"T1": INT8, "T2": INT8, "T3": INT8, "T4": ["tensor(int32)"]},
        {
            "auto_pad": "NOTSET",
            "kernel_shape": opt(INTS),
            "dilations": opt(INTS),
            "strides": opt(INTS),
            "pads": opt(INTS),
            "group": 1,
            "channels_last": 0,
        },
        inf.same_elem(7),
        "ONNX QLinearConv, on channels-last tensors when channels_last=1 (onnxruntime's NHWC "
        "transformer at ORT_ENABLE_ALL writes it).",
    ),
    "QGemm": (
        [
            "A:TA",
            "a_scale:T",
            "a_zero_point:TA",
            "B:TB",
            "b_scale:T",
            "b_zero_point:TB",
            "C:TC?",
            "y_scale:T?",
            "y_zero_point:TYZ?",
        ],
        ["Y:TY"],
        {
            "T": ["tensor(float)"],
            "TA": INT8,
            "TB": INT8,
            "TC": ["tensor(int32)"],
            "TYZ": INT8,
            "TY": ["tensor(float)", "tensor(uint8)", "tensor(int8)"],
        },
        {"transA": 0, "transB": 0, "alpha": 1.0},
        inf.qgemm,
        "alpha * (A - a_zero_point) (B - b_zero_point) * a_scale * b_scale + C * a_scale * b_scale, "
        "in float, or requantized to y_scale/y_zero_point when they are given.",
    ),
    "QLinearSoftmax": (
        ["X:T", "X_scale:tensor(float)", "x_zero_point:T?", "y_scale:tensor(float)", "y_zero_point:T"],
        ["Y:T"],
        {"T": INT8},
        {"axis": -1, "opset": req(INT)},
        inf.same_as(0),
        "Softmax of a quantized tensor, requantized (axis semantics of the Softmax of `opset`).",
    ),
    "QLinearAveragePool": (
        _QLINEAR_IO,
        ["Y:T"],
        {"T": INT8},
        {
            "auto_pad": "NOTSET",
            "kernel_shape": req(INTS),
            "strides": opt(INTS),
            "pads": opt(INTS),
            "ceil_mode": 0,
            "count_include_pad": 0,
            "channels_last": 0,
        },
        inf.same_elem(0),
        "AveragePool of a quantized tensor (NCHW, or NHWC with channels_last), requantized.",
    ),
    "QLinearWhere": (
        [
            "condition:B",
            "X:T",
            "x_scale:TF",
            "x_zero_point:T",
            "Y:T",
            "y_scale:TF",
            "y_zero_point:T",
            "z_scale:TF",
            "z_zero_point:T",
        ],
        ["Z:T"],
        {"B": ["tensor(bool)"], "TF": ["tensor(float)"], "T": INT8},
        {},
        inf.where(0, 1, 4),
        "Where(condition, X, Y) with X and Y requantized to Z's scale and zero point.",
    ),
    "QLinearReduceMean": (
        [
            "data:T",
            "data_scale:tensor(float)",
            "data_zero_point:T?",
            "reduced_scale:tensor(float)",
            "reduced_zero_point:T?",
        ],
        ["reduced:T"],
        {"T": INT8},
        {"axes": req(INTS), "keepdims": req(INT)},
        inf.reduce,
        "ReduceMean of the dequantized input, requantized.",
    ),
    "QuantizeLinear": (
        ["x:T1", "y_scale:T1", "y_zero_point:T2?"],
        ["y:T2"],
        {"T1": ["tensor(float16)", "tensor(float)"], "T2": _INTEGERS},
        {"axis": opt(INT)},
        inf.quantized_like(2),
        "saturate(round(x / y_scale) + y_zero_point), per tensor or per `axis` (16-bit and 4-bit "
        "types too, before ONNX had them).",
    ),
    "DequantizeLinear": (
        ["x:T1", "x_scale:T2", "x_zero_point:T1?"],
        ["y:T2"],
        {"T1": _INTEGERS + ["tensor(int32)"], "T2": ["tensor(float16)", "tensor(float)"]},
        {"axis": opt(INT)},
        inf.elem_from(0, 1),
        "(x - x_zero_point) * x_scale, per tensor or per `axis`.",
    ),
    "DynamicQuantizeLSTM": (
        [
            "X:T",
            "W:T2",
            "R:T2",
            "B:T?",
            "sequence_lens:T1?",
            "initial_h:T?",
            "initial_c:T?",
            "P:T?",
            "W_scale:T",
            "W_zero_point:T2",
            "R_scale:T",
            "R_zero_point:T2",
        ],
        ["Y:T?", "Y_h:T?", "Y_c:T?"],
        {"T": ["tensor(float)"], "T1": ["tensor(int32)"], "T2": INT8},
        {
            "activation_alpha": opt(FLOATS),
            "activation_beta": opt(FLOATS),
            "activations": opt(STRINGS),
            "clip": opt(FLOAT),
            "direction": "forward",
            "hidden_size": opt(INT),
            "input_forget": 0,
        },
        inf.lstm,
        "LSTM whose W ([directions, input, 4*hidden]) and R are quantized 8-bit; the matmuls "
        "quantize their float operand on the fly (as DynamicQuantizeMatMul).",
    ),
    "QAttention": (
        [
            "input:T1",
            "weight:T2",
            "bias:T3",
            "input_scale:T3",
            "weight_scale:T3",
            "mask_index:T4?",
            "input_zero_point:T1?",
            "weight_zero_point:T2?",
            "past:T3?",
        ],
        ["output:T3", "present:T3?"],
        {"T1": INT8, "T2": INT8, "T3": ["tensor(float)", "tensor(float16)"], "T4": ["tensor(int32)"]},
        {
            "num_heads": req(INT),
            "unidirectional": 0,
            "scale": opt(FLOAT),
            "mask_filter_value": opt(FLOAT),
            "do_rotary": opt(INT),
            "past_present_share_buffer": opt(INT),
        },
        inf.qattention,
        "Attention whose input and merged QKV weight are quantized 8-bit.",
    ),
    "QEmbedLayerNormalization": (
        [
            "input_ids:T1",
            "segment_ids:T1?",
            "word_embedding_quant:T2",
            "position_embedding_quant:T2",
            "segment_embedding:T2?",
            "gamma_quant:T2",
            "beta_quant:T2",
            "mask:T1?",
            "word_embedding_scale:T",
            "position_embedding_scale:T",
            "segment_embedding_scale:T?",
            "gamma_scale:T",
            "beta_scale:T",
            "word_embedding_zero_point:T2",
            "position_embedding_zero_point:T2",
            "segment_embedding_zero_point:T2?",
            "gamma_zero_point:T2",
            "beta_zero_point:T2",
        ],
        ["layernorm_out:T", "mask_index_out:T1"],
        {"T1": ["tensor(int32)"], "T2": INT8, "T": ["tensor(float)"]},
        {"epsilon": 1e-12},
        inf.qembed_norm,
        "EmbedLayerNormalization with 8-bit quantized embedding tables, gamma and beta.",
    ),
}

__all__ = ["QUANT_OPS"]
