"""SessionOptions that change what a session does: profiling, ORT_PARALLEL, the written model,
initializer and dimension overrides, threads, seeds."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

F = TensorProto.FLOAT


def _branchy_model() -> bytes:
    """Two independent branches joined at the end (room for ORT_PARALLEL)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"], name="left_mm"),
        helper.make_node("Relu", ["a"], ["ra"], name="left_relu"),
        helper.make_node("MatMul", ["x", "w2"], ["b"], name="right_mm"),
        helper.make_node("Sigmoid", ["b"], ["sb"], name="right_sigmoid"),
        helper.make_node("Add", ["ra", "sb"], ["y"], name="join"),
    ]
    rng = np.random.default_rng(0)
    return make_model(
        nodes,
        [("x", F, ["n", 8])],
        [("y", F, None)],
        {"w1": rng.standard_normal((8, 8)).astype(np.float32), "w2": rng.standard_normal((8, 8)).astype(np.float32)},
    ).SerializeToString()


MODEL = _branchy_model()
X = np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)
EXPECTED = onnxplug.InferenceSession(MODEL).run(None, {"x": X})[0]


def test_profiling_writes_a_chrome_trace(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = onnxplug.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = "trace"
    session = onnxplug.InferenceSession(MODEL, options)
    assert abs(session.get_profiling_start_time_ns() - __import__("time").time_ns()) < 60e9
    session.run(None, {"x": X})
    session.run(None, {"x": X})
    path = session.end_profiling()
    assert os.path.basename(path).startswith("trace_") and path.endswith(".json")
    assert session.end_profiling() == ""
    events = json.loads((tmp_path / path).read_text())
    sessions = [e["name"] for e in events if e["cat"] == "Session"]
    assert sessions[:2] == ["model_loading_array", "session_initialization"]
    assert sessions.count("model_run") == 2
    nodes = [e for e in events if e["cat"] == "Node"]
    assert len(nodes) == 2 * 5
    first = next(e for e in nodes if e["name"] == "left_mm_kernel_time")
    assert first["ph"] == "X" and isinstance(first["ts"], int) and isinstance(first["dur"], int)
    assert first["args"]["op_name"] == "MatMul"
    assert first["args"]["provider"] == "CPUExecutionProvider"
    assert first["args"]["input_type_shape"] == [{"float": [4, 8]}, {"float": [8, 8]}]
    assert first["args"]["output_type_shape"] == [{"float": [4, 8]}]
    assert first["args"]["activation_size"] == str(4 * 8 * 4 + 8 * 8 * 4)
    assert first["args"]["output_size"] == str(4 * 8 * 4)
    # in the order the events ended: each run's nodes before its model_run event
    ends = [e["ts"] + e["dur"] for e in events]
    assert ends == sorted(ends)
    runs = [i for i, e in enumerate(events) if e["name"] == "model_run"]
    assert sum(1 for e in events[: runs[0]] if e["cat"] == "Node") == 5


def test_profiling_off():
    session = onnxplug.InferenceSession(MODEL)
    assert session.get_profiling_start_time_ns() == 0
    assert session.end_profiling() == ""


def test_parallel_execution_matches_sequential():
    options = onnxplug.SessionOptions()
    options.execution_mode = onnxplug.ExecutionMode.ORT_PARALLEL
    options.inter_op_num_threads = 2
    session = onnxplug.InferenceSession(MODEL, options)
    for _ in range(20):
        np.testing.assert_allclose(session.run(None, {"x": X})[0], EXPECTED, rtol=1e-6)
    session.close()


def test_parallel_execution_reports_errors_and_terminate():
    options = onnxplug.SessionOptions()
    options.execution_mode = onnxplug.ExecutionMode.ORT_PARALLEL
    session = onnxplug.InferenceSession(MODEL, options)
    with pytest.raises(onnxplug.InvalidArgument, match="Got invalid dimensions"):
        session.run(None, {"x": np.ones((2, 3), np.float32)})
    run_options = onnxplug.RunOptions()
    run_options.terminate = True
    with pytest.raises(onnxplug.Fail, match="terminate"):
        session.run(None, {"x": X}, run_options)


def test_optimized_model_is_written_and_loadable_by_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle that loads the written model")
    # The written model is the optimizer's output: a model-local function stays a function (a
    # provider may claim the call as a whole; inlining is the partitioner's choice), and
    # onnxruntime runs it.
    body = [helper.make_node("MatMul", ["a", "b"], ["ab"]), helper.make_node("Relu", ["ab"], ["out"])]
    function = helper.make_function("local", "MatRelu", ["a", "b"], ["out"], body, [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("MatRelu", ["x", "w"], ["y"], domain="local")]
    model = make_model(
        nodes, [("x", F, [2, 3])], [("y", F, [2, 2])], {"w": np.ones((3, 2), np.float32)}, extra_opsets={"local": 1}
    )
    model.functions.append(function)
    path = tmp_path / "optimized.onnx"
    options = onnxplug.SessionOptions()
    options.optimized_model_filepath = str(path)
    session = onnxplug.InferenceSession(model.SerializeToString(), options)
    written = __import__("onnx").load(str(path))
    assert [n.op_type for n in written.graph.node] == ["MatRelu"]
    assert [f.name for f in written.functions] == ["MatRelu"]
    basic = ort.SessionOptions()
    basic.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    reference = ort.InferenceSession(str(path), basic, providers=["CPUExecutionProvider"])
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 2
    np.testing.assert_allclose(reference.run(None, {"x": x})[0], session.run(None, {"x": x})[0])


def test_add_initializer_overrides_the_model():
    nodes = [helper.make_node("Add", ["x", "w"], ["y"])]
    model = make_model(nodes, [("x", F, [2])], [("y", F, [2])], {"w": np.zeros(2, np.float32)}).SerializeToString()
    options = onnxplug.SessionOptions()
    options.add_initializer("w", onnxplug.OrtValue.ortvalue_from_numpy(np.array([10, 20], np.float32)))
    (y,) = onnxplug.InferenceSession(model, options).run(None, {"x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(y, [11, 21])
    bad = onnxplug.SessionOptions()
    bad.add_initializer("nope", onnxplug.OrtValue.ortvalue_from_numpy(np.zeros(2, np.float32)))
    with pytest.raises(onnxplug.InvalidArgument, match="no initializer named 'nope'"):
        onnxplug.InferenceSession(model, bad)


def test_free_dimension_overrides():
    graph_input = helper.make_tensor_value_info("x", F, ["batch", 8])
    graph_input.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [], [("y", F, None)])
    model.graph.input.append(graph_input)
    by_name = onnxplug.SessionOptions()
    by_name.add_free_dimension_override_by_name("batch", 3)
    session = onnxplug.InferenceSession(model.SerializeToString(), by_name)
    assert session.get_inputs()[0].shape == [3, 8]
    with pytest.raises(onnxplug.InvalidArgument, match="index: 0 Got: 2 Expected: 3"):
        session.run(None, {"x": np.ones((2, 8), np.float32)})
    by_denotation = onnxplug.SessionOptions()
    by_denotation.add_free_dimension_override_by_denotation("DATA_BATCH", 5)
    assert onnxplug.InferenceSession(model.SerializeToString(), by_denotation).get_inputs()[0].shape == [5, 8]


def test_intra_op_threads_limit_blas_only_during_run():
    threadpoolctl = pytest.importorskip("threadpoolctl", reason="intra_op_num_threads is honoured through it")
    before = [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"]
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = 1
    seen = []

    session = onnxplug.InferenceSession(MODEL, options)
    original = session._execute

    def spy(*args):
        seen.extend(info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas")
        return original(*args)

    session._execute = spy
    np.testing.assert_allclose(session.run(None, {"x": X})[0], EXPECTED, rtol=1e-6)
    assert seen and set(seen) == {1}
    after = [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"]
    assert after == before


def test_set_seed_makes_unseeded_random_ops_reproducible():
    model = make_model(
        [helper.make_node("RandomUniform", [], ["y"], shape=[4], dtype=F)], [], [("y", F, [4])]
    ).SerializeToString()
    session = onnxplug.InferenceSession(model)
    onnxplug.set_seed(42)
    first = session.run(None, {})[0]
    onnxplug.set_seed(42)
    second = session.run(None, {})[0]
    np.testing.assert_array_equal(first, second)


def test_logger_severity():
    onnxplug.set_default_logger_severity(3)
    onnxplug.set_default_logger_severity(2)
    with pytest.raises(RuntimeError):
        onnxplug.set_default_logger_severity(7)


def test_constant_subgraphs_are_folded_unless_optimizations_are_off():
    nodes = [
        helper.make_node("Shape", ["w"], ["shape"], name="shape"),
        helper.make_node(
            "ConstantOfShape", ["shape"], ["ones"], name="ones", value=helper.make_tensor("", F, [1], [1])
        ),
        helper.make_node("Add", ["x", "ones"], ["y"], name="add"),
        helper.make_node("RandomUniformLike", ["w"], ["noise"], name="noise"),
    ]
    model = make_model(
        nodes, [("x", F, [2])], [("y", F, [2]), ("noise", F, [2])], {"w": np.zeros(2, np.float32)}
    ).SerializeToString()
    folded = onnxplug.InferenceSession(model)
    assert [n.name for n in folded.get_partition_report().nodes] == ["add", "noise"]  # random ops never fold
    off = onnxplug.SessionOptions()
    off.graph_optimization_level = onnxplug.GraphOptimizationLevel.ORT_DISABLE_ALL
    unfolded = onnxplug.InferenceSession(model, off)
    assert [n.name for n in unfolded.get_partition_report().nodes] == ["shape", "ones", "add", "noise"]
    for session in (folded, unfolded):
        y, noise = session.run(None, {"x": np.array([1, 2], np.float32)})
        np.testing.assert_array_equal(y, [2, 3])
        assert noise.shape == (2,)


def test_log_severity_level_reports_the_partition(caplog):
    options = onnxplug.SessionOptions()
    options.log_severity_level = 1
    options.logid = "mymodel"
    with caplog.at_level("INFO", logger="onnxplug.session.mymodel"):
        onnxplug.InferenceSession(MODEL, options)
    messages = [r.getMessage() for r in caplog.records]
    assert any("nodes per provider {'CPUExecutionProvider': 5}" in m for m in messages)
    # each stage reports as it ends, so a slow creation shows where it is
    assert [m.split(" in ")[0] for m in messages[:4]] == ["loaded", "optimized", "partitioned", "planned"]
    quiet = onnxplug.SessionOptions()
    quiet.log_severity_level = 3
    quiet.logid = "quiet"
    caplog.clear()
    onnxplug.InferenceSession(MODEL, quiet)
    assert not [r for r in caplog.records if r.name == "onnxplug.session.quiet"]
