"""The OpenVINO provider through onnxplug's public API: options, partitioning, results, caching.

Everything runs through ``onnxplug.InferenceSession(..., providers=["OpenVINOExecutionProvider"])``;
only the tests of the plugin's own helpers (the claim grouping, the capability cache, the
missing-package path) import ``onnxplug_openvino``.
"""

from __future__ import annotations

import contextlib
import io
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

pytest.importorskip("openvino", reason="the 'openvino' package is not installed (pip install onnxplug[openvino])")

OV = "OpenVINOExecutionProvider"
CPU = "CPUExecutionProvider"


def _mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Add", ["h", "b"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"], name="relu"),
        helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1),
    ]
    return make_model(
        nodes,
        [("x", TensorProto.FLOAT, [2, 8])],
        [("y", TensorProto.FLOAT, [2, 16])],
        {"w": rng.standard_normal((8, 16)).astype(np.float32), "b": rng.standard_normal(16).astype(np.float32)},
    )


def _x(shape=(2, 8), seed=1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _conv_ml_model() -> onnx.ModelProto:
    """Conv → Relu → Flatten → LinearClassifier (ai.onnx.ml) and a conv branch after it."""
    rng = np.random.default_rng(3)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
        helper.make_node(
            "LinearClassifier",
            ["f"],
            ["label", "scores"],
            name="classifier",
            domain="ai.onnx.ml",
            coefficients=rng.standard_normal(3 * 2 * 4 * 4).astype(np.float32).tolist(),
            intercepts=[0.1, -0.2, 0.3],
            classlabels_ints=[0, 1, 2],
        ),
        helper.make_node("Sigmoid", ["scores"], ["p"], name="sigmoid"),
        helper.make_node("Mul", ["p", "two"], ["y"], name="mul"),
    ]
    return make_model(
        nodes,
        [("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [("label", TensorProto.INT64, [1]), ("y", TensorProto.FLOAT, [1, 3])],
        {"w": rng.standard_normal((2, 3, 3, 3)).astype(np.float32), "two": np.array(2.0, np.float32)},
        extra_opsets={"ai.onnx.ml": 1},
    )


# -- options ---------------------------------------------------------------------------------


def test_unknown_option_names_it_and_the_valid_ones():
    with pytest.raises(onnxplug.InvalidArgument) as raised:
        onnxplug.InferenceSession(_mlp().SerializeToString(), providers=[(OV, {"no_such_key": "1"})])
    message = str(raised.value)
    assert "no_such_key" in message
    for valid in ("device_type", "precision", "num_of_threads", "num_streams", "cache_dir"):
        assert valid in message


@pytest.mark.parametrize(
    "options, named",
    [
        ({"precision": "FP8"}, "precision"),
        ({"num_of_threads": "zero"}, "num_of_threads"),
        ({"num_streams": "-1"}, "num_streams"),
        ({"device_type": "TPU"}, "device_type"),
    ],
)
def test_bad_option_values_are_rejected(options, named):
    with pytest.raises(onnxplug.InvalidArgument, match=named):
        onnxplug.InferenceSession(_mlp().SerializeToString(), providers=[(OV, options)])


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"precision": "FP32", "num_of_threads": "1", "num_streams": "1"},
        {"precision": "ACCURACY"},
        {"device_type": "CPU"},
        {"device_type": "AUTO:CPU"},
    ],
)
def test_valid_options_run_and_agree_with_cpu(options):
    model = _mlp().SerializeToString()
    session = onnxplug.InferenceSession(model, providers=[(OV, options)])
    assert session.get_providers() == [OV, CPU]
    assert session.get_provider_options()[OV] == options
    assert session.partition_counts() == {OV: 4}
    (got,) = session.run(None, {"x": _x()})
    (expected,) = onnxplug.InferenceSession(model, providers=[CPU]).run(None, {"x": _x()})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("precision", ["FP16", "BF16"])
def test_reduced_precisions_on_request(precision):
    model = _mlp().SerializeToString()
    (got,) = onnxplug.InferenceSession(model, providers=[(OV, {"precision": precision})]).run(None, {"x": _x()})
    (expected,) = onnxplug.InferenceSession(model, providers=[CPU]).run(None, {"x": _x()})
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=5e-2, atol=5e-2)


# -- partitioning ----------------------------------------------------------------------------


def test_ml_ops_stay_on_cpu_and_the_rest_splits_around_them():
    model = _conv_ml_model().SerializeToString()
    feeds = {"x": np.random.default_rng(5).standard_normal((1, 3, 4, 4)).astype(np.float32)}
    session = onnxplug.InferenceSession(model, providers=[OV])
    assert session.partition_counts() == {OV: 5, CPU: 1}
    fused = session._plan.partition.fused
    assert sorted(sorted(nodes) for _, nodes in fused.values()) == [["conv", "flatten", "relu"], ["mul", "sigmoid"]]
    reasons = session._plan.partition.declined[OV]["classifier"]
    assert any("ai.onnx.ml" in reason for reason in reasons)
    got = session.run(None, feeds)
    expected = onnxplug.InferenceSession(model, providers=[CPU]).run(None, feeds)
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_allclose(got[1], expected[1], rtol=1e-5, atol=1e-6)


def test_partition_command_shows_what_openvino_took_and_why_it_declined(tmp_path):
    from onnxplug.cli import main

    path = tmp_path / "mixed.onnx"
    onnx.save(_conv_ml_model(), str(path))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["partition", str(path), "--providers", OV]) == 0
    text = out.getvalue()
    assert f"{OV}: 5 nodes" in text
    assert "fused partition" in text
    assert "declined classifier (LinearClassifier): ai.onnx.ml ops have no OpenVINO conversion" in text


def test_run_command(tmp_path):
    from onnxplug.cli import main

    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), str(path))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["run", str(path), "--providers", OV]) == 0
    assert OV in out.getvalue()


def test_unconvertible_op_is_declined_with_the_frontends_reason():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Det", ["r"], ["d"], name="det"),
        helper.make_node("Neg", ["d"], ["y"], name="neg"),
    ]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [3, 3])], [("y", TensorProto.FLOAT, [])], opset=21)
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=[OV])
    assert session.partition_counts() == {OV: 2, CPU: 1}
    assert session._plan.partition.declined[OV]["det"] == ["OpenVINO's ONNX frontend has no conversion for Det"]
    x = np.eye(3, dtype=np.float32) * 2
    (got,) = session.run(None, {"x": x})
    np.testing.assert_allclose(got, -8.0, rtol=1e-6)


def test_dynamic_rank_input_is_declined():
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    model = make_model(nodes, [("x", TensorProto.FLOAT, None)], [("y", TensorProto.FLOAT, None)])
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=[OV])
    assert session.partition_counts() == {CPU: 1}
    assert "dynamic rank" in session._plan.partition.declined[OV]["relu"][0]


def test_unsupported_element_type_is_declined():
    nodes = [helper.make_node("Identity", ["x"], ["y"], name="identity")]
    model = make_model(nodes, [("x", TensorProto.STRING, [2])], [("y", TensorProto.STRING, [2])])
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=[OV])
    assert session.partition_counts() == {CPU: 1}
    assert "element type string" in session._plan.partition.declined[OV]["identity"][0]


def test_claims_are_convex_so_the_core_never_splits_them(recwarn):
    # a → (Det: not OpenVINO) → c, and a → c directly: {a, c} is connected but not convex.
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="a"),
        helper.make_node("Det", ["a"], ["d"], name="det"),
        helper.make_node("Add", ["a", "d"], ["y"], name="c"),
    ]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [3, 3])], [("y", TensorProto.FLOAT, [3, 3])], opset=21)
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=[OV])
    assert not [w for w in recwarn if "non-convex" in str(w.message)]
    assert session.partition_counts() == {OV: 2, CPU: 1}
    assert len(session._plan.partition.fused) == 2
    x = np.eye(3, dtype=np.float32)
    (got,) = session.run(None, {"x": x})
    np.testing.assert_allclose(got, x + 1.0, rtol=1e-6)


# -- running ---------------------------------------------------------------------------------


def test_outputs_are_fresh_numpy_arrays():
    session = onnxplug.InferenceSession(_mlp().SerializeToString(), providers=[OV])
    (first,) = session.run(None, {"x": _x()})
    (second,) = session.run(None, {"x": _x()})
    assert isinstance(first, np.ndarray) and first.flags.writeable
    assert not np.shares_memory(first, second)
    kept = first.copy()
    first[...] = 0
    (third,) = session.run(None, {"x": _x()})
    np.testing.assert_array_equal(third, kept)


def test_one_session_from_many_threads():
    session = onnxplug.InferenceSession(_mlp().SerializeToString(), providers=[OV])
    inputs = [_x(seed=i) for i in range(8)]
    expected = [session.run(None, {"x": x})[0] for x in inputs]
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(20):
                results[i] = session.run(None, {"x": inputs[i]})[0]
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for i, value in enumerate(expected):
        np.testing.assert_array_equal(results[i], value)


def test_integer_and_bool_outputs_keep_their_types():
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Greater", ["x", "zero"], ["g"], name="greater"),
    ]
    model = make_model(
        nodes,
        [("x", TensorProto.FLOAT, [2, 3])],
        [("s", TensorProto.INT64, [2]), ("g", TensorProto.BOOL, [2, 3])],
        {"zero": np.array(0.0, np.float32)},
    )
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=[OV])
    shape, greater = session.run(None, {"x": _x((2, 3))})
    assert shape.dtype == np.int64 and shape.tolist() == [2, 3]
    assert greater.dtype == np.bool_ and greater.shape == (2, 3)


def test_cache_dir_writes_compiled_blobs(tmp_path):
    cache = tmp_path / "ov-cache"
    model = _mlp().SerializeToString()
    session = onnxplug.InferenceSession(model, providers=[(OV, {"cache_dir": str(cache)})])
    (got,) = session.run(None, {"x": _x()})
    assert list(cache.glob("*.blob")), "OpenVINO wrote no compiled blob into cache_dir"
    again = onnxplug.InferenceSession(model, providers=[(OV, {"cache_dir": str(cache)})])
    np.testing.assert_array_equal(again.run(None, {"x": _x()})[0], got)


# -- the plugin's own helpers ----------------------------------------------------------------


def test_capability_and_compiled_models_are_cached_by_content_in_the_core_cache():
    import onnxplug_openvino

    cache = onnxplug.default_compile_cache()
    onnxplug_openvino.clear_caches()
    model = _mlp().SerializeToString()
    onnxplug.InferenceSession(model, providers=[OV])
    misses = cache.misses
    assert len(cache) == 2  # the support analysis and the compiled model
    onnxplug.InferenceSession(model, providers=[OV])
    assert cache.misses == misses and len(cache) == 2
    other = onnxplug.InferenceSession(model, providers=[(OV, {"num_of_threads": "1"})])
    assert len(cache) == 3  # other settings compile anew; the analysis is shared
    assert other.run(None, {"x": _x()})[0].shape


def test_missing_openvino_means_no_device_and_an_install_hint(monkeypatch):
    import sys

    from onnxplug_openvino import provider

    monkeypatch.setattr(provider, "_core", None)
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino → ImportError
    factory = provider.OpenVINOProviderFactory()
    assert factory.devices() == []
    assert "pip install onnxplug[openvino]" in factory.unavailable_reason()


def test_graph_view_model_bytes_is_the_views_nodes_as_a_model():
    """The core's GraphView.model_bytes(), which capability() hands to convert_partially."""
    from onnxplug.graph import GraphView, load_model

    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Add", ["h", "b"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["y"], name="relu"),
    ]
    model = make_model(
        nodes,
        [("x", TensorProto.FLOAT, [2, 3]), ("b", TensorProto.FLOAT, [4])],  # b: an overridable initializer
        [("y", TensorProto.FLOAT, [2, 4])],
        {"w": np.ones((3, 4), np.float32), "b": np.zeros(4, np.float32)},
    )
    loaded = load_model(model.SerializeToString())
    graph = loaded.model.graph
    view = GraphView(graph, loaded.opsets, [n for n in graph if n.name in ("add", "relu")])
    built = onnx.ModelProto.FromString(view.model_bytes())
    assert [n.name for n in built.graph.node] == ["add", "relu"]
    assert [i.name for i in built.graph.input] == ["h", "b"]
    assert [t.name for t in built.graph.initializer] == []
    assert [o.name for o in built.graph.output] == ["y"]
    assert [v.name for v in built.graph.value_info] == ["s"]
    assert [d.dim_value for d in built.graph.input[0].type.tensor_type.shape.dim] == [2, 4]
    whole = onnx.ModelProto.FromString(GraphView(graph, loaded.opsets).model_bytes())
    assert [t.name for t in whole.graph.initializer] == ["w"]
    assert [i.name for i in whole.graph.input] == ["x", "b"]
    view.end_query()
    with pytest.raises(RuntimeError, match="valid only during"):
        view.model_bytes()


def test_dynamic_batch_runs_with_changing_shapes():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    w = np.random.default_rng(2).standard_normal((8, 4)).astype(np.float32)
    model = make_model(nodes, [("x", TensorProto.FLOAT, ["N", 8])], [("y", TensorProto.FLOAT, ["N", 4])], {"w": w})
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=[OV])
    assert session.partition_counts() == {OV: 2}
    for batch in (2, 5, 1, 5):
        x = _x((batch, 8), seed=batch)
        (got,) = session.run(None, {"x": x})
        np.testing.assert_allclose(got, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)


def test_if_reading_outer_values_is_fused_with_their_producer(recwarn):
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["r", "x"], ["t"], name="then_add")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Sub", ["r", "x"], ["e"], name="else_sub")],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 3])],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch),
    ]
    model = make_model(
        nodes, [("x", TensorProto.FLOAT, [2, 3]), ("c", TensorProto.BOOL, [])], [("y", TensorProto.FLOAT, [2, 3])]
    )
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=[OV])
    assert session.partition_counts() == {OV: 2}
    assert [sorted(nodes) for _, nodes in session._plan.partition.fused.values()] == [["if", "relu"]]
    assert not [w for w in recwarn if "fall back" in str(w.message)]
    x = _x((2, 3))
    for flag, expected in ((True, np.maximum(x, 0) + x), (False, np.maximum(x, 0) - x)):
        (got,) = session.run(None, {"x": x, "c": np.array(flag)})
        np.testing.assert_allclose(got, expected, rtol=1e-6)


# -- creation cost -----------------------------------------------------------------------------


def _control_flow_model() -> onnx.ModelProto:
    """Relu → If → Loop → Sigmoid → Mul, where the Loop's body holds a Det (no OpenVINO conversion):
    the Loop is declined, so its body is a second graph that OpenVINO is asked about."""
    then_branch = helper.make_graph(
        [helper.make_node("Add", ["r", "x"], ["t"], name="then_add")],
        "then",
        [],
        [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3, 3])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Sub", ["r", "x"], ["e"], name="else_sub")],
        "else",
        [],
        [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3, 3])],
    )
    body = helper.make_graph(
        [
            helper.make_node("Det", ["acc_in"], ["d"], name="body_det"),
            helper.make_node("Add", ["acc_in", "d"], ["acc_out"], name="body_add"),
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id"),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [3, 3]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [3, 3]),
        ],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch),
        helper.make_node("Loop", ["n", "c", "y"], ["z"], name="loop", body=body),
        helper.make_node("Sigmoid", ["z"], ["s"], name="sigmoid"),
        helper.make_node("Mul", ["s", "x"], ["out"], name="mul"),
    ]
    model = make_model(
        nodes,
        [("x", TensorProto.FLOAT, [3, 3]), ("c", TensorProto.BOOL, []), ("n", TensorProto.INT64, [])],
        [("out", TensorProto.FLOAT, [3, 3])],
    )
    # The Loop's result has a declared shape, so Sigmoid can go to OpenVINO once the Loop is cut out.
    model.graph.value_info.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [3, 3]))
    return model


@pytest.fixture
def openvino_calls(monkeypatch):
    """Counts the real OpenVINO calls the plugin makes (the methods are wrapped, not replaced)."""
    import openvino as ov

    import onnxplug_openvino

    counts: dict[str, int] = {}
    frontend = type(ov.frontend.FrontEndManager().load_by_framework("onnx"))
    for cls, name in ((frontend, "convert_partially"), (ov.Core, "compile_model")):
        original = getattr(cls, name)

        def counted(*args, _original=original, _name=name, **kwargs):
            counts[_name] = counts.get(_name, 0) + 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(cls, name, counted)
    onnxplug_openvino.clear_caches()
    yield counts
    onnxplug_openvino.clear_caches()


def test_one_conversion_per_graph_and_one_compile_per_partition(openvino_calls):
    model = _control_flow_model()
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=[OV])
    report = session.get_partition_report()
    # The main graph and the Loop's body are each converted once; declining the Loop cuts it out
    # of the converted model instead of converting the rest again.
    assert openvino_calls["convert_partially"] == 2
    # One compile per partition: relu+if and sigmoid+mul here, body_add and body_id in the body.
    assert sorted(report.partitions.values()) == [("relu", "if"), ("sigmoid", "mul")]
    assert openvino_calls["compile_model"] == 4
    assert report.declined[OV]["loop"] == ("OpenVINO's ONNX frontend has no conversion for Det (inside its subgraph)",)
    x = _x((3, 3))
    (got,) = session.run(None, {"x": x, "c": np.array(True), "n": np.array(2, np.int64)})
    acc = np.maximum(x, 0) + x
    for _ in range(2):
        acc = acc + np.linalg.det(acc)
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-acc)) * x, rtol=1e-5, atol=1e-6)
    # A second session over the same model reuses both caches.
    onnxplug.InferenceSession(model.SerializeToString(), providers=[OV])
    assert openvino_calls["convert_partially"] == 2


def test_reader_of_a_declined_node_is_checked_against_the_declared_type(openvino_calls):
    """With z declared without a rank, Sigmoid (reading the declined Loop's result) is declined
    for the dynamic rank its partition's input would have, and no graph is converted twice."""
    model = _control_flow_model()
    model.graph.value_info[-1].type.tensor_type.ClearField("shape")
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=[OV])
    report = session.get_partition_report()
    assert sorted(report.partitions.values()) == [("relu", "if")]
    assert "dynamic rank" in report.declined[OV]["sigmoid"][0]
    assert openvino_calls["convert_partially"] == 2


def test_slow_steps_are_logged_at_info(openvino_calls, monkeypatch, caplog):
    import onnxplug_openvino.provider as provider

    monkeypatch.setattr(provider, "SLOW_S", 0.0)  # every step counts as slow
    with caplog.at_level("INFO", logger="onnxplug.openvino"):
        onnxplug.InferenceSession(_mlp().SerializeToString(), providers=[OV])
    messages = [r.getMessage() for r in caplog.records if r.name == "onnxplug.openvino"]
    assert any(m.startswith("capability of 4 nodes: 4 supported, 0 declined") for m in messages), messages
    assert any(m.startswith("compiled openvino_partition_0 (4 nodes) for CPU in") for m in messages), messages


def test_a_conversion_error_is_bisected_to_the_failing_node(monkeypatch):
    """A conversion error names no node: the nodes are halved until the failing one is alone,
    so one bad node among 16 costs about 2 log2(16) conversions, not one per node.  The
    frontend's ``load`` is wrapped to fail for any model holding ``neg_9`` (no real op makes
    the whole conversion raise once the provider's own checks have run)."""
    import openvino as ov

    import onnxplug_openvino

    frontend = type(ov.frontend.FrontEndManager().load_by_framework("onnx"))
    original = frontend.load
    loads = []

    def load(self, stream, *args, **kwargs):
        names = {node.name for node in onnx.load_from_string(stream.getvalue()).graph.node}
        loads.append(names)
        if "neg_9" in names:
            raise RuntimeError("Check 'false' failed at src/frontends/onnx:\ninjected conversion error")
        return original(self, stream, *args, **kwargs)

    monkeypatch.setattr(frontend, "load", load)
    onnxplug_openvino.clear_caches()
    nodes = [
        helper.make_node("Neg" if i % 2 else "Relu", [f"v{i}"], [f"v{i + 1}"], name=f"{'neg' if i % 2 else 'relu'}_{i}")
        for i in range(16)
    ]
    model = make_model(nodes, [("v0", TensorProto.FLOAT, [2, 3])], [("v16", TensorProto.FLOAT, [2, 3])])
    try:
        session = onnxplug.InferenceSession(model.SerializeToString(), providers=[OV])
    finally:
        onnxplug_openvino.clear_caches()
    report = session.get_partition_report()
    assert report.declined[OV]["neg_9"] == ("OpenVINO's ONNX frontend failed to convert it: injected conversion error",)
    assert {n.name for n in report.nodes if n.provider == OV} == {n.name for n in nodes} - {"neg_9"}
    assert len(loads) <= 9, [sorted(names) for names in loads]
    x = _x((2, 3))
    (got,) = session.run(None, {"v0": x})
    expected = x
    for i in range(16):
        expected = -expected if i % 2 else np.maximum(expected, 0)
    np.testing.assert_allclose(got, expected)
