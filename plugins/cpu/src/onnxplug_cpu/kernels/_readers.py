"""Who reads each value of a graph: what the CPU provider's chain finders (QDQ chains, linear
pipelines) ask before fusing, since a value read by anything outside a chain must stay."""

from __future__ import annotations

from onnxplug.graph import GraphView

__all__ = ["value_readers"]


def value_readers(graph: GraphView) -> dict[str, list]:
    """Value name → the nodes reading it, in graph order (a node reading a value twice is
    listed twice)."""
    readers: dict[str, list] = {}
    for node in graph.nodes:
        for value in node.inputs:
            if value:
                readers.setdefault(value, []).append(node)
    return readers
