"""``onnxplug convert MODEL --to TARGET -o OUT``: the whole model in a target's own format.

The converter belongs to the target's plugin (its factory's ``convert_model(model, out,
options)``), so the core imports no vendor tool; ``--to coreml`` writes an ``.mlpackage`` on any
machine.  A model the target cannot take whole fails naming every node it cannot translate.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import InvalidArgument


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("convert", help="convert a whole model to a target's format (coreml: .mlpackage)")
    parser.add_argument("model", help="path of an .onnx file")
    parser.add_argument("--to", required=True, metavar="TARGET", help="the target plugin (coreml)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="where to write (OUT.mlpackage)")
    parser.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="a provider option, repeatable"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from .._plugins import default_environment
    from ..partition.targets._plan import _importable_factory

    options = {}
    for item in args.option:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidArgument(f"--option {item!r}: expected KEY=VALUE")
        options[key] = value
    factory = default_environment().factory(args.to) or _importable_factory(args.to)
    convert = getattr(factory, "convert_model", None)
    if convert is None:
        found = "is not installed" if factory is None else "has no converter"
        raise InvalidArgument(f"no converter for target '{args.to}': its provider plugin {found}")
    written = convert(args.model, args.output, options)
    print(f"wrote {written}", file=sys.stdout)
    return 0
