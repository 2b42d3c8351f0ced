"""Convexity: which sets of nodes can run as one unit.

A set of nodes S can run as one compiled unit only if it is convex: no path leaves S and comes
back into it, or the unit would need a value computed after it.  A non-convex set is split: the
nodes of S reachable from S through an outside node (the re-entry set D) are removed, which
leaves a convex set S \\ D; D is then checked the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import onnx_ir as ir

__all__ = ["successor_map", "convex_parts", "connected_parts"]


def successor_map(nodes: Sequence[ir.Node], reads: Mapping[str, Sequence[ir.Value]]) -> dict[str, set[str]]:
    """``{node name: names of nodes that read one of its outputs}`` (outer-scope reads of
    subgraphs count as reads of the node that owns the subgraph)."""
    producer = {id(v): node.name for node in nodes for v in node.outputs}
    successors: dict[str, set[str]] = {node.name: set() for node in nodes}
    for node in nodes:
        for value in reads[node.name]:
            source = producer.get(id(value))
            if source is not None and source != node.name:
                successors[source].add(node.name)
    return successors


def _reentry(group: set[str], successors: Mapping[str, set[str]]) -> set[str]:
    """Nodes of ``group`` reachable from ``group`` through at least one node outside it."""
    frontier = [s for name in group for s in successors[name] if s not in group]
    seen = set(frontier)
    reentered: set[str] = set()
    while frontier:
        name = frontier.pop()
        if name in group:
            reentered.add(name)
        for nxt in successors[name]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return reentered


def convex_parts(nodes: Iterable[str], successors: Mapping[str, set[str]]) -> list[set[str]]:
    """``nodes`` split into convex sets (one set when it already is convex)."""
    parts = []
    remaining = set(nodes)
    while remaining:
        reentered = _reentry(remaining, successors)
        convex = remaining - reentered
        if not convex:  # cannot happen for an acyclic graph; guard against a loop anyway
            parts.extend({name} for name in remaining)
            break
        parts.append(convex)
        remaining = reentered
    return parts


def connected_parts(nodes: Iterable[str], successors: Mapping[str, set[str]]) -> list[set[str]]:
    """``nodes`` split into pieces connected by producer→consumer edges among themselves."""
    chosen = set(nodes)
    parent = {name: name for name in chosen}

    def find(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for name in chosen:
        for nxt in successors.get(name, ()):
            if nxt in chosen:
                parent[find(nxt)] = find(name)
    pieces: dict[str, set[str]] = {}
    for name in chosen:
        pieces.setdefault(find(name), set()).add(name)
    return list(pieces.values())
