"""``onnxplug partition MODEL``: which provider runs what, and why the others declined.

Everything printed or drawn comes from the session's public
:meth:`~onnxplug.InferenceSession.get_partition_report`, so the node counts here are the nodes
that run (folded constants are not nodes) and always add up to the total printed.
"""

from __future__ import annotations

import argparse

from ..runtime import InferenceSession
from ..runtime.report import PartitionReport
from ._html import write_html


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("partition", help="show how a model is split between providers")
    parser.add_argument("model", help="path of an .onnx file")
    parser.add_argument("--providers", default="", help="comma-separated provider names, highest priority first")
    parser.add_argument("--html", metavar="OUT.html", help="also write a self-contained page drawing the graph")
    parser.add_argument(
        "--target",
        metavar="NAME",
        help="plan for a provider whose runtime need not be here (tensorrt, directml, nnapi, coreml): "
        "what it would claim, from its capability table",
    )
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="with --target: fix a free dimension of the model's inputs and outputs before planning, repeatable",
    )
    parser.set_defaults(handler=run)


def format_report(report: PartitionReport, title: str) -> list[str]:
    """The text report's lines: totals, then per provider its count, fused partitions and the
    nodes it declined (with where they went instead), then the copies."""
    provider_of = {node.name: node.provider for node in report.nodes}
    op_of = {node.name: node.op_type for node in report.nodes}
    counts = report.counts
    lines = [f"{title}: {len(report.nodes)} nodes, {len(report.constants)} constants"]
    for provider in report.providers:
        count = counts.get(provider, 0)
        lines.append(f"{provider}: {count} node{'s' if count != 1 else ''}")
        for name, members in report.partitions.items():
            if members and provider_of.get(members[0]) == provider:
                lines.append(f"  fused partition {name}: {len(members)} nodes")
        replaced = 0
        for node, reasons in sorted(report.declined.get(provider, {}).items()):
            if node not in provider_of:  # a function op nobody claimed: its body's nodes run instead
                replaced += 1
                continue
            lines.append(f"  declined {node} ({op_of[node]}): {'; '.join(reasons)} -> {provider_of[node]}")
        if replaced:
            lines.append(f"  declined {replaced} function node{'s' if replaced != 1 else ''} later inlined")
    lines.append(f"copies inserted: {len(report.copies)}")
    lines.extend(f"  {copy}" for copy in report.copies)
    return lines


def run(args: argparse.Namespace) -> int:
    if args.target:
        return _plan(args)
    names = [p.strip() for p in args.providers.split(",") if p.strip()] or None
    session = InferenceSession(args.model, providers=names)
    report = session.get_partition_report()
    print("\n".join(format_report(report, str(args.model))))
    if args.html:
        write_html(report, args.html, title=str(args.model))
        print(f"wrote {args.html}")
    return 0


def _plan(args: argparse.Namespace) -> int:
    """``--target``: the plan from :func:`onnxplug.partition.targets.plan_for_target`."""
    from ..errors import InvalidArgument
    from ..partition.targets import plan_for_target

    if args.providers:
        raise InvalidArgument("--target plans for one target (with the CPU provider); it cannot be given --providers")
    dims = {}
    for entry in args.dim:
        name, _, value = entry.partition("=")
        if not name.strip() or not value.strip().isdigit():
            raise InvalidArgument(f"--dim takes NAME=VALUE with a non-negative integer VALUE, got {entry!r}")
        dims[name.strip()] = int(value)
    plan = plan_for_target(args.model, args.target, dims=dims)
    print("\n".join(plan.lines(str(args.model))))
    if args.html:
        write_html(plan.report, args.html, title=f"{args.model} (plan for {plan.provider})")
        print(f"wrote {args.html}")
    return 0
