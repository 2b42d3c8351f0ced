"""The same scenarios against onnxruntime (a test-only oracle) and onnxplug.

Results must be equal; errors must be of the class onnxruntime raises (same name, or for
onnxruntime's builtin exceptions a subclass of it, since onnxplug's classes also derive from the
closest builtin).
"""

from __future__ import annotations

import os
import threading
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

ort = pytest.importorskip("onnxruntime", reason="the parity suite needs onnxruntime as an oracle")

RUNTIMES = {"onnxruntime": ort, "onnxplug": onnxplug}
F = TensorProto.FLOAT


def _mlp_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="dense"),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Softmax", ["r"], ["probs"], axis=1),
        helper.make_node("ArgMax", ["probs"], ["label"], axis=1, keepdims=0),
    ]
    model = make_model(
        nodes,
        [("x", F, ["batch", 4])],
        [("probs", F, None), ("label", TensorProto.INT64, None)],
        {"w1": rng.random((4, 3), dtype=np.float32), "b1": rng.random(3, dtype=np.float32)},
    )
    model.producer_name = "parity"
    model.graph.doc_string = "graph doc"
    onnx.helper.set_model_props(model, {"names": "{0: 'a'}"})
    return model


MODEL = _mlp_model().SerializeToString()
X = np.random.default_rng(1).random((5, 4), dtype=np.float32)


def _session(rt, model=MODEL, *args, **kwargs):
    kwargs.setdefault("providers", ["CPUExecutionProvider"])
    return rt.InferenceSession(model, *args, **kwargs)


def _outcome(fn, rt):
    try:
        return "ok", fn(rt)
    except Exception as error:  # noqa: BLE001 - the outcome is what is compared
        return "error", error


def _assert_same(fn):
    kind_ort, ort_value = _outcome(fn, ort)
    kind_ours, our_value = _outcome(fn, onnxplug)
    assert kind_ours == kind_ort, f"onnxruntime: {kind_ort} {ort_value!r}; onnxplug: {kind_ours} {our_value!r}"
    if kind_ort == "error":
        ort_class = type(ort_value)
        if ort_class.__module__.startswith("onnxruntime"):
            # onnxplug's class, or a base of it (RunTerminated is a Fail), has onnxruntime's name
            names = [cls.__name__ for cls in type(our_value).__mro__ if cls.__module__.startswith("onnxplug")]
            assert ort_class.__name__ in names, (ort_value, our_value)
        else:
            assert isinstance(our_value, ort_class), (ort_value, our_value)
        return our_value
    _assert_equal(ort_value, our_value)
    return our_value


def _assert_equal(expected, actual):
    if isinstance(expected, (list, tuple)):
        assert len(expected) == len(actual)
        for e, a in zip(expected, actual):
            _assert_equal(e, a)
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray) and actual.dtype == expected.dtype and actual.shape == expected.shape
        if expected.dtype == object:
            assert actual.tolist() == expected.tolist()
        else:
            np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)
    else:
        assert expected == actual


def test_run_all_outputs():
    _assert_same(lambda rt: _session(rt).run(None, {"x": X}))


def test_run_selected_outputs_tuple_and_duplicates():
    _assert_same(lambda rt: _session(rt).run(("label", "probs", "label"), {"x": X}))


def test_path_and_pathlike(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(MODEL)
    _assert_same(lambda rt: _session(rt, str(path)).run(None, {"x": X}))
    _assert_same(lambda rt: _session(rt, path).run(None, {"x": X}))


def test_sess_options_positional_and_keyword():
    def scenario(rt):
        options = rt.SessionOptions()
        first = rt.InferenceSession(MODEL, options, providers=["CPUExecutionProvider"]).run(None, {"x": X})
        second = rt.InferenceSession(MODEL, sess_options=options, providers=["CPUExecutionProvider"]).run(
            None, {"x": X}
        )
        return first + second

    _assert_same(scenario)


def test_introspection():
    def scenario(rt):
        session = _session(rt)
        return [(a.name, a.type, a.shape) for a in session.get_inputs() + session.get_outputs()]

    _assert_same(scenario)


def test_modelmeta():
    def scenario(rt):
        meta = _session(rt).get_modelmeta()
        return [
            meta.producer_name,
            meta.graph_name,
            meta.domain,
            meta.description,
            meta.graph_description,
            meta.version,
            meta.custom_metadata_map,
        ]

    _assert_same(scenario)


def test_providers_and_options():
    _assert_same(lambda rt: _session(rt).get_providers())
    _assert_same(lambda rt: _session(rt, providers=[("CPUExecutionProvider", {"use_arena": 1})]).get_provider_options())


def test_unknown_provider_warns_and_falls_back():
    def scenario(rt):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            session = _session(rt, providers=["NonexistentExecutionProvider", "CPUExecutionProvider"])
        assert any(issubclass(w.category, UserWarning) and "Nonexistent" in str(w.message) for w in caught)
        return session.get_providers()

    _assert_same(scenario)


def test_set_providers_unknown_raises():
    def scenario(rt):
        _session(rt).set_providers(["NonexistentExecutionProvider"])

    _assert_same(scenario)


@pytest.mark.parametrize(
    "feed",
    [
        {},
        {"x": X, "q": X},
        {"x": X.astype(np.float64)},
        {"x": X[0]},
        {"x": np.zeros((2, 5), np.float32)},
    ],
    ids=["missing", "unknown", "dtype", "rank", "dim"],
)
def test_feed_errors(feed):
    _assert_same(lambda rt: _session(rt).run(None, feed))


def test_unknown_output_name():
    _assert_same(lambda rt: _session(rt).run(["nope"], {"x": X}))


def test_output_names_as_string():
    _assert_same(lambda rt: _session(rt).run("label", {"x": X}))


def test_list_feed():
    _assert_same(lambda rt: _session(rt).run(None, {"x": X.tolist()}))


def test_missing_file(tmp_path):
    _assert_same(lambda rt: _session(rt, str(tmp_path / "nope.onnx")))


def test_garbage_bytes():
    _assert_same(lambda rt: _session(rt, b"garbage bytes"))


def test_unsupported_model_type():
    _assert_same(lambda rt: _session(rt, bytearray(MODEL)))


def test_unknown_op():
    model = make_model([helper.make_node("FooBar", ["x"], ["y"])], [("x", F, [1])], [("y", F, [1])])
    _assert_same(lambda rt: _session(rt, model.SerializeToString()))


def test_undefined_input():
    model = make_model([helper.make_node("Relu", ["q"], ["y"])], [("x", F, [1])], [("y", F, [1])])
    _assert_same(lambda rt: _session(rt, model.SerializeToString()))


def test_missing_graph_output():
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [1])], [("w", F, [1])])
    _assert_same(lambda rt: _session(rt, model.SerializeToString()))


def test_reshape_failure_at_run():
    model = make_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"])],
        [("x", F, [6]), ("s", TensorProto.INT64, [2])],
        [("y", F, None)],
    )
    _assert_same(
        lambda rt: _session(rt, model.SerializeToString()).run(
            None, {"x": np.ones(6, np.float32), "s": np.array([4, 4], np.int64)}
        )
    )


def test_terminate():
    def scenario(rt):
        options = rt.RunOptions()
        options.terminate = True
        return _session(rt).run(None, {"x": X}, options)

    _assert_same(scenario)


def test_terminate_cleared_makes_options_usable():
    def scenario(rt):
        options = rt.RunOptions()
        options.terminate = True
        options.terminate = False
        return _session(rt).run(None, {"x": X}, options)

    _assert_same(scenario)


def test_run_with_ort_values():
    def scenario(rt):
        value = rt.OrtValue.ortvalue_from_numpy(X)
        results = _session(rt).run_with_ort_values(None, {"x": value})
        return [(r.data_type(), r.shape(), r.element_type(), r.device_name(), r.is_tensor()) for r in results] + [
            r.numpy() for r in results
        ]

    _assert_same(scenario)


def test_iobinding():
    def scenario(rt):
        session = _session(rt)
        binding = session.io_binding()
        binding.bind_cpu_input("x", X)
        binding.bind_output("probs")
        session.run_with_iobinding(binding)
        first = binding.copy_outputs_to_cpu()
        target = rt.OrtValue.ortvalue_from_shape_and_type([5], np.int64)
        binding.clear_binding_outputs()
        binding.bind_ortvalue_output("label", target)
        session.run_with_iobinding(binding)
        return first + [target.numpy(), [v.shape() for v in binding.get_outputs()]]

    _assert_same(scenario)


def test_iobinding_unknown_input_fails_at_bind():
    _assert_same(lambda rt: _session(rt).io_binding().bind_cpu_input("q", X))


def test_iobinding_of_another_session():
    def scenario(rt):
        binding = _session(rt).io_binding()
        _session(rt).run_with_iobinding(binding)

    _assert_same(scenario)


def test_run_async():
    def scenario(rt):
        done = threading.Event()
        box = {}

        def callback(results, user_data, error):
            box.update(results=results, user_data=user_data, error=error)
            done.set()

        _session(rt).run_async(None, {"x": X}, callback, "payload")
        assert done.wait(30)
        return [box["results"], box["user_data"], box["error"]]

    _assert_same(scenario)


def test_run_async_missing_input_raises_at_once():
    _assert_same(lambda rt: _session(rt).run_async(None, {}, lambda *a: None, None))


def test_session_and_run_config_entries():
    def scenario(rt):
        options = rt.SessionOptions()
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        run_options = rt.RunOptions()
        run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        return [
            options.get_session_config_entry("session.intra_op.allow_spinning"),
            run_options.get_run_config_entry("memory.enable_memory_arena_shrinkage"),
        ]

    _assert_same(scenario)
    _assert_same(lambda rt: rt.SessionOptions().get_session_config_entry("missing"))
    _assert_same(lambda rt: rt.RunOptions().get_run_config_entry("missing"))


def test_session_options_defaults():
    names = [
        "intra_op_num_threads",
        "inter_op_num_threads",
        "execution_mode",
        "execution_order",
        "graph_optimization_level",
        "optimized_model_filepath",
        "enable_profiling",
        "profile_file_prefix",
        "log_severity_level",
        "log_verbosity_level",
        "logid",
        "enable_cpu_mem_arena",
        "enable_mem_pattern",
        "enable_mem_reuse",
        "use_deterministic_compute",
        "use_per_session_threads",
    ]
    _assert_same(
        lambda rt: [
            int(v) if hasattr(v, "__int__") and not isinstance(v, (bool, str)) else v
            for v in (getattr(rt.SessionOptions(), n) for n in names)
        ]
    )


def test_graph_optimization_level_rejects_plain_int():
    def scenario(rt):
        rt.SessionOptions().graph_optimization_level = 1

    _assert_same(scenario)


def test_enums():
    _assert_same(
        lambda rt: [
            int(rt.GraphOptimizationLevel.ORT_ENABLE_ALL),
            int(rt.ExecutionMode.ORT_PARALLEL),
            int(rt.ExecutionOrder.PRIORITY_BASED),
        ]
    )


def test_get_available_providers_ends_with_cpu():
    assert onnxplug.get_available_providers()[-1] == "CPUExecutionProvider"
    assert onnxplug.get_all_providers()[-1] == "CPUExecutionProvider"
    assert onnxplug.get_device() == ort.get_device() == "CPU"


def test_outputs_never_alias():
    model = make_model(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Identity", ["w"], ["z"])],
        [("x", F, [2])],
        [("y", F, [2]), ("z", F, [2])],
        {"w": np.ones(2, np.float32)},
    )
    session = onnxplug.InferenceSession(model.SerializeToString())
    x = np.zeros(2, np.float32)
    y, z = session.run(None, {"x": x})
    y[:] = 5
    z[:] = 5
    y2, z2 = session.run(None, {"x": x})
    np.testing.assert_array_equal(x, [0, 0])
    np.testing.assert_array_equal(z2, [1, 1])


def test_env_is_not_polluted():
    assert "ONNXPLUG_BLOCK" not in os.environ


def test_string_tensors_in_and_out():
    model = make_model(
        [helper.make_node("Identity", ["s"], ["t"])], [("s", TensorProto.STRING, [2])], [("t", TensorProto.STRING, [2])]
    ).SerializeToString()
    for feed in (np.array(["a", "bc"]), np.array(["a", "bc"], dtype=object), ["a", "bc"]):
        result = _assert_same(lambda rt, feed=feed: _session(rt, model).run(None, {"s": feed}))
        assert result[0].dtype == object and result[0].tolist() == ["a", "bc"]


def test_sequence_input_and_output():
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, None))
    nodes = [helper.make_node("SequenceLength", ["seq"], ["n"]), helper.make_node("Identity", ["seq"], ["same"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_value_info("seq", seq_type)],
        [helper.make_tensor_value_info("n", TensorProto.INT64, []), helper.make_value_info("same", seq_type)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feed = {"seq": [np.ones(2, np.float32), np.zeros(3, np.float32)]}
    _assert_same(lambda rt: _session(rt, model.SerializeToString()).run(None, feed))
    _assert_same(lambda rt: [(a.name, a.type, a.shape) for a in _session(rt, model.SerializeToString()).get_inputs()])


def test_zipmap_output_is_a_list_of_dicts():
    nodes = [
        helper.make_node("Identity", ["x"], ["probs"]),
        helper.make_node("ZipMap", ["probs"], ["zipped"], domain="ai.onnx.ml", classlabels_int64s=[3, 7]),
    ]
    out_type = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(F, None))
    )
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", F, [2, 2])], [helper.make_value_info("zipped", out_type)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    model.ir_version = 8
    x = np.array([[0.25, 0.75], [0.5, 0.5]], np.float32)
    result = _assert_same(lambda rt: _session(rt, model.SerializeToString()).run(None, {"x": x}))
    assert result == [[{3: 0.25, 7: 0.75}, {3: 0.5, 7: 0.5}]]
    _assert_same(lambda rt: [o.type for o in _session(rt, model.SerializeToString()).get_outputs()])


def test_optional_input_omitted_or_none():
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(F, [2]))
    nodes = [helper.make_node("OptionalHasElement", ["maybe"], ["has"])]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_value_info("maybe", opt_type)],
        [helper.make_tensor_value_info("has", TensorProto.BOOL, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    _assert_same(lambda rt: _session(rt, model.SerializeToString()).run(None, {"maybe": np.ones(2, np.float32)}))
    _assert_same(lambda rt: [(a.name, a.type, a.shape) for a in _session(rt, model.SerializeToString()).get_inputs()])


def test_an_output_listed_twice_is_returned_twice():
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, [("x", F, [5, 4])], [("y", F, [5, 4])])
    model.graph.output.append(model.graph.output[0])
    data = model.SerializeToString()

    def scenario(rt):
        session = rt.InferenceSession(data, providers=["CPUExecutionProvider"])
        return [o.name for o in session.get_outputs()] + [len(session.run(None, {"x": X}))]

    assert _assert_same(scenario) == ["y", "y", 2]
