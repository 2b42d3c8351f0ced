"""Session-creation time: onnxplug with the OpenVINO provider against onnxruntime (CPU).

    python scripts/bench_creation.py                      # every model, 3 rounds each
    python scripts/bench_creation.py --models control squeezenet --rounds 5

Creation is what a user waits for before the first ``run``: loading, partitioning, OpenVINO's
capability query (its ONNX frontend's ``convert_partially``) and compiling each partition.  The
in-process caches of onnxplug-openvino (capability by model content, compiled models by content)
are cleared before every timed creation, so each round pays the full price, as a fresh process
would.  The table shows the median of the rounds and how many ``convert_partially`` and
``compile_model`` calls one creation made.

Models: ``control``, a 5-node model with an If and a Loop whose body holds a Det, which OpenVINO
cannot convert (so the Loop runs on the CPU provider and its body is split between providers),
and the light model-zoo classics shipped in the onnx wheel, as shipped (IR 3: weights are
overridable inputs) and with constant weights (``-const``).
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import onnx

REPO = Path(__file__).resolve().parent.parent

LIGHT = ("squeezenet", "resnet50", "densenet121", "inception_v2", "vgg19")


def control_model() -> bytes:
    """The plugin test's Relu → If → Loop → Sigmoid → Mul model (``_control_flow_model`` in
    plugins/openvino/tests/test_openvino.py, loaded by path: the tests folder is no package)."""
    import importlib.util

    path = REPO / "plugins" / "openvino" / "tests" / "test_openvino.py"
    spec = importlib.util.spec_from_file_location("onnxplug_openvino_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._control_flow_model().SerializeToString()


def light_model(name: str, constant_weights: bool) -> bytes | None:
    from onnx.backend.test import loader

    if not os.path.exists(os.path.join(loader.DATA_DIR, "light", f"light_{name}.onnx")):
        return None
    if constant_weights:
        from bench import light_model as constant_light_model  # scripts/bench.py, beside this one

        return constant_light_model(name).SerializeToString()
    return onnx.load(os.path.join(loader.DATA_DIR, "light", f"light_{name}.onnx")).SerializeToString()


class CallCounter:
    """Counts the OpenVINO calls a creation makes by wrapping the classes' methods."""

    def __init__(self) -> None:
        import openvino as ov

        self.counts: collections.Counter[str] = collections.Counter()
        frontend = type(ov.frontend.FrontEndManager().load_by_framework("onnx"))
        for cls, name in ((frontend, "convert_partially"), (ov.Core, "compile_model")):
            original = getattr(cls, name)
            setattr(cls, name, self._wrap(name, original))

    def _wrap(self, name, original):
        def counted(*args, **kwargs):
            self.counts[name] += 1
            return original(*args, **kwargs)

        return counted


def time_onnxplug(data: bytes, counter: CallCounter) -> tuple[float, dict[str, int]]:
    import onnxplug
    import onnxplug_openvino

    onnxplug_openvino.clear_caches()
    counter.counts.clear()
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnxplug.InferenceSession(data, providers=["OpenVINOExecutionProvider"])
    return time.perf_counter() - start, dict(counter.counts)


def time_onnxruntime(data: bytes) -> float:
    import onnxruntime

    start = time.perf_counter()
    onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"])
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = ["control", *(f"{n}{s}" for n in LIGHT for s in ("", "-const"))]
    parser.add_argument("--models", nargs="*", default=names, help=f"any of {', '.join(names)}")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    counter = CallCounter()
    # One creation each first, untimed: importing openvino, its Core and device plugins, and
    # onnxruntime's own start-up are paid once per process, not per session.
    time_onnxplug(control_model(), counter)
    time_onnxruntime(control_model())
    print(f"{'model':<22} {'onnxplug+OV ms':>14} {'onnxruntime ms':>14} {'ratio':>6}  calls")
    for name in args.models:
        if name == "control":
            data = control_model()
        else:
            base, _, kind = name.partition("-")
            data = light_model(base, kind == "const")
        if data is None:
            print(f"{name:<22} (not in this onnx wheel)")
            continue
        ours, theirs, calls = [], [], {}
        for _ in range(args.rounds):
            seconds, calls = time_onnxplug(data, counter)
            ours.append(seconds)
            theirs.append(time_onnxruntime(data))
        a, b = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
        text = ", ".join(f"{k} {v}" for k, v in sorted(calls.items()))
        print(f"{name:<22} {a:>14.1f} {b:>14.1f} {a / b:>6.2f}  {text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
