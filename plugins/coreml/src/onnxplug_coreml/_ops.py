"""MIL forms of the element-wise, activation, linear-algebra, normalization and tensor ops.

Shapes are static here (the translator refuses dynamic ones), so ops whose ONNX form takes a
shape tensor (Reshape, Expand, Squeeze/Unsqueeze, Flatten) take the inferred output shape, and
Shape/Size become constants.
"""

from __future__ import annotations

import numpy as np
import onnx

from .translate import Untranslatable, attr, converts

_UNARY = {
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Abs": "abs",
    "Erf": "erf",
    "Floor": "floor",
    "Ceil": "ceil",
    "Round": "round",
    "Sin": "sin",
    "Cos": "cos",
    "Softplus": "softplus",
    "Not": "logical_not",
    "Identity": "identity",
}
_BINARY = {
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "real_div",
    "Pow": "pow",
    "Equal": "equal",
    "Less": "less",
    "Greater": "greater",
    "LessOrEqual": "less_equal",
    "GreaterOrEqual": "greater_equal",
    "And": "logical_and",
    "Or": "logical_or",
    "Xor": "logical_xor",
}


def _x(ctx, node, index=0):
    return ctx.var(node.input[index], node)


def _gathering(ctx, node, gather):
    """Run ``gather(x)`` on the data input; MIL's gathers take no bool, so bool goes through int32."""
    x = _x(ctx, node)
    if ctx.mil_dtype(node.input[0], node) != "bool":
        return gather(x)
    return ctx.mb.cast(x=gather(ctx.mb.cast(x=x, dtype="int32")), dtype="bool")


def _out(ctx, node, var, index=0):
    ctx.set(node.output[index], var)


@converts(*_UNARY)
def _unary(ctx, node):
    _out(ctx, node, getattr(ctx.mb, _UNARY[node.op_type])(x=_x(ctx, node)))


@converts(*_BINARY)
def _binary(ctx, node):
    x, y = _x(ctx, node, 0), _x(ctx, node, 1)
    if node.op_type == "Div" and ctx.mil_dtype(node.input[0], node) not in ("fp32", "fp16"):
        raise Untranslatable(node, "integer Div truncates in ONNX; MIL's division is real or floor division")
    _out(ctx, node, getattr(ctx.mb, _BINARY[node.op_type])(x=x, y=y))


@converts("Max", "Min", "Sum", "Mean")
def _variadic(ctx, node):
    fn = {"Max": ctx.mb.maximum, "Min": ctx.mb.minimum, "Sum": ctx.mb.add, "Mean": ctx.mb.add}[node.op_type]
    names = [n for n in node.input if n]
    result = ctx.var(names[0], node)
    for name in names[1:]:
        result = fn(x=result, y=ctx.var(name, node))
    if node.op_type == "Mean":
        result = ctx.mb.real_div(x=result, y=ctx.np_type(names[0], node)(len(names)))
    elif len(names) == 1:
        result = ctx.mb.identity(x=result)
    _out(ctx, node, result)


@converts("Neg")
def _neg(ctx, node):
    _out(ctx, node, ctx.mb.mul(x=_x(ctx, node), y=ctx.np_type(node.input[0], node)(-1)))


@converts("Reciprocal")
def _reciprocal(ctx, node):
    # real_div(1, x), not MIL's inverse(): that adds an epsilon (1e-4 by default) ONNX does not have
    _out(ctx, node, ctx.mb.real_div(x=ctx.np_type(node.input[0], node)(1.0), y=_x(ctx, node)))


@converts("LeakyRelu")
def _leaky_relu(ctx, node):
    _out(ctx, node, ctx.mb.leaky_relu(x=_x(ctx, node), alpha=float(attr(node, "alpha", 0.01))))


@converts("Elu")
def _elu(ctx, node):
    _out(ctx, node, ctx.mb.elu(x=_x(ctx, node), alpha=float(attr(node, "alpha", 1.0))))


@converts("HardSigmoid")
def _hard_sigmoid(ctx, node):
    alpha, beta = float(attr(node, "alpha", 0.2)), float(attr(node, "beta", 0.5))
    _out(ctx, node, ctx.mb.sigmoid_hard(x=_x(ctx, node), alpha=alpha, beta=beta))


@converts("PRelu")
def _prelu(ctx, node):
    # where(x < 0, x * slope, x): ONNX's slope broadcasts any way; MIL's prelu takes a per-channel vector only
    x, slope = _x(ctx, node, 0), _x(ctx, node, 1)
    negative = ctx.mb.less(x=x, y=ctx.np_type(node.input[0], node)(0))
    _out(ctx, node, ctx.mb.select(cond=negative, a=ctx.mb.mul(x=x, y=slope), b=x))


@converts("Gelu")
def _gelu(ctx, node):
    approximate = attr(node, "approximate", "none")
    mode = {"none": "EXACT", "tanh": "TANH_APPROXIMATION"}.get(approximate)
    if mode is None:
        raise Untranslatable(node, f"approximate={approximate!r} is neither 'none' nor 'tanh'")
    _out(ctx, node, ctx.mb.gelu(x=_x(ctx, node), mode=mode))


@converts("Clip")
def _clip(ctx, node):
    x = _x(ctx, node)
    if ctx.opset(node) < 11:
        low, high = attr(node, "min"), attr(node, "max")
    else:
        low, high = ctx.required_const(node, 1, "min"), ctx.required_const(node, 2, "max")
    dtype = ctx.np_type(node.input[0], node)
    if low is not None:
        x = ctx.mb.maximum(x=x, y=dtype(np.asarray(low).reshape(())))
    if high is not None:
        x = ctx.mb.minimum(x=x, y=dtype(np.asarray(high).reshape(())))
    _out(ctx, node, x if (low is not None or high is not None) else ctx.mb.identity(x=x))


def _positive_axis(axis, rank, node):
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        raise Untranslatable(node, f"axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


@converts("Softmax", "LogSoftmax")
def _softmax(ctx, node):
    x = _x(ctx, node)
    shape = ctx.shape(node.input[0], node)
    if ctx.opset(node) >= 13:
        axis = _positive_axis(attr(node, "axis", -1), len(shape), node)
        result = ctx.mb.softmax(x=x, axis=axis)
    else:  # before opset 13: the input is coerced to 2-D at ``axis`` and normalized over the second part
        axis = _positive_axis(attr(node, "axis", 1), len(shape), node)
        flat = ctx.mb.reshape(x=x, shape=[int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))])
        result = ctx.mb.reshape(x=ctx.mb.softmax(x=flat, axis=1), shape=list(shape))
    if node.op_type == "LogSoftmax":
        result = ctx.mb.log(x=result)
    _out(ctx, node, result)


@converts("MatMul")
def _matmul(ctx, node):
    _out(ctx, node, ctx.mb.matmul(x=_x(ctx, node, 0), y=_x(ctx, node, 1)))


@converts("Gemm")
def _gemm(ctx, node):
    a = _x(ctx, node, 0)
    if attr(node, "transA", 0):
        a = ctx.mb.transpose(x=a, perm=[1, 0])
    b = ctx.required_const(node, 1, "input B")
    alpha, beta = float(attr(node, "alpha", 1.0)), float(attr(node, "beta", 1.0))
    dt = ctx.np_type(node.input[0], node)
    weight = (np.asarray(b if attr(node, "transB", 0) else b.T, np.float32) * np.float32(alpha)).astype(dt)  # [out, in]
    c = ctx.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if c is not None and c.size in (1, weight.shape[0]) and c.ndim <= 1:
        bias = np.broadcast_to(np.asarray(c, np.float32).reshape(-1) * np.float32(beta), (weight.shape[0],)).astype(dt)
        _out(ctx, node, ctx.mb.linear(x=a, weight=weight, bias=np.ascontiguousarray(bias)))
        return
    result = ctx.mb.linear(x=a, weight=weight)
    if len(node.input) > 2 and node.input[2]:
        c_var = _x(ctx, node, 2)
        if beta != 1.0:
            c_var = ctx.mb.mul(x=c_var, y=dt(beta))
        result = ctx.mb.add(x=result, y=c_var)
    _out(ctx, node, result)


@converts("LayerNormalization")
def _layer_norm(ctx, node):
    if any(name for name in node.output[1:]):
        raise Untranslatable(node, "the Mean and InvStdDev outputs have no MIL form")
    shape = ctx.shape(node.input[0], node)
    axis = _positive_axis(attr(node, "axis", -1), len(shape), node)
    axes = list(range(axis, len(shape)))
    epsilon = ctx.np_type(node.input[0], node)(attr(node, "epsilon", 1e-5))  # MIL: the type of x
    scale = ctx.const(node.input[1])
    bias = ctx.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    normalized = tuple(shape[axis:])
    has_bias = len(node.input) > 2 and bool(node.input[2])
    if (
        scale is not None
        and scale.shape == normalized
        and (not has_bias or (bias is not None and bias.shape == normalized))
    ):
        dt = ctx.np_type(node.input[0], node)
        gamma = np.asarray(scale, dt)
        beta = np.asarray(bias, dt) if bias is not None else np.zeros(normalized, dt)
        _out(ctx, node, ctx.mb.layer_norm(x=_x(ctx, node), axes=axes, gamma=gamma, beta=beta, epsilon=epsilon))
        return
    result = ctx.mb.mul(x=ctx.mb.layer_norm(x=_x(ctx, node), axes=axes, epsilon=epsilon), y=_x(ctx, node, 1))
    if has_bias:
        result = ctx.mb.add(x=result, y=_x(ctx, node, 2))
    _out(ctx, node, result)


@converts("Cast")
def _cast(ctx, node):
    to = int(attr(node, "to"))
    target = {
        onnx.TensorProto.FLOAT: "fp32",
        onnx.TensorProto.FLOAT16: "fp16",
        onnx.TensorProto.INT32: "int32",
        onnx.TensorProto.INT64: "int32",
        onnx.TensorProto.BOOL: "bool",
    }.get(to)
    if target is None:
        raise Untranslatable(node, f"Cast to {onnx.TensorProto.DataType.Name(to).lower()} has no Core ML type")
    x = _x(ctx, node)
    same = ctx.mil_dtype(node.input[0], node) == target
    _out(ctx, node, ctx.mb.identity(x=x) if same else ctx.mb.cast(x=x, dtype=target))


@converts("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(ctx, node):
    shape = ctx.shape(node.output[0], node)  # static shapes: the inferred result is the target
    _out(ctx, node, ctx.mb.reshape(x=_x(ctx, node), shape=np.array(shape, np.int32)))


@converts("Expand")
def _expand(ctx, node):
    in_shape, out_shape = ctx.shape(node.input[0], node), ctx.shape(node.output[0], node)
    padded = (1,) * (len(out_shape) - len(in_shape)) + tuple(in_shape)
    x = _x(ctx, node)
    if padded != tuple(in_shape):
        x = ctx.mb.reshape(x=x, shape=np.array(padded, np.int32))
    reps = [o // i if i else 1 for o, i in zip(out_shape, padded)]
    _out(ctx, node, ctx.mb.tile(x=x, reps=reps) if any(r != 1 for r in reps) else ctx.mb.identity(x=x))


@converts("Transpose")
def _transpose(ctx, node):
    rank = ctx.rank(node.input[0], node)
    perm = attr(node, "perm", list(range(rank))[::-1])
    _out(ctx, node, ctx.mb.transpose(x=_x(ctx, node), perm=[int(p) for p in perm]))


@converts("Concat")
def _concat(ctx, node):
    rank = ctx.rank(node.output[0], node)
    values = [ctx.var(name, node) for name in node.input if name]
    _out(ctx, node, ctx.mb.concat(values=values, axis=_positive_axis(attr(node, "axis"), rank, node)))


@converts("Split")
def _split(ctx, node):
    rank = ctx.rank(node.input[0], node)
    axis = _positive_axis(attr(node, "axis", 0), rank, node)
    if ctx.opset(node) >= 13:
        ctx.required_const(node, 1, "input split")
    sizes = [ctx.shape(name, node)[axis] for name in node.output]  # static: the outputs say the sizes
    parts = ctx.mb.split(x=_x(ctx, node), split_sizes=np.array(sizes, np.int32), axis=axis)
    for index, part in enumerate(parts if isinstance(parts, (list, tuple)) else [parts]):
        _out(ctx, node, part, index)


@converts("Slice")
def _slice(ctx, node):
    shape = ctx.shape(node.input[0], node)
    if ctx.opset(node) < 10:
        starts, ends = attr(node, "starts"), attr(node, "ends")
        axes, steps = attr(node, "axes", list(range(len(starts)))), [1] * len(starts)
    else:
        starts = ctx.required_const(node, 1, "starts")
        ends = ctx.required_const(node, 2, "ends")
        axes = ctx.required_const(node, 3, "axes")
        steps = ctx.required_const(node, 4, "steps")
        axes = list(range(len(starts))) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
    begin, end, stride = [0] * len(shape), list(shape), [1] * len(shape)
    begin_mask, end_mask = [False] * len(shape), [False] * len(shape)
    for start, stop, axis, step in zip(np.asarray(starts).tolist(), np.asarray(ends).tolist(), axes, steps):
        axis = _positive_axis(axis, len(shape), node)
        if int(step) == 0:
            raise Untranslatable(node, "a Slice step is 0")
        b, e, s = slice(int(start), int(stop), int(step)).indices(shape[axis])
        begin[axis], end[axis], stride[axis] = b, e, s
        if s < 0 and e < 0:  # down to and including index 0: no end index expresses it, the mask does
            end[axis], end_mask[axis] = 0, True
    _out(
        ctx,
        node,
        ctx.mb.slice_by_index(
            x=_x(ctx, node),
            begin=np.array(begin, np.int32),
            end=np.array(end, np.int32),
            stride=np.array(stride, np.int32),
            begin_mask=begin_mask,
            end_mask=end_mask,
        ),
    )


@converts("Gather")
def _gather(ctx, node):
    shape = ctx.shape(node.input[0], node)
    axis = _positive_axis(attr(node, "axis", 0), len(shape), node)
    indices = ctx.const(node.input[1])
    if indices is not None:
        indices = np.where(indices < 0, indices + shape[axis], indices)
        if indices.size and (indices.min() < 0 or indices.max() >= shape[axis]):
            raise Untranslatable(node, f"constant indices are out of range for size {shape[axis]}")
        index_var = ctx.mb.const(val=indices.astype(np.int32))
    else:
        index_var = _x(ctx, node, 1)  # run-time indices: Core ML reads them as they come (non-negative)
    _out(ctx, node, _gathering(ctx, node, lambda x: ctx.mb.gather(x=x, indices=index_var, axis=axis)))


@converts("Shape", "Size")
def _shape(ctx, node):
    shape = ctx.shape(node.input[0], node)  # static shapes: known now, so a constant
    if node.op_type == "Size":
        ctx.folded[node.output[0]] = np.array(int(np.prod(shape)), np.int64)
        return
    start, end = int(attr(node, "start", 0)), attr(node, "end", None)
    ctx.folded[node.output[0]] = np.array(shape[slice(start, None if end is None else int(end))], np.int64)


@converts("ConstantOfShape")
def _constant_of_shape(ctx, node):
    shape = ctx.required_const(node, 0, "input shape")
    found = attr(node, "value")
    value = np.zeros(1, np.float32) if found is None else onnx.numpy_helper.to_array(found).reshape(-1)
    ctx.folded[node.output[0]] = np.full([int(d) for d in shape.reshape(-1)], value[0], value.dtype)


@converts("Dropout")
def _dropout(ctx, node):
    if len(node.input) > 2 and node.input[2]:
        training = ctx.required_const(node, 2, "training_mode")
        if bool(np.asarray(training).reshape(-1)[0]):
            raise Untranslatable(node, "Dropout in training mode has no MIL form")
    _out(ctx, node, ctx.mb.identity(x=_x(ctx, node)))
    if len(node.output) > 1 and node.output[1]:  # at inference every element is kept
        ctx.folded[node.output[1]] = np.ones(ctx.shape(node.input[0], node), bool)


@converts("Where")
def _where(ctx, node):
    _out(ctx, node, ctx.mb.select(cond=_x(ctx, node, 0), a=_x(ctx, node, 1), b=_x(ctx, node, 2)))


@converts("Tile")
def _tile(ctx, node):
    reps = ctx.required_const(node, 1, "repeats")
    _out(ctx, node, ctx.mb.tile(x=_x(ctx, node), reps=[int(r) for r in np.asarray(reps).reshape(-1)]))


@converts("ArgMax", "ArgMin")
def _arg(ctx, node):
    if attr(node, "select_last_index", 0):
        raise Untranslatable(node, "select_last_index=1 has no MIL form")
    rank = ctx.rank(node.input[0], node)
    axis = _positive_axis(attr(node, "axis", 0), rank, node)
    fn = ctx.mb.reduce_argmax if node.op_type == "ArgMax" else ctx.mb.reduce_argmin
    _out(ctx, node, fn(x=_x(ctx, node), axis=axis, keep_dims=bool(attr(node, "keepdims", 1))))


_REDUCE = {
    "ReduceSum": "reduce_sum",
    "ReduceMean": "reduce_mean",
    "ReduceMax": "reduce_max",
    "ReduceMin": "reduce_min",
    "ReduceProd": "reduce_prod",
    "ReduceL1": "reduce_l1_norm",
    "ReduceL2": "reduce_l2_norm",
    "ReduceLogSumExp": "reduce_log_sum_exp",
    "ReduceSumSquare": "reduce_sum_square",
}
#: The opset from which each reduction takes its axes as an input rather than an attribute.
_AXES_INPUT_FROM = dict.fromkeys(_REDUCE, 18) | {"ReduceSum": 13}


@converts(*_REDUCE)
def _reduce(ctx, node):
    rank = ctx.rank(node.input[0], node)
    if ctx.opset(node) >= _AXES_INPUT_FROM[node.op_type]:
        axes = ctx.required_const(node, 1, "axes")
        axes = None if axes is None or axes.size == 0 else axes.reshape(-1).tolist()
    else:
        axes = attr(node, "axes")
    x = _x(ctx, node)
    if axes is None and attr(node, "noop_with_empty_axes", 0):
        _out(ctx, node, ctx.mb.identity(x=x))
        return
    axes = list(range(rank)) if axes is None else [_positive_axis(a, rank, node) for a in axes]
    keep = bool(attr(node, "keepdims", 1))
    _out(ctx, node, getattr(ctx.mb, _REDUCE[node.op_type])(x=x, axes=axes, keep_dims=keep))


@converts("DepthToSpace")
def _depth_to_space(ctx, node):
    n, c, h, w = ctx.shape(node.input[0], node)
    b = int(attr(node, "blocksize"))
    mode = attr(node, "mode", "DCR")
    if mode == "DCR":
        parts, perm = [n, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
    else:
        parts, perm = [n, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]
    x = ctx.mb.reshape(x=_x(ctx, node), shape=np.array(parts, np.int32))
    x = ctx.mb.transpose(x=x, perm=perm)
    _out(ctx, node, ctx.mb.reshape(x=x, shape=np.array([n, c // (b * b), h * b, w * b], np.int32)))


@converts("Range")
def _range(ctx, node):
    start, limit, delta = (ctx.required_const(node, i, what) for i, what in enumerate(("start", "limit", "delta")))
    ctx.folded[node.output[0]] = np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)


@converts("GatherElements")
def _gather_elements(ctx, node):
    rank = ctx.rank(node.input[0], node)
    axis = _positive_axis(attr(node, "axis", 0), rank, node)
    indices = ctx.const(node.input[1])
    if indices is not None:
        size = ctx.shape(node.input[0], node)[axis]
        index_var = ctx.mb.const(val=np.where(indices < 0, indices + size, indices).astype(np.int32))
    else:
        index_var = _x(ctx, node, 1)
    _out(ctx, node, _gathering(ctx, node, lambda x: ctx.mb.gather_along_axis(x=x, indices=index_var, axis=axis)))


@converts("GatherND")
def _gather_nd(ctx, node):
    if attr(node, "batch_dims", 0):
        raise Untranslatable(node, "batch_dims must be 0")
    indices = _x(ctx, node, 1)
    _out(ctx, node, _gathering(ctx, node, lambda x: ctx.mb.gather_nd(x=x, indices=indices)))
