"""GraphView: what providers see, read-only and valid only during capability()."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

from onnxplug.graph import GraphView, load_model
from onnxplug.testing import make_model

F = TensorProto.FLOAT


def _view(nodes, inputs=(("x", F, [2]),), outputs=(("d", F, [2]),)):
    loaded = load_model(make_model(nodes, list(inputs), list(outputs)).SerializeToString())
    return GraphView(loaded.model.graph, loaded.opsets)


def test_fusion_groups_are_connected_and_convex():
    view = _view(
        [
            helper.make_node("Relu", ["x"], ["a"], name="a"),
            helper.make_node("Neg", ["a"], ["b"], name="b"),  # left out below
            helper.make_node("Add", ["a", "b"], ["c"], name="c"),
            helper.make_node("Abs", ["c"], ["d"], name="d"),
            helper.make_node("Exp", ["x"], ["e"], name="e"),  # chosen, unconnected
        ],
        outputs=(("d", F, [2]), ("e", F, [2])),
    )
    # {a, c, d} is not convex (a -> b -> c leaves and comes back); e stands alone.
    assert view.fusion_groups(["a", "c", "d", "e"]) == [("a",), ("c", "d"), ("e",)]
    assert view.fusion_groups(["a", "b", "c", "d"]) == [("a", "b", "c", "d")]


def test_fusion_groups_follow_subgraph_reads():
    branch = helper.make_graph(
        [helper.make_node("Neg", ["a"], ["t"])], "then", [], [helper.make_tensor_value_info("t", F, [2])]
    )
    view = _view(
        [
            helper.make_node("Relu", ["x"], ["a"], name="a"),
            helper.make_node("If", ["c"], ["b"], name="if", then_branch=branch, else_branch=branch),
            helper.make_node("Add", ["a", "b"], ["d"], name="d"),
        ],
        inputs=(("x", F, [2]), ("c", TensorProto.BOOL, [])),
    )
    # a -> if (read inside its branches) -> d: fusing {a, d} without the If is not convex.
    assert view.fusion_groups(["a", "d"]) == [("a",), ("d",)]


def test_view_is_closed_after_the_call():
    view = _view([helper.make_node("Relu", ["x"], ["d"], name="r")])
    view.end_query()
    with pytest.raises(RuntimeError, match="valid only during"):
        _ = view.nodes


def test_node_views_carry_static_symbolic_and_unknown_dims():
    from onnx import TensorProto, helper

    import onnxplug
    from onnxplug.api import KernelProvider

    seen = {}

    class Recording(KernelProvider):
        def capability(self, graph, kernels):
            for node in graph.nodes:
                seen[node.name] = (node.input_shapes, node.output_shapes)
            return super().capability(graph, kernels)

    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Reshape", ["r", "s"], ["y"], name="reshape"),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, None]),
            helper.make_tensor_value_info("s", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    environment = onnxplug.Environment(only=["cpu"])
    factory = environment.factory("cpu")
    original = factory.create
    factory.create = lambda device, options: Recording(factory, device)
    try:
        onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"], environment=environment)
    finally:
        factory.create = original
    relu_in, relu_out = seen["relu"]
    assert relu_in == (("batch", 3, None),)
    # shape inference may name the unknown dim it passes on (onnx writes unk__N)
    assert relu_out[0][:2] == ("batch", 3) and (relu_out[0][2] is None or isinstance(relu_out[0][2], str))
    inputs, outputs = seen["reshape"]
    assert inputs[0] == relu_out[0] and inputs[1] == (2,)
    assert outputs[0] is None or len(outputs[0]) == 2
