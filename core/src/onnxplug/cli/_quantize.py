"""``onnxplug quantize MODEL -o OUT``: onnxplug.quantization from the command line.

Without ``--calibration`` the model is quantized dynamically (weights ahead, activations at run
time).  With ``--calibration DIR`` it is quantized statically, calibrated on the ``.npy`` files
there: ``INPUT.npy`` or ``INPUT_<n>.npy`` (any suffix), one sample per file for a one-input
model, or one sub-folder per sample holding ``<input name>.npy`` files.  Calibration shows a
progress bar.  ``--pre-process`` runs ``quant_pre_process`` first (constant folding: models
that compute their weights, as the onnx wheel's light models do with ConstantOfShape, have no
constant weights to quantize otherwise); a model that comes out with nothing quantized gets a
warning saying so.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import onnx

from ..errors import InvalidArgument
from ._progress import progress


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("quantize", help="quantize a model (dynamic, or static with .npy calibration samples)")
    parser.add_argument("model", help="path of an .onnx file")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.onnx")
    parser.add_argument("--calibration", metavar="DIR", help="folder of .npy samples: static quantization")
    parser.add_argument("--format", choices=["QDQ", "QOperator"], default="QDQ", help="static format (default QDQ)")
    parser.add_argument("--method", choices=["MinMax", "Entropy", "Percentile"], default="MinMax")
    parser.add_argument("--activation-type", choices=["QInt8", "QUInt8", "QInt16", "QUInt16"], default="QInt8")
    parser.add_argument("--weight-type", choices=["QInt8", "QUInt8", "QInt16", "QUInt16"], default="QInt8")
    parser.add_argument("--per-channel", action="store_true")
    parser.add_argument("--reduce-range", action="store_true")
    parser.add_argument("--exclude", default="", help="comma-separated node names to leave float")
    parser.add_argument("--op-types", default="", help="comma-separated operator types to quantize (default: all)")
    parser.add_argument("--providers", default="", help="providers calibration runs on (default: the usual choice)")
    parser.add_argument(
        "--pre-process", action="store_true", help="run quant_pre_process first (fold constants, infer shapes)"
    )
    parser.set_defaults(handler=run)


class FolderReader:
    """Calibration samples from a folder of .npy files (see the module docstring)."""

    def __init__(self, folder: str, input_names: list[str]):
        if not os.path.isdir(folder):
            raise InvalidArgument(f"--calibration {folder!r} is not a folder")
        entries = sorted(os.listdir(folder))
        subdirs = [e for e in entries if os.path.isdir(os.path.join(folder, e))]
        self.samples: list[str | dict] = []
        if subdirs:
            for sub in subdirs:
                path = os.path.join(folder, sub)
                missing = [n for n in input_names if not os.path.isfile(os.path.join(path, _file_name(n)))]
                if missing:
                    raise InvalidArgument(f"calibration sample {path!r} has no file for inputs {missing}")
                self.samples.append({n: os.path.join(path, _file_name(n)) for n in input_names})
        else:
            files = [os.path.join(folder, e) for e in entries if e.endswith(".npy")]
            if len(input_names) != 1:
                raise InvalidArgument(
                    f"the model has {len(input_names)} inputs: give one sub-folder per sample with "
                    f"{', '.join(_file_name(n) for n in input_names)}"
                )
            self.samples = [{input_names[0]: f} for f in files]
        if not self.samples:
            raise InvalidArgument(f"--calibration {folder!r} holds no .npy samples")
        self.index = 0

    def __len__(self) -> int:
        return len(self.samples)

    def get_next(self):
        if self.index >= len(self.samples):
            return None
        sample = self.samples[self.index]
        self.index += 1
        return {name: np.load(path) for name, path in sample.items()}


def _file_name(input_name: str) -> str:
    return input_name.replace("/", "_").replace(":", "_") + ".npy"


def _names(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def run(args: argparse.Namespace) -> int:
    if not args.pre_process:
        return _quantize(args, args.model)
    from ..quantization import quant_pre_process

    with tempfile.TemporaryDirectory() as folder:
        prepared = os.path.join(folder, "pre_processed.onnx")
        quant_pre_process(args.model, prepared)
        return _quantize(args, prepared)


#: Ops whose presence shows that something was quantized.
_QUANTIZED_OPS = frozenset({"QuantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul"})


def _quantize(args: argparse.Namespace, source: str) -> int:
    from .. import quantization as q

    common = dict(
        per_channel=args.per_channel,
        reduce_range=args.reduce_range,
        weight_type=q.QuantType[args.weight_type],
        nodes_to_exclude=_names(args.exclude),
        op_types_to_quantize=_names(args.op_types) or None,
    )
    if args.calibration is None:
        q.quantize_dynamic(source, args.output, **common)
        print(f"wrote {args.output} (dynamic, weights {args.weight_type})")
        _warn_if_unquantized(args)
        return 0
    model = onnx.load(source, load_external_data=False)
    initializers = {i.name for i in model.graph.initializer}
    reader = FolderReader(args.calibration, [i.name for i in model.graph.input if i.name not in initializers])
    with progress(len(reader), "calibrating") as update:
        q.quantize_static(
            source,
            args.output,
            reader,
            quant_format=q.QuantFormat[args.format],
            activation_type=q.QuantType[args.activation_type],
            calibrate_method=q.CalibrationMethod[args.method],
            calibration_providers=_names(args.providers) or None,
            progress=update,
            **common,
        )
    print(f"wrote {args.output} ({args.format}, {args.method} over {len(reader)} samples)")
    _warn_if_unquantized(args)
    return 0


def _warn_if_unquantized(args: argparse.Namespace) -> None:
    ops = {node.op_type for node in onnx.load(args.output, load_external_data=False).graph.node}
    if not ops & _QUANTIZED_OPS:
        hint = "" if args.pre_process else "; weights computed by the graph need --pre-process to fold them"
        print(f"onnxplug quantize: warning: nothing was quantized in {args.model}{hint}", file=sys.stderr)
