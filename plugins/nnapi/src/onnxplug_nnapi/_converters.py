"""ONNX → NNAPI converters for the layout-neutral ops: elementwise math, shapes, axes, matrices.

Each converter reads one ONNX node through the :class:`~onnxplug_nnapi.translate.Context` and
appends NNAPI operations (operand order as ``NeuralNetworks.h`` documents each operation's
inputs).  The spatial ones (convolutions, pools, Resize...) are in :mod:`._spatial`.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from .program import FUSED_NONE, OPERAND
from .translate import TO_NHWC, Context, Untranslatable, arg, attr, converts, requantize_like

_UNARY = {
    "Abs": "ABS",
    "Exp": "EXP",
    "Floor": "FLOOR",
    "Log": "LOG",
    "Neg": "NEG",
    "Relu": "RELU",
    "Sigmoid": "LOGISTIC",
    "Sin": "SIN",
    "Sqrt": "SQRT",
    "Tanh": "TANH",
}
#: Binary ops: NNAPI name, and whether the operation takes a FuseCode input.
_BINARY = {
    "Add": ("ADD", True),
    "Sub": ("SUB", True),
    "Mul": ("MUL", True),
    "Div": ("DIV", True),
    "Pow": ("POW", False),
    "Max": ("MAXIMUM", False),
    "Min": ("MINIMUM", False),
    "PRelu": ("PRELU", False),
}
_AXIS_TO_NHWC = {0: 0, 1: 3, 2: 1, 3: 2}


def _unary_op(ctx: Context, node: ir.Node, name: str, extra=()) -> None:
    x = node.inputs[0]
    layout = ctx.layout_of(x)
    source = ctx.operand(x, layout, node)
    inputs = [source, *(make() for make in extra)]
    ctx.b.operation(name, inputs, [ctx.define(node.outputs[0], node, layout)], node.name)


for _op, _name in _UNARY.items():
    converts(_op)(lambda ctx, node, _name=_name: _unary_op(ctx, node, _name))


@converts("Elu")
def _elu(ctx, node):
    _unary_op(ctx, node, "ELU", [lambda: ctx.b.float32(attr(node, "alpha", 1.0), "alpha")])


@converts("LeakyRelu")
def _leaky_relu(ctx, node):
    alpha = np.array([attr(node, "alpha", 0.01)], np.float32)
    _unary_op(ctx, node, "PRELU", [lambda: ctx.b.constant(OPERAND["TENSOR_FLOAT32"], alpha, label="alpha")])


@converts("Clip")
def _clip(ctx, node):
    if ctx.opset(node) < 11:
        low, high = attr(node, "min", -3.4028234663852886e38), attr(node, "max", 3.4028234663852886e38)
    else:
        bounds = []
        for index in (1, 2):
            value = arg(node, index)
            data = ctx.const(value) if value is not None else None
            if value is not None and data is None:
                raise Untranslatable(node, "Clip bounds must be constant (NNAPI has RELU6/RELU1 only)")
            bounds.append(None if data is None else float(np.asarray(data).reshape(-1)[0]))
        low, high = bounds
    kinds = {(0.0, 6.0): "RELU6", (-1.0, 1.0): "RELU1"}
    if (low, high) not in kinds:
        raise Untranslatable(node, f"Clip({low}, {high}) is neither RELU6 (0, 6) nor RELU1 (-1, 1)")
    _unary_op(ctx, node, kinds[(low, high)])


@converts("Cast")
def _cast(ctx, node):
    if ctx.dtype(node.outputs[0]) not in (ir.DataType.FLOAT, ir.DataType.INT32):
        raise Untranslatable(node, f"Cast to {ctx.dtype(node.outputs[0])}: NNAPI casts to float32 and int32 here")
    _unary_op(ctx, node, "CAST")


@converts("QuantizeLinear")
def _quantize(ctx, node):
    if ctx.dtype(node.outputs[0]) not in (ir.DataType.UINT8, ir.DataType.INT8):
        raise Untranslatable(node, f"QuantizeLinear to {ctx.dtype(node.outputs[0])}: NNAPI quantizes to 8 bits")
    _unary_op(ctx, node, "QUANTIZE")


@converts("DequantizeLinear")
def _dequantize(ctx, node):
    if ctx.dtype(node.inputs[0]) not in (ir.DataType.UINT8, ir.DataType.INT8):
        raise Untranslatable(node, f"DequantizeLinear of {ctx.dtype(node.inputs[0])}: NNAPI dequantizes 8 bits")
    _unary_op(ctx, node, "DEQUANTIZE")


@converts("QLinearSigmoid", domain="com.microsoft")
def _qlinear_sigmoid(ctx, node):
    scale, zero = ctx.quantization(node.outputs[0], node)
    expected = 0 if ctx.dtype(node.outputs[0]) == ir.DataType.UINT8 else -128
    if not np.isclose(scale, 1 / 256) or zero != expected:
        raise Untranslatable(node, f"NNAPI's quantized LOGISTIC needs output scale 1/256, zero point {expected}")
    _unary_op(ctx, node, "LOGISTIC")


def _binary_layout(ctx: Context, node: ir.Node, values) -> str:
    """NHWC when every computed input is available in NHWC (constants are permuted to it)."""
    if ctx.layout != "nhwc" or len(ctx.shape(node.outputs[0], node)) != 4:
        return "nchw"
    computed = [v for v in values if ctx.const(v) is None]
    if computed and all(ctx.available(v, "nhwc") for v in computed):
        return "nhwc"
    return "nchw"


def _binary(ctx: Context, node: ir.Node, name: str, fused: bool, a: ir.Value, b: ir.Value, out: ir.Value) -> None:
    layout = _binary_layout(ctx, node, (a, b))
    inputs = [ctx.operand(a, layout, node), ctx.operand(b, layout, node)]
    if fused:
        inputs.append(ctx.b.int32(FUSED_NONE, "fuse"))
    ctx.b.operation(name, inputs, [ctx.define(out, node, layout)], node.name)


for _op, (_name, _fused) in _BINARY.items():
    if _op not in ("Max", "Min"):
        converts(_op)(
            lambda ctx, node, _n=_name, _f=_fused: _binary(
                ctx, node, _n, _f, node.inputs[0], node.inputs[1], node.outputs[0]
            )
        )


@converts("QLinearAdd", domain="com.microsoft")
def _qlinear_add(ctx, node):
    _binary(ctx, node, "ADD", True, node.inputs[0], node.inputs[3], node.outputs[0])


@converts("Max", "Min")
def _extremum(ctx, node):
    name = _BINARY[node.op_type][0]
    values = [v for v in node.inputs if v is not None]
    if len(values) == 1:
        return _reshape_to_output(ctx, node)
    layout = _binary_layout(ctx, node, values)
    current = ctx.operand(values[0], layout, node)
    for position, value in enumerate(values[1:], start=1):
        last = position == len(values) - 1
        out = (
            ctx.define(node.outputs[0], node, layout) if last else ctx.b.like(current, label=f"{node.name}:{position}")
        )
        ctx.b.operation(name, [current, ctx.operand(value, layout, node)], [out], node.name)
        current = out


@converts("BatchNormalization")
def _batch_norm(ctx, node):
    if len([v for v in node.outputs if v.name]) > 1 or attr(node, "training_mode", 0):
        raise Untranslatable(node, "training-mode BatchNormalization (running statistics) has no NNAPI form")
    parts = [ctx.const(arg(node, i)) for i in range(1, 5)]
    if any(p is None for p in parts):
        raise Untranslatable(node, "scale, B, mean and var must be constant (NNAPI computes it as MUL and ADD)")
    scale, bias, mean, var = (np.asarray(p, np.float64) for p in parts)
    a = scale / np.sqrt(var + attr(node, "epsilon", 1e-5))
    b = bias - mean * a
    x = node.inputs[0]
    rank = len(ctx.shape(x, node))
    layout = "nhwc" if rank == 4 and ctx.available(x, "nhwc") else "nchw"
    shape = (-1,) if layout == "nhwc" else (-1,) + (1,) * (rank - 2)
    a_op = ctx.b.constant(OPERAND["TENSOR_FLOAT32"], a.reshape(shape), label=f"{node.name}:scale")
    b_op = ctx.b.constant(OPERAND["TENSOR_FLOAT32"], b.reshape(shape), label=f"{node.name}:shift")
    source = ctx.operand(x, layout, node)
    scaled = ctx.b.like(source, label=f"{node.name}:scaled")
    ctx.b.operation("MUL", [source, a_op, ctx.b.int32(FUSED_NONE, "fuse")], [scaled], node.name)
    out = ctx.define(node.outputs[0], node, layout)
    ctx.b.operation("ADD", [scaled, b_op, ctx.b.int32(FUSED_NONE, "fuse")], [out], node.name)


def _reshape_to_output(ctx: Context, node: ir.Node) -> None:
    """RESHAPE to the output's static shape: Reshape, Flatten, Squeeze, Unsqueeze, Identity."""
    out = node.outputs[0]
    dims = ctx.shape(out, node)
    source = ctx.operand(node.inputs[0], "nchw", node)
    ctx.b.operation("RESHAPE", [source, ctx.b.int32s(dims, "shape")], [ctx.define(out, node)], node.name)


for _op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"):
    converts(_op)(_reshape_to_output)


def _axis(ctx: Context, node: ir.Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise Untranslatable(node, f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def _axis_layout(ctx: Context, node: ir.Node, values) -> str:
    computed = [v for v in values if ctx.const(v) is None]
    if ctx.layout == "nhwc" and computed and all(ctx.available(v, "nhwc") for v in computed):
        return "nhwc"
    return "nchw"


@converts("Concat")
def _concat(ctx, node):
    values = [v for v in node.inputs if v is not None]
    rank = len(ctx.shape(values[0], node))
    axis = _axis(ctx, node, attr(node, "axis", 0), rank)
    layout = _axis_layout(ctx, node, values) if rank == 4 else "nchw"
    inputs = [ctx.operand(v, layout, node) for v in values]
    nn_axis = _AXIS_TO_NHWC[axis] if layout == "nhwc" else axis
    out = ctx.define(node.outputs[0], node, layout)
    ctx.b.operation("CONCATENATION", [*inputs, ctx.b.int32(nn_axis, "axis")], [out], node.name)


@converts("Split")
def _split(ctx, node):
    x = node.inputs[0]
    shape = ctx.shape(x, node)
    axis = _axis(ctx, node, attr(node, "axis", 0), len(shape))
    outputs = list(node.outputs)
    sizes = ctx.const(arg(node, 1)) if arg(node, 1) is not None else attr(node, "split")
    if arg(node, 1) is not None and sizes is None:
        raise Untranslatable(node, "split sizes must be constant")
    if sizes is not None and len(set(int(s) for s in np.asarray(sizes).reshape(-1))) > 1:
        raise Untranslatable(node, f"uneven split {list(np.asarray(sizes).reshape(-1))}: NNAPI's SPLIT is even")
    if shape[axis] % len(outputs):
        raise Untranslatable(node, f"{len(outputs)} outputs do not divide axis size {shape[axis]}")
    layout = _axis_layout(ctx, node, [x]) if len(shape) == 4 else "nchw"
    nn_axis = _AXIS_TO_NHWC[axis] if layout == "nhwc" else axis
    inputs = [ctx.operand(x, layout, node), ctx.b.int32(nn_axis, "axis"), ctx.b.int32(len(outputs), "num_splits")]
    ctx.b.operation("SPLIT", inputs, [ctx.define(v, node, layout) for v in outputs], node.name)


@converts("Softmax")
def _softmax(ctx, node):
    x = node.inputs[0]
    rank = len(ctx.shape(x, node))
    axis = _axis(ctx, node, attr(node, "axis", -1 if ctx.opset(node) >= 13 else 1), rank)
    if ctx.opset(node) < 13 and axis != rank - 1:
        # Softmax before opset 13 normalizes over all dims from ``axis`` on: a 2-D softmax between RESHAPEs
        shape = ctx.shape(x, node)
        flat = (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))
        source = ctx.operand(x, "nchw", node)
        rows = ctx.b.like(source, flat, label=f"{x.name}:2d")
        ctx.b.operation("RESHAPE", [source, ctx.b.int32s(flat, "shape")], [rows], node.name)
        normalized = ctx.b.like(source, flat, label=f"{node.outputs[0].name}:2d")
        inputs = [rows, ctx.b.float32(1.0, "beta"), ctx.b.int32(1, "axis")]
        ctx.b.operation("SOFTMAX", inputs, [normalized], node.name)
        out = ctx.define(node.outputs[0], node)
        ctx.b.operation("RESHAPE", [normalized, ctx.b.int32s(shape, "shape")], [out], node.name)
        return
    layout = _axis_layout(ctx, node, [x]) if rank == 4 else "nchw"
    nn_axis = _AXIS_TO_NHWC[axis] if layout == "nhwc" else axis
    inputs = [ctx.operand(x, layout, node), ctx.b.float32(1.0, "beta"), ctx.b.int32(nn_axis, "axis")]
    ctx.b.operation("SOFTMAX", inputs, [ctx.define(node.outputs[0], node, layout)], node.name)


@converts("ReduceMean")
def _reduce_mean(ctx, node):
    x = node.inputs[0]
    rank = len(ctx.shape(x, node))
    if ctx.opset(node) >= 18 and arg(node, 1) is not None:
        axes = ctx.const(arg(node, 1))
        if axes is None:
            raise Untranslatable(node, "axes must be constant")
    else:
        axes = attr(node, "axes")
    keep = int(attr(node, "keepdims", 1))
    if axes is None or len(np.asarray(axes).reshape(-1)) == 0:
        if attr(node, "noop_with_empty_axes", 0):
            return _reshape_to_output(ctx, node)
        axes = list(range(rank))
    axes = sorted({_axis(ctx, node, int(a), rank) for a in np.asarray(axes).reshape(-1)})
    layout = _axis_layout(ctx, node, [x]) if rank == 4 and keep else "nchw"
    nn_axes = [_AXIS_TO_NHWC[a] for a in axes] if layout == "nhwc" else axes
    inputs = [ctx.operand(x, layout, node), ctx.b.int32s(nn_axes, "axes"), ctx.b.int32(keep, "keep_dims")]
    ctx.b.operation("MEAN", inputs, [ctx.define(node.outputs[0], node, layout)], node.name)


@converts("Transpose")
def _transpose(ctx, node):
    x = node.inputs[0]
    rank = len(ctx.shape(x, node))
    perm = attr(node, "perm", list(reversed(range(rank))))
    inputs = [ctx.operand(x, "nchw", node), ctx.b.int32s(perm, "perm")]
    ctx.b.operation("TRANSPOSE", inputs, [ctx.define(node.outputs[0], node)], node.name)


@converts("Gather")
def _gather(ctx, node):
    data, indices = node.inputs[0], node.inputs[1]
    shape = ctx.shape(data, node)
    axis = _axis(ctx, node, attr(node, "axis", 0), len(shape))
    constant = ctx.const(indices)
    if constant is not None:
        normalized = np.where(constant < 0, constant + shape[axis], constant).astype(np.int32)
        index_op = ctx.b.constant(
            OPERAND["TENSOR_INT32"], normalized.reshape(normalized.shape or (1,)), label="indices"
        )
    elif ctx.dtype(indices) == ir.DataType.INT32:
        index_op = ctx.operand(indices, "nchw", node)
    else:
        raise Untranslatable(node, "computed indices must be int32 (NNAPI has no int64)")
    out = node.outputs[0]
    inputs = [ctx.operand(data, "nchw", node), ctx.b.int32(axis, "axis"), index_op]
    if constant is not None and constant.ndim == 0:  # NNAPI indices have a dimension: gather [i], then drop it
        dims = shape[:axis] + (1,) + shape[axis + 1 :]
        gathered = ctx.b.tensor(ctx.code(out, node), dims, label=f"{out.name}:gathered")
        ctx.b.operation("GATHER", inputs, [gathered], node.name)
        target = ctx.define(out, node)
        ctx.b.operation("RESHAPE", [gathered, ctx.b.int32s(ctx.shape(out, node), "shape")], [target], node.name)
        return
    ctx.b.operation("GATHER", inputs, [ctx.define(out, node)], node.name)


@converts("Slice")
def _slice(ctx, node):
    x = node.inputs[0]
    shape = ctx.shape(x, node)
    rank = len(shape)
    if ctx.opset(node) < 10:
        starts, ends = attr(node, "starts"), attr(node, "ends")
        axes, steps = attr(node, "axes"), None
    else:
        parts = [ctx.const(arg(node, i)) if arg(node, i) is not None else None for i in range(1, 5)]
        if any(arg(node, i) is not None and parts[i - 1] is None for i in range(1, 5)):
            raise Untranslatable(node, "starts, ends, axes and steps must be constant")
        starts, ends, axes, steps = parts
    starts, ends = np.asarray(starts).reshape(-1), np.asarray(ends).reshape(-1)
    axes = list(range(len(starts))) if axes is None else [int(a) % rank for a in np.asarray(axes).reshape(-1)]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.asarray(steps).reshape(-1)]
    begin, end, stride = [0] * rank, list(shape), [1] * rank
    end_mask = 0
    for axis, start, stop, step in zip(axes, starts, ends, steps):
        size = shape[axis]
        start, stop = int(start), int(stop)
        start = start + size if start < 0 else start
        stop = stop + size if stop < 0 else stop
        if step > 0:
            begin[axis], end[axis] = min(max(start, 0), size), min(max(stop, 0), size)
        else:
            begin[axis], end[axis] = min(max(start, 0), size - 1), min(max(stop, -1), size - 1)
            if end[axis] == -1:
                end_mask |= 1 << axis  # to the start of the axis: "-1" would mean the last element
        stride[axis] = step
    inputs = [
        ctx.operand(x, "nchw", node),
        ctx.b.int32s(begin, "begin"),
        ctx.b.int32s(end, "end"),
        ctx.b.int32s(stride, "strides"),
        ctx.b.int32(0, "begin_mask"),
        ctx.b.int32(end_mask, "end_mask"),
        ctx.b.int32(0, "shrink_axis_mask"),
    ]
    ctx.b.operation("STRIDED_SLICE", inputs, [ctx.define(node.outputs[0], node)], node.name)


@converts("Pad")
def _pad(ctx, node):
    x = node.inputs[0]
    rank = len(ctx.shape(x, node))
    if attr(node, "mode", "constant") != "constant":
        raise Untranslatable(node, "only constant-mode Pad has an NNAPI form")
    if ctx.opset(node) < 11:
        pads, value = attr(node, "pads"), attr(node, "value", 0.0)
    else:
        if arg(node, 3) is not None:
            raise Untranslatable(node, "Pad with an axes input is not translated")
        pads = ctx.const(arg(node, 1))
        value = ctx.const(arg(node, 2)) if arg(node, 2) is not None else 0.0
        if pads is None or value is None:
            raise Untranslatable(node, "pads and constant_value must be constant")
    pads = np.asarray(pads, np.int64).reshape(2, rank).T  # [rank, (begin, end)]
    if (pads < 0).any():
        raise Untranslatable(node, "negative pads (cropping) have no NNAPI PAD form")
    layout = _axis_layout(ctx, node, [x]) if rank == 4 else "nchw"
    if layout == "nhwc":
        pads = pads[list(TO_NHWC)]
    value = float(np.asarray(value).reshape(-1)[0])
    inputs = [ctx.operand(x, layout, node), ctx.b.constant(OPERAND["TENSOR_INT32"], pads, label="paddings")]
    name = "PAD"
    if value != 0.0:
        name = "PAD_V2"
        inputs.append(ctx.b.float32(value, "pad_value"))
    ctx.b.operation(name, inputs, [ctx.define(node.outputs[0], node, layout)], node.name)


def _fully_connected(ctx: Context, node: ir.Node, a: ir.Value, weights: int, bias: int, out: ir.Value) -> None:
    """FULLY_CONNECTED flattens its input to [batch, K]; a RESHAPE restores other output ranks."""
    source = ctx.operand(a, "nchw", node)
    out_shape = ctx.shape(out, node)
    fuse = ctx.b.int32(FUSED_NONE, "fuse")
    if len(out_shape) == 2:
        ctx.b.operation("FULLY_CONNECTED", [source, weights, bias, fuse], [ctx.define(out, node)], node.name)
        return
    rows = int(np.prod(out_shape[:-1]))
    flat = ctx.b.tensor(ctx.code(out, node), (rows, out_shape[-1]), label=f"{out.name}:2d")
    if ctx.code(out, node) != OPERAND["TENSOR_FLOAT32"]:
        scale, zero = ctx.quantization(out, node)
        flat = ctx.b.tensor(ctx.code(out, node), (rows, out_shape[-1]), scale=scale, zero_point=zero, label=out.name)
    ctx.b.operation("FULLY_CONNECTED", [source, weights, bias, fuse], [flat], node.name)
    ctx.b.operation("RESHAPE", [flat, ctx.b.int32s(out_shape, "shape")], [ctx.define(out, node)], node.name)


@converts("MatMul")
def _matmul(ctx, node):
    a, b = node.inputs
    b_data = ctx.const(b)
    if b_data is not None and b_data.ndim == 2:
        weights = ctx.b.constant(OPERAND["TENSOR_FLOAT32"], b_data.T, label=f"{b.name}:transposed")
        bias = ctx.b.constant(OPERAND["TENSOR_FLOAT32"], np.zeros(b_data.shape[1], np.float32), label="bias")
        return _fully_connected(ctx, node, a, weights, bias, node.outputs[0])
    ranks = {len(ctx.shape(a, node)), len(ctx.shape(b, node))}
    if len(ranks) != 1 or not ranks <= {2, 3, 4}:
        raise Untranslatable(
            node, f"BATCH_MATMUL needs operands of one rank between 2 and 4, got ranks {sorted(ranks)}"
        )
    inputs = [
        ctx.operand(a, "nchw", node),
        ctx.operand(b, "nchw", node),
        ctx.b.bool(False, "adj_x"),
        ctx.b.bool(False, "adj_y"),
    ]
    ctx.b.operation("BATCH_MATMUL", inputs, [ctx.define(node.outputs[0], node)], node.name)


@converts("Gemm")
def _gemm(ctx, node):
    a, b, c = node.inputs[0], node.inputs[1], arg(node, 2)
    alpha, beta = float(attr(node, "alpha", 1.0)), float(attr(node, "beta", 1.0))
    if attr(node, "transA", 0):
        raise Untranslatable(node, "transA=1 has no FULLY_CONNECTED form")
    trans_b = attr(node, "transB", 0)
    b_data = ctx.const(b)
    n = ctx.shape(node.outputs[0], node)[1]
    if b_data is not None:
        matrix = (b_data if trans_b else b_data.T) * alpha
        weights = ctx.b.constant(OPERAND["TENSOR_FLOAT32"], matrix, label=f"{b.name}:weights")
    elif trans_b and alpha == 1.0:
        weights = ctx.operand(b, "nchw", node)
    else:
        raise Untranslatable(node, "a computed B needs transB=1 and alpha=1 (FULLY_CONNECTED weights are [N, K])")
    c_data = ctx.const(c) if c is not None else np.zeros(n, np.float32)
    if c is not None and c_data is None or np.size(c_data) not in (1, n) or np.ndim(c_data) > 2:
        raise Untranslatable(node, "C must be a constant of N values (FULLY_CONNECTED's bias)")
    bias = np.broadcast_to(np.asarray(c_data, np.float32).reshape(-1) * beta, (n,))
    bias_op = ctx.b.constant(OPERAND["TENSOR_FLOAT32"], bias, label="bias")
    _fully_connected(ctx, node, a, weights, bias_op, node.outputs[0])


@converts("QLinearMatMul")
def _qlinear_matmul(ctx, node):
    a, b = node.inputs[0], node.inputs[3]
    b_data = ctx.const(b)
    if b_data is None or b_data.ndim != 2:
        raise Untranslatable(node, "B must be a constant matrix (quantized FULLY_CONNECTED weights)")
    a_scale, a_zero = ctx.quantization(a, node)
    b_scale, b_zero = ctx.quantization(b, node)
    code = ctx.code(a, node)
    data, b_zero = requantize_like(b_data, b_zero, code)
    weights = ctx.b.constant(code, data.T, scale=b_scale, zero_point=b_zero, label=f"{b.name}:weights")
    bias = ctx.b.constant(
        OPERAND["TENSOR_INT32"], np.zeros(b_data.shape[1], np.int32), scale=a_scale * b_scale, label="bias"
    )
    _fully_connected(ctx, node, a, weights, bias, node.outputs[0])
