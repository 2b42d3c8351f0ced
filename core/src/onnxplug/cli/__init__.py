"""The ``onnxplug`` command: ``run`` (the demo, or any model), ``bench``, ``plugins``, ``partition``,
``optimize``, ``inspect``, ``quantize``, ``validate``, ``serve`` and ``convert``."""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from ..errors import OnnxplugError
from . import _bench, _inspect, _optimize, _partition, _plugins_cmd, _quantize, _run, _validate

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnxplug", description="ONNX inference with provider plugins.")
    commands = parser.add_subparsers(dest="command", required=True)
    _run.add_parser(commands)
    _bench.add_parser(commands)
    _plugins_cmd.add_parser(commands)
    _partition.add_parser(commands)
    _optimize.add_parser(commands)
    for tool in (_inspect, _quantize, _validate):  # model tools (quant)
        tool.add_parser(commands)
    from . import _serve  # serving: its own line, so merges with other commands stay trivial

    _serve.add_parser(commands)
    from . import _convert  # target formats (coreml): its own line too

    _convert.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``onnxplug`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    saved = warnings.formatwarning
    warnings.formatwarning = _format_warning
    try:
        return int(args.handler(args) or 0)
    except (OnnxplugError, OSError, ValueError) as error:
        print(f"onnxplug {args.command}: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: a line, not a traceback; 130 is the shell's SIGINT status
        print(f"onnxplug {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.formatwarning = saved


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as one line for a command's user: the category and message, not the source line."""
    return f"{category.__name__}: {message}\n"
