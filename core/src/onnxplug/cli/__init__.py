"""The ``onnxplug`` command: ``run`` (the demo, or any model), ``plugins``, ``partition`` and
``optimize``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import OnnxplugError
from . import _optimize, _partition, _plugins_cmd, _run

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnxplug", description="ONNX inference with provider plugins.")
    commands = parser.add_subparsers(dest="command", required=True)
    _run.add_parser(commands)
    _plugins_cmd.add_parser(commands)
    _partition.add_parser(commands)
    _optimize.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onnxplug`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except (OnnxplugError, OSError, ValueError) as error:
        print(f"onnxplug {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
