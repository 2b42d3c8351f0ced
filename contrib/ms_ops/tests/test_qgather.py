"""GatherBlockQuantized and TransposeMatMul against onnxruntime, and a BERT whose embedding
Gathers and MatMuls matmul_nbits_quantizer quantized to 4 bits."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import onnx.helper as oh
import pytest

import onnxplug

from .test_end_to_end import _bert_feeds, _bert_model


def _model(data, scales, zero_points, indices_shape, **attrs):
    inits = [onnx.numpy_helper.from_array(data, "data"), onnx.numpy_helper.from_array(scales, "scales")]
    names = ["data", "idx", "scales"]
    if zero_points is not None:
        inits.append(onnx.numpy_helper.from_array(zero_points, "zp"))
        names.append("zp")
    graph = oh.make_graph(
        [oh.make_node("GatherBlockQuantized", names, ["y"], domain="com.microsoft", **attrs)],
        "g",
        [oh.make_tensor_value_info("idx", onnx.TensorProto.INT64, indices_shape)],
        [oh.make_tensor_value_info("y", onnx.helper.np_dtype_to_tensor_dtype(scales.dtype), None)],
        initializer=inits,
    )
    opsets = [oh.make_opsetid("", 21), oh.make_opsetid("com.microsoft", 1)]
    return oh.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def _both(ort, model, idx):
    ours = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"idx": idx})[0]
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"idx": idx})[0]
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_allclose(ours.astype(np.float32), theirs.astype(np.float32), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("dtype", [ml_dtypes.uint4, ml_dtypes.int4], ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("axes", [(0, 1), (1, 0), (0, 2), (2, 2)])
@pytest.mark.parametrize("with_zero_points", [True, False])
@pytest.mark.parametrize("scale_type", [np.float32, np.float16])
def test_gather_block_quantized_4bit(ort, rng, dtype, axes, with_zero_points, scale_type):
    gather_axis, quantize_axis = axes
    shape = [6, 40, 36]
    info = ml_dtypes.iinfo(dtype)
    data = rng.integers(info.min, info.max + 1, size=shape).astype(dtype)
    block = 16
    blocked = list(shape)
    blocked[quantize_axis] = -(-shape[quantize_axis] // block)
    scales = (rng.random(blocked) * 0.1 + 0.01).astype(scale_type)
    zero = rng.integers(info.min, info.max + 1, size=blocked).astype(dtype) if with_zero_points else None
    idx = rng.integers(-shape[gather_axis], shape[gather_axis], size=(2, 3)).astype(np.int64)
    model = _model(data, scales, zero, [2, 3], gather_axis=gather_axis, quantize_axis=quantize_axis, block_size=block)
    _both(ort, model, idx)


@pytest.mark.parametrize("with_zero_points", [True, False])
def test_gather_block_quantized_uint8(ort, rng, with_zero_points):
    data = rng.integers(0, 256, size=(10, 64)).astype(np.uint8)
    scales = (rng.random((10, 2)) * 0.1 + 0.01).astype(np.float32)
    zero = rng.integers(0, 256, size=(10, 2)).astype(np.uint8) if with_zero_points else None
    idx = np.array([[0, 9, 3], [3, 3, 1]], np.int64)
    _both(ort, _model(data, scales, zero, [2, 3], bits=8, block_size=32), idx)


@pytest.mark.parametrize("block_size,scale_shape", [(16, (8, 3)), (0, (8, 1)), (0, (1, 1))])
def test_gather_block_quantized_float8(ort, rng, block_size, scale_shape):
    data = (rng.standard_normal((8, 40)) * 3).astype(ml_dtypes.float8_e4m3fn)
    scales = (rng.random(scale_shape) * 0.1 + 0.01).astype(np.float32)
    idx = np.array([7, 0, 2, 2], np.int64)
    _both(ort, _model(data, scales, None, [4], block_size=block_size), idx)


def test_gather_block_quantized_index_out_of_range(rng):
    data = rng.integers(0, 16, size=(4, 16)).astype(ml_dtypes.uint4)
    model = _model(data, np.ones((4, 1), np.float32), None, [1], block_size=16)
    session = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"])
    with pytest.raises(onnxplug.InvalidArgument, match=r"indices must be in \[-4, 3\]"):
        session.run(None, {"idx": np.array([4], np.int64)})


@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_transpose_matmul(run_both, close, rng, trans):
    a = rng.standard_normal((2, 5, 4) if trans[0] else (2, 4, 5)).astype(np.float32)
    b = rng.standard_normal((3, 5) if trans[1] else (5, 3)).astype(np.float32)
    close(*run_both("TransposeMatMul", [("a", a), ("b", b)], ["y"], transA=trans[0], transB=trans[1], alpha=0.5))


def test_bert_with_4bit_embeddings(ort, rng, tmp_path):
    nbits = pytest.importorskip("onnxruntime.quantization.matmul_nbits_quantizer")
    batch, seq = 3, 11
    quantizer = nbits.MatMulNBitsQuantizer(
        _bert_model(rng, batch=batch, seq=seq),
        block_size=16,
        is_symmetric=False,
        op_types_to_quantize=("MatMul", "Gather"),
    )
    quantizer.process()
    path = tmp_path / "bert_q4_gather.onnx"
    quantizer.model.save_model_to_file(str(path))
    ops = {n.op_type for n in onnx.load(str(path)).graph.node if n.domain == "com.microsoft"}
    assert {"GatherBlockQuantized", "MatMulNBits"} <= ops, ops
    feeds = _bert_feeds(rng, batch, seq)
    theirs = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    ours = onnxplug.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-4, atol=1e-4)
