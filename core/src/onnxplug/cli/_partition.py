"""``onnxplug partition MODEL``: which provider runs what, and why the others declined."""

from __future__ import annotations

import argparse
import collections
from typing import Any

from ..runtime import InferenceSession
from ._html import write_html


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("partition", help="show how a model is split between providers")
    parser.add_argument("model", help="path of an .onnx file")
    parser.add_argument("--providers", default="", help="comma-separated provider names, highest priority first")
    parser.add_argument("--html", metavar="OUT.html", help="also write a self-contained page drawing the graph")
    parser.set_defaults(handler=run)


def partition_report(session: InferenceSession) -> dict[str, Any]:
    """The main graph's assignment: nodes in execution order with their provider, edges between
    them, per-provider counts, fused partitions (members in order), copies, and declined reasons."""
    plan = session._require_plan()
    graph_nodes = list(session._loaded.model.graph)
    position = {node.name: i for i, node in enumerate(graph_nodes)}
    by_name = {node.name: node for node in graph_nodes}
    members = {name: sorted(part, key=position.__getitem__) for name, (_, part) in plan.partition.fused.items()}
    nodes = []
    for step in plan.steps:
        if step.node_index < 0:  # an inserted copy: listed under "copies"
            continue
        for name in members.get(step.name, [step.name]):
            nodes.append({"name": name, "op_type": by_name[name].op_type, "provider": step.provider})
    producer = {id(value): node.name for node in graph_nodes for value in node.outputs}
    edges = [
        (producer[id(value)], node["name"])
        for node in nodes
        for value in by_name[node["name"]].inputs
        if value is not None and id(value) in producer
    ]
    counts = collections.Counter(a.provider.ort_name for a in plan.partition.assignments.values())
    return {
        "nodes": nodes,
        "edges": edges,
        "counts": dict(counts),
        "partitions": members,
        "copies": [str(c) for c in plan.copies],
        "declined": plan.partition.declined,
        "providers": session.get_providers(),
    }


def run(args: argparse.Namespace) -> int:
    names = [p.strip() for p in args.providers.split(",") if p.strip()] or None
    session = InferenceSession(args.model, providers=names)
    report = partition_report(session)
    assigned = {n["name"]: n["provider"] for n in report["nodes"]}
    print(f"{args.model}: {len(report['nodes'])} nodes")
    for provider in report["providers"]:
        count = report["counts"].get(provider, 0)
        print(f"{provider}: {count} node{'s' if count != 1 else ''}")
        for name, members in report["partitions"].items():
            if members and assigned.get(members[0]) == provider:
                print(f"  fused partition {name}: {len(members)} nodes")
        declined = report["declined"].get(provider, {})
        for node, reasons in sorted(declined.items()):
            print(f"  declined {node} ({_op(report, node)}): {'; '.join(reasons)} -> {assigned.get(node, '?')}")
    print(f"copies inserted: {len(report['copies'])}")
    for copy in report["copies"]:
        print(f"  {copy}")
    if args.html:
        write_html(report, args.html, title=str(args.model))
        print(f"wrote {args.html}")
    return 0


def _op(report: dict[str, Any], node: str) -> str:
    return next((n["op_type"] for n in report["nodes"] if n["name"] == node), "?")
