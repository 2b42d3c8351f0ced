"""``python -m onnxplug.tools.check_model_usability MODEL --target nnapi``: can a model run on a
deployment target, and which nodes would fall back?

The target planning (nnapi, tensorrt, directml, coreml) is onnxplug's partition planner for
targets; this module is its command-line front.  Where the planner is not installed, it says so
and exits with status 2 rather than guessing.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

TARGETS = ("nnapi", "tensorrt", "directml", "coreml")
# Where the target planner lives, and the function that runs the check and prints its report.
_PLANNER_MODULE = "onnxplug.partition.targets"
_PLANNER_FUNCTION = "check_usability"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m onnxplug.tools.check_model_usability",
        description="Check whether a model can run on a deployment target, and what would fall back.",
    )
    parser.add_argument("model", help="path of an .onnx file")
    parser.add_argument("--target", required=True, choices=TARGETS)
    args, rest = parser.parse_known_args(argv)
    try:
        planner = importlib.import_module(_PLANNER_MODULE)
        check = getattr(planner, _PLANNER_FUNCTION)
    except (ImportError, AttributeError):
        print(
            f"check_model_usability: planning for target '{args.target}' is not installed "
            f"({_PLANNER_MODULE}.{_PLANNER_FUNCTION} is missing from this onnxplug)",
            file=sys.stderr,
        )
        return 2
    return int(check(args.model, target=args.target, argv=rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
