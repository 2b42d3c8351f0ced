"""ONNX → NNAPI converters for the spatial ops: the ones with NNAPI's layout flag (or LRN's axis).

They read their 4-D input in the translation's layout (NHWC through a TRANSPOSE, or NCHW with the
flag set; see :mod:`onnxplug_nnapi.translate`) and use NNAPI's explicit-padding forms, so
ONNX's ``pads``/``auto_pad`` map exactly: ONNX lists pads as (top, left, bottom, right), NNAPI
takes left, right, top, bottom; ONNX strides/dilations/kernels are (H, W), NNAPI takes W first.
"""

from __future__ import annotations

import math

import numpy as np
import onnx_ir as ir

from .program import FUSED_NONE, OPERAND
from .translate import Context, Untranslatable, arg, attr, converts, requantize_like


def _pads(node: ir.Node, size, kernel, strides, dilations) -> list[int]:
    """(top, left, bottom, right) from ``pads`` or ``auto_pad``."""
    mode = attr(node, "auto_pad", "NOTSET")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for n, k, s, d in zip(size, kernel, strides, dilations):
            total = max((math.ceil(n / s) - 1) * s + (k - 1) * d + 1 - n, 0)
            small = total // 2
            begin.append(small if mode == "SAME_UPPER" else total - small)
            end.append(total - begin[-1])
        return begin + end
    if mode == "VALID":
        return [0, 0, 0, 0]
    return list(attr(node, "pads", [0, 0, 0, 0]))


def _geometry(ctx: Context, node: ir.Node, x: ir.Value, kernel):
    shape = ctx.shape(x, node)
    if len(shape) != 4:
        raise Untranslatable(node, f"NNAPI's 2-D operations take rank-4 inputs, got rank {len(shape)}")
    strides = list(attr(node, "strides", [1, 1]))
    dilations = list(attr(node, "dilations", [1, 1]))
    pads = _pads(node, shape[2:], kernel, strides, dilations)
    return shape, strides, dilations, pads


def _explicit(ctx: Context, pads, strides) -> list[int]:
    """NNAPI's explicit padding and strides: left, right, top, bottom, stride_w, stride_h."""
    top, left, bottom, right = pads
    values = [(left, "pad_left"), (right, "pad_right"), (top, "pad_top"), (bottom, "pad_bottom")]
    values += [(strides[1], "stride_w"), (strides[0], "stride_h")]
    return [ctx.b.int32(v, label) for v, label in values]


def _conv(ctx: Context, node: ir.Node, x: ir.Value, w: np.ndarray, bias_op, weight_quant) -> None:
    """CONV_2D, DEPTHWISE_CONV_2D or GROUPED_CONV_2D by ``group``.

    :param weight_quant: ``None`` (float), or ``(code, scale, zero point, per-channel scales)``.
    """
    kernel = list(attr(node, "kernel_shape", w.shape[2:]))
    shape, strides, dilations, pads = _geometry(ctx, node, x, kernel)
    group = int(attr(node, "group", 1))
    channels, out_channels = shape[1], w.shape[0]
    if group == 1:
        name, filt, channel_dim = "CONV_2D", w.transpose(0, 2, 3, 1), 0  # OIHW -> OHWI
    elif group == channels and w.shape[1] == 1:
        name, filt, channel_dim = "DEPTHWISE_CONV_2D", w.transpose(1, 2, 3, 0), 3  # [M,1,kh,kw] -> [1,kh,kw,M]
    else:
        if dilations != [1, 1]:
            raise Untranslatable(node, "NNAPI's GROUPED_CONV_2D has no dilation")
        name, filt, channel_dim = "GROUPED_CONV_2D", w.transpose(0, 2, 3, 1), 0
    source, layout_flag = ctx.spatial(x, node)
    if weight_quant is None:
        filt_op = ctx.b.constant(OPERAND["TENSOR_FLOAT32"], filt, label=f"{node.name}:filter")
    else:
        code, scale, zero, per_channel = weight_quant
        if per_channel is not None:
            filt_op = ctx.b.constant(
                OPERAND["TENSOR_QUANT8_SYMM_PER_CHANNEL"],
                filt,
                label=f"{node.name}:filter",
                channel_quant=(channel_dim, tuple(float(s) for s in per_channel)),
            )
        else:
            filt_op = ctx.b.constant(code, filt, scale=scale, zero_point=zero, label=f"{node.name}:filter")
    inputs = [source, filt_op, bias_op, *_explicit(ctx, pads, strides)]
    if name == "DEPTHWISE_CONV_2D":
        inputs.append(ctx.b.int32(out_channels // channels, "depth_multiplier"))
    if name == "GROUPED_CONV_2D":
        inputs.append(ctx.b.int32(group, "num_groups"))
    inputs += [ctx.b.int32(FUSED_NONE, "fuse"), layout_flag]
    if name != "GROUPED_CONV_2D":
        inputs += [ctx.b.int32(dilations[1], "dilation_w"), ctx.b.int32(dilations[0], "dilation_h")]
    ctx.b.operation(name, inputs, [ctx.define(node.outputs[0], node, ctx.layout)], node.name)


@converts("Conv")
def _float_conv(ctx, node):
    w = ctx.const(node.inputs[1])
    if w is None or w.ndim != 4:
        raise Untranslatable(node, "the weights W must be a constant 4-D tensor")
    bias = ctx.const(arg(node, 2)) if arg(node, 2) is not None else np.zeros(w.shape[0], np.float32)
    if bias is None:
        raise Untranslatable(node, "the bias B must be constant")
    bias_op = ctx.b.constant(OPERAND["TENSOR_FLOAT32"], bias, label=f"{node.name}:bias")
    _conv(ctx, node, node.inputs[0], w, bias_op, None)


@converts("QLinearConv")
def _qlinear_conv(ctx, node):
    x, w_value = node.inputs[0], node.inputs[3]
    w = ctx.const(w_value)
    if w is None or w.ndim != 4:
        raise Untranslatable(node, "the weights w must be a constant 4-D tensor")
    x_scale, _ = ctx.quantization(x, node)
    w_scales = np.asarray(ctx.const(node.inputs[4]), np.float64).reshape(-1)
    w_zeros = np.asarray(ctx.const(node.inputs[5])).reshape(-1)
    code = ctx.code(x, node)
    if w_scales.size > 1:
        if w.dtype != np.int8 or (w_zeros != 0).any():
            raise Untranslatable(node, "per-channel weights must be int8 with zero points 0 (NNAPI's symmetric form)")
        quant, bias_scale = (code, 0.0, 0, w_scales), 0.0  # NNAPI derives each bias scale per channel
    else:
        data, zero = requantize_like(w, int(w_zeros[0]), code)
        w = data
        quant, bias_scale = (code, float(w_scales[0]), zero, None), x_scale * float(w_scales[0])
    bias = ctx.const(arg(node, 8)) if arg(node, 8) is not None else np.zeros(w.shape[0], np.int32)
    if bias is None:
        raise Untranslatable(node, "the bias B must be constant")
    bias_op = ctx.b.constant(OPERAND["TENSOR_INT32"], bias, scale=bias_scale, label=f"{node.name}:bias")
    _conv(ctx, node, x, w, bias_op, quant)


def _pool(ctx: Context, node: ir.Node, name: str, x: ir.Value, kernel, average: bool) -> None:
    shape, strides, dilations, pads = _geometry(ctx, node, x, kernel)
    if dilations != [1, 1]:
        raise Untranslatable(node, "dilated pooling has no NNAPI form")
    if len([v for v in node.outputs if v.name]) > 1:
        raise Untranslatable(node, "MaxPool's Indices output has no NNAPI form")
    out = ctx.shape(node.outputs[0], node)
    top, left, bottom, right = pads
    # ceil_mode: the last windows run past the end; NNAPI gets that as extra end padding
    bottom += max(0, (out[2] - 1) * strides[0] + kernel[0] - (shape[2] + top + bottom))
    right += max(0, (out[3] - 1) * strides[1] + kernel[1] - (shape[3] + left + right))
    if average and any((top, left, bottom, right)) and attr(node, "count_include_pad", 0):
        raise Untranslatable(node, "NNAPI's AVERAGE_POOL_2D excludes padding; count_include_pad=1 with padding")
    source, layout_flag = ctx.spatial(x, node)
    inputs = [source, *_explicit(ctx, (top, left, bottom, right), strides)]
    inputs += [ctx.b.int32(kernel[1], "filter_w"), ctx.b.int32(kernel[0], "filter_h")]
    inputs += [ctx.b.int32(FUSED_NONE, "fuse"), layout_flag]
    ctx.b.operation(name, inputs, [ctx.define(node.outputs[0], node, ctx.layout)], node.name)


@converts("AveragePool")
def _average_pool(ctx, node):
    _pool(ctx, node, "AVERAGE_POOL_2D", node.inputs[0], list(attr(node, "kernel_shape")), True)


@converts("MaxPool")
def _max_pool(ctx, node):
    _pool(ctx, node, "MAX_POOL_2D", node.inputs[0], list(attr(node, "kernel_shape")), False)


@converts("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx, node):
    shape = ctx.shape(node.inputs[0], node)
    if len(shape) != 4:
        raise Untranslatable(node, f"NNAPI's 2-D pools take rank-4 inputs, got rank {len(shape)}")
    name = "AVERAGE_POOL_2D" if node.op_type == "GlobalAveragePool" else "MAX_POOL_2D"
    _pool(ctx, node, name, node.inputs[0], list(shape[2:]), node.op_type == "GlobalAveragePool")


@converts("QLinearAveragePool", domain="com.microsoft")
def _qlinear_average_pool(ctx, node):
    if attr(node, "channels_last", 0):
        raise Untranslatable(node, "channels_last=1 input is not translated (NCHW input only)")
    if ctx.quantization(node.inputs[0], node) != ctx.quantization(node.outputs[0], node):
        raise Untranslatable(node, "NNAPI's quantized AVERAGE_POOL_2D needs the output's scale and zero point equal")
    _pool(ctx, node, "AVERAGE_POOL_2D", node.inputs[0], list(attr(node, "kernel_shape")), True)


@converts("DepthToSpace")
def _depth_to_space(ctx, node):
    mode = attr(node, "mode", "DCR")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "DCR":
        raise Untranslatable(node, "only DCR mode has an NNAPI form")
    source, layout_flag = ctx.spatial(node.inputs[0], node)
    inputs = [source, ctx.b.int32(attr(node, "blocksize"), "block_size"), layout_flag]
    ctx.b.operation("DEPTH_TO_SPACE", inputs, [ctx.define(node.outputs[0], node, ctx.layout)], node.name)


@converts("LRN")
def _lrn(ctx, node):
    """ONNX sums over ``size`` channels and divides alpha by it; NNAPI takes a radius and the
    per-element alpha, and an axis instead of a layout flag."""
    size = int(attr(node, "size"))
    if size % 2 == 0:
        raise Untranslatable(node, f"an even size ({size}) is a lopsided window; NNAPI's radius is symmetric")
    if len(ctx.shape(node.inputs[0], node)) != 4:
        raise Untranslatable(node, "LRN is translated for rank-4 (NCHW) input")
    layout = ctx.layout
    inputs = [
        ctx.operand(node.inputs[0], layout, node),
        ctx.b.int32((size - 1) // 2, "radius"),
        ctx.b.float32(attr(node, "bias", 1.0), "bias"),
        ctx.b.float32(attr(node, "alpha", 1e-4) / size, "alpha"),
        ctx.b.float32(attr(node, "beta", 0.75), "beta"),
        ctx.b.int32(3 if layout == "nhwc" else 1, "axis"),
    ]
    ctx.b.operation("LOCAL_RESPONSE_NORMALIZATION", inputs, [ctx.define(node.outputs[0], node, layout)], node.name)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@converts("Resize")
def _resize(ctx, node):
    x = node.inputs[0]
    shape, out = ctx.shape(x, node), ctx.shape(node.outputs[0], node)
    if len(shape) != 4 or out[:2] != shape[:2]:
        raise Untranslatable(node, "NNAPI resizes the two spatial dims of a rank-4 input only")
    mode = _text(attr(node, "mode", "nearest"))
    legacy = ctx.opset(node) < 11
    coords = "asymmetric" if legacy else _text(attr(node, "coordinate_transformation_mode", "half_pixel"))
    nearest = "floor" if legacy else _text(attr(node, "nearest_mode", "round_prefer_floor"))
    if attr(node, "antialias", 0):
        raise Untranslatable(node, "antialiased Resize has no NNAPI form")
    if mode == "linear":
        flags = {"asymmetric": (False, False), "align_corners": (True, False), "half_pixel": (False, True)}
        if coords == "pytorch_half_pixel" and min(out[2:]) > 1:
            coords = "half_pixel"
        name = "RESIZE_BILINEAR"
    elif mode == "nearest":
        flags = {}
        if coords == "asymmetric" and nearest == "floor":
            flags[coords] = (False, False)
        integer_upscale = all(o % i == 0 for o, i in zip(out[2:], shape[2:]))
        if coords == "half_pixel" and (nearest == "round_prefer_ceil" or integer_upscale):
            flags[coords] = (False, True)  # no .5 ties on integer upscales, so floor/ceil preference agree
        if coords == "align_corners" and nearest == "round_prefer_ceil":
            flags[coords] = (True, False)
        name = "RESIZE_NEAREST_NEIGHBOR"
    else:
        raise Untranslatable(node, f"mode '{mode}' has no NNAPI form (nearest and linear do)")
    if coords not in flags:
        raise Untranslatable(
            node,
            f"{mode} Resize with coordinate_transformation_mode '{coords}' "
            f"(nearest_mode '{nearest}') has no NNAPI form",
        )
    align, half = flags[coords]
    source, layout_flag = ctx.spatial(x, node)
    inputs = [source, ctx.b.int32(out[3], "output_width"), ctx.b.int32(out[2], "output_height"), layout_flag]
    inputs += [ctx.b.bool(align, "align_corners"), ctx.b.bool(half, "half_pixel_centers")]
    ctx.b.operation(name, inputs, [ctx.define(node.outputs[0], node, ctx.layout)], node.name)
