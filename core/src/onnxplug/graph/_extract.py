"""Extracting nodes of a graph as a standalone ONNX model (for compilers and capability checks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import onnx
import onnx_ir as ir
from onnx import helper

from ._scopes import node_reads

__all__ = ["extract_model"]


def extract_model(
    name: str,
    members: Sequence[ir.Node],
    outside_readers: set[int],
    graph_outputs: set[int],
    constants: Mapping[int, ir.Value],
    opsets: Mapping[str, int],
    ir_version: int,
) -> tuple[onnx.ModelProto, list[ir.Value], list[ir.Value]]:
    """``members`` (in execution order) as a model, with the values it takes and gives.

    Inputs are the values the nodes read (subgraphs' outer-scope reads included) that they do not
    produce; constants among them are embedded as initializers instead.  Outputs are the values
    they produce that something outside reads or that are graph outputs.

    :param outside_readers: ids of values read by nodes that are not ``members``.
    :param graph_outputs: ids of the graph's output values.
    :param constants: id → initializer value, for initializers that cannot be overridden.
    """
    produced = {id(v) for node in members for v in node.outputs}
    inputs: list[ir.Value] = []
    initializers: list[onnx.TensorProto] = []
    seen: set[int] = set()
    for node in members:
        for value in node_reads(node):
            if id(value) in produced or id(value) in seen:
                continue
            seen.add(id(value))
            if id(value) in constants:
                tensor = ir.serde.serialize_tensor(value.const_value)
                tensor.name = value.name
                initializers.append(tensor)
            else:
                inputs.append(value)
    outputs = [
        v for node in members for v in node.outputs if v.name and (id(v) in outside_readers or id(v) in graph_outputs)
    ]
    graph = helper.make_graph(
        [ir.serde.serialize_node(node) for node in members],
        name,
        [ir.serde.serialize_value(v) for v in inputs],
        [ir.serde.serialize_value(v) for v in outputs],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    model.ir_version = ir_version
    return model, inputs, outputs
