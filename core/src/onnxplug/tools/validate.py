"""Where do two providers' results part?  Every intermediate tensor of a model is compared, node
by node in execution order, and the first node whose outputs differ beyond tolerance is reported
with the values: the provider bug is usually at that node, and everything after it inherits it.

Both sessions run with graph optimizations disabled so that every node of the file exists in
both and its outputs can be read (they are added as graph outputs).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np
import onnx

from ..errors import InvalidArgument

__all__ = ["Divergence", "first_divergence", "random_feeds"]

_NP = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.BOOL: np.bool_,
}


@dataclasses.dataclass(frozen=True)
class Divergence:
    """The first disagreement: node, output, sample, and the values at the worst element."""

    node: str
    op_type: str
    output: str
    sample: int
    index: tuple[int, ...]
    value_a: object
    value_b: object
    max_abs_diff: float
    mismatched: int
    size: int

    def describe(self, a: str = "A", b: str = "B") -> str:
        return (
            f"first divergence at node '{self.node}' ({self.op_type}), output '{self.output}', sample {self.sample}: "
            f"{self.mismatched} of {self.size} elements differ; max |diff| {self.max_abs_diff:.6g} at index "
            f"{list(self.index)}: {a} {self.value_a!r} vs {b} {self.value_b!r}"
        )


def random_feeds(model: onnx.ModelProto, count: int, seed: int = 0) -> list[dict]:
    """Seeded inputs from the declared types and shapes (symbolic dimensions become 1)."""
    rng = np.random.default_rng(seed)
    initializers = {i.name for i in model.graph.initializer}
    feeds = []
    for _ in range(count):
        feed = {}
        for value in model.graph.input:
            if value.name in initializers:
                continue
            tensor = value.type.tensor_type
            dtype = _NP.get(tensor.elem_type)
            if dtype is None:
                raise InvalidArgument(f"input '{value.name}': no random values for element type {tensor.elem_type}")
            shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tensor.shape.dim]
            if np.dtype(dtype).kind == "f":
                feed[value.name] = rng.standard_normal(shape).astype(dtype)
            elif dtype is np.bool_:
                feed[value.name] = rng.random(shape) < 0.5
            else:
                feed[value.name] = rng.integers(0, 8, shape).astype(dtype)
        feeds.append(feed)
    return feeds


def _expose_all(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[tuple[onnx.NodeProto, str]]]:
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - types are then taken only where the file declares them
        inferred = model
    types = {}
    for info in [*inferred.graph.value_info, *inferred.graph.output]:
        if info.type.HasField("tensor_type") and info.type.tensor_type.elem_type:
            types[info.name] = info.type.tensor_type.elem_type
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    watched = []
    for node in model.graph.node:
        for name in node.output:
            if not name or name not in types:
                continue
            watched.append((node, name))
            if name not in present:
                exposed.graph.output.append(onnx.helper.make_tensor_value_info(name, types[name], None))
                present.add(name)
    return exposed, watched


def _session(model_bytes, providers, environment):
    from ..runtime import GraphOptimizationLevel, InferenceSession, SessionOptions

    options = SessionOptions()
    options.graph_optimization_level = GraphOptimizationLevel.ORT_DISABLE_ALL
    return InferenceSession(model_bytes, options, providers=list(providers), environment=environment)


def first_divergence(
    model: str | onnx.ModelProto,
    providers_a: Sequence[str],
    providers_b: Sequence[str],
    feeds: Sequence[dict],
    *,
    rtol: float = 1e-3,
    atol: float = 1e-4,
    environment=None,
    progress: Callable[[int], None] | None = None,
) -> Divergence | None:
    """The first node (execution order, then sample order) whose outputs differ, or None.

    Floats compare with ``|a - b| <= atol + rtol * |b|`` (NaN equal to NaN), other types exactly.
    """
    proto = onnx.load(model) if isinstance(model, str) else model
    exposed, watched = _expose_all(proto)
    data = exposed.SerializeToString()
    first, second = _session(data, providers_a, environment), _session(data, providers_b, environment)
    names = [name for _, name in watched]
    for sample, feed in enumerate(feeds):
        values_a = dict(zip(names, first.run(names, feed), strict=True))
        values_b = dict(zip(names, second.run(names, feed), strict=True))
        for node, name in watched:
            found = _compare(node, name, sample, values_a[name], values_b[name], rtol, atol)
            if found is not None:
                return found
        if progress is not None:
            progress(sample + 1)
    return None


def _compare(node, name, sample, a, b, rtol, atol) -> Divergence | None:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return Divergence(node.name, node.op_type, name, sample, (), a.shape, b.shape, float("inf"), a.size, b.size)
    if a.dtype.kind in "fc":
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        diff = np.abs(a64 - b64)
        bad = ~((diff <= atol + rtol * np.abs(b64)) | (np.isnan(a64) & np.isnan(b64)))
        diff = np.where(np.isnan(diff), np.inf, diff)
    else:
        bad = a != b
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) if a.dtype.kind in "iub" else bad.astype(float)
    if not bad.any():
        return None
    worst = np.unravel_index(int(np.argmax(np.where(bad, diff, -1))), a.shape) if a.ndim else ()
    return Divergence(
        node.name,
        node.op_type,
        name,
        sample,
        tuple(int(i) for i in worst),
        a[worst].item(),
        b[worst].item(),
        float(diff[worst]),
        int(bad.sum()),
        int(a.size),
    )
