"""The graph walks the optimizer counts and folds with (``onnxplug.graph.all_nodes`` and
``graphs_of``): onnx-ir's own walks' results, in the same order, subgraphs at any depth."""

from __future__ import annotations

import onnx
import onnx.helper as oh
import onnx_ir as ir

from onnxplug.graph import all_nodes, graphs_of


def _nested_model() -> ir.Model:
    """An If whose then-branch holds a Loop (its attributes come in name order: else first), and a
    plain node before and after."""
    f = onnx.TensorProto.FLOAT
    body = oh.make_graph(
        [oh.make_node("Identity", ["v_in"], ["v_out"]), oh.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [
            oh.make_tensor_value_info("i", onnx.TensorProto.INT64, []),
            oh.make_tensor_value_info("cond_in", onnx.TensorProto.BOOL, []),
            oh.make_tensor_value_info("v_in", f, [2]),
        ],
        [oh.make_tensor_value_info("cond_out", onnx.TensorProto.BOOL, []), oh.make_tensor_value_info("v_out", f, [2])],
    )
    then_branch = oh.make_graph(
        [oh.make_node("Loop", ["trip", "", "x"], ["looped"], body=body)],
        "then",
        [],
        [oh.make_tensor_value_info("looped", f, [2])],
        [onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(oh.make_tensor("trip", 7, [], [2])), "trip")],
    )
    else_branch = oh.make_graph(
        [oh.make_node("Neg", ["x"], ["negated"])], "else", [], [oh.make_tensor_value_info("negated", f, [2])]
    )
    graph = oh.make_graph(
        [
            oh.make_node("Abs", ["x"], ["a"]),
            oh.make_node("If", ["c"], ["chosen"], then_branch=then_branch, else_branch=else_branch),
            oh.make_node("Add", ["a", "chosen"], ["y"]),
        ],
        "main",
        [oh.make_tensor_value_info("x", f, [2]), oh.make_tensor_value_info("c", onnx.TensorProto.BOOL, [])],
        [oh.make_tensor_value_info("y", f, [2])],
    )
    return ir.serde.deserialize_model(oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))


def test_all_nodes_is_onnx_ir_s_walk():
    graph = _nested_model().graph
    assert [id(n) for n in all_nodes(graph)] == [id(n) for n in graph.all_nodes()]
    assert [n.op_type for n in all_nodes(graph)] == ["Abs", "If", "Neg", "Loop", "Identity", "Identity", "Add"]


def test_graphs_of_is_the_graph_and_its_subgraphs_outermost_first():
    graph = _nested_model().graph
    assert [id(g) for g in graphs_of(graph)] == [id(g) for g in [graph, *graph.subgraphs()]]
    assert [g.name for g in graphs_of(graph)] == ["main", "else", "then", "body"]
