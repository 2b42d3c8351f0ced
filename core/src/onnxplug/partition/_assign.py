"""Claim collection and node assignment.

Providers are asked in priority order; the first valid claim on a node wins.  Every claim is
checked: the node must exist and a KernelClaim must resolve to a kernel the provider may use.
A provider whose ``capability`` raises is warned about and skipped.  A node nobody claims is
replaced by its function body when it has one (see ``_inline``) and the new nodes are offered
again; a node that still has no taker is an error that says, per provider, why it was declined.
"""

from __future__ import annotations

import dataclasses
import difflib
import warnings
from collections.abc import Mapping, Sequence

import onnx.defs
import onnx_ir as ir

from ..api import FuseClaim, KernelClaim, KernelLookup, Provider
from ..errors import Fail, InvalidGraph, NotImplemented  # noqa: A004 - onnxruntime's name
from ..graph import GraphView, NodeView, convex_parts, node_reads, successor_map
from ..kernels import STANDARD_DOMAINS, KernelDef
from ._inline import CHAIN_KEY, FunctionInliner, FunctionKey, node_opsets

__all__ = ["Assignment", "InliningNeeded", "PartitionResult", "ProviderSlot", "partition_graph"]


@dataclasses.dataclass(frozen=True)
class ProviderSlot:
    """A provider taking part in a session, with the kernels it may use."""

    provider: Provider
    kernels: KernelLookup


@dataclasses.dataclass(frozen=True)
class Assignment:
    """Who runs a node: with a kernel (KernelClaim), or inside a fused partition (FuseClaim)."""

    provider: Provider
    kernel: KernelDef | None
    partition: str | None = None


@dataclasses.dataclass
class PartitionResult:
    """The outcome: an assignment per node name, and each provider's reasons for declining."""

    assignments: dict[str, Assignment]
    declined: dict[str, dict[str, list[str]]]
    #: How many function-op nodes were replaced by their bodies (the graph was edited).
    inlined: int = 0
    #: Fused partitions: name → (provider, node names).
    fused: dict[str, tuple[Provider, frozenset[str]]] = dataclasses.field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        """Nodes per provider (onnxruntime name)."""
        totals: dict[str, int] = {}
        for assignment in self.assignments.values():
            name = assignment.provider.ort_name
            totals[name] = totals.get(name, 0) + 1
        return totals


class InliningNeeded(Exception):
    """Raised by :func:`partition_graph` called with ``may_edit=False`` where a node nobody
    claims has a function body to inline: the caller partitions an editable copy instead."""

    def __init__(self, node: ir.Node) -> None:
        super().__init__(f"node '{node.name}' ({node.op_type}) is to be replaced by its function body")
        self.node = node


def _warn(message: str) -> None:
    warnings.warn(message, UserWarning, stacklevel=4)


def partition_graph(
    graph: ir.Graph,
    nodes: Sequence[ir.Node],
    opsets: Mapping[str, int],
    slots: Sequence[ProviderSlot],
    *,
    functions: Mapping[FunctionKey, ir.Function] | None = None,
    may_edit: bool = True,
) -> PartitionResult:
    """Assign every node of ``graph`` (given in execution order) to a provider.

    Nodes nobody claims that have a function body (an ONNX schema function or one of the
    model's ``functions``) are inlined into ``graph`` and their body nodes offered in turn, so the
    graph may have changed when this returns (``PartitionResult.inlined``).

    :param functions: the model's local functions by ``(domain, name, overload)``.
    :param may_edit: ``False``: raise :class:`InliningNeeded` instead of inlining (``graph`` is
        left as it is; the providers have been asked about its nodes).
    :raises NotImplemented: a node no provider claims (with each provider's reason).
    :raises InvalidGraph: an op unknown in a standard domain; a recursive function.
    :raises Fail: an op of a custom domain no installed library provides.
    """
    result = PartitionResult({}, {})
    assignments, declined = result.assignments, result.declined
    inliner = FunctionInliner(graph, opsets, functions)
    pending = list(nodes)
    while pending:
        _offer(graph, pending, opsets, slots, result)
        expanded: list[ir.Node] = []
        for node in pending:
            if node.name in assignments:
                continue
            if not may_edit and inliner.body(node) is not None:
                raise InliningNeeded(node)
            body = inliner.expand(node)
            if body is None:
                view = GraphView(graph, node_opsets(node, opsets), [node])
                raise _unclaimed_error(view.node(node.name), node, node_opsets(node, opsets), declined)
            expanded.extend(body)
        pending = expanded
    result.inlined = inliner.count
    return result


def _offer(
    graph: ir.Graph,
    nodes: Sequence[ir.Node],
    opsets: Mapping[str, int],
    slots: Sequence[ProviderSlot],
    result: PartitionResult,
) -> None:
    """Ask every provider about ``nodes``, one view per set of opsets (inlined bodies resolve
    their ops with the opsets they were written for)."""
    assignments, declined = result.assignments, result.declined
    successors: dict[str, set[str]] | None = None
    groups: dict[tuple[tuple[str, int], ...], tuple[Mapping[str, int], list[ir.Node]]] = {}
    for node in nodes:
        node_sets = node_opsets(node, opsets)
        groups.setdefault(tuple(sorted(node_sets.items())), (node_sets, []))[1].append(node)
    for group_opsets, group in groups.values():
        view = GraphView(graph, group_opsets, group)
        for slot in slots:
            provider = slot.provider
            view.begin_query(provider.name)
            try:
                claims = list(provider.capability(view, slot.kernels) or ())
            except Exception as error:  # noqa: BLE001 - a faulty plugin must not stop the session
                _warn(
                    f"provider '{provider.name}' failed in capability() and is skipped: {type(error).__name__}: {error}"
                )
                claims = []
            try:
                for claim in claims:
                    if isinstance(claim, KernelClaim):
                        _accept_kernel_claim(view, slot, claim, assignments)
                    elif isinstance(claim, FuseClaim):
                        if successors is None:
                            every = list(graph)
                            successors = successor_map(every, {n.name: node_reads(n) for n in every})
                        _accept_fuse_claim(view, provider, claim, result, successors)
                    else:
                        _warn(f"provider '{provider.name}' returned {claim!r}, which is not a claim; ignored")
            finally:
                per_node = declined.setdefault(provider.ort_name, {})
                for name, reasons in view.end_query().items():
                    per_node.setdefault(name, []).extend(reasons)


def _accept_kernel_claim(
    view: GraphView, slot: ProviderSlot, claim: KernelClaim, assignments: dict[str, Assignment]
) -> None:
    provider = slot.provider
    if claim.node not in view:
        _warn(f"provider '{provider.name}' claimed node '{claim.node}', which is not in the graph; ignored")
        return
    if claim.node in assignments:
        return
    node = view.node(claim.node)
    kernel = slot.kernels.resolve(node)
    if kernel is None:
        _warn(
            f"provider '{provider.name}' claimed node '{node.name}' ({node.key_string()}) but has no "
            "kernel registered for it; ignored"
        )
        return
    assignments[claim.node] = Assignment(provider, kernel)


def _accept_fuse_claim(
    view: GraphView, provider: Provider, claim: FuseClaim, result: PartitionResult, successors: Mapping[str, set[str]]
) -> None:
    """Accept the convex parts of a FuseClaim's still-unassigned nodes (warning when split)."""
    unknown = [name for name in claim.nodes if name not in view]
    if unknown:
        _warn(
            f"provider '{provider.name}' claimed nodes {unknown[:5]} in a FuseClaim, which are not in the graph; "
            "they are ignored"
        )
    free = {name for name in claim.nodes if name in view and name not in result.assignments}
    if not free:
        return
    parts = convex_parts(free, successors)
    if len(parts) > 1:
        _warn(
            f"provider '{provider.name}' claimed a non-convex set of {len(free)} nodes (a path leaves it and "
            f"comes back); it was split into {len(parts)} convex partitions"
        )
    for part in parts:
        name = claim.name if claim.name and len(parts) == 1 and claim.name not in result.fused else ""
        name = name or f"{provider.name}_partition_{len(result.fused)}"
        result.fused[name] = (provider, frozenset(part))
        for node in part:
            result.assignments[node] = Assignment(provider, None, name)


def _unclaimed_error(
    node: NodeView, ir_node: ir.Node, opsets: Mapping[str, int], declined: dict[str, dict[str, list[str]]]
) -> Exception:
    version = opsets.get(node.domain)
    chain = ir_node.meta.get(CHAIN_KEY, ())
    origin = ""
    if chain:
        domain, name, _ = chain[0]
        origin = f" (inlined from the body of {domain or 'ai.onnx'}::{name})"
    if node.since_version is None:
        if node.domain in STANDARD_DOMAINS:
            return InvalidGraph(
                f"No Op registered for {node.op_type} with domain_version of {version} "
                f"(node '{node.name}', domain '{node.domain or 'ai.onnx'}'){origin}"
            )
        if version is None:
            return InvalidGraph(
                f"node '{node.name}' uses domain '{node.domain}', which the model does not import in "
                f"opset_import{origin}"
            )
        return _unknown_custom_op(node, version)
    reasons = []
    for provider, per_node in declined.items():
        why = "; ".join(per_node.get(node.name, [])) or "did not claim it"
        reasons.append(f"{provider}: {why}")
    return NotImplemented(
        f"Could not find an implementation for {node.op_type}({node.since_version}) node with name "
        f"'{node.name}' ({node.key_string()}){origin}. " + " | ".join(reasons)
    )


# Domains of ops that only onnxruntime itself can run, with what they are and what to do instead.
_NOT_PORTABLE = {
    "com.microsoft.nchwc": (
        "onnxruntime's NCHWc ops: its ORT_ENABLE_ALL optimizer (NchwcTransformer) rewrites convolutions "
        "and pooling into a blocked channel layout sized for the vector width of the machine that saved "
        "the model, so such a model is layout- and machine-specific, not portable ONNX. Load the original "
        "model, or save a portable one with SessionOptions.graph_optimization_level = ORT_ENABLE_EXTENDED "
        "(or lower) and optimized_model_filepath"
    ),
}


def _unknown_custom_op(node: NodeView, version: int) -> Exception:
    """The error for an op no schema declares, in a custom domain the model imports: a known
    non-portable onnxruntime domain, an op library of the domain that lacks the op (or has it
    only from a later version), or no library of the domain at all."""
    what = f"{node.domain}:{node.op_type}({version}) is not a registered function/op (node '{node.name}')"
    if node.domain in _NOT_PORTABLE:
        return NotImplemented(f"{what}. It is one of {_NOT_PORTABLE[node.domain]}.")
    # onnx.defs holds the schemas every loaded op library registered (process-wide).
    declared = [s for s in onnx.defs.get_all_schemas_with_history() if s.domain == node.domain]
    if not declared:
        return Fail(
            f"{what}. No installed op library provides domain '{node.domain}': install the plugin that does, or "
            "register one with SessionOptions.register_custom_ops_library(...)"
        )
    later = sorted(s.since_version for s in declared if s.name == node.op_type)
    if later:
        return Fail(
            f"{what}. The op library installed for domain '{node.domain}' declares {node.op_type} from version "
            f"{later[0]} on, and the model imports '{node.domain}' version {version}"
        )
    names = sorted({s.name for s in declared})
    close = difflib.get_close_matches(node.op_type, names, n=3)
    hint = f" (similar names: {', '.join(close)})" if close else ""
    return Fail(
        f"{what}. An op library for domain '{node.domain}' is installed, but it does not provide "
        f"{node.op_type}: it declares {len(names)} ops of that domain{hint}. Install a version of the "
        "library that has the op, or register one that does with SessionOptions.register_custom_ops_library(...)"
    )
