"""ORT_ENABLE_BASIC: each pass on a small graph (golden op lists before and after, outputs equal),
and the whole level on onnx's light models (outputs equal to the unoptimized graph)."""

from __future__ import annotations

import collections
import glob
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

F = TensorProto.FLOAT
LEVEL = onnxplug.GraphOptimizationLevel


def session_at(model, level, providers=("CPUExecutionProvider",)):
    options = onnxplug.SessionOptions()
    options.graph_optimization_level = level
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else model
    return onnxplug.InferenceSession(source, options, providers=list(providers))


def histogram(session) -> dict[str, int]:
    """Op types of the nodes the session runs (main graph), counted."""
    return dict(collections.Counter(node.op_type for node in session.get_partition_report().nodes))


def _run_both(model, feeds):
    """Outputs at ORT_DISABLE_ALL and ORT_ENABLE_BASIC, and the BASIC session."""
    plain = session_at(model, LEVEL.ORT_DISABLE_ALL).run(None, feeds)
    basic = session_at(model, LEVEL.ORT_ENABLE_BASIC)
    for a, b in zip(plain, basic.run(None, feeds)):
        np.testing.assert_array_equal(a, b)
    return basic


def _passes(session) -> dict[str, int]:
    """What the passes did, added up over rounds (``{"folded": 3, "replaced": 1, ...}``)."""
    totals: dict[str, int] = {}
    for report in session.get_optimization_report().passes:
        for key, count in report.changes.items():
            totals[key] = totals.get(key, 0) + count
    return totals


X = np.arange(12, dtype=np.float32).reshape(3, 4) - 5


def test_shape_arithmetic_folds_to_a_constant_reshape():
    # what exporters write: Shape → Gather → Unsqueeze → Concat → Reshape
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "axes"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    inits = {"zero": np.array(0, np.int64), "axes": np.array([0], np.int64), "minus_one": np.array([-1], np.int64)}
    model = make_model(nodes, [("x", F, [3, 4])], [("y", F, [3, 4])], inits)
    assert histogram(session_at(model, LEVEL.ORT_DISABLE_ALL)) == {
        "Shape": 1, "Gather": 1, "Unsqueeze": 1, "Concat": 1, "Reshape": 1, "Relu": 1
    }  # fmt: skip
    basic = _run_both(model, {"x": X})
    # the Reshape to the shape x already has is a no-op once its target is known
    assert histogram(basic) == {"Relu": 1}
    assert _passes(basic)["replaced"] == 1  # shape simplification


def test_dynamic_shapes_are_not_folded():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Cast", ["s"], ["y"], to=F)]
    model = make_model(nodes, [("x", F, ["batch", 4])], [("y", F, [2])])
    basic = _run_both(model, {"x": X})
    assert histogram(basic) == {"Shape": 1, "Cast": 1}


def test_constant_nodes_and_their_arithmetic_fold():
    nodes = [
        helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", F, [4], [1, 2, 3, 4])),
        helper.make_node("Mul", ["c", "two"], ["c2"]),
        helper.make_node("Add", ["x", "c2"], ["y"]),
    ]
    model = make_model(nodes, [("x", F, [3, 4])], [("y", F, [3, 4])], {"two": np.array(2, np.float32)})
    basic = _run_both(model, {"x": X})
    assert histogram(basic) == {"Add": 1}
    assert basic.get_partition_report().constants >= {"c2"}


def test_random_ops_and_overridable_initializers_are_not_folded():
    nodes = [
        helper.make_node("RandomUniform", [], ["noise"], shape=[3, 4], seed=1.0),
        helper.make_node("Mul", ["w", "w"], ["w2"]),
        helper.make_node("Add", ["noise", "w2"], ["y"]),
    ]
    model = make_model(nodes, [("w", F, [3, 4])], [("y", F, [3, 4])], {"w": np.ones((3, 4), np.float32)})
    session = session_at(model, LEVEL.ORT_ENABLE_BASIC)
    assert histogram(session) == {"RandomUniform": 1, "Mul": 1, "Add": 1}
    fed = session.run(None, {"w": np.full((3, 4), 3, np.float32)})[0]
    assert (fed >= 9).all()  # the feed replaced the initializer: w*w was not folded


def test_large_results_stay_computed(monkeypatch):
    """Results over ``FOLD_LIMIT_BYTES`` (1 GiB; lowered here so the test allocates little) are
    computed per run; up to it they fold."""
    from onnxplug.optimizer import _fold

    monkeypatch.setattr(_fold, "FOLD_LIMIT_BYTES", 1 << 20)
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["big"]), helper.make_node("Add", ["big", "x"], ["y"])]
    inits = {"shape": np.array([1 << 16, 4], np.int64)}  # 1 MiB of float32 folds...
    model = make_model(nodes, [("x", F, [1])], [("y", F, None)], inits)
    session = session_at(model, LEVEL.ORT_ENABLE_BASIC)
    assert histogram(session) == {"Add": 1}
    inits = {"shape": np.array([(1 << 16) + 1, 4], np.int64)}  # ...16 bytes more stays a node
    model = make_model(nodes, [("x", F, [1])], [("y", F, None)], inits)
    assert histogram(session_at(model, LEVEL.ORT_ENABLE_BASIC)) == {"ConstantOfShape": 1, "Add": 1}


@pytest.mark.parametrize(
    "node, extra, inits",
    [
        (helper.make_node("Identity", ["x"], ["n"]), [], {}),
        (helper.make_node("Dropout", ["x"], ["n"]), [], {}),
        (helper.make_node("Dropout", ["x", "", "training"], ["n"]), [], {"training": np.array(False)}),
        (helper.make_node("Cast", ["x"], ["n"], to=F), [], {}),
        (helper.make_node("Reshape", ["x", "shape"], ["n"]), [], {"shape": np.array([3, 4], np.int64)}),
        (helper.make_node("Expand", ["x", "shape"], ["n"]), [], {"shape": np.array([1, 4], np.int64)}),
        (helper.make_node("Squeeze", ["x"], ["n"]), [], {}),
        (
            helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
            [helper.make_node("Transpose", ["t"], ["n"], perm=[1, 0])],
            {},
        ),
    ],
    ids=["identity", "dropout", "dropout-training-false", "cast-same", "reshape", "expand", "squeeze", "transposes"],
)
def test_no_ops_are_removed(node, extra, inits):
    nodes = [node, *extra, helper.make_node("Relu", ["n"], ["y"])]
    model = make_model(nodes, [("x", F, [3, 4])], [("y", F, [3, 4])], inits)
    basic = _run_both(model, {"x": X})
    assert histogram(basic) == {"Relu": 1}


@pytest.mark.parametrize(
    "node, inits",
    [
        (helper.make_node("Cast", ["x"], ["n"], to=TensorProto.DOUBLE), {}),
        (helper.make_node("Reshape", ["x", "shape"], ["n"]), {"shape": np.array([4, 3], np.int64)}),
        (helper.make_node("Dropout", ["x", "", "training"], ["n"]), {}),
    ],
    ids=["cast-other-type", "reshape-other-shape", "dropout-training-fed"],
)
def test_lookalike_no_ops_stay(node, inits):
    nodes = [node, helper.make_node("Abs", ["n"], ["y"])]
    inputs = [("x", F, [3, 4])] + ([("training", TensorProto.BOOL, [])] if "training" in node.input else [])
    out_type = TensorProto.DOUBLE if node.op_type == "Cast" else F
    model = make_model(nodes, inputs, [("y", out_type, None)], inits)
    session = session_at(model, LEVEL.ORT_ENABLE_BASIC)
    assert histogram(session)[node.op_type] == 1


def test_a_no_op_writing_a_graph_output_stays():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Identity", ["r"], ["y"])]
    model = make_model(nodes, [("x", F, [3, 4])], [("y", F, [3, 4])])
    basic = _run_both(model, {"x": X})
    assert histogram(basic) == {"Relu": 1, "Identity": 1}
    assert [o.name for o in basic.get_outputs()] == ["y"]


def test_transposes_that_do_not_cancel_stay():
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 2, 0]),
        helper.make_node("Transpose", ["t"], ["u"], perm=[1, 2, 0]),
        helper.make_node("Relu", ["u"], ["y"]),
    ]
    model = make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, [4, 2, 3])])
    basic = _run_both(model, {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)})
    assert histogram(basic) == {"Transpose": 2, "Relu": 1}


def test_common_subexpressions_are_merged():
    nodes = [
        helper.make_node("Exp", ["x"], ["a"]),
        helper.make_node("Exp", ["x"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    model = make_model(nodes, [("x", F, [3, 4])], [("y", F, [3, 4])])
    basic = _run_both(model, {"x": X})
    assert histogram(basic) == {"Exp": 1, "Add": 1}
    assert _passes(basic)["merged"] == 1


def test_dead_nodes_and_unused_initializers_are_removed():
    nodes = [helper.make_node("Exp", ["x"], ["unused"]), helper.make_node("Relu", ["x"], ["y"])]
    model = make_model(nodes, [("x", F, [3, 4])], [("y", F, [3, 4])], {"w": np.ones(3, np.float32)})
    basic = _run_both(model, {"x": X})
    assert histogram(basic) == {"Relu": 1}
    assert "w" not in basic.get_optimization_report().model.graph.initializers


def test_an_unused_initializer_alone_is_removed():
    """Every node is read: the pass still runs for the initializer nobody uses."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [3, 4])], [("y", F, [3, 4])])
    model.graph.initializer.append(onnx.numpy_helper.from_array(np.ones(3, np.float32), "w"))
    basic = _run_both(model, {"x": X})
    assert "w" not in basic.get_optimization_report().model.graph.initializers
    assert _passes(basic)["initializers"] == 1


def test_an_unused_optional_output_and_trailing_missing_inputs_are_dropped():
    """No node is dead, but MaxPool's Indices is read by nobody and Clip's bounds are missing
    names at the end: the dead-code pass drops the output and trims the inputs."""
    nodes = [
        helper.make_node("MaxPool", ["x"], ["p", "indices"], kernel_shape=[2, 2]),
        helper.make_node("Clip", ["p", "", ""], ["y"]),
    ]
    model = make_model(nodes, [("x", F, [1, 1, 4, 4])], [("y", F, [1, 1, 3, 3])])
    basic = _run_both(model, {"x": np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)})
    pool, clip = basic.get_optimization_report().model.graph
    assert [v.name for v in pool.outputs] == ["p"]
    assert len(clip.inputs) == 1


def test_nodes_out_of_order_in_a_subgraph_are_sorted():
    """The main graph is in order, the branch is not: the loader sorts (it checks every graph)."""
    then_nodes = [helper.make_node("Neg", ["h"], ["t"]), helper.make_node("Exp", ["x"], ["h"])]
    then_graph = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("t", F, [3, 4])])
    else_graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [3, 4])]
    )
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph)]
    model = make_model(nodes, [("cond", TensorProto.BOOL, []), ("x", F, [3, 4])], [("y", F, [3, 4])])
    session = session_at(model, LEVEL.ORT_DISABLE_ALL)
    (y,) = session.run(None, {"cond": np.array(True), "x": X})
    np.testing.assert_allclose(y, -np.exp(X), rtol=1e-6)
    (branch,) = [node for node in session.get_optimization_report().model.graph]  # (a copy: the cloner)
    assert [node.op_type for node in branch.attributes["then_branch"].as_graph()] == ["Exp", "Neg"]


def test_disable_all_changes_nothing():
    nodes = [helper.make_node("Identity", ["x"], ["n"]), helper.make_node("Relu", ["n"], ["y"])]
    model = make_model(nodes, [("x", F, [3, 4])], [("y", F, [3, 4])])
    session = session_at(model, LEVEL.ORT_DISABLE_ALL)
    assert histogram(session) == {"Identity": 1, "Relu": 1}
    assert not any(p.changed for p in session.get_optimization_report().passes)


def test_the_callers_model_is_not_edited():
    nodes = [helper.make_node("Identity", ["x"], ["n"]), helper.make_node("Relu", ["n"], ["y"])]
    model = make_model(nodes, [("x", F, [3, 4])], [("y", F, [3, 4])])
    loaded = onnxplug.graph.load_model(model.SerializeToString())
    before = [n.op_type for n in loaded.model.graph]
    result = onnxplug.optimizer.optimize(loaded.model, 1)
    assert [n.op_type for n in result.model.graph] == ["Relu"]
    assert [n.op_type for n in loaded.model.graph] == before


def test_subgraphs_are_folded_too():
    then_nodes = [helper.make_node("Mul", ["two", "two"], ["four"]), helper.make_node("Add", ["x", "four"], ["t"])]
    then_graph = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("t", F, [3, 4])])
    else_graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", F, [3, 4])]
    )
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph)]
    model = make_model(
        nodes, [("cond", TensorProto.BOOL, []), ("x", F, [3, 4])], [("y", F, [3, 4])], {"two": np.float32(2)}
    )
    basic = _run_both(model, {"cond": np.array(True), "x": X})
    branch = next(iter(basic.get_optimization_report().model.graph)).attributes["then_branch"].value
    assert [n.op_type for n in branch] == ["Add"]


def _light_models() -> list[str]:
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    small = ("light_squeezenet", "light_shufflenet", "light_zfnet512", "light_bvlc_alexnet")
    return sorted(p for p in glob.glob(os.path.join(folder, "*.onnx")) if os.path.basename(p)[:-5] in small)


@pytest.mark.parametrize("path", _light_models(), ids=os.path.basename)
def test_light_models_give_the_same_outputs_at_every_level(path):
    plain = session_at(path, LEVEL.ORT_DISABLE_ALL)
    (info,) = plain.get_inputs()
    name = info.name
    x = np.random.default_rng(0).standard_normal(info.shape).astype(np.float32)
    expected = plain.run(None, {name: x})
    for level in (LEVEL.ORT_ENABLE_BASIC, LEVEL.ORT_ENABLE_EXTENDED, LEVEL.ORT_ENABLE_ALL):
        session = session_at(path, level)
        for got, want in zip(session.run(None, {name: x}), expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
        assert len(session.get_partition_report().nodes) < len(plain.get_partition_report().nodes)


@pytest.mark.parametrize("kind", ["the input", "a view of the input", "a fresh array"])
def test_a_folded_constant_never_shares_memory_with_another_constant(kind):
    # Folding keeps a kernel's result as it is only when the result owns its memory and is not
    # an input: a view or the input itself would tie two constants (or a whole buffer) together.
    import onnx_ir as ir

    from onnxplug.optimizer import optimize

    nodes = [helper.make_node("Neg", ["w"], ["n"]), helper.make_node("Add", ["x", "n"], ["y"])]
    model = make_model(
        nodes, [("x", F, [2, 3])], [("y", F, [2, 3])], {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    )
    loaded = ir.serde.deserialize_model(model)
    weights = np.arange(6, dtype=np.float32).reshape(2, 3)
    loaded.graph.initializers["w"].const_value = ir.tensor(weights, name="w")  # numpy() is this array
    results = {"the input": lambda a: a, "a view of the input": lambda a: a[:], "a fresh array": lambda a: -a}

    def evaluate(node, opsets, inputs):
        return [results[kind](inputs[0])] if node.op_type == "Neg" else None

    optimized = optimize(loaded, int(LEVEL.ORT_ENABLE_BASIC), evaluate=evaluate).model
    folded = optimized.graph.initializers["n"].const_value.numpy()
    assert not np.shares_memory(folded, weights)
    np.testing.assert_array_equal(folded, results[kind](weights))


def _fill_then_scale_model(fill_value: float = 0.25):
    """``x @ (ConstantOfShape([4, 5], fill) * s)``: the fill folds, and its product too."""
    value = helper.make_tensor("value", TensorProto.FLOAT, [1], [fill_value])
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["filled"], value=value),
        helper.make_node("Mul", ["filled", "s"], ["w"]),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("ConstantOfShape", ["shape"], ["bias"], value=value),
        helper.make_node("Add", ["x", "x"], ["x2"]),
    ]
    graph = helper.make_graph(
        nodes,
        "fill",
        [helper.make_tensor_value_info("x", F, [3, 4])],
        [helper.make_tensor_value_info("y", F, [3, 5]), helper.make_tensor_value_info("bias", F, [4, 5])],
        [
            onnx.numpy_helper.from_array(np.array([4, 5], np.int64), "shape"),
            onnx.numpy_helper.from_array(np.arange(1, 6, dtype=np.float32), "s"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _optimized_with_fills_only(model, rule_sets=None):
    """``model`` optimized at the extended level with an evaluator that computes nothing: only
    ConstantOfShape nodes fold (they need no evaluator)."""
    import onnx_ir as ir

    from onnxplug.optimizer import optimize

    loaded = ir.serde.deserialize_model(model)
    return optimize(
        loaded, int(LEVEL.ORT_ENABLE_EXTENDED), rule_sets=rule_sets, evaluate=lambda node, opsets, inputs: None
    ).model


def test_rules_see_a_fill_as_one_broadcast_value_written_out_when_optimization_ends():
    from onnxscript.rewriter import pattern

    from onnxplug.optimizer import OpRef, RuleSet

    seen = []

    def observe(context, a, b, **_):
        seen.append(a.const_value.numpy().strides)
        return False  # look, never rewrite

    watch = pattern.RewriteRule(lambda op, a, b: op.Mul(a, b), lambda op, a, b: op.Mul(a, b), observe)
    rule_set = RuleSet("test.watch_fill", [watch], produces=[OpRef("", "Mul")])
    optimized = _optimized_with_fills_only(_fill_then_scale_model(), {"extended": [rule_set]})
    assert seen and all(strides == (0, 0) for strides in seen)  # no memory while the rules run
    filled = optimized.graph.initializers["filled"].const_value.numpy()
    assert filled.flags.c_contiguous and 0 not in filled.strides
    np.testing.assert_array_equal(filled, np.full((4, 5), 0.25, np.float32))


def test_a_folded_fill_runs_as_the_unfolded_node_does():
    model = _fill_then_scale_model()
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    session = _run_both(model, {"x": x})
    optimized = session.get_optimization_report().model
    for value in optimized.graph.initializers.values():
        array = value.const_value.numpy()
        assert array.flags.c_contiguous and (array.size <= 1 or 0 not in array.strides), value.name
    assert _passes(session).get("written", 0) >= 1
    y, bias = session.run(None, {"x": x})
    np.testing.assert_allclose(y, x @ (np.full((4, 5), 0.25, np.float32) * np.arange(1, 6, dtype=np.float32)))
    np.testing.assert_array_equal(bias, np.full((4, 5), 0.25, np.float32))
    bias[0, 0] = 7  # an output the caller owns, not the session's constant
    np.testing.assert_array_equal(session.run(None, {"x": x})[1], np.full((4, 5), 0.25, np.float32))


@pytest.mark.parametrize("shape", [[-1, 5], [2**40, 2**40, 2**40], [[4, 5]]])
def test_a_fill_of_a_shape_that_cannot_be_filled_is_not_folded(shape):
    # negative, more elements than numpy can index, not 1-D: left to the run, which names the node
    model = _fill_then_scale_model()
    model.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(np.array(shape, np.int64), "shape"))
    optimized = _optimized_with_fills_only(model)
    assert "ConstantOfShape" in [n.op_type for n in optimized.graph]  # (the two merged as one)
    assert "filled" not in optimized.graph.initializers
    good = _optimized_with_fills_only(_fill_then_scale_model())
    assert "ConstantOfShape" not in [n.op_type for n in good.graph]
