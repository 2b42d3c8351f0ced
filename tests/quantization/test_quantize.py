"""onnxplug.quantization against onnxruntime.quantization (names, enums, defaults, arithmetic) and
on three model kinds: accuracy against the float model, and onnxruntime running the written
models (onnxruntime is the test oracle only)."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxplug
from onnxplug import quantization as oq
from onnxplug.quantization import quant_utils

sys.path.insert(0, str(Path(__file__).parent))
import models

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle these tests compare against")
oq_ort = pytest.importorskip("onnxruntime.quantization", reason="onnxruntime.quantization is the API oracle")

PUBLIC = [
    "quantize_dynamic",
    "quantize_static",
    "quantize",
    "quant_pre_process",
    "StaticQuantConfig",
    "DynamicQuantConfig",
]
ENUMS = ["CalibrationMethod", "QuantFormat", "QuantType", "QuantizationMode"]


def _default(value):
    return value.name if hasattr(value, "name") and hasattr(value, "value") else value


@pytest.mark.parametrize("name", PUBLIC)
def test_signature_matches_onnxruntime(name):
    ours = inspect.signature(getattr(oq, name)).parameters
    theirs = inspect.signature(getattr(oq_ort, name)).parameters
    positional = [p for p in ours.values() if p.kind is not p.KEYWORD_ONLY]
    assert [p.name for p in positional] == list(theirs)
    for param in positional:
        assert _default(param.default) == _default(theirs[param.name].default), param.name


@pytest.mark.parametrize("name", ENUMS)
def test_enum_members_match_onnxruntime(name):
    ours = [(m.name, m.value) for m in getattr(oq, name)]
    assert ours == [(m.name, m.value) for m in getattr(oq_ort, name)]


def test_quant_type_helpers_match_onnxruntime():
    for member in oq.QuantType:
        theirs = oq_ort.QuantType[member.name]
        assert member.tensor_type == theirs.tensor_type
        assert str(member) == str(theirs)
        assert oq.QuantType.from_string(member.name) is member
    assert oq.QuantFormat.from_string("QDQ") is oq.QuantFormat.QDQ
    with pytest.raises(onnxplug.InvalidArgument):
        oq.QuantType.from_string("QInt7")


@pytest.mark.parametrize("q_type", ["QInt8", "QUInt8", "QInt16", "QUInt16"])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("reduce_range", [False, True])
def test_ranges_and_scales_match_onnxruntime(q_type, symmetric, reduce_range):
    from onnxruntime.quantization import quant_utils as ort_utils

    elem = oq.QuantType[q_type].tensor_type
    ours = quant_utils.get_qmin_qmax_for_qType(elem, reduce_range, symmetric)
    theirs = ort_utils.get_qmin_qmax_for_qType(elem, reduce_range, symmetric)
    assert [int(v) for v in ours] == [int(v) for v in theirs]
    for low, high in [(-1.5, 3.0), (0.2, 4.0), (-7.0, -0.5), (0.0, 0.0), (-1e-3, 2e-3)]:
        zero, scale = quant_utils.compute_scale_zp(np.float32(low), np.float32(high), *ours, symmetric=symmetric)
        z2, s2 = ort_utils.compute_scale_zp(np.float32(low), np.float32(high), *theirs, symmetric=symmetric)
        assert int(zero) == int(z2) and np.float32(scale) == np.float32(s2), (low, high)


# --- models ---------------------------------------------------------------------------------

MODES = [
    ("dynamic", False),
    ("dynamic", True),
    ("QDQ", False),
    ("QDQ", True),
    ("QOperator", False),
    ("QOperator", True),
]
EXPECTED_OPS = {"dynamic": {"DynamicQuantizeLinear"}, "QDQ": {"QuantizeLinear", "DequantizeLinear"}}
# The usual int8 error: worst-case element error relative to the output's largest magnitude.
INT8_TOLERANCE = 0.06


def _quantize(model_path, out, shapes, mode, per_channel, **kwargs):
    if mode == "dynamic":
        oq.quantize_dynamic(model_path, out, per_channel=per_channel, **kwargs)
    else:
        reader = models.SampleReader(shapes, 16, seed=1)
        oq.quantize_static(
            model_path, out, reader, quant_format=oq.QuantFormat[mode], per_channel=per_channel, **kwargs
        )


@pytest.fixture(scope="module", params=sorted(models.BUILDERS))
def float_model(request, tmp_path_factory):
    model, shapes = models.BUILDERS[request.param](np.random.default_rng(0))
    path = tmp_path_factory.mktemp(request.param) / "float.onnx"
    onnx.save(model, str(path))
    samples = models.SampleReader(shapes, 4, seed=99).samples
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = [reference.run(None, s)[0] for s in samples]
    return request.param, path, shapes, samples, expected


@pytest.mark.parametrize(("mode", "per_channel"), MODES)
def test_quantized_model_accuracy_and_onnxruntime_agreement(float_model, mode, per_channel, tmp_path):
    kind, path, shapes, samples, expected = float_model
    out = tmp_path / "quant.onnx"
    _quantize(str(path), str(out), shapes, mode, per_channel)
    quantized = onnx.load(str(out))
    onnx.checker.check_model(quantized)
    ops = {n.op_type for n in quantized.graph.node}
    wanted = EXPECTED_OPS.get(mode) or ({"QLinearConv"} if kind == "cnn" else {"QLinearMatMul"})
    if mode == "dynamic":
        wanted = wanted | ({"ConvInteger"} if kind == "cnn" else {"MatMulInteger"})
    assert wanted <= ops, ops

    plug = onnxplug.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    plain = ort.SessionOptions()
    plain.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    oracle_plain = ort.InferenceSession(str(out), plain, providers=["CPUExecutionProvider"])
    oracle = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for sample, want in zip(samples, expected, strict=True):
        got = plug.run(None, sample)[0]
        peak = float(np.abs(want).max())
        assert np.abs(got - want).max() <= INT8_TOLERANCE * peak, "accuracy against the float model"
        # The same graph, kernel for kernel: onnxruntime unoptimized gives the same numbers.
        np.testing.assert_allclose(got, oracle_plain.run(None, sample)[0], rtol=1e-5, atol=1e-5 * peak)
        # Optimized, onnxruntime fuses Q/DQ into integer kernels whose rounding may move a value
        # by a quantization step; the result still agrees within int8 error.
        assert np.abs(got - oracle.run(None, sample)[0]).max() <= INT8_TOLERANCE * peak


def test_per_channel_weights_have_one_scale_per_output_channel(float_model, tmp_path):
    kind, path, shapes, *_ = float_model
    out = tmp_path / "pc.onnx"
    _quantize(str(path), str(out), shapes, "QDQ", True)
    model = onnx.load(str(out))
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    weight = "c2w" if kind == "cnn" else "w1"
    assert inits[f"{weight}_quantized"].dtype == np.int8
    channels = inits[f"{weight}_quantized"].shape[0 if kind == "cnn" else -1]
    assert inits[f"{weight}_scale"].shape == (channels,)


def test_nodes_to_exclude_and_op_types(tmp_path):
    model, shapes = models.mlp(np.random.default_rng(0))
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    out = tmp_path / "q.onnx"
    oq.quantize_static(
        str(path),
        str(out),
        models.SampleReader(shapes, 4, 1),
        quant_format=oq.QuantFormat.QOperator,
        nodes_to_exclude=["mm2"],
    )
    names = {n.name: n.op_type for n in onnx.load(str(out)).graph.node}
    assert names["mm2"] == "MatMul" and "mm1_quant" in names
    oq.quantize_dynamic(str(path), str(out), op_types_to_quantize=["Conv"])
    assert "MatMulInteger" not in {n.op_type for n in onnx.load(str(out)).graph.node}


def test_relu_absorbed_and_zero_point_at_minimum(tmp_path):
    model, shapes = models.cnn(np.random.default_rng(0))
    path = tmp_path / "cnn.onnx"
    onnx.save(model, str(path))
    out = tmp_path / "q.onnx"
    oq.quantize_static(str(path), str(out), models.SampleReader(shapes, 4, 1), quant_format=oq.QuantFormat.QOperator)
    quantized = onnx.load(str(out))
    relus = [n.name for n in quantized.graph.node if n.op_type == "Relu"]
    assert relus == ["relu3"]  # after the float residual Add; relu1/relu2 were absorbed by their Conv
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in quantized.graph.initializer}
    assert int(inits["r1_zero_point"]) == -128


@pytest.mark.parametrize("method", ["MinMax", "Entropy", "Percentile"])
def test_calibration_methods(method, tmp_path):
    model, shapes = models.cnn(np.random.default_rng(0))
    path = tmp_path / "cnn.onnx"
    onnx.save(model, str(path))
    out = tmp_path / "q.onnx"
    oq.quantize_static(
        str(path), str(out), models.SampleReader(shapes, 8, 1), calibrate_method=oq.CalibrationMethod[method]
    )
    samples = models.SampleReader(shapes, 2, 5).samples
    want = [ort.InferenceSession(str(path)).run(None, s)[0] for s in samples]
    plug = onnxplug.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    for sample, expected in zip(samples, want, strict=True):
        assert np.abs(plug.run(None, sample)[0] - expected).max() <= 0.1 * np.abs(expected).max()


def test_min_max_ranges_and_calibration_cache(tmp_path):
    from onnxplug.quantization.calibrate import collect_ranges

    model, shapes = models.mlp(np.random.default_rng(0))
    reader = models.SampleReader(shapes, 5, 3)
    ranges = collect_ranges(model, ["x", "r1"], reader)
    xs = np.stack([s["x"] for s in reader.samples])
    assert float(ranges["x"].lowest) == xs.min() and float(ranges["x"].highest) == xs.max()
    assert float(ranges["r1"].lowest) == 0.0
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    cache = tmp_path / "ranges.json"
    oq.quantize_static(
        str(path), str(tmp_path / "a.onnx"), models.SampleReader(shapes, 5, 3), calibration_cache_path=cache
    )
    stored = json.loads(cache.read_text())
    assert stored["x"] == [float(xs.min()), float(xs.max())]
    # A present cache replaces calibration: no reader needed, the same model comes out.
    oq.quantize_static(str(path), str(tmp_path / "b.onnx"), None, calibration_cache_path=cache)
    assert onnx.load(str(tmp_path / "a.onnx")) == onnx.load(str(tmp_path / "b.onnx"))


def test_bad_input_is_reported(tmp_path):
    model, shapes = models.mlp(np.random.default_rng(0))
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    with pytest.raises(onnxplug.InvalidArgument, match="no samples"):
        oq.quantize_static(str(path), str(tmp_path / "q.onnx"), models.SampleReader(shapes, 0, 1))
    with pytest.raises(onnxplug.InvalidArgument, match="calibration_data_reader"):
        oq.quantize_static(str(path), str(tmp_path / "q.onnx"))
    with pytest.raises(onnxplug.InvalidArgument, match="not a file"):
        oq.quantize_dynamic(str(tmp_path / "missing.onnx"), str(tmp_path / "q.onnx"))
    with pytest.raises(onnxplug.InvalidArgument, match="QuantType"):
        oq.quantize_dynamic(str(path), str(tmp_path / "q.onnx"), weight_type="int8")


def test_calibration_data_reader_protocol():
    class Reader(oq.CalibrationDataReader):
        def __init__(self):
            self.items = [{"x": 1}, {"x": 2}]

        def get_next(self):
            return self.items.pop(0) if self.items else None

    assert list(Reader()) == [{"x": 1}, {"x": 2}]
    assert isinstance(models.SampleReader({"x": (1,)}, 1, 0), oq.CalibrationDataReader)


def test_quant_pre_process_marks_and_keeps_results(tmp_path):
    model, shapes = models.cnn(np.random.default_rng(0))
    path, out = tmp_path / "cnn.onnx", tmp_path / "pre.onnx"
    onnx.save(model, str(path))
    oq.quant_pre_process(str(path), str(out))
    processed = onnx.load(str(out))
    assert {p.key: p.value for p in processed.metadata_props}["onnx.quant.pre_process"] == "onnxruntime.quant"
    from onnxruntime.quantization.quant_utils import model_has_pre_process_metadata

    assert model_has_pre_process_metadata(processed)
    sample = models.SampleReader(shapes, 1, 2).samples[0]
    np.testing.assert_allclose(
        ort.InferenceSession(str(out)).run(None, sample)[0],
        ort.InferenceSession(str(path)).run(None, sample)[0],
        rtol=1e-5,
        atol=1e-6,
    )


def test_quantize_with_config_objects(tmp_path):
    model, shapes = models.mlp(np.random.default_rng(0))
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    oq.quantize(str(path), str(tmp_path / "s.onnx"), oq.StaticQuantConfig(models.SampleReader(shapes, 4, 1)))
    oq.quantize(str(path), str(tmp_path / "d.onnx"), oq.DynamicQuantConfig())
    assert "QuantizeLinear" in {n.op_type for n in onnx.load(str(tmp_path / "s.onnx")).graph.node}
    assert "MatMulInteger" in {n.op_type for n in onnx.load(str(tmp_path / "d.onnx")).graph.node}
