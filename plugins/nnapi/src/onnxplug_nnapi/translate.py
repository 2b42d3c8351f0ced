"""The NNAPI translator: an ONNX partition in, an NNAPI :class:`~onnxplug_nnapi.program.Program` out.

Pure Python over onnx-ir, so it runs (and is tested) on any machine; only replaying the program
needs Android (:mod:`onnxplug_nnapi.ndk`).  What it takes care of, as NNAPI requires:

* **Types and shapes.** Every operand has a static shape (the table asks for static shapes; the
  translator infers the intermediate ones with ONNX shape inference).  float32 values become
  ``TENSOR_FLOAT32``, int32 ``TENSOR_INT32``, uint8 and int8 ``TENSOR_QUANT8_ASYMM`` and
  ``TENSOR_QUANT8_ASYMM_SIGNED`` with the scale and zero point the QLinear / Q / DQ node next to
  them declares (NNAPI keeps quantization in the operand's type, ONNX in the node's inputs).
  int64 constants (indices, shapes) are narrowed to int32; int64 *values* are refused.
* **Layout.** ONNX is NCHW.  With ``layout="nhwc"`` (the default, as onnxruntime's NNAPI EP: many
  drivers accelerate NHWC only) the spatial operations (convolutions, pools, Resize,
  DepthToSpace, LRN) run in NHWC: a value gets a ``TRANSPOSE`` to NHWC the first time such an
  operation reads it, elementwise operations and Concat/Split/Pad/ReduceMean keep NHWC values in
  NHWC (constants are permuted to match), everything else reads the NCHW form (transposed back
  once), and the partition's outputs are NCHW.  With ``layout="nchw"`` the spatial operations set
  their NCHW layout flag (API 29) and no transpose is added.  Filters are always OHWI (CONV_2D,
  GROUPED_CONV_2D) or 1HWO (DEPTHWISE_CONV_2D), whatever the layout.
* **Refusals.** A node the NNAPI form cannot express (a Resize mode without an NNAPI
  counterpart, a Conv with non-constant weights, ceil-mode average pooling over padding...)
  raises :class:`Untranslatable` naming the node and the reason; :func:`declines` asks that of
  every node so the provider can decline them before partitioning.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from onnxplug import translation

from .program import OPERAND, Program, ProgramBuilder

__all__ = ["LAYOUTS", "Untranslatable", "converters", "declines", "translate", "translate_partition"]

LAYOUTS = ("nhwc", "nchw")
TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)

_CODES = {
    ir.DataType.FLOAT: OPERAND["TENSOR_FLOAT32"],
    ir.DataType.FLOAT16: OPERAND["TENSOR_FLOAT16"],
    ir.DataType.INT32: OPERAND["TENSOR_INT32"],
    ir.DataType.INT64: OPERAND["TENSOR_INT32"],  # constants only (narrowed); values are refused
    ir.DataType.BOOL: OPERAND["TENSOR_BOOL8"],
    ir.DataType.UINT8: OPERAND["TENSOR_QUANT8_ASYMM"],
    ir.DataType.INT8: OPERAND["TENSOR_QUANT8_ASYMM_SIGNED"],
}
_QUANT_CODES = {
    np.dtype(np.uint8): OPERAND["TENSOR_QUANT8_ASYMM"],
    np.dtype(np.int8): OPERAND["TENSOR_QUANT8_ASYMM_SIGNED"],
}

#: (domain, op) → converter(ctx, node); filled by ``_converters`` through :func:`converts`.
_CONVERTERS = translation.ConverterRegistry()

#: Where each quantized op keeps its (value, scale, zero point) triples: inputs, then outputs.
QUANT_SLOTS: dict[str, tuple[tuple[tuple[int, int, int], ...], tuple[tuple[int, int, int], ...]]] = {
    "QuantizeLinear": ((), ((0, 1, 2),)),
    "DequantizeLinear": (((0, 1, 2),), ()),
    "QLinearConv": (((0, 1, 2), (3, 4, 5)), ((0, 6, 7),)),
    "QLinearMatMul": (((0, 1, 2), (3, 4, 5)), ((0, 6, 7),)),
    "QLinearAdd": (((0, 1, 2), (3, 4, 5)), ((0, 6, 7),)),
    "QLinearAveragePool": (((0, 1, 2),), ((0, 3, 4),)),
    "QLinearSigmoid": (((0, 1, 2),), ((0, 3, 4),)),
}


class Untranslatable(translation.Untranslatable):
    """A node (or a value) that has no NNAPI form; the message names it and says why."""

    target = "NNAPI"


#: Registers a converter for ops (explicit registry: the module that defines it imports this).
converts = _CONVERTERS.converts


def converters() -> frozenset[tuple[str, str]]:
    """The (domain, op) pairs the translator handles."""
    from . import _converters, _spatial  # noqa: F401 - importing them registers the converters

    return _CONVERTERS.keys()


def attr(node: ir.Node, name: str, default: Any = None) -> Any:
    found = node.attributes.get(name)
    return default if found is None else found.value


def arg(node: ir.Node, index: int) -> ir.Value | None:
    """The node's input ``index``, or ``None`` when it is absent."""
    return node.inputs[index] if index < len(node.inputs) else None


def requantize_like(data: np.ndarray, zero: int, code: int) -> tuple[np.ndarray, int]:
    """8-bit weights in the input's signedness (NNAPI wants them alike): shifted by 128 if needed."""
    if code == OPERAND["TENSOR_QUANT8_ASYMM"] and data.dtype == np.int8:
        return (data.astype(np.int16) + 128).astype(np.uint8), zero + 128
    if code == OPERAND["TENSOR_QUANT8_ASYMM_SIGNED"] and data.dtype == np.uint8:
        return (data.astype(np.int16) - 128).astype(np.int8), zero - 128
    return data, zero


class Context:
    """The translation state: the builder, each ONNX value's operands by layout, the quantization
    of quantized values, and the constants (initializers, and DequantizeLinear of constants)."""

    def __init__(self, graph: ir.Graph, opsets: dict[str, int], layout: str) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.graph = graph
        self.opsets = opsets
        self.layout = layout
        self.b = ProgramBuilder()
        self.values: dict[str, dict[str, int]] = {}
        self.quant: dict[str, tuple[Any, Any]] = {}
        self.folded: dict[str, np.ndarray] = {}
        self._fold_dequantized_constants()

    # --- values -------------------------------------------------------------------------------

    def opset(self, node: ir.Node) -> int:
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        return self.opsets.get(domain, 1)

    def const(self, value: ir.Value | None) -> np.ndarray | None:
        """The value's data when it is a constant, else ``None``."""
        if value is None:
            return None
        if value.name in self.folded:
            return self.folded[value.name]
        if value.const_value is not None:
            return value.const_value.numpy()
        return None

    def shape(self, value: ir.Value, node: Any) -> tuple[int, ...]:
        const = self.const(value)
        if const is not None:
            return tuple(const.shape)
        if value.shape is None or not value.shape.is_static():
            raise Untranslatable(node, f"'{value.name}' has no static shape ({value.shape}); NNAPI needs fixed shapes")
        return tuple(int(d) for d in value.shape)

    def code(self, value: ir.Value, node: Any) -> int:
        dtype = self.dtype(value)
        code = _CODES.get(dtype)
        if code is None or (dtype == ir.DataType.INT64 and self.const(value) is None):
            raise Untranslatable(node, f"'{value.name}' is {dtype}, which NNAPI has no tensor type for")
        return code

    def dtype(self, value: ir.Value) -> ir.DataType:
        const = self.const(value)
        if const is not None:
            return ir.DataType.from_numpy(const.dtype)
        return value.dtype

    def available(self, value: ir.Value, layout: str) -> bool:
        return layout in self.values.get(value.name, {})

    def layout_of(self, value: ir.Value) -> str:
        """The layout a layout-neutral reader should use: NHWC when the value has it, else NCHW."""
        return "nhwc" if self.available(value, "nhwc") else "nchw"

    def quantization(self, value: ir.Value, node: Any) -> tuple[float, int]:
        found = self.quant.get(value.name)
        if found is None:
            raise Untranslatable(node, f"'{value.name}' is quantized but no QLinear/Q/DQ node states its scale")
        scale, zero_point = found
        if np.size(scale) != 1 or np.size(zero_point) != 1:
            raise Untranslatable(
                node, f"'{value.name}' is quantized per axis; NNAPI takes per-tensor quantization here"
            )
        return float(np.asarray(scale).reshape(-1)[0]), int(np.asarray(zero_point).reshape(-1)[0])

    def operand(self, value: ir.Value, layout: str, node: Any) -> int:
        """The operand holding ``value`` in ``layout`` (a constant is created; a value in the other
        layout gets a TRANSPOSE, made once)."""
        layouts = self.values.setdefault(value.name, {})
        if layout in layouts:
            return layouts[layout]
        const = self.const(value)
        if const is not None:
            layouts[layout] = self.constant(value, const, layout, node)
            return layouts[layout]
        if not layouts:
            raise Untranslatable(node, f"'{value.name}' is neither an input, a constant nor computed before it")
        other, source = next(iter(layouts.items()))
        perm = TO_NHWC if layout == "nhwc" else TO_NCHW
        dims = tuple(self.b.operands[source].dims[p] for p in perm)
        target = self.b.like(source, dims, label=f"{value.name}:{layout}")
        self.b.operation("TRANSPOSE", [source, self.b.int32s(perm, f"perm {other}->{layout}")], [target], node.name)
        layouts[layout] = target
        return target

    def constant(self, value: ir.Value, data: np.ndarray, layout: str, node: Any) -> int:
        data = np.asarray(data)
        if data.ndim == 0:
            data = data.reshape(1)  # NNAPI tensors have at least one dimension
        if layout == "nhwc":
            if data.ndim > 4:
                raise Untranslatable(node, f"constant '{value.name}' of rank {data.ndim} in a 4-D NHWC operation")
            data = data.reshape((1,) * (4 - data.ndim) + data.shape).transpose(TO_NHWC)
        if data.dtype in (np.uint8, np.int8):
            scale, zero_point = self.quantization(value, node)
            return self.b.constant(_QUANT_CODES[data.dtype], data, scale=scale, zero_point=zero_point, label=value.name)
        if data.dtype == np.int64:
            if data.size and (data.max() > np.iinfo(np.int32).max or data.min() < np.iinfo(np.int32).min):
                raise Untranslatable(node, f"constant '{value.name}' does not fit int32 (NNAPI has no int64)")
            data = data.astype(np.int32)
        code = _CODES.get(ir.DataType.from_numpy(data.dtype))
        if code is None:
            raise Untranslatable(node, f"constant '{value.name}' is {data.dtype}, which NNAPI has no tensor type for")
        return self.b.constant(code, data, label=value.name)

    def define(self, value: ir.Value, node: Any, layout: str = "nchw", dims: Sequence[int] | None = None) -> int:
        """A new operand for ``value`` (an output of ``node``), in ``layout``; quantized values get
        their scale and zero point."""
        code = self.code(value, node)
        if dims is None:
            dims = self.shape(value, node)
            if layout == "nhwc":
                dims = tuple(dims[p] for p in TO_NHWC)
        scale, zero_point = (0.0, 0)
        if code in _QUANT_CODES.values():
            scale, zero_point = self.quantization(value, node)
        index = self.b.tensor(code, dims, scale=scale, zero_point=zero_point, label=value.name)
        self.values.setdefault(value.name, {})[layout] = index
        return index

    def spatial(self, value: ir.Value, node: Any) -> tuple[int, int]:
        """``(operand, layout flag operand)`` for the 4-D input of a spatial operation."""
        return self.operand(value, self.layout, node), self.b.bool(self.layout == "nchw", "layout is NCHW")

    # --- setup --------------------------------------------------------------------------------

    def _fold_dequantized_constants(self) -> None:
        """DequantizeLinear of constants is a float constant (Conv weights in QDQ models)."""
        for node in self.graph:
            if node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
                continue
            x, scale = self.const(node.inputs[0]), self.const(node.inputs[1])
            zero = self.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else 0
            if x is None or scale is None or zero is None:
                continue
            axis = node.attributes.get("axis")
            axis = axis.value if axis is not None else 1
            scale, zero = np.asarray(scale, np.float32), np.asarray(zero)
            if scale.ndim == 1 and x.ndim > 1:
                shape = [1] * x.ndim
                shape[axis] = -1
                scale, zero = scale.reshape(shape), zero.reshape(shape)
            self.folded[node.outputs[0].name] = ((x.astype(np.int32) - zero.astype(np.int32)) * scale).astype(
                np.float32
            )

    def gather_quantization(self, nodes: Iterable[ir.Node]) -> None:
        """Record each quantized value's scale and zero point from the nodes that state them;
        two different statements for one value are refused."""
        for node in nodes:
            slots = QUANT_SLOTS.get(node.op_type)
            if slots is None or (node.op_type == "DequantizeLinear" and node.outputs[0].name in self.folded):
                continue
            for where, (v, s, z) in [(node.inputs, slot) for slot in slots[0]] + [
                (node.outputs, slot) for slot in slots[1]
            ]:
                value = where[v] if v < len(where) else None
                if value is None:
                    continue
                scale = self.const(node.inputs[s]) if s < len(node.inputs) else None
                zero_input = node.inputs[z] if z < len(node.inputs) else None
                zero = self.const(zero_input) if zero_input is not None else np.uint8(0)
                if scale is None or zero is None:
                    raise Untranslatable(node, "NNAPI needs constant quantization scales and zero points")
                found = self.quant.setdefault(value.name, (scale, zero))
                if not (np.array_equal(found[0], scale) and np.array_equal(found[1], zero)):
                    raise Untranslatable(
                        node, f"'{value.name}' is quantized with two different scales/zero points in the partition"
                    )

    def seed_input(self, value: ir.Value, node: Any) -> int:
        return self.define(value, node, "nchw")


def _inferred(model: onnx.ModelProto | bytes) -> ir.Model:
    if isinstance(model, bytes):
        proto = onnx.load_model_from_string(model)
    else:
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    # Before IR 4 shape inference ignores initializers that are not graph inputs (the partition's
    # constants), and would leave every shape after a Conv unknown.
    proto.ir_version = max(proto.ir_version, 4)
    try:
        proto = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort: a missing shape is refused later by name
        pass
    return ir.serde.deserialize_model(proto)


def _convert(ctx: Context, node: ir.Node) -> None:
    if node.op_type == "DequantizeLinear" and node.outputs[0].name in ctx.folded:
        return  # folded into a float constant
    converter = _CONVERTERS.get(node.domain, node.op_type)
    if converter is None:
        raise Untranslatable(node, "the translator has no NNAPI form for this op")
    converter(ctx, node)


def translate(
    model: onnx.ModelProto | bytes, inputs: Sequence[str], outputs: Sequence[str], *, layout: str = "nhwc"
) -> Program:
    """The NNAPI program computing ``outputs`` from ``inputs`` (in that order) of ``model``.

    :raises Untranslatable: a node with no NNAPI form, naming it and the reason.
    """
    converters()
    model_ir = _inferred(model)
    graph = model_ir.graph
    ctx = Context(graph, dict(model_ir.opset_imports), layout)
    nodes = list(graph)
    ctx.gather_quantization(nodes)
    by_name = {v.name: v for v in graph.inputs}
    by_name.update({v.name: v for node in nodes for v in node.outputs})
    input_indices = []
    for name in inputs:
        if name not in by_name:
            raise Untranslatable(name, "is not an input of the partition")
        value = by_name[name]
        input_indices.append(ctx.seed_input(value, next(iter(value.consumers()), name)))
    for node in nodes:
        _convert(ctx, node)
    output_indices: list[int] = []
    for name in outputs:
        value = by_name.get(name)
        if value is None:
            raise Untranslatable(name, "is not computed by the partition")
        index = ctx.operand(value, "nchw", value.producer() or name)
        if index in input_indices or index in output_indices or ctx.b.operands[index].value is not None:
            # NNAPI needs each model output to be its own computed operand: copy through RESHAPE
            copy = ctx.b.like(index, label=f"{name}:output")
            dims = ctx.b.operands[index].dims
            ctx.b.operation("RESHAPE", [index, ctx.b.int32s(dims, "shape")], [copy], f"{name}:output")
            index = copy
        output_indices.append(index)
    return Program(
        tuple(ctx.b.operands),
        tuple(ctx.b.operations),
        tuple(input_indices),
        tuple(output_indices),
        tuple(inputs),
        tuple(outputs),
        layout,
    )


def translate_partition(partition: Any, *, layout: str = "nhwc") -> Program:
    """The program for a :class:`~onnxplug.api.Partition` (what ``compile()`` receives)."""
    return translate(partition.model, partition.inputs, partition.outputs, layout=layout)


def declines(
    model: onnx.ModelProto | bytes, names: Iterable[str] | None = None, *, layout: str = "nhwc"
) -> dict[str, str]:
    """Node name → reason, for the nodes (all, or ``names``) the translator cannot express.

    Each node is translated alone, its non-constant inputs taken as program inputs, so the
    answer does not depend on how the nodes are later grouped.
    """
    converters()
    model_ir = _inferred(model)
    opsets = dict(model_ir.opset_imports)
    wanted = None if names is None else set(names)
    refused: dict[str, str] = {}
    for node in model_ir.graph:
        if wanted is not None and node.name not in wanted:
            continue
        ctx = Context(model_ir.graph, opsets, layout)
        try:
            ctx.gather_quantization([node])
            for value in node.inputs:
                if value is not None and ctx.const(value) is None and value.name not in ctx.values:
                    ctx.seed_input(value, node)
            _convert(ctx, node)
            for value in node.outputs:
                if value.name:
                    ctx.operand(value, "nchw", node)
        except Untranslatable as error:
            refused[node.name] = error.reason
    return refused
