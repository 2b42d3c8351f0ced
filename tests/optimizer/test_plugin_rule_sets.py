"""The CPU provider and ms_ops contribute their rule sets through ``onnxplug_rewrite_rules``."""

from __future__ import annotations

import onnx.defs
import pytest

import onnxplug
from onnxplug.optimizer import STAGES, RuleSet

EXPECTED = {
    "basic": ["cpu.conv_bn", "cpu.matmul_add_gemm"],
    "extended": [
        "cpu.layer_norm",
        "ms_ops.rms_norm",
        "ms_ops.skip_layer_norm",
        "ms_ops.skip_rms_norm",
        "ms_ops.gelu",
        "ms_ops.fast_gelu",
        "ms_ops.bias_gelu",
        "ms_ops.fused_matmul",
        "ms_ops.fused_conv",
        "ms_ops.fused_gemm",
    ],
}


def collected(stage):
    env = onnxplug.Environment()
    return [s for result in env.plugin_manager.hook.onnxplug_rewrite_rules(stage=stage) for s in result]


@pytest.mark.parametrize("stage", STAGES)
def test_hook_onnxplug_rewrite_rules(stage):
    sets = collected(stage)
    assert all(isinstance(s, RuleSet) and s.rules and s.produces and s.description for s in sets)
    names = [s.name for s in sets]
    expected = EXPECTED.get(stage, [])
    # in order within each plugin (pluggy decides the order between plugins); ms_ops' attention
    # sets belong to another family and are left out here
    for prefix in ("cpu.", "ms_ops."):
        assert [n for n in names if n in expected and n.startswith(prefix)] == [
            n for n in expected if n.startswith(prefix)
        ]
    assert set(expected) <= set(names)


@pytest.mark.parametrize("stage", ["basic", "extended"])
def test_produced_ops_have_schemas(stage):
    """Every op a set produces is one onnx (with ms_ops' schemas registered) knows."""
    onnxplug.Environment()  # registers the op libraries' schemas
    for rule_set in collected(stage):
        for ref in rule_set.produces:
            assert onnx.defs.has(ref.op_type, ref.domain), (rule_set.name, str(ref))


def test_a_dropped_session_leaves_no_graph_alive_in_the_rules():
    """The optimizer applies new rule objects to each model (``RuleSet.fresh_rules``): an
    onnxscript rule keeps its last match, so shared rule objects kept the last optimized model,
    and every initializer of it, alive after its session was gone."""
    import gc

    import numpy as np
    import onnx_ir as ir
    from onnx import TensorProto, helper, numpy_helper

    name = "graph-the-rules-must-not-keep"
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    report = session.get_optimization_report()
    assert any(n.op_type == "FusedConv" for n in report.model.graph)  # a rule matched this graph
    del session, report
    gc.collect()
    # ``type``, not ``isinstance``: the heap may hold a weak proxy whose referent is gone (left by
    # an earlier test), and ``isinstance`` on it raises ReferenceError.
    alive = [g for g in gc.get_objects() if type(g) is ir.Graph and g.name == name]
    assert alive == []


def test_lazy_rules_build_new_objects_each_time():
    from onnxplug.optimizer import LazyRules

    lazy = LazyRules("onnxplug_ms_ops.rules.fused:fused_conv_rules")
    first, second = lazy.build(), lazy.build()
    assert len(first) == len(second) == len(lazy) > 0
    assert all(a is not b for a, b in zip(first, second))
    assert tuple(lazy) == tuple(lazy)  # the kept ones, for listing
