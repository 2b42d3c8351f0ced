"""The DirectML translator: an ONNX partition in, a :class:`~onnxplug_directml.graph.DmlGraph` out.

Pure Python over onnx-ir, tested on any machine.  It covers a documented subset of the
DirectML table (:data:`SUPPORTED`): float32/float16 tensors of rank up to 4, every tensor
described as 4-D (leading 1s) with packed strides; broadcasting is a zero-stride view of the
smaller operand; Reshape, Flatten, Squeeze, Unsqueeze and Identity are ``ELEMENT_WISE_IDENTITY``
reading the same bytes under the new sizes.  Constants become graph inputs flagged
``DML_TENSOR_FLAG_OWNED_BY_DML`` (DirectML copies them into its persistent resource when the
operator is initialized).  Anything outside raises :class:`Untranslatable` naming the node, and
:func:`declines` asks that of every node, so the provider claims at run time only what this
subset runs; planning (``--target directml``) still uses the whole table.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnxplug import translation

from .graph import (
    CONVOLUTION_DIRECTION_FORWARD,
    CONVOLUTION_MODE_CROSS_CORRELATION,
    DATA_TYPES,
    MATRIX_TRANSFORM_NONE,
    MATRIX_TRANSFORM_TRANSPOSE,
    DmlGraph,
    DmlNode,
    GraphInput,
    TensorDesc,
)

__all__ = ["SUPPORTED", "Untranslatable", "declines", "translate", "translate_partition"]

_UNARY = {
    "Abs": "ELEMENT_WISE_ABS",
    "Exp": "ELEMENT_WISE_EXP",
    "Floor": "ELEMENT_WISE_FLOOR",
    "Log": "ELEMENT_WISE_LOG",
    "Sqrt": "ELEMENT_WISE_SQRT",
    "Relu": "ACTIVATION_RELU",
    "Sigmoid": "ACTIVATION_SIGMOID",
    "Tanh": "ACTIVATION_TANH",
}
_BINARY = {
    "Add": "ELEMENT_WISE_ADD",
    "Sub": "ELEMENT_WISE_SUBTRACT",
    "Mul": "ELEMENT_WISE_MULTIPLY",
    "Div": "ELEMENT_WISE_DIVIDE",
    "Max": "ELEMENT_WISE_MAX",
    "Min": "ELEMENT_WISE_MIN",
    "Sum": "ELEMENT_WISE_ADD",
}
_VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
_OTHERS = (
    "Neg",
    "Clip",
    "Elu",
    "LeakyRelu",
    "Conv",
    "Gemm",
    "MatMul",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "GlobalMaxPool",
    "Softmax",
    "Concat",
    "BatchNormalization",
    "LRN",
)
#: The ai.onnx ops the execution path translates (the rest of the table is planned, not run).
SUPPORTED = frozenset(_UNARY) | frozenset(_BINARY) | frozenset(_VIEWS) | frozenset(_OTHERS)
_FLT_MAX = 3.4028234663852886e38


class Untranslatable(translation.Untranslatable):
    """A node outside the translated subset; the message names it and says why."""

    target = "DirectML execution"


def _attr(node: ir.Node, name: str, default: Any = None) -> Any:
    found = node.attributes.get(name)
    value = default if found is None else found.value
    return value.decode() if isinstance(value, bytes) else value


def _pad4(shape: Sequence[int]) -> tuple[int, ...]:
    return (1,) * (4 - len(shape)) + tuple(int(d) for d in shape)


class _Builder:
    """Graph inputs, nodes and edges, and where each ONNX value comes from."""

    def __init__(self, opsets: dict[str, int]) -> None:
        self.opsets = opsets
        self.inputs: list[GraphInput] = []
        self.nodes: list[DmlNode] = []
        self.input_edges: list[tuple[int, int, int]] = []
        self.intermediate_edges: list[tuple[int, int, int, int]] = []
        self.sources: dict[str, tuple] = {}  # value → ("input", index) | ("node", node, slot)
        self.shapes: dict[str, tuple[int, ...]] = {}
        self.types: dict[str, int] = {}

    def opset(self) -> int:
        return self.opsets.get("", 1)

    def shape(self, value: ir.Value, node: Any) -> tuple[int, ...]:
        if value.name in self.shapes:
            return self.shapes[value.name]
        if value.const_value is not None:
            return tuple(value.const_value.shape)
        if value.shape is None or not value.shape.is_static():
            raise Untranslatable(node, f"'{value.name}' has no static shape ({value.shape})")
        return tuple(int(d) for d in value.shape)

    def data_type(self, value: ir.Value, node: Any) -> int:
        if value.name in self.types:
            return self.types[value.name]
        dtype = value.const_value.numpy().dtype if value.const_value is not None else value.dtype.numpy()
        code = DATA_TYPES.get(np.dtype(dtype))
        if code is None:
            raise Untranslatable(node, f"'{value.name}' is {np.dtype(dtype)}; the translated subset takes float32/16")
        return code

    def graph_input(self, name: str, shape, data_type: int, value: np.ndarray | None = None) -> int:
        desc = TensorDesc.packed(data_type, _pad4(shape), owned_by_dml=value is not None)
        self.inputs.append(GraphInput(name, desc, value))
        return len(self.inputs) - 1

    def source(self, value: ir.Value, node: Any) -> tuple:
        found = self.sources.get(value.name)
        if found is not None:
            return found
        if value.const_value is None:
            raise Untranslatable(node, f"'{value.name}' is neither an input, a constant nor computed before it")
        data = value.const_value.numpy()
        if len(data.shape) > 4:
            raise Untranslatable(node, f"constant '{value.name}' has rank {data.ndim}; the subset is up to 4-D")
        index = self.graph_input(value.name, data.shape, self.data_type(value, node), np.ascontiguousarray(data))
        self.sources[value.name] = ("input", index)
        return self.sources[value.name]

    def constant(self, name: str, data: np.ndarray, sizes: Sequence[int], data_type: int) -> tuple:
        dtype = np.float16 if data_type == DATA_TYPES[np.dtype(np.float16)] else np.float32
        index = self.graph_input(name, sizes, data_type, np.ascontiguousarray(np.asarray(data, dtype)))
        return ("input", index)

    def view(self, value: ir.Value, node: Any, sizes: Sequence[int] | None = None, broadcast_to=None) -> tuple:
        """``(source, desc)``: the value read as ``sizes`` (same bytes), or broadcast (zero strides)."""
        shape = self.shape(value, node)
        if len(shape) > 4:
            raise Untranslatable(node, f"'{value.name}' has rank {len(shape)}; the translated subset is up to 4-D")
        data_type = self.data_type(value, node)
        desc = TensorDesc.packed(data_type, _pad4(shape if sizes is None else sizes))
        if broadcast_to is not None:
            target = _pad4(broadcast_to)
            if any(s not in (1, t) for s, t in zip(desc.sizes, target)):
                raise Untranslatable(
                    node, f"'{value.name}' of shape {list(shape)} does not broadcast to {list(target)}"
                )
            strides = tuple(0 if s == 1 else st for s, st in zip(desc.sizes, desc.strides))  # size-1: repeated
            desc = TensorDesc(data_type, target, strides)
        return self.source(value, node), desc

    def add(self, operator: str, node: ir.Node, reads: list, outputs: list[ir.Value], **fields: Any) -> None:
        """Append a DirectML node reading ``reads`` (``(source, desc)`` or ``None`` per input slot)
        and producing ``outputs`` (packed, at their ONNX shapes)."""
        index = len(self.nodes)
        out_descs = []
        for slot, value in enumerate(outputs):
            sizes = fields.pop(f"_out{slot}_sizes", None)
            data_type = self.data_type(value, node) if value.name not in self.types else self.types[value.name]
            out_descs.append(TensorDesc.packed(data_type, _pad4(sizes or self.shape(value, node))))
            self.sources[value.name] = ("node", index, slot)
            self.shapes[value.name] = self.shape(value, node)
            self.types[value.name] = data_type
        self.nodes.append(
            DmlNode(operator, f"{node.name}:{operator}", [r and r[1] for r in reads], out_descs, fields, node.name)
        )
        for slot, read in enumerate(reads):
            if read is None:
                continue
            source = read[0]
            if source[0] == "input":
                self.input_edges.append((source[1], index, slot))
            else:
                self.intermediate_edges.append((source[1], source[2], index, slot))


def _unary(b: _Builder, node: ir.Node, operator: str, **fields: Any) -> None:
    shape = b.shape(node.inputs[0], node)
    b.add(operator, node, [b.view(node.inputs[0], node, shape)], [node.outputs[0]], **fields)


def _binary(b: _Builder, node: ir.Node, operator: str, first: ir.Value, second: ir.Value, out: ir.Value) -> None:
    target = b.shape(out, node)
    b.add(operator, node, [b.view(first, node, broadcast_to=target), b.view(second, node, broadcast_to=target)], [out])


def _pads(node: ir.Node, size, kernel, strides, dilations) -> tuple[list[int], list[int]]:
    mode = _attr(node, "auto_pad", "NOTSET")
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for n, k, s, d in zip(size, kernel, strides, dilations):
            total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
            small = total // 2
            begin.append(small if mode == "SAME_UPPER" else total - small)
            end.append(total - begin[-1])
        return begin, end
    if mode == "VALID":
        return [0] * len(size), [0] * len(size)
    pads = list(_attr(node, "pads", [0] * (2 * len(size))))
    return pads[: len(size)], pads[len(size) :]


def _convert(b: _Builder, node: ir.Node) -> None:
    op = node.op_type
    if node.domain not in ("", "ai.onnx") or op not in SUPPORTED:
        raise Untranslatable(node, "outside the DirectML execution path's operator subset (planning only)")
    if op in _UNARY:
        return _unary(b, node, _UNARY[op])
    if op in _BINARY:
        values = [v for v in node.inputs if v is not None]
        if len(values) != 2:
            raise Untranslatable(node, f"{len(values)} inputs; the translated element-wise {op} takes 2")
        return _binary(b, node, _BINARY[op], values[0], values[1], node.outputs[0])
    if op in _VIEWS:
        out_shape = b.shape(node.outputs[0], node)
        return b.add("ELEMENT_WISE_IDENTITY", node, [b.view(node.inputs[0], node, out_shape)], [node.outputs[0]])
    if op == "Neg":
        return _unary(b, node, "ELEMENT_WISE_IDENTITY", ScaleBias=(-1.0, 0.0))
    if op == "Elu":
        return _unary(b, node, "ACTIVATION_ELU", Alpha=float(_attr(node, "alpha", 1.0)))
    if op == "LeakyRelu":
        return _unary(b, node, "ACTIVATION_LEAKY_RELU", Alpha=float(_attr(node, "alpha", 0.01)))
    if op == "Clip":
        return _clip(b, node)
    if op == "Conv":
        return _conv(b, node)
    if op in ("Gemm", "MatMul"):
        return _gemm(b, node)
    if op in ("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"):
        return _pool(b, node)
    if op == "Softmax":
        return _softmax(b, node)
    if op == "Concat":
        return _concat(b, node)
    if op == "BatchNormalization":
        return _batch_norm(b, node)
    return _lrn(b, node)


def _clip(b: _Builder, node: ir.Node) -> None:
    if b.opset() < 11:
        low, high = _attr(node, "min", -_FLT_MAX), _attr(node, "max", _FLT_MAX)
    else:
        bounds = []
        for index, default in ((1, -_FLT_MAX), (2, _FLT_MAX)):
            value = node.inputs[index] if index < len(node.inputs) else None
            if value is not None and value.const_value is None:
                raise Untranslatable(node, "Clip bounds computed at run time (ELEMENT_WISE_CLIP takes constants)")
            bounds.append(default if value is None else float(value.const_value.numpy().reshape(-1)[0]))
        low, high = bounds
    _unary(b, node, "ELEMENT_WISE_CLIP", Min=float(low), Max=float(high))


def _conv(b: _Builder, node: ir.Node) -> None:
    x, w = node.inputs[0], node.inputs[1]
    bias = node.inputs[2] if len(node.inputs) > 2 else None
    shape, w_shape = b.shape(x, node), b.shape(w, node)
    if len(shape) != 4:
        raise Untranslatable(node, f"rank-{len(shape)} input; the translated subset has 2-D convolutions only")
    kernel = list(_attr(node, "kernel_shape", w_shape[2:]))
    strides = list(_attr(node, "strides", [1, 1]))
    dilations = list(_attr(node, "dilations", [1, 1]))
    start, end = _pads(node, shape[2:], kernel, strides, dilations)
    reads = [b.view(x, node), b.view(w, node)]
    reads.append(None if bias is None else b.view(bias, node, (1, w_shape[0], 1, 1)))
    b.add(
        "CONVOLUTION",
        node,
        reads,
        [node.outputs[0]],
        Mode=CONVOLUTION_MODE_CROSS_CORRELATION,
        Direction=CONVOLUTION_DIRECTION_FORWARD,
        DimensionCount=2,
        Strides=strides,
        Dilations=dilations,
        StartPadding=start,
        EndPadding=end,
        OutputPadding=[0, 0],
        GroupCount=int(_attr(node, "group", 1)),
    )


def _gemm(b: _Builder, node: ir.Node) -> None:
    a, bb = node.inputs[0], node.inputs[1]
    out = b.shape(node.outputs[0], node)
    if node.op_type == "MatMul":
        a_shape, b_shape = b.shape(a, node), b.shape(bb, node)
        if len(a_shape) < 2 or len(b_shape) < 2 or len(out) > 4:
            raise Untranslatable(node, "MatMul of vectors or above 4-D is outside the translated subset")
        batch = out[:-2]
        reads = [
            b.view(a, node, broadcast_to=(*batch, *a_shape[-2:])),
            b.view(bb, node, broadcast_to=(*batch, *b_shape[-2:])),
            None,
        ]
        trans_a = trans_b = MATRIX_TRANSFORM_NONE
        alpha, beta = 1.0, 0.0
    else:
        trans_a = MATRIX_TRANSFORM_TRANSPOSE if _attr(node, "transA", 0) else MATRIX_TRANSFORM_NONE
        trans_b = MATRIX_TRANSFORM_TRANSPOSE if _attr(node, "transB", 0) else MATRIX_TRANSFORM_NONE
        alpha, beta = float(_attr(node, "alpha", 1.0)), float(_attr(node, "beta", 1.0))
        c = node.inputs[2] if len(node.inputs) > 2 else None
        reads = [b.view(a, node), b.view(bb, node), None if c is None else b.view(c, node, broadcast_to=out)]
    b.add(
        "GEMM",
        node,
        reads,
        [node.outputs[0]],
        TransA=trans_a,
        TransB=trans_b,
        Alpha=alpha,
        Beta=beta,
    )


def _pool(b: _Builder, node: ir.Node) -> None:
    x = node.inputs[0]
    shape = b.shape(x, node)
    if len(shape) != 4:
        raise Untranslatable(node, f"rank-{len(shape)} input; the translated subset pools in 2-D only")
    if len([v for v in node.outputs if v.name]) > 1:
        raise Untranslatable(node, "MaxPool's Indices output is outside the translated subset")
    glob = node.op_type.startswith("Global")
    kernel = list(shape[2:]) if glob else list(_attr(node, "kernel_shape"))
    strides = [1, 1] if glob else list(_attr(node, "strides", [1, 1]))
    if not glob and list(_attr(node, "dilations", [1, 1])) != [1, 1]:
        raise Untranslatable(node, "dilated pooling (MAX_POOLING2) is outside the translated subset")
    start, end = ([0, 0], [0, 0]) if glob else _pads(node, shape[2:], kernel, strides, [1, 1])
    out = b.shape(node.outputs[0], node)
    for axis in range(2):  # ceil_mode: windows running past the end are end padding
        end[axis] += max(
            0, (out[2 + axis] - 1) * strides[axis] + kernel[axis] - (shape[2 + axis] + start[axis] + end[axis])
        )
    average = "Average" in node.op_type
    fields = dict(DimensionCount=2, Strides=strides, WindowSize=kernel, StartPadding=start, EndPadding=end)
    if average:
        fields["IncludePadding"] = bool(_attr(node, "count_include_pad", 0))
    b.add("AVERAGE_POOLING" if average else "MAX_POOLING", node, [b.view(x, node)], [node.outputs[0]], **fields)


def _softmax(b: _Builder, node: ir.Node) -> None:
    """ACTIVATION_SOFTMAX normalizes the last dimension: the input is read as [1, 1, rows, cols]
    (cols: the dims from ``axis`` on), which is Softmax-1/11 exactly and Softmax-13 on the last axis."""
    x = node.inputs[0]
    shape = b.shape(x, node)
    axis = _attr(node, "axis", -1 if b.opset() >= 13 else 1) % len(shape)
    if b.opset() >= 13 and axis != len(shape) - 1:
        raise Untranslatable(node, f"Softmax-13 over axis {axis}, not the last (ACTIVATION_SOFTMAX1 is not used)")
    rows, cols = int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))
    b.add("ACTIVATION_SOFTMAX", node, [b.view(x, node, (rows, cols))], [node.outputs[0]], _out0_sizes=(rows, cols))


def _concat(b: _Builder, node: ir.Node) -> None:
    values = [v for v in node.inputs if v is not None]
    rank = len(b.shape(values[0], node))
    axis = _attr(node, "axis", 0) % rank + (4 - rank)
    reads = [b.view(v, node) for v in values]
    b.add("JOIN", node, reads, [node.outputs[0]], InputCount=len(values), Axis=axis)


def _batch_norm(b: _Builder, node: ir.Node) -> None:
    if len([v for v in node.outputs if v.name]) > 1 or _attr(node, "training_mode", 0):
        raise Untranslatable(node, "training-mode BatchNormalization is outside the translated subset")
    x = node.inputs[0]
    shape = b.shape(x, node)
    if len(shape) != 4:
        raise Untranslatable(node, "BatchNormalization is translated for 4-D (NCHW) input")
    channels = (1, shape[1], 1, 1)
    scale, bias, mean, var = (b.view(node.inputs[i], node, channels) for i in (1, 2, 3, 4))
    b.add(
        "BATCH_NORMALIZATION",
        node,
        [b.view(x, node), mean, var, scale, bias],
        [node.outputs[0]],
        Spatial=True,
        Epsilon=float(_attr(node, "epsilon", 1e-5)),
    )


def _lrn(b: _Builder, node: ir.Node) -> None:
    if len(b.shape(node.inputs[0], node)) != 4:
        raise Untranslatable(node, "LRN is translated for 4-D (NCHW) input")
    b.add(
        "LOCAL_RESPONSE_NORMALIZATION",
        node,
        [b.view(node.inputs[0], node)],
        [node.outputs[0]],
        CrossChannel=True,
        LocalSize=int(_attr(node, "size")),
        Alpha=float(_attr(node, "alpha", 1e-4)),
        Beta=float(_attr(node, "beta", 0.75)),
        Bias=float(_attr(node, "bias", 1.0)),
    )


def _inferred(model: onnx.ModelProto | bytes) -> ir.Model:
    if isinstance(model, bytes):
        proto = onnx.load_model_from_string(model)
    else:
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    proto.ir_version = max(proto.ir_version, 4)  # before IR 4 inference ignores non-input initializers
    try:
        proto = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - best effort: a missing shape is refused later by name
        pass
    return ir.serde.deserialize_model(proto)


def translate(model: onnx.ModelProto | bytes, inputs: Sequence[str], outputs: Sequence[str]) -> DmlGraph:
    """The DirectML graph computing ``outputs`` from ``inputs`` (in that order) of ``model``.

    :raises Untranslatable: a node outside the subset, naming it and the reason.
    """
    model_ir = _inferred(model)
    b = _Builder(dict(model_ir.opset_imports))
    values = {v.name: v for v in model_ir.graph.inputs}
    values.update({v.name: v for node in model_ir.graph for v in node.outputs})
    for name in inputs:
        value = values.get(name)
        if value is None:
            raise Untranslatable(name, "is not an input of the partition")
        consumer = next(iter(value.consumers()), name)
        index = b.graph_input(name, b.shape(value, consumer), b.data_type(value, consumer))
        b.sources[name] = ("input", index)
    for node in model_ir.graph:
        _convert(b, node)
    output_edges, descs, shapes, seen = [], [], [], set()
    for position, name in enumerate(outputs):
        source = b.sources.get(name)
        if source is None or source[0] != "node" or source[1:] in seen:
            # an input, a constant or a repeated output: DirectML outputs come from their own node
            value = values[name]
            shape = b.shape(value, name)
            b.add("ELEMENT_WISE_IDENTITY", value.producer() or _Named(name), [b.view(value, name, shape)], [value])
            source = b.sources[name]
        seen.add(source[1:])
        output_edges.append((source[1], source[2], position))
        descs.append(b.nodes[source[1]].outputs[source[2]])
        shapes.append(b.shapes[name])
    return DmlGraph(
        tuple(b.inputs),
        tuple(b.nodes),
        tuple(b.input_edges),
        tuple(b.intermediate_edges),
        tuple(output_edges),
        tuple(inputs),
        tuple(outputs),
        tuple(descs),
        tuple(shapes),
    )


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


def translate_partition(partition: Any) -> DmlGraph:
    """The graph for a :class:`~onnxplug.api.Partition` (what ``compile()`` receives)."""
    return translate(partition.model, partition.inputs, partition.outputs)


def declines(model: onnx.ModelProto | bytes, names: Iterable[str] | None = None) -> dict[str, str]:
    """Node name → reason, for the nodes (all, or ``names``) outside the translated subset; each
    node is translated alone, its computed inputs taken as graph inputs."""
    model_ir = _inferred(model)
    wanted = None if names is None else set(names)
    refused: dict[str, str] = {}
    for node in model_ir.graph:
        if wanted is not None and node.name not in wanted:
            continue
        b = _Builder(dict(model_ir.opset_imports))
        try:
            for value in node.inputs:
                if value is not None and value.const_value is None and value.name not in b.sources:
                    index = b.graph_input(value.name, b.shape(value, node), b.data_type(value, node))
                    b.sources[value.name] = ("input", index)
            _convert(b, node)
        except Untranslatable as error:
            refused[node.name] = error.reason
    return refused
