"""``onnxplug partition MODEL``: which provider runs what, and why the others declined."""

from __future__ import annotations

import argparse
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
    """The session's public partition report as plain dicts and lists, for the text and HTML
    output: nodes in execution order with their provider, edges between them, per-provider
    counts, fused partitions, copies, and declined reasons."""
    report = session.get_partition_report()
    return {
        "nodes": [{"name": n.name, "op_type": n.op_type, "provider": n.provider} for n in report.nodes],
        "edges": [(source, target) for source, target, _ in report.edges],
        "counts": report.counts,
        "partitions": {name: list(members) for name, members in report.partitions.items()},
        "copies": [str(c) for c in report.copies],
        "declined": {p: {n: list(r) for n, r in per.items()} for p, per in report.declined.items()},
        "providers": list(report.providers),
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
