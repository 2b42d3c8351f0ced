"""Scopes and order in an onnx-ir graph: subgraphs, outer-scope reads, topological order.

onnx-ir links a subgraph's read of an enclosing scope's value to that very Value object, so the
values a node's subgraphs take from outside are the ones they read but do not define.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import onnx_ir as ir

from ..errors import Fail

__all__ = [
    "all_nodes",
    "attribute_table",
    "execution_order",
    "graphs_of",
    "node_reads",
    "order_units",
    "outer_references",
    "subgraphs",
]

_GRAPH, _GRAPHS = ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS


def attribute_table(node: ir.Node) -> Mapping[str, ir.Attr]:
    """``node``'s attributes by name, to read.  onnx-ir's ``Attributes`` is a ``UserDict``: its
    own dict is read, not the mapping's views, which cost a Python-level call per attribute of
    every node on the stages' walks (``items()`` of an empty one: ~2 µs)."""
    attributes = node.attributes
    return getattr(attributes, "data", attributes)


def subgraphs(node: ir.Node) -> list[tuple[str, ir.Graph]]:
    """``(attribute name, graph)`` for each graph attribute of ``node``."""
    table = attribute_table(node)
    if not table:
        return []
    found = []
    for name, attr in table.items():
        kind = attr.type
        if kind is _GRAPH:
            found.append((name, attr.value))
        elif kind is _GRAPHS:
            found.extend((name, g) for g in attr.value)
    return found


def all_nodes(graph: ir.Graph | ir.Function) -> Iterator[ir.Node]:
    """Every node of ``graph`` and of the subgraphs below it, each graph's nodes in order, a
    node's subgraphs right after it (``graph.all_nodes()``'s order, at about half its cost)."""
    for node in graph:
        yield node
        for _, inner in subgraphs(node):
            yield from all_nodes(inner)


def graphs_of(graph: ir.Graph | ir.Function) -> list[ir.Graph | ir.Function]:
    """``graph`` and every subgraph below it, outermost first (``[graph, *graph.subgraphs()]``)."""
    found = [graph]
    for node in graph:
        for _, inner in subgraphs(node):
            found.extend(graphs_of(inner))
    return found


def outer_references(node: ir.Node) -> list[ir.Value]:
    """Values from enclosing scopes that ``node``'s subgraphs (at any depth) read."""
    defined: set[int] = set()
    used: list[ir.Value] = []
    pending = [g for _, g in subgraphs(node)]
    while pending:
        graph = pending.pop()
        defined.update(id(v) for v in graph.inputs)
        defined.update(id(v) for v in graph.initializers.values())
        for inner in graph:
            defined.update(id(v) for v in inner.outputs)
            used.extend(v for v in inner.inputs if v is not None)
            pending.extend(g for _, g in subgraphs(inner))
        used.extend(graph.outputs)
    seen: set[int] = set()
    outer = []
    for value in used:
        if id(value) not in defined and id(value) not in seen:
            seen.add(id(value))
            outer.append(value)
    return outer


def node_reads(node: ir.Node) -> list[ir.Value]:
    """Every value ``node`` needs before it runs: its inputs and its subgraphs' outer reads."""
    reads = [v for v in node.inputs if v is not None]
    if subgraphs(node):
        reads.extend(outer_references(node))
    return reads


def order_units(units: Sequence[Sequence[ir.Node]]) -> list[Sequence[ir.Node]]:
    """Units (a node, or the nodes of a fused partition) in an order where every unit comes after
    the units producing what it reads; stable with respect to the given order (Kahn's algorithm).

    :raises Fail: the units depend on each other in a cycle (a non-convex partition).
    """
    unit_of: dict[int, int] = {}
    for index, unit in enumerate(units):
        for node in unit:
            for value in node.outputs:
                unit_of[id(value)] = index
    waiting = [0] * len(units)
    consumers: list[list[int]] = [[] for _ in units]
    for index, unit in enumerate(units):
        sources: set[int] = set()
        for node in unit:
            for value in node_reads(node):
                source = unit_of.get(id(value))
                if source is not None and source != index:
                    sources.add(source)
        waiting[index] = len(sources)
        for source in sources:
            consumers[source].append(index)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    ready.reverse()
    order: list[Sequence[ir.Node]] = []
    while ready:
        index = ready.pop()
        order.append(units[index])
        released = []
        for consumer in consumers[index]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                released.append(consumer)
        ready.extend(sorted(released, reverse=True))
    if len(order) != len(units):
        raise Fail("the graph's nodes (or fused partitions) depend on each other in a cycle")
    return order


def execution_order(graph: ir.Graph) -> list[ir.Node]:
    """The graph's nodes with producers before consumers (cycles were rejected at load time)."""
    return [unit[0] for unit in order_units([[node] for node in graph])]
