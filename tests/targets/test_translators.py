"""The NNAPI and DirectML translators on the quantized convnets of the golden plans: the QDQ and
QOperator models become NNAPI programs whose 8-bit operands carry the scales and zero points of
the nodes around them; DirectML's subset has no Q/DQ, so only the float nodes are translated."""

from __future__ import annotations

import numpy as np
import pytest
from target_models import qdq_convnet, qoperator_convnet, table_partitions

from onnxplug_directml.table import TABLE as DML_TABLE
from onnxplug_directml.translate import declines as dml_declines
from onnxplug_nnapi.table import TABLE as NNAPI_TABLE
from onnxplug_nnapi.translate import translate_partition as nnapi_translate


def test_nnapi_qdq_convnet():
    (partition,) = table_partitions(qdq_convnet(), NNAPI_TABLE)
    prog = nnapi_translate(partition)
    assert prog.ops() == [
        "QUANTIZE", "DEQUANTIZE", "TRANSPOSE", "CONV_2D", "RELU", "QUANTIZE", "DEQUANTIZE", "MAX_POOL_2D",
        "TRANSPOSE", "RESHAPE", "FULLY_CONNECTED", "SOFTMAX",
    ]  # fmt: skip
    quantize = prog.operations[0]
    xq = prog.operand(quantize.outputs[0])
    assert (xq.type_name, xq.scale, xq.zero_point) == ("TENSOR_QUANT8_ASYMM_SIGNED", pytest.approx(0.02), 0)
    conv = next(op for op in prog.operations if op.name == "CONV_2D")
    weights = prog.operand(conv.inputs[1])  # the DequantizeLinear of constant int8 weights, folded
    assert weights.type_name == "TENSOR_FLOAT32" and weights.dims == (8, 3, 3, 3)
    assert np.allclose(np.abs(weights.value).max() / 0.01, np.round(np.abs(weights.value).max() / 0.01))


def test_nnapi_qoperator_convnet():
    programs = [nnapi_translate(p) for p in table_partitions(qoperator_convnet(), NNAPI_TABLE)]
    assert [p.ops() for p in programs] == [
        ["QUANTIZE", "TRANSPOSE", "CONV_2D", "TRANSPOSE"],
        ["FULLY_CONNECTED", "DEQUANTIZE"],
    ]
    conv = programs[0].operations[2]
    x, w, b = (programs[0].operand(i) for i in conv.inputs[:3])
    assert x.code == w.code and b.type_name == "TENSOR_INT32"
    assert b.scale == pytest.approx(x.scale * w.scale)  # NNAPI's bias scale: input scale x filter scale
    fc = programs[1].operations[0]
    assert programs[1].operand(fc.inputs[0]).type_name.startswith("TENSOR_QUANT8")


def test_directml_declines_the_qdq_nodes_and_keeps_the_float_ones():
    (partition,) = table_partitions(qdq_convnet(), DML_TABLE)  # the table takes the whole model...
    refused = dml_declines(partition.model)  # ...the execution path's subset not the 8-bit nodes
    assert set(refused) == {"quant_x", "dequant_x", "quant_r", "dequant_r"}
    assert "operator subset" in refused["quant_x"] and "int8" in refused["dequant_x"]
    assert {"conv", "relu", "pool", "flatten", "matmul", "softmax"} <= set(partition.nodes) - set(refused)
