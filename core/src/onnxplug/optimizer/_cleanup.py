"""Removing what computes nothing: no-op nodes, repeated subexpressions, dead nodes and unused
initializers.

No-ops are removed by rewiring their readers to the node's input, so they are only removed when
the output is not a graph output (the graph's output names are part of its interface):

* ``Identity``;
* ``Dropout`` in inference (no ``training_mode`` input, or a constant false one, and the mask
  unused);
* ``Cast`` to the type the input already has;
* ``Reshape``, ``Expand``, ``Squeeze`` and ``Flatten`` whose input and output have the same fully
  static shape;
* ``Transpose`` pairs whose permutations cancel (the first one's only reader is the second).
"""

from __future__ import annotations

import onnx_ir as ir

from ..graph import graphs_of

__all__ = ["eliminate_common_subexpressions", "remove_dead_code", "remove_no_ops"]

_SHAPE_OPS = frozenset({"Reshape", "Expand", "Squeeze", "Flatten"})


def _static(value: ir.Value | None) -> tuple[int, ...] | None:
    if value is None or value.shape is None:
        return None
    dims = tuple(value.shape)
    return dims if all(isinstance(d, int) for d in dims) else None  # type: ignore[return-value]


def _dtype(value: ir.Value | None) -> ir.DataType | None:
    if value is None or not isinstance(value.type, ir.TensorType):
        return None
    return value.type.dtype


def _is_false_constant(value: ir.Value | None) -> bool:
    if value is None:
        return True
    if value.const_value is None or value.is_graph_input():
        return False
    try:
        return not bool(value.const_value.numpy().any())
    except Exception:  # noqa: BLE001 - an unreadable flag is not known to be false
        return False


def _source_if_no_op(node: ir.Node) -> ir.Value | None:
    """The value ``node``'s first output equals, when the node is a no-op; else ``None``."""
    if node.domain not in ("", "ai.onnx") or not node.inputs or node.inputs[0] is None:
        return None
    source, output = node.inputs[0], node.outputs[0]
    op = node.op_type
    if op == "Identity":
        return source
    if op == "Dropout":
        version = node.graph.opset_imports.get("", 0) if node.graph is not None else 0
        mask_used = len(node.outputs) > 1 and (node.outputs[1].uses() or node.outputs[1].is_graph_output())
        if mask_used:
            return None
        if version >= 12:
            training = node.inputs[2] if len(node.inputs) > 2 else None
            return source if _is_false_constant(training) else None
        if version >= 7:  # inference-only Dropout: no training flag at all
            return source
        return None
    if op == "Cast":
        to = node.attributes.get_int("to", 0)
        return source if _dtype(source) is not None and int(_dtype(source)) == to else None  # type: ignore[arg-type]
    if op in _SHAPE_OPS:
        before, after = _static(source), _static(output)
        return source if before is not None and before == after else None
    if op == "Transpose":
        producer = source.producer()
        if producer is None or producer.op_type != "Transpose" or producer.domain not in ("", "ai.onnx"):
            return None
        if len(source.uses()) != 1 or source.is_graph_output():
            return None
        first, second = producer.attributes.get_ints("perm"), node.attributes.get_ints("perm")
        if first is None or second is None or len(first) != len(second):
            return None
        if all(first[second[i]] == i for i in range(len(first))):
            return producer.inputs[0]
    return None


def remove_no_ops(model: ir.Model) -> dict[str, int]:
    """Remove no-op nodes everywhere (subgraphs included); returns the count per op type."""
    removed: dict[str, int] = {}
    for graph in graphs_of(model.graph):
        for node in list(graph):
            if node.graph is None:  # already removed with a pair
                continue
            source = _source_if_no_op(node)
            output = node.outputs[0] if node.outputs else None
            if source is None or output is None or output.is_graph_output():
                continue
            ir.convenience.replace_all_uses_with(output, source)
            removed[node.op_type] = removed.get(node.op_type, 0) + 1
    if removed:
        remove_dead_code(model)
    return removed


def _sizes(model: ir.Model) -> tuple[int, int]:
    graphs = graphs_of(model.graph)
    return sum(len(g) for g in graphs), sum(len(g.initializers) for g in graphs)


def eliminate_common_subexpressions(model: ir.Model) -> dict[str, int]:
    """Merge nodes that compute the same op on the same inputs with the same attributes."""
    from onnx_ir.passes.common import CommonSubexpressionEliminationPass

    if not _may_repeat(model.graph):
        return {"merged": 0}
    before, _ = _sizes(model)
    CommonSubexpressionEliminationPass()(model)
    return {"merged": before - _sizes(model)[0]}


def _may_repeat(graph: ir.Graph) -> bool:
    """Whether two nodes of ``graph`` apply one op to the same inputs: onnx-ir's pass merges
    only such nodes (in the main graph), so where none do, its walk (attributes hashed, tensors
    compared) is skipped."""
    seen: set[tuple] = set()
    for node in graph:
        key = (node.domain, node.op_type, node.overload, tuple(id(value) for value in node.inputs))
        if key in seen:
            return True
        seen.add(key)
    return False


def _may_be_dead(model: ir.Model) -> bool:
    """Whether onnx-ir's dead-code pass could change ``model``: some node output (of any graph or
    function) nobody reads, which also covers the unused optional outputs it drops, a trailing
    missing input, or an initializer nobody uses.  Where there is none, its walk, which asks onnx
    for every node's schema, is skipped (six nodes: ~40 µs of a session's ~1 ms)."""
    graphs = [*graphs_of(model.graph), *(g for f in model.functions.values() for g in graphs_of(f))]
    for graph in graphs:
        outputs = {id(value) for value in graph.outputs}
        for node in graph:
            if node.inputs and node.inputs[-1] is None:
                return True
            for value in node.outputs:
                if id(value) not in outputs and not value.uses():
                    return True
    reachable = {id(value) for value in (*model.graph.inputs, *model.graph.outputs)}
    return any(id(value) not in reachable and not value.uses() for value in model.graph.initializers.values())


def remove_dead_code(model: ir.Model) -> dict[str, int]:
    """Remove nodes whose outputs nobody reads and initializers nobody uses; counts of each."""
    from onnx_ir.passes.common import RemoveUnusedNodesPass

    if not _may_be_dead(model):
        return {"nodes": 0, "initializers": 0}
    nodes, initializers = _sizes(model)
    RemoveUnusedNodesPass()(model)
    after_nodes, after_initializers = _sizes(model)
    return {"nodes": nodes - after_nodes, "initializers": initializers - after_initializers}
