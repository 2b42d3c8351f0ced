"""Session introspection with onnxruntime's shapes: EP graph assignment and memory infos.

``InferenceSession.get_provider_graph_assignment_info()`` answers, as onnxruntime does, only
when the session was created with the config entry ``session.record_ep_graph_assignment_info``
set to ``"1"``.  It is built from the session's :class:`~onnxplug.PartitionReport`: one
subgraph per fused partition, and one per provider for the nodes it runs with kernels.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ..errors import Fail
from ..graph import InMemoryData
from ._device import OrtMemoryInfo, cpu_memory_info

if TYPE_CHECKING:
    from .options import SessionOptions
    from .report import PartitionReport

__all__ = [
    "RECORD_ASSIGNMENT_KEY",
    "OrtEpAssignedNode",
    "OrtEpAssignedSubgraph",
    "assignment_info",
    "in_memory_data",
    "memory_infos",
]

RECORD_ASSIGNMENT_KEY = "session.record_ep_graph_assignment_info"


@dataclasses.dataclass(frozen=True)
class OrtEpAssignedNode:
    """A node of an assigned subgraph: ``name``, ``op_type``, ``domain``."""

    name: str
    op_type: str
    domain: str


@dataclasses.dataclass(frozen=True)
class OrtEpAssignedSubgraph:
    """Nodes one execution provider runs together; ``get_nodes()`` lists them in run order."""

    ep_name: str
    nodes: tuple[OrtEpAssignedNode, ...]

    def get_nodes(self) -> list[OrtEpAssignedNode]:
        return list(self.nodes)


def assignment_info(entries: dict[str, str], report: PartitionReport) -> list[OrtEpAssignedSubgraph]:
    """The subgraphs of ``report``, in order of first appearance.

    :raises Fail: the session was not asked to record them (onnxruntime's message).
    """
    if entries.get(RECORD_ASSIGNMENT_KEY) != "1":
        raise Fail(
            f"Session configuration entry '{RECORD_ASSIGNMENT_KEY}' must be set to \"1\" to retrieve EP graph "
            "assignment information."
        )
    groups: dict[tuple[str, str | None], list[OrtEpAssignedNode]] = {}
    for node in report.nodes:
        key = (node.provider, node.partition)
        groups.setdefault(key, []).append(OrtEpAssignedNode(node.name, node.op_type, node.domain))
    return [OrtEpAssignedSubgraph(provider, tuple(nodes)) for (provider, _), nodes in groups.items()]


def memory_infos(count: int) -> list[OrtMemoryInfo]:
    """Where ``count`` inputs (or outputs) live: host memory, for every onnxplug provider, as
    feeds are taken and results handed back as host arrays (copies to a device are the plan's)."""
    return [cpu_memory_info() for _ in range(count)]


def in_memory_data(options: SessionOptions) -> InMemoryData | None:
    """What ``add_external_initializers`` and ``add_external_initializers_from_files_in_memory``
    gave ``options``, for the loader (``None`` when neither was called)."""
    initializers = options.__dict__.get("_external_initializers", {})
    files = options.__dict__.get("_external_files", {})
    if not initializers and not files:
        return None
    return InMemoryData(initializers=dict(initializers), files=dict(files))
