"""The stages around the optimizer: rule sets from plugins and their gate, what providers see
(folded graphs, constants as initializers), set_providers, and the written optimized model."""

from __future__ import annotations

import types
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnxscript.rewriter import pattern

import onnxplug
from onnxplug import Environment, hookimpl
from onnxplug.api import FuseClaim, KernelClaim
from onnxplug.errors import PluginError
from onnxplug.optimizer import OpRef, RuleSet
from onnxplug.testing import make_model
from onnxplug.testing.fakes import FakeFactory, fake_plugin

F = TensorProto.FLOAT
LEVEL = onnxplug.GraphOptimizationLevel


def _double_relu_model() -> onnx.ModelProto:
    """MatMul → Relu → Relu: the test rule below merges the two Relus (nothing built in does)."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    inits = {"w": np.arange(12, dtype=np.float32).reshape(4, 3) / 10 - 0.5}
    return make_model(nodes, [("x", F, [2, 4])], [("y", F, [2, 3])], inits)


def _double_relu_rule() -> pattern.RewriteRule:
    """Relu(Relu(x)) → Relu(x)."""
    return pattern.RewriteRule(lambda op, x: op.Relu(op.Relu(x)), lambda op, x: op.Relu(x))


def _rules_plugin(*rule_sets: RuleSet, stage: str = "extended") -> types.SimpleNamespace:
    """A plugin contributing ``rule_sets`` to one optimizer stage."""
    wanted = stage

    @hookimpl
    def onnxplug_rewrite_rules(stage):
        return list(rule_sets) if stage == wanted else []

    return types.SimpleNamespace(onnxplug_rewrite_rules=onnxplug_rewrite_rules)


def _environment(*plugins) -> Environment:
    env = Environment()
    for index, plugin in enumerate(plugins):
        env.register(plugin, name=f"test-plugin-{index}")
    return env


def _session(model, level, env, providers=("CPUExecutionProvider",)):
    options = onnxplug.SessionOptions()
    options.graph_optimization_level = level
    return onnxplug.InferenceSession(model.SerializeToString(), options, providers=list(providers), environment=env)


def _ops(session) -> list[str]:
    return [node.op_type for node in session.get_partition_report().nodes]


X = np.arange(8, dtype=np.float32).reshape(2, 4) - 3


def test_a_plugins_rule_set_runs_at_extended_and_not_below():
    env = _environment(_rules_plugin(RuleSet("test.relu", [_double_relu_rule()], produces=[OpRef("", "Relu")])))
    model = _double_relu_model()
    basic = _session(model, LEVEL.ORT_ENABLE_BASIC, env)
    extended = _session(model, LEVEL.ORT_ENABLE_EXTENDED, env)
    assert _ops(basic) == ["MatMul", "Relu", "Relu"]
    assert _ops(extended) == ["MatMul", "Relu"]
    assert extended.get_optimization_report().fusions() == {"test.relu": 1}
    np.testing.assert_allclose(extended.run(None, {"x": X})[0], basic.run(None, {"x": X})[0], rtol=1e-6)


def test_a_rule_set_whose_op_no_provider_runs_is_not_applied():
    unrunnable = RuleSet("test.nobody", [_double_relu_rule()], produces=[OpRef("test.nowhere", "Relu", 1)])
    env = _environment(_rules_plugin(unrunnable))
    session = _session(_double_relu_model(), LEVEL.ORT_ENABLE_ALL, env)
    assert _ops(session) == ["MatMul", "Relu", "Relu"]
    assert (
        "no provider of the session runs test.nowhere::Relu" in session.get_optimization_report().skipped["test.nobody"]
    )


def test_a_rule_set_for_another_provider_is_not_applied():
    targeted = RuleSet("test.elsewhere", [_double_relu_rule()], produces=[OpRef("", "Relu")], providers=("openvino",))
    session = _session(_double_relu_model(), LEVEL.ORT_ENABLE_ALL, _environment(_rules_plugin(targeted)))
    assert _ops(session) == ["MatMul", "Relu", "Relu"]
    assert "not among the session's providers" in session.get_optimization_report().skipped["test.elsewhere"]


def test_an_op_newer_than_the_models_opset_is_not_produced():
    rule = pattern.RewriteRule(lambda op, x: op.Relu(x), lambda op, x: op.Gelu(x))  # Gelu exists from opset 20
    env = _environment(_rules_plugin(RuleSet("test.gelu", [rule], produces=[OpRef("", "Gelu")])))
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2, 4])], [("y", F, [2, 4])], opset=17)
    assert _ops(_session(model, LEVEL.ORT_ENABLE_ALL, env)) == ["Relu"]


def test_layout_rules_run_only_at_enable_all():
    env = _environment(
        _rules_plugin(RuleSet("test.relu", [_double_relu_rule()], produces=[OpRef("", "Relu")]), stage="layout")
    )
    assert _ops(_session(_double_relu_model(), LEVEL.ORT_ENABLE_EXTENDED, env)) == ["MatMul", "Relu", "Relu"]
    assert _ops(_session(_double_relu_model(), LEVEL.ORT_ENABLE_ALL, env)) == ["MatMul", "Relu"]


def test_a_plugin_returning_something_else_is_named():
    @hookimpl
    def onnxplug_rewrite_rules(stage):
        return ["not a rule set"]

    env = _environment(types.SimpleNamespace(onnxplug_rewrite_rules=onnxplug_rewrite_rules))
    with pytest.raises(PluginError, match="test-plugin-0.*expected onnxplug.optimizer.RuleSet"):
        _session(_double_relu_model(), LEVEL.ORT_ENABLE_ALL, env)


def _shape_model() -> onnx.ModelProto:
    """Relu(Reshape(x, Concat(Shape(w)[0:1], [-1]))) with a constant w: the target folds."""
    nodes = [
        helper.make_node("Shape", ["w"], ["s"], end=1),
        helper.make_node("Concat", ["s", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    inits = {"w": np.zeros((2, 5), np.float32), "minus_one": np.array([-1], np.int64)}
    return make_model(nodes, [("x", F, [2, 4])], [("y", F, [2, 4])], inits)


def test_providers_are_asked_about_the_folded_graph():
    seen = {}

    def claim(graph, kernels):
        seen["ops"] = [node.op_type for node in graph.nodes]
        seen["initializers"] = set(graph.initializers)
        return [KernelClaim(node.name) for node in graph.nodes if node.op_type == "Relu"]

    factory = FakeFactory("watcher", claim)
    env = _environment(fake_plugin(factory))
    session = _session(
        _shape_model(), LEVEL.ORT_ENABLE_BASIC, env, ["WatcherExecutionProvider", "CPUExecutionProvider"]
    )
    assert seen["ops"] == ["Relu"]  # the Reshape to x's own shape went with the folded target
    assert session.get_partition_report().counts == {"WatcherExecutionProvider": 1}


def test_a_fused_partition_receives_folded_constants_as_initializers():
    compiled = {}

    def claim(graph, kernels):
        return [FuseClaim([node.name for node in graph.nodes])]

    factory = FakeFactory("fuser", claim)
    original_create = factory.create

    def create(device, options):
        provider = original_create(device, options)
        compile_partition = provider.compile

        def recording(partition):
            compiled["initializers"] = [t.name for t in partition.model_proto().graph.initializer]
            compiled["inputs"] = list(partition.inputs)
            return compile_partition(partition)

        provider.compile = recording
        return provider

    factory.create = create
    nodes = [
        helper.make_node("Mul", ["w", "w"], ["w2"]),  # folded before partitioning
        helper.make_node("Add", ["x", "w2"], ["y"]),
    ]
    model = make_model(nodes, [("x", F, [2, 4])], [("y", F, [2, 4])], {"w": np.full((2, 4), 3, np.float32)})
    session = _session(model, LEVEL.ORT_ENABLE_BASIC, _environment(fake_plugin(factory)), ["FuserExecutionProvider"])
    assert compiled == {"initializers": ["w2"], "inputs": ["x"]}
    np.testing.assert_array_equal(session.run(None, {"x": X})[0], X + 9)


def test_set_providers_gives_the_outputs_of_a_fresh_session():
    # a function op one provider claims whole and the CPU provider runs inlined: switching back
    # and forth must re-partition from the optimized model, not from a graph already inlined
    def claim(graph, kernels):
        return [KernelClaim(node.name) for node in graph.nodes if node.op_type in ("Neg", "Relu")]

    factory = FakeFactory("negator", claim)
    env = _environment(fake_plugin(factory))
    nodes = [
        helper.make_node("HardSwish", ["x"], ["h"]),
        helper.make_node("Neg", ["h"], ["n"]),
        helper.make_node("Mul", ["n", "w"], ["m"]),
        helper.make_node("Mul", ["m", "m"], ["y"]),
    ]
    model = make_model(nodes, [("x", F, [2, 4])], [("y", F, [2, 4])], {"w": np.float32(2)})
    with_fake = ["NegatorExecutionProvider", "CPUExecutionProvider"]
    fresh_cpu = _session(model, LEVEL.ORT_ENABLE_ALL, env)
    fresh_fake = _session(model, LEVEL.ORT_ENABLE_ALL, env, with_fake)
    switched = _session(model, LEVEL.ORT_ENABLE_ALL, env, with_fake)
    switched.set_providers(["CPUExecutionProvider"])
    np.testing.assert_array_equal(switched.run(None, {"x": X})[0], fresh_cpu.run(None, {"x": X})[0])
    assert _ops(switched) == _ops(fresh_cpu)
    switched.set_providers(with_fake)
    np.testing.assert_array_equal(switched.run(None, {"x": X})[0], fresh_fake.run(None, {"x": X})[0])
    assert switched.get_partition_report().counts == fresh_fake.get_partition_report().counts
    assert switched.get_partition_report().counts["NegatorExecutionProvider"] == 1


def test_the_model_written_at_extended_runs_in_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle that loads the written model")
    env = _environment(_rules_plugin(RuleSet("test.relu", [_double_relu_rule()], produces=[OpRef("", "Relu")])))
    path = tmp_path / "optimized.onnx"
    options = onnxplug.SessionOptions()
    options.graph_optimization_level = LEVEL.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(path)
    session = onnxplug.InferenceSession(
        _double_relu_model().SerializeToString(), options, providers=["CPUExecutionProvider"], environment=env
    )
    written = onnx.load(str(path))
    assert [n.op_type for n in written.graph.node] == ["MatMul", "Relu"]
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(reference.run(None, {"x": X})[0], session.run(None, {"x": X})[0], rtol=1e-6)


def test_optimized_model_external_initializers(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle that loads the written model")
    nodes = [helper.make_node("MatMul", ["x", "big"], ["h"]), helper.make_node("Add", ["h", "small"], ["y"])]
    inits = {"big": np.ones((4, 300), np.float32), "small": np.ones(300, np.float32)}
    model = make_model(nodes, [("x", F, [2, 4])], [("y", F, [2, 300])], inits)
    options = onnxplug.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "out.onnx")
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "weights.bin")
    options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "2000")
    session = onnxplug.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    written = onnx.load(str(tmp_path / "out.onnx"), load_external_data=False)
    locations = {t.name: t.data_location for t in written.graph.initializer}
    assert locations == {"big": TensorProto.EXTERNAL, "small": TensorProto.DEFAULT}
    assert (tmp_path / "weights.bin").stat().st_size == 4 * 300 * 4
    reference = ort.InferenceSession(str(tmp_path / "out.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(reference.run(None, {"x": X})[0], session.run(None, {"x": X})[0], rtol=1e-6)


@pytest.mark.parametrize("name", ["../escape.bin", "/tmp/abs.bin"])
def test_optimized_model_external_file_must_stay_beside_the_model(tmp_path, name):
    options = onnxplug.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "out.onnx")
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", name)
    with pytest.raises(onnxplug.InvalidArgument, match="must be a file name in the folder"), warnings.catch_warnings():
        onnxplug.InferenceSession(_double_relu_model().SerializeToString(), options, providers=["CPUExecutionProvider"])


def test_a_rule_set_is_tried_only_where_one_of_its_anchors_is():
    anchored_elsewhere = RuleSet("test.anchored", [_double_relu_rule()], produces=[OpRef("", "Relu")], anchors={"Conv"})
    session = _session(_double_relu_model(), LEVEL.ORT_ENABLE_EXTENDED, _environment(_rules_plugin(anchored_elsewhere)))
    assert _ops(session) == ["MatMul", "Relu", "Relu"]  # would fuse if tried: the graph has no Conv
    anchored_here = RuleSet("test.anchored", [_double_relu_rule()], produces=[OpRef("", "Relu")], anchors=["Relu"])
    session = _session(_double_relu_model(), LEVEL.ORT_ENABLE_EXTENDED, _environment(_rules_plugin(anchored_here)))
    assert _ops(session) == ["MatMul", "Relu"]


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ({("MatMul", "Relu")}, ["MatMul", "Relu"]),  # the graph has the edge: tried
        ({("Relu", "Relu")}, ["MatMul", "Relu"]),
        ({("Relu", "MatMul"), ("Relu", "Relu")}, ["MatMul", "Relu"]),  # any one of them
        ({("Relu", "MatMul")}, ["MatMul", "Relu", "Relu"]),  # both ops present, not that edge: not tried
    ],
)
def test_a_rule_set_with_anchor_edges_is_tried_only_where_one_of_them_is(edges, expected):
    rule_set = RuleSet(
        "test.edges", [_double_relu_rule()], produces=[OpRef("", "Relu")], anchors={"Relu"}, anchor_edges=edges
    )
    session = _session(_double_relu_model(), LEVEL.ORT_ENABLE_EXTENDED, _environment(_rules_plugin(rule_set)))
    assert _ops(session) == expected


def test_anchor_edges_are_pairs():
    with pytest.raises(TypeError, match="pairs"):
        RuleSet("test.bad", [], anchor_edges=[("Relu", "Relu", "Relu")])


def test_a_rule_set_that_found_nothing_is_not_tried_again_on_the_same_graph(monkeypatch):
    from onnxplug.optimizer import pipeline

    tried, original = [], pipeline.rewrite_in_place

    def rewrite_in_place(model, rule_sets):
        tried.extend(rule_set.name for rule_set in rule_sets if rule_set.name.startswith("test."))
        return original(model, rule_sets)

    monkeypatch.setattr(pipeline, "rewrite_in_place", rewrite_in_place)
    fuses = RuleSet("test.fuses", [_double_relu_rule()], produces=[OpRef("", "Relu")])
    softmaxes = pattern.RewriteRule(lambda op, x: op.Softmax(op.Softmax(x)), lambda op, x: op.Softmax(x))
    never = RuleSet("test.never", [softmaxes], produces=[OpRef("", "Softmax")])
    session = _session(_double_relu_model(), LEVEL.ORT_ENABLE_EXTENDED, _environment(_rules_plugin(fuses, never)))
    assert _ops(session) == ["MatMul", "Relu"]
    # round 1: the fusion, then "never" on the fused graph; round 2: the fusion again (it may
    # match its own results), but not "never": the graph is the one it found nothing in
    assert tried == ["test.fuses", "test.never", "test.fuses"]


def test_anchors_are_op_types_not_a_string():
    with pytest.raises(TypeError, match="not a string"):
        RuleSet("test.bad", [], anchors="Relu")


def test_lazy_rules_are_built_when_a_model_needs_them_and_anew_for_each():
    from onnxplug.optimizer import LazyRules

    built = []

    def build():
        built.append(1)
        return [_double_relu_rule()]

    lazy = LazyRules(build)
    rule_set = RuleSet("test.lazy", lazy, produces=[OpRef("", "Relu")], anchors={"Relu"})
    assert built == [] and "not built" in repr(rule_set.rules)
    environment = _environment(_rules_plugin(rule_set))
    session = _session(_double_relu_model(), LEVEL.ORT_ENABLE_EXTENDED, environment)
    assert _ops(session) == ["MatMul", "Relu"] and built
    # new rule objects for each application to a model (an onnxscript rule keeps its last
    # match: RuleSet.fresh_rules), so a second session builds them again
    first = len(built)
    _session(_double_relu_model(), LEVEL.ORT_ENABLE_EXTENDED, environment)
    assert len(built) == 2 * first
    assert len(lazy) == 1 and len(built) == 2 * first + 1  # listing builds the kept ones once
    assert len(lazy) == 1 and len(built) == 2 * first + 1


def test_a_small_models_session_does_not_import_onnxscripts_rewriter():
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, onnxplug\n"
        "from onnx import TensorProto, helper\n"
        "from onnxplug.testing import make_model\n"
        "m = make_model([helper.make_node('Relu', ['x'], ['y'])], [('x', 1, [2])], [('y', 1, [2])])\n"
        "s = onnxplug.InferenceSession(m.SerializeToString(), providers=['CPUExecutionProvider'])\n"
        "s.run(None, {'x': np.ones(2, np.float32)})\n"
        "print('onnxscript.rewriter' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def _dequantized_weight_model() -> onnx.ModelProto:
    """MatMul(x, DequantizeLinear(w_int8, s, z)) with constant quantized weights."""
    nodes = [
        helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"]),
        helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    inits = {
        "wq": np.arange(12, dtype=np.int8).reshape(4, 3) - 6,
        "s": np.array(0.5, np.float32),
        "z": np.array(1, np.int8),
    }
    return make_model(nodes, [("x", F, [2, 4])], [("y", F, [2, 3])], inits)


def _gemm_of_dequantized_rule() -> pattern.RewriteRule:
    """MatMul(x, DequantizeLinear(w, s, z)) → Gemm(x, DequantizeLinear(w, s, z)): matches only
    while the DequantizeLinear of the constant weights is still a node."""
    return pattern.RewriteRule(
        lambda op, x, w, s, z: op.MatMul(x, op.DequantizeLinear(w, s, z)),
        lambda op, x, w, s, z: op.Gemm(x, op.DequantizeLinear(w, s, z)),
    )


@pytest.mark.parametrize(
    ("keeps", "rule", "expected"),
    [
        ((), _gemm_of_dequantized_rule, ["MatMul"]),  # folded first: the rule finds float weights
        (("DequantizeLinear",), _gemm_of_dequantized_rule, ["Gemm"]),  # kept for the rule, folded after
        (("DequantizeLinear",), _double_relu_rule, ["MatMul"]),  # kept, unused, folded after the stages
    ],
)
def test_keeps_unfolded_leaves_ops_for_the_rule_stages_and_folds_them_after(keeps, rule, expected, monkeypatch):
    monkeypatch.setenv("ONNXPLUG_CPU_VNNI", "0")  # the CPU provider's QDQ set then keeps nothing itself
    rule_set = RuleSet("test.dq", [rule()], produces=[OpRef("", "Gemm")], keeps_unfolded=keeps)
    model = _dequantized_weight_model()
    session = _session(model, LEVEL.ORT_ENABLE_EXTENDED, _environment(_rules_plugin(rule_set)))
    assert _ops(session) == expected  # the weights' DequantizeLinear is folded in every case
    want = X @ ((np.arange(12, dtype=np.float32).reshape(4, 3) - 7) * 0.5)
    np.testing.assert_allclose(session.run(None, {"x": X})[0], want, rtol=1e-6)


def test_keeps_unfolded_must_be_a_collection():
    with pytest.raises(TypeError, match="keeps_unfolded"):
        RuleSet("test.bad", [], keeps_unfolded="DequantizeLinear")


@pytest.mark.parametrize(
    ("roots", "expected"), [({"Relu"}, ["MatMul", "Relu"]), ({"MatMul"}, ["MatMul", "Relu", "Relu"])]
)
def test_a_rule_set_with_roots_is_tried_only_at_nodes_of_those_types(roots, expected):
    # Relu(Relu(x)) ends at a Relu: offered only MatMul nodes, the rule never sees a match.
    rule_set = RuleSet("test.roots", [_double_relu_rule()], produces=[OpRef("", "Relu")], roots=roots)
    session = _session(_double_relu_model(), LEVEL.ORT_ENABLE_EXTENDED, _environment(_rules_plugin(rule_set)))
    assert _ops(session) == expected


def test_roots_are_op_types_not_a_string():
    with pytest.raises(TypeError, match="not a string"):
        RuleSet("test.bad", [], roots="Relu")


def test_sessions_with_the_same_providers_share_their_rule_gate(monkeypatch):
    """The gate's answers (``runtime._rule_gates``) are worked out for the first session of an
    Environment, providers and first provider's kernels, and reused by the next."""
    asked = []
    real_has = onnxplug.api.KernelLookup.has
    monkeypatch.setattr(onnxplug.api.KernelLookup, "has", lambda self, *key: asked.append(key) or real_has(self, *key))
    environment = Environment(autoload=False, only=["cpu", "ms_ops"])
    data = _double_relu_model().SerializeToString()
    onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"], environment=environment)
    assert asked
    asked.clear()
    onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"], environment=environment)
    assert asked == []
    other = Environment(autoload=False, only=["cpu", "ms_ops"])
    onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"], environment=other)
    assert asked  # another Environment: a gate of its own


def test_a_shared_gate_tells_rule_sets_at_one_address_apart(monkeypatch):
    """A gate keeps each answer with its rule set, so a set made after another was freed, at its
    address, is asked again (every set given one id here stands for that reuse)."""
    from onnxplug.optimizer import RuleGate, pipeline

    monkeypatch.setattr(pipeline, "id", lambda obj: 7, raising=False)
    gate = RuleGate({"cpu"}, lambda domain, op_type, version: op_type == "Relu")
    unrunnable = RuleSet(name="tanh", rules=(), produces=[OpRef("", "Tanh")])
    runnable = RuleSet(name="relu", rules=(), produces=[OpRef("", "Relu")])
    assert gate.why_not(unrunnable, {"": 17}) == "no provider of the session runs ai.onnx::Tanh"
    assert gate.why_not(runnable, {"": 17}) is None
    assert gate.why_not(unrunnable, {"": 17}) is not None
