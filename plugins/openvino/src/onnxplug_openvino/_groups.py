"""Turning the supported nodes into good FuseClaims: connected and convex.

A set is convex when no path leaves it and comes back; the core would split a non-convex claim
(with a warning), so the provider splits its own first: the nodes re-entered through an outside
node are moved to a later part, as the core does, and each part is cut into connected pieces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

__all__ = ["convex_groups"]


def _edges(nodes: Sequence, reads: Mapping[str, Iterable[str]] | None) -> dict[str, set[str]]:
    """``{node: nodes reading one of its outputs}`` over the view's nodes (``reads`` gives what a
    node reads when it has subgraphs reading outer values; else its inputs count)."""
    producer = {out: node.name for node in nodes for out in node.outputs if out}
    successors: dict[str, set[str]] = {node.name: set() for node in nodes}
    for node in nodes:
        values = reads.get(node.name, node.inputs) if reads is not None else node.inputs
        for value in values:
            source = producer.get(value)
            if source is not None and source != node.name:
                successors[source].add(node.name)
    return successors


def _reentered(group: set[str], successors: dict[str, set[str]]) -> set[str]:
    frontier = [s for name in group for s in successors[name] if s not in group]
    seen = set(frontier)
    found: set[str] = set()
    while frontier:
        name = frontier.pop()
        if name in group:
            found.add(name)
        for nxt in successors[name]:
            if nxt not in seen:
                seen.add(nxt)
                frontier.append(nxt)
    return found


def _connected(group: set[str], successors: dict[str, set[str]]) -> list[set[str]]:
    parent = {name: name for name in group}

    def find(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for name in group:
        for nxt in successors[name]:
            if nxt in group:
                parent[find(nxt)] = find(name)
    pieces: dict[str, set[str]] = {}
    for name in group:
        pieces.setdefault(find(name), set()).add(name)
    return list(pieces.values())


def convex_groups(
    nodes: Sequence, supported: Iterable[str], reads: Mapping[str, Iterable[str]] | None = None
) -> list[list[str]]:
    """Connected convex groups of the ``supported`` nodes, each in the view's order."""
    successors = _edges(nodes, reads)
    order = {node.name: index for index, node in enumerate(nodes)}
    remaining = {name for name in supported if name in order}
    groups: list[list[str]] = []
    pending = _connected(remaining, successors)
    while pending:
        group = pending.pop()
        back = _reentered(group, successors)
        convex = group - back
        if not convex:  # acyclic graphs always leave some; guard anyway
            groups.extend([name] for name in group)
            continue
        for piece in _connected(convex, successors):
            groups.append(sorted(piece, key=order.__getitem__))
        if back:
            pending.extend(_connected(back, successors))
    groups.sort(key=lambda g: order[g[0]])
    return groups
