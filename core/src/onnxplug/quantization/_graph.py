"""Graph bookkeeping the quantizers share: tensor types, initializers, node naming, topological
order, and the quantization of constants (weights per tensor or per channel, biases in int32)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import InvalidArgument, InvalidGraph
from .quant_utils import compute_scale_zp, get_qmin_qmax_for_qType, quantize_nparray


class GraphState:
    """A top-level graph being rewritten: the nodes emitted so far, the initializers (added
    ones included) and fresh names."""

    def __init__(self, model: onnx.ModelProto):
        inferred = model
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
        except Exception:  # noqa: BLE001 - shape inference is a help for typing, not a requirement
            inferred = model
        self.model = model
        graph = model.graph
        self.types: dict[str, int] = {}
        for info in [*inferred.graph.value_info, *graph.input, *graph.output]:
            if info.type.HasField("tensor_type"):
                self.types[info.name] = info.type.tensor_type.elem_type
        self.initializers = {init.name: init for init in graph.initializer}
        for init in graph.initializer:
            self.types[init.name] = init.data_type
        self.graph_outputs = {o.name for o in graph.output}
        self.nodes: list[onnx.NodeProto] = []
        self.new_initializers: list[onnx.TensorProto] = []
        self._names = {n.name for n in graph.node} | set(self.types)
        for node in graph.node:
            self._names.update(node.output)
        self._counter = 0
        self.weights_cache: dict[tuple, tuple] = {}

    def is_float(self, name: str) -> bool:
        """True where the tensor is float32 (or of unknown type: shape inference left it open)."""
        return bool(name) and self.types.get(name, TensorProto.FLOAT) == TensorProto.FLOAT

    def constant(self, name: str) -> np.ndarray | None:
        init = self.initializers.get(name)
        return None if init is None else numpy_helper.to_array(init)

    def unique(self, base: str) -> str:
        name = base
        while name in self._names:
            self._counter += 1
            name = f"{base}_{self._counter}"
        self._names.add(name)
        return name

    def add_initializer(self, base: str, array: np.ndarray) -> str:
        name = self.unique(base)
        tensor = numpy_helper.from_array(np.asarray(array), name)
        self.new_initializers.append(tensor)
        self.initializers[name] = tensor
        self.types[name] = tensor.data_type
        return name

    def emit(self, op_type: str, inputs, outputs, name: str, domain: str = "", **attrs) -> onnx.NodeProto:
        node = helper.make_node(op_type, list(inputs), list(outputs), name=self.unique(name), domain=domain, **attrs)
        self.nodes.append(node)
        return node

    def finish(self, drop_initializers: set[str] = frozenset()) -> onnx.ModelProto:
        """The rewritten model: emitted nodes in topological order, unused initializers dropped."""
        out = onnx.ModelProto()
        out.CopyFrom(self.model)
        graph = out.graph
        del graph.node[:]
        graph.node.extend(_toposort(self.nodes, {i.name for i in self.model.graph.input} | set(self.initializers)))
        used = {name for node in graph.node for name in node.input} | self.graph_outputs
        kept = [i for i in self.model.graph.initializer if i.name in used and i.name not in drop_initializers]
        kept += [i for i in self.new_initializers if i.name in used]
        del graph.initializer[:]
        graph.initializer.extend(kept)
        # Old-IR models list initializers among the inputs too; a dropped one must leave the inputs.
        dropped = set(self.initializers) - {i.name for i in kept}
        inputs = [i for i in graph.input if i.name not in dropped]
        del graph.input[:]
        graph.input.extend(inputs)
        # Value infos of tensors that no longer exist, or whose type changed, would mislead checkers.
        produced = {o for node in graph.node for o in node.output}
        infos = [v for v in graph.value_info if v.name in produced]
        del graph.value_info[:]
        graph.value_info.extend(infos)
        return out


def _toposort(nodes, available: set[str]) -> list[onnx.NodeProto]:
    ready = set(available) | {""}
    pending = list(nodes)
    order = []
    while pending:
        progressed = []
        rest = []
        for node in pending:
            needs = set(node.input) | _outer_names(node)
            if needs <= ready:
                progressed.append(node)
                ready.update(node.output)
            else:
                rest.append(node)
        if not progressed:
            missing = sorted(set().union(*(set(n.input) - ready for n in rest)))
            raise InvalidGraph(f"quantized graph has a cycle or missing inputs: {missing[:5]}")
        order.extend(progressed)
        pending = rest
    return order


def _outer_names(node) -> set[str]:
    """Names a node's subgraphs read from the enclosing graph (so the node waits for them)."""
    names: set[str] = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for graph in graphs:
            local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
            for inner in graph.node:
                local.update(inner.output)
                names.update(n for n in inner.input if n and n not in local)
                names.update(_outer_names(inner))
    return names


def tensor_params(low, high, q_type, symmetric, reduce_range=False):
    """(zero point, scale) of an activation from its calibrated range."""
    qmin, qmax = get_qmin_qmax_for_qType(q_type, reduce_range, symmetric=symmetric)
    zero, scale = compute_scale_zp(np.float32(low), np.float32(high), qmin, qmax, symmetric=symmetric)
    return zero, scale


def quantize_weight(array, q_type, symmetric, reduce_range, axis=None):
    """A constant quantized per tensor (``axis`` None) or per slice along ``axis``.

    Returns ``(quantized, zero_points, scales)``; per channel the parameters are 1-D.
    """
    array = np.asarray(array, dtype=np.float32)
    qmin, qmax = get_qmin_qmax_for_qType(q_type, reduce_range, symmetric=symmetric)
    if axis is None:
        low, high = (array.min(), array.max()) if array.size else (0.0, 0.0)
        zero, scale = compute_scale_zp(np.float32(low), np.float32(high), qmin, qmax, symmetric=symmetric)
        return quantize_nparray(q_type, array, scale, zero, qmin, qmax), zero, scale
    axis = axis + array.ndim if axis < 0 else axis
    if not 0 <= axis < array.ndim:
        raise InvalidArgument(f"per-channel axis {axis} is out of range for a weight of shape {array.shape}")
    moved = np.moveaxis(array, axis, 0).reshape(array.shape[axis], -1)
    zeros, scales = [], []
    for row in moved:
        low, high = (row.min(), row.max()) if row.size else (0.0, 0.0)
        zero, scale = compute_scale_zp(np.float32(low), np.float32(high), qmin, qmax, symmetric=symmetric)
        zeros.append(zero)
        scales.append(scale)
    zeros = np.array(zeros, dtype=np.asarray(qmin).dtype)
    scales = np.array(scales, dtype=np.float32)
    shape = [1] * array.ndim
    shape[axis] = -1
    quantized = quantize_nparray(q_type, array, scales.reshape(shape), zeros.reshape(shape), qmin, qmax)
    return quantized, zeros, scales


def quantize_bias(bias, input_scale, weight_scale):
    """An int32 bias with scale ``input_scale * weight_scale`` (zero point 0), the form QLinearConv
    and the QDQ Conv/Gemm fusions expect; returns ``(quantized, scale)``."""
    bias = np.asarray(bias, dtype=np.float32)
    scale = (np.float32(input_scale) * np.asarray(weight_scale, dtype=np.float32)).astype(np.float32)
    # A zero scale (an all-zero input range gets scale 1, so only a zero weight scale): keep 1.
    safe = np.where(scale == 0, np.float32(1), scale)
    limit = np.float64(np.iinfo(np.int32).max)
    quantized = np.clip(np.rint(bias.astype(np.float64) / safe.astype(np.float64)), -limit, limit).astype(np.int32)
    return quantized, safe
