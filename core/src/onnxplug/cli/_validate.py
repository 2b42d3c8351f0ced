"""``onnxplug validate MODEL --providers A,B``: run the model on two providers and report the
first node whose outputs differ beyond tolerance, with the values (``onnxplug.tools.validate``).
Exit status 0 when they agree, 3 when they diverge."""

from __future__ import annotations

import argparse
import os

import numpy as np
import onnx

from ..errors import InvalidArgument
from ..tools.validate import first_divergence, random_feeds
from ._progress import progress


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("validate", help="find the first node where two providers' results differ")
    parser.add_argument("model", help="path of an .onnx file")
    parser.add_argument("--providers", required=True, metavar="A,B", help="two provider names, comma-separated")
    parser.add_argument("--samples", type=int, default=1, help="random input samples to compare (default 1)")
    parser.add_argument("--inputs", metavar="DIR", help="a folder of <input>.npy files: one given sample instead")
    parser.add_argument("--rtol", type=float, default=1e-3)
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, environment=None) -> int:
    names = [p.strip() for p in args.providers.split(",") if p.strip()]
    if len(names) != 2:
        raise InvalidArgument(f"--providers needs two names, got {args.providers!r}")
    model = onnx.load(args.model)
    if args.inputs:
        initializers = {i.name for i in model.graph.initializer}
        wanted = [i.name for i in model.graph.input if i.name not in initializers]
        feeds = [{n: np.load(os.path.join(args.inputs, n.replace("/", "_") + ".npy")) for n in wanted}]
    else:
        feeds = random_feeds(model, args.samples, args.seed)
    with progress(len(feeds), "validating") as update:
        found = first_divergence(
            model,
            [names[0]],
            [names[1]],
            feeds,
            rtol=args.rtol,
            atol=args.atol,
            environment=environment,
            progress=update,
        )
    if found is None:
        print(f"{args.model}: {names[0]} and {names[1]} agree on every node output over {len(feeds)} sample(s)")
        return 0
    print(found.describe(names[0], names[1]))
    return 3
