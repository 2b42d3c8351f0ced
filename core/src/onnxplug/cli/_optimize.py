"""``onnxplug optimize MODEL -o OUT``: the optimizer stage on its own, with what each pass did.

The model is optimized for the providers given (rule sets apply only where a provider can run
what they produce), written to OUT, and every pass that changed something is listed with the node
counts before and after; fusions are totalled by rule set.
"""

from __future__ import annotations

import argparse

from ..runtime import GraphOptimizationLevel, InferenceSession, SessionOptions

LEVELS = {
    "disable": GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": GraphOptimizationLevel.ORT_ENABLE_ALL,
}


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("optimize", help="optimize a model and write it, listing what each pass changed")
    parser.add_argument("model", help="path of an .onnx file")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="where to write the optimized model")
    parser.add_argument(
        "--level",
        choices=sorted(LEVELS),
        default="extended",
        help="optimization level (default: extended, the highest whose output other runtimes load)",
    )
    parser.add_argument("--providers", default="", help="comma-separated provider names the model is optimized for")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    options = SessionOptions()
    options.graph_optimization_level = LEVELS[args.level]
    options.optimized_model_filepath = args.output
    names = [p.strip() for p in args.providers.split(",") if p.strip()] or None
    session = InferenceSession(args.model, options, providers=names)
    report = session.get_optimization_report()
    print(f"{args.model}: level {args.level}, providers {', '.join(session.get_providers())}")
    for item in report.passes:
        if not item.changed:
            continue
        what = ", ".join(f"{name} {count}" for name, count in sorted(item.changes.items()))
        print(f"  {item.name:<24} nodes {item.nodes_before:>6} -> {item.nodes_after:<6} {what}")
    fusions = report.fusions()
    if fusions:
        print("fusions: " + ", ".join(f"{name} {count}" for name, count in sorted(fusions.items())))
    for name, reason in sorted(report.skipped.items()):
        print(f"  not applied: {name} ({reason})")
    print(f"nodes: {report.nodes_before} -> {report.nodes_after}")
    print(f"wrote {args.output}")
    return 0
