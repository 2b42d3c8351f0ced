"""MIL forms of the convolutions, pools, batch/instance normalization, Pad and Resize.

MIL's spatial ops are NCHW like ONNX, so weights and values keep their layout; what changes is
how padding is spelled (ONNX ``[x1_begin, x2_begin, x1_end, x2_end]``, MIL ``[x1_begin,
x1_end, x2_begin, x2_end]``) and which attribute combinations exist at all.
"""

from __future__ import annotations

import numpy as np

from .translate import Untranslatable, attr, converts

#: ONNX ``auto_pad`` → MIL ``pad_type`` (``NOTSET`` uses the explicit pads: ``custom``).
_PAD_TYPES = {"NOTSET": "custom", "VALID": "valid", "SAME_UPPER": "same", "SAME_LOWER": "same_lower"}


def _mil_pads(node, spatial: int) -> list[int]:
    pads = attr(node, "pads", [0] * (2 * spatial))
    return [int(v) for pair in zip(pads[:spatial], pads[spatial:]) for v in pair]


def _pad_type(node) -> str:
    auto_pad = attr(node, "auto_pad", "NOTSET")
    if auto_pad not in _PAD_TYPES:
        raise Untranslatable(node, f"auto_pad={auto_pad!r} is unknown")
    return _PAD_TYPES[auto_pad]


def _spatial_rank(ctx, node, allowed, what) -> int:
    rank = ctx.rank(node.input[0], node)
    if rank not in allowed:
        raise Untranslatable(node, f"{what}: the input has rank {rank}")
    return rank - 2


@converts("Conv")
def _conv(ctx, node):
    spatial = _spatial_rank(ctx, node, (3, 4), "only 1-D/2-D Conv is supported")
    bias = ctx.required_const(node, 2, "bias B")
    pad_type = _pad_type(node)
    kwargs = dict(
        x=ctx.var(node.input[0], node),
        weight=ctx.var(node.input[1], node),
        strides=[int(s) for s in attr(node, "strides", [1] * spatial)],
        dilations=[int(d) for d in attr(node, "dilations", [1] * spatial)],
        groups=int(attr(node, "group", 1)),
        pad_type=pad_type,
    )
    if pad_type == "custom":
        kwargs["pad"] = _mil_pads(node, spatial)
    if bias is not None:
        kwargs["bias"] = np.asarray(bias, ctx.np_type(node.input[0], node))
    ctx.set(node.output[0], ctx.mb.conv(**kwargs))


@converts("ConvTranspose")
def _conv_transpose(ctx, node):
    spatial = _spatial_rank(ctx, node, (3, 4), "only 1-D/2-D ConvTranspose is supported")
    weight = ctx.required_const(node, 1, "weight W")
    bias = ctx.required_const(node, 2, "bias B")
    if attr(node, "auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise Untranslatable(node, "auto_pad SAME_UPPER/SAME_LOWER is not supported")
    if attr(node, "output_shape") is not None:
        raise Untranslatable(node, "output_shape is not supported")
    if any(attr(node, "output_padding", [0]) or [0]):
        raise Untranslatable(node, "output_padding must have default values (zeros)")
    kernel = attr(node, "kernel_shape")
    if kernel is not None and list(kernel) != list(weight.shape[2:]):
        raise Untranslatable(node, f"kernel_shape {kernel} must match the weights' {list(weight.shape[2:])}")
    kwargs = dict(
        x=ctx.var(node.input[0], node),
        weight=np.asarray(weight, ctx.np_type(node.input[0], node)),
        strides=[int(s) for s in attr(node, "strides", [1] * spatial)],
        dilations=[int(d) for d in attr(node, "dilations", [1] * spatial)],
        groups=int(attr(node, "group", 1)),
        pad_type="valid" if attr(node, "auto_pad", "NOTSET") == "VALID" else "custom",
        output_shape=np.array(ctx.shape(node.output[0], node), np.int32),
    )
    if kwargs["pad_type"] == "custom":
        kwargs["pad"] = _mil_pads(node, spatial)
    if bias is not None:
        kwargs["bias"] = np.asarray(bias, ctx.np_type(node.input[0], node))
    ctx.set(node.output[0], ctx.mb.conv_transpose(**kwargs))


@converts("MaxPool", "AveragePool")
def _pool(ctx, node):
    spatial = _spatial_rank(ctx, node, (4,), "only 2-D pooling is supported (rank-4 input)")
    if len(node.output) > 1 and node.output[1]:
        raise Untranslatable(node, "MaxPool's Indices output has no MIL form")
    if any(int(d) != 1 for d in attr(node, "dilations", [1] * spatial)):
        raise Untranslatable(node, "dilated pooling has no MIL form (dilations must be 1)")
    if attr(node, "storage_order", 0):
        raise Untranslatable(node, "storage_order=1 has no MIL form")
    kernel = [int(k) for k in attr(node, "kernel_shape")]
    pad_type = _pad_type(node)
    kwargs = dict(
        x=ctx.var(node.input[0], node),
        kernel_sizes=kernel,
        strides=[int(s) for s in attr(node, "strides", [1] * spatial)],
        pad_type=pad_type,
        ceil_mode=bool(attr(node, "ceil_mode", 0)),
    )
    if pad_type == "custom":
        kwargs["pad"] = _mil_pads(node, spatial)
    if node.op_type == "MaxPool":
        ctx.set(node.output[0], ctx.mb.max_pool(**kwargs))
    else:
        exclude = not attr(node, "count_include_pad", 0)
        ctx.set(node.output[0], ctx.mb.avg_pool(exclude_padding_from_average=exclude, **kwargs))


@converts("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx, node):
    spatial = _spatial_rank(ctx, node, (4,), "only 2-D pooling is supported (rank-4 input)")
    fn = ctx.mb.reduce_mean if node.op_type == "GlobalAveragePool" else ctx.mb.reduce_max
    axes = list(range(2, 2 + spatial))
    ctx.set(node.output[0], fn(x=ctx.var(node.input[0], node), axes=axes, keep_dims=True))


def _channel_params(ctx, node, indices, names):
    values = []
    for index, name in zip(indices, names):
        value = ctx.required_const(node, index, name)
        values.append(np.asarray(value, np.float32).reshape(-1))
    return values


def _like_input(ctx, node, *arrays):
    """Arrays in the data input's type (MIL takes fp16 parameters next to fp16 values)."""
    dt = ctx.np_type(node.input[0], node)
    return [np.asarray(a).astype(dt) for a in arrays]


@converts("BatchNormalization")
def _batch_norm(ctx, node):
    if attr(node, "training_mode", 0) or any(name for name in node.output[1:]):
        raise Untranslatable(node, "training mode (running mean/var outputs) has no MIL form")
    scale, bias, mean, var = _channel_params(ctx, node, (1, 2, 3, 4), ("scale", "B", "input_mean", "input_var"))
    epsilon = ctx.np_type(node.input[0], node)(attr(node, "epsilon", 1e-5))  # MIL: the type of x
    x = ctx.var(node.input[0], node)
    rank = ctx.rank(node.input[0], node)
    if 3 <= rank <= 5:
        mean, var, scale, bias = _like_input(ctx, node, mean, var, scale, bias)
        out = ctx.mb.batch_norm(x=x, mean=mean, variance=var, gamma=scale, beta=bias, epsilon=epsilon)
    else:  # MIL's batch_norm takes ranks 3-5: a rank-2 input is y = x * a + b over its channels
        a = scale / np.sqrt(var + np.float32(epsilon))  # in float32, then in x's type
        shape = [1, -1] + [1] * (rank - 2)
        a, b = _like_input(ctx, node, a.reshape(shape), (bias - mean * a).reshape(shape))
        out = ctx.mb.add(x=ctx.mb.mul(x=x, y=a), y=b)
    ctx.set(node.output[0], out)


@converts("InstanceNormalization")
def _instance_norm(ctx, node):
    _spatial_rank(ctx, node, (3, 4), "only 1-D/2-D InstanceNormalization is supported")
    scale, bias = _channel_params(ctx, node, (1, 2), ("scale", "B"))
    epsilon = ctx.np_type(node.input[0], node)(attr(node, "epsilon", 1e-5))  # MIL: the type of x
    x = ctx.var(node.input[0], node)
    scale, bias = _like_input(ctx, node, scale, bias)
    ctx.set(node.output[0], ctx.mb.instance_norm(x=x, gamma=scale, beta=bias, epsilon=epsilon))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "replicate"}


@converts("Pad")
def _pad(ctx, node):
    rank = ctx.rank(node.input[0], node)
    mode = attr(node, "mode", "constant")
    if mode not in _PAD_MODES:
        raise Untranslatable(node, f"mode={mode!r} has no MIL form (constant, reflect, edge)")
    if ctx.opset(node) < 11:
        pads, value = attr(node, "pads"), float(attr(node, "value", 0.0))
        axes = list(range(rank))
    else:
        pads = ctx.required_const(node, 1, "pads")
        constant = ctx.required_const(node, 2, "constant_value")
        value = 0.0 if constant is None else float(np.asarray(constant).reshape(-1)[0])
        found = ctx.required_const(node, 3, "axes")
        axes = list(range(rank)) if found is None else [int(a) % rank for a in np.asarray(found).reshape(-1)]
    pads = [int(p) for p in np.asarray(pads).reshape(-1)]
    if any(p < 0 for p in pads):
        raise Untranslatable(node, "negative pads (cropping) have no MIL pad form")
    begin, end = [0] * rank, [0] * rank
    for i, axis in enumerate(axes):
        begin[axis], end[axis] = pads[i], pads[len(axes) + i]
    padded = [a for a in range(rank) if begin[a] or end[a]]
    if mode != "constant" and padded and min(padded) < rank - 2:
        raise Untranslatable(node, f"{mode} padding is only supported on the last two axes")
    mil_pad = [v for a in range(rank) for v in (begin[a], end[a])]
    x = ctx.var(node.input[0], node)
    value = ctx.np_type(node.input[0], node)(value)
    ctx.set(node.output[0], ctx.mb.pad(x=x, pad=np.array(mil_pad, np.int32), mode=_PAD_MODES[mode], constant_val=value))


def resize_form(node, rank: int, in_shape, out_shape) -> tuple[str, dict] | str:
    """How a Resize maps to MIL: ``(op, arguments)``, or the reason it does not.

    MIL resizes the last two axes of a rank-4 value: nearest neighbour by integer factors
    (``upsample_nearest_neighbor``; ONNX's asymmetric/floor and half_pixel/round_prefer_floor
    agree there), bilinear with half-pixel centres or aligned corners (``upsample_bilinear``).
    Shared with the capability table so planning and translation refuse alike.
    """
    if rank != 4:
        return f"only 2-D Resize is supported (rank-4 input); the input has rank {rank}"
    if tuple(out_shape[:2]) != tuple(in_shape[:2]):
        return "Resize may only scale the last two axes (N and C keep their sizes)"
    mode = attr(node, "mode", "nearest")
    transform = attr(node, "coordinate_transformation_mode", "half_pixel")
    if attr(node, "antialias", 0) or attr(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
        return "antialias and keep_aspect_ratio_policy have no MIL form"
    if attr(node, "axes") is not None:
        return "Resize with axes is not supported"
    factors = [o / i for o, i in zip(out_shape[2:], in_shape[2:])]
    if mode == "nearest":
        nearest = attr(node, "nearest_mode", "round_prefer_floor")
        if (transform, nearest) not in (("asymmetric", "floor"), ("half_pixel", "round_prefer_floor")):
            return f"nearest Resize needs asymmetric/floor or half_pixel/round_prefer_floor, not {transform}/{nearest}"
        if any(f < 1 or f != int(f) for f in factors):
            return f"nearest Resize needs integer upscaling factors, not {factors}"
        return "upsample_nearest_neighbor", dict(
            scale_factor_height=int(factors[0]), scale_factor_width=int(factors[1])
        )
    if mode == "linear":
        if transform in ("half_pixel", "pytorch_half_pixel") and all(o > 1 for o in out_shape[2:]):
            align = False
        elif transform == "align_corners":
            align = True
        else:
            return f"linear Resize needs half_pixel or align_corners coordinates, not {transform}"
        return "upsample_bilinear", dict(
            scale_factor_height=float(factors[0]), scale_factor_width=float(factors[1]), align_corners=align
        )
    return f"mode={mode!r} has no MIL form (nearest, linear)"


@converts("Resize")
def _resize(ctx, node):
    # opset 10: (X, scales); from 11: (X, roi, scales, sizes), roi unused by the forms MIL has
    wanted = ((1, "scales"),) if ctx.opset(node) < 11 else ((2, "scales"), (3, "sizes"))
    for index, what in wanted:
        ctx.required_const(node, index, what)
    in_shape, out_shape = ctx.shape(node.input[0], node), ctx.shape(node.output[0], node)
    form = resize_form(node, len(in_shape), in_shape, out_shape)
    if isinstance(form, str):
        raise Untranslatable(node, form)
    op, kwargs = form
    if op == "upsample_bilinear":
        # MIL's factors must reproduce the output size exactly (floor(in * factor) == out)
        kwargs["scale_factor_height"] = out_shape[2] / in_shape[2]
        kwargs["scale_factor_width"] = out_shape[3] / in_shape[3]
    ctx.set(node.output[0], getattr(ctx.mb, op)(x=ctx.var(node.input[0], node), **kwargs))


@converts("LRN")
def _lrn(ctx, node):
    _spatial_rank(ctx, node, (3, 4, 5), "LRN needs a rank 3-5 input")
    ctx.set(
        node.output[0],
        ctx.mb.local_response_norm(
            x=ctx.var(node.input[0], node),
            size=int(attr(node, "size")),
            alpha=float(attr(node, "alpha", 1e-4)),
            beta=float(attr(node, "beta", 0.75)),
            k=float(attr(node, "bias", 1.0)),
        ),
    )
