"""``onnxplug run``: the embedded digits demo, or any model with given or random inputs."""

from __future__ import annotations

import argparse
import importlib.resources
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import OnnxplugError
from ..graph import ELEMENT_NAMES, np_dtype
from ..runtime import InferenceSession
from ._feeds import cast_given, infer_dims, parse_dims, resolve_shapes

DEMO_MODEL = "digits.onnx"
DEMO_SAMPLES = "digits_samples.npz"


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("run", help="run a model (without MODEL: the embedded digits demo)")
    parser.add_argument("model", nargs="?", help="path of an .onnx file (default: the embedded demo)")
    parser.add_argument("--providers", default="", help="comma-separated provider names, highest priority first")
    parser.add_argument("--repeat", type=int, default=1, help="run this many times and report latency")
    add_feed_arguments(parser)
    parser.set_defaults(handler=run)


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError(f"{what} expects NAME=VALUE, got {item!r}")
        pairs[name] = value
    return pairs


def _session(model: Any, providers: str) -> InferenceSession:
    names = [p.strip() for p in providers.split(",") if p.strip()] or None
    return InferenceSession(model, providers=names)


def _timed_runs(session: InferenceSession, feeds: dict[str, Any], repeat: int) -> tuple[list[Any], list[float]]:
    latencies = []
    outputs: list[Any] = []
    for _ in range(max(1, repeat)):
        start = time.perf_counter()
        outputs = session.run(None, feeds)
        latencies.append(time.perf_counter() - start)
    return outputs, latencies


def _print_providers(session: InferenceSession) -> None:
    counts = session.partition_counts()
    summary = ", ".join(f"{name}: {count} node{'s' if count != 1 else ''}" for name, count in counts.items())
    print(f"providers: {summary}")


def run(args: argparse.Namespace) -> int:
    if args.model is None:
        return run_demo(args)
    session = _session(args.model, args.providers)
    feeds, defaulted = build_feeds(args, session)
    try:
        outputs, latencies = _timed_runs(session, feeds, args.repeat)
    except OnnxplugError:
        if defaulted:
            print(
                f"hint: random inputs gave these symbolic dimensions 1: {', '.join(defaulted)}; "
                "set them with --dim NAME=V or --dim INPUT:INDEX=V",
                file=sys.stderr,
            )
        raise
    for arg, value in zip(session.get_outputs(), outputs):
        print(f"{arg.name}: {describe_value(value)}")
    print(f"median latency: {statistics.median(latencies) * 1e3:.3f} ms over {len(latencies)} run(s)")
    _print_providers(session)
    return 0


def add_feed_arguments(parser: argparse.ArgumentParser) -> None:
    """``--input``, ``--dim`` and ``--seed``: how ``run`` and ``bench`` make a model's feeds."""
    parser.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="feed an input from a .npy file (repeatable); others get random values",
    )
    parser.add_argument(
        "--dim",
        action="append",
        default=[],
        metavar="NAME=V|INPUT:INDEX=V",
        help="value of a symbolic dimension in random inputs, by name or by input and position (repeatable)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed for random inputs")


def build_feeds(args: argparse.Namespace, session: InferenceSession) -> tuple[dict[str, Any], list[str]]:
    """The feeds ``--input``/``--dim``/``--seed`` describe, and the symbolic dims that defaulted to 1."""
    given = _pairs(args.input, "--input")
    inputs = session.get_inputs()
    named, positional = parse_dims(args.dim, [arg.name for arg in inputs])
    shapes, defaulted = resolve_shapes(inputs, named, positional, infer_dims(args.model, inputs))
    rng = np.random.default_rng(args.seed)
    feeds = {arg.name: random_array(arg.type, shapes[arg.name], rng) for arg in inputs if arg.name not in given}
    declared = {arg.name: arg.type for arg in inputs} | {i.name: i.type for i in session.get_overridable_initializers()}
    for name, path in given.items():
        if name not in declared:
            raise ValueError(f"--input {name}: the model has no input named {name!r} (inputs: {sorted(declared)})")
        feeds[name], note = cast_given(name, np.load(path, allow_pickle=False), declared[name], _declared_dtype)
        if note:
            print(note, file=sys.stderr)
    return feeds, defaulted


def run_demo(args: argparse.Namespace) -> int:
    demo = importlib.resources.files("onnxplug") / "demo"
    with importlib.resources.as_file(demo / DEMO_MODEL) as model_path:
        session = _session(model_path, args.providers)
    with importlib.resources.as_file(demo / DEMO_SAMPLES) as samples_path, np.load(samples_path) as data:
        pixels, labels = data["pixels"], data["labels"]
    print(f"digits demo: {len(labels)} held-out 8x8 digits, classified by {DEMO_MODEL}")
    latencies = []
    correct = 0
    for index in range(len(labels)):
        outputs, times = _timed_runs(session, {"pixels": pixels[index : index + 1]}, max(1, args.repeat))
        latencies.extend(times)
        probabilities, predicted = outputs
        predicted_digit = int(predicted[0])
        correct += predicted_digit == int(labels[index])
        mark = "ok" if predicted_digit == int(labels[index]) else "WRONG"
        print(
            f"  sample {index:2d}: predicted {predicted_digit} (p={probabilities[0, predicted_digit]:.2f}), "
            f"true {int(labels[index])}  {mark}"
        )
    print(f"accuracy: {correct}/{len(labels)} = {correct / len(labels):.1%}")
    print(f"median latency: {statistics.median(latencies) * 1e3:.3f} ms per run")
    _print_providers(session)
    return 0


_RANDOM_INT_HIGH = 10


def _declared_dtype(type_string: str) -> np.dtype | None:
    """numpy dtype of a ``tensor(...)`` type string (``None`` for others)."""
    element = type_string[len("tensor(") : -1] if type_string.startswith("tensor(") else ""
    codes = [code for code, name in ELEMENT_NAMES.items() if name == element]
    return np.dtype(np_dtype(codes[0])) if codes and element not in ("string", "bool") else None


def random_array(type_string: str, shape: tuple[int, ...], rng: np.random.Generator) -> Any:
    if not type_string.startswith("tensor("):
        raise ValueError(f"cannot make random values of type {type_string}; pass it with --input")
    element = type_string[len("tensor(") : -1]
    if element == "string":
        return np.full(shape, "a", dtype=object)
    if element == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    codes = [code for code, name in ELEMENT_NAMES.items() if name == element]
    if not codes:
        raise ValueError(f"cannot make random values of type {type_string}; pass it with --input")
    dtype = np_dtype(codes[0])
    if dtype.kind in "iu":
        return rng.integers(0, _RANDOM_INT_HIGH, size=shape).astype(dtype)
    return rng.random(size=shape, dtype=np.float64).astype(dtype)


def describe_value(value: Any) -> str:
    """``dtype shape`` plus a short summary of the values."""
    if value is None:
        return "None (empty optional)"
    if isinstance(value, list):
        return f"sequence of {len(value)}" + (f": first {describe_value(value[0])}" if value else "")
    if isinstance(value, dict):
        return f"map of {len(value)} entries"
    array = np.asarray(value)
    head = f"{array.dtype} {list(array.shape)}"
    if array.size == 0:
        return head + " (empty)"
    if array.dtype.kind in "fc" or array.dtype.kind in "iu":
        numeric = array.astype(np.float64) if array.dtype.kind != "c" else np.abs(array)
        return head + f" min={numeric.min():.4g} max={numeric.max():.4g} mean={numeric.mean():.4g}"
    flat = array.ravel()
    return head + f" first={flat[0]!r}"
