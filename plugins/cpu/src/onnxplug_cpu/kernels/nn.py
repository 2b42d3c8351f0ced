"""Convolutions and Dropout: Conv, ConvTranspose, DeformConv, Col2Im, Dropout.

Conv is ``onnxplug_cpu.numerics.convolve`` (im2col over a strided ``sliding_window_view``
followed by one batched matmul for all groups, with pointwise, depthwise and Winograd fast paths;
shared with op libraries such as FusedConv), with constant weights prepared once as a
``PackedConv``;
ConvTranspose and Col2Im are a matmul followed by a scatter-add that loops over the kernel's
offsets only; a float32 2-D ConvTranspose whose kernel equals its stride (no overlap, no pads)
is ``Wᵀ @ x`` and one compiled interleaving pass with the bias (``kernels._conv_transpose_jit``).
When the weights are a constant initializer their reshaping is done once, in the kernel factory.
float16 and bfloat16 are computed in float32 and cast back.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import Binding, check_allocation

from ..numerics import Convolution, conv_compute_dtype, pack_conv_weights
from . import _f32_conv, _f32_products
from ._conv_bindings import is_float32_c
from ._conv_transpose_jit import compiled as _compiled_interleave
from ._registry import kernel
from ._team import run_settings
from .pool import pool_geometry


@kernel("Conv", since=(1, 11, 22), factory=True)
def conv(ctx, *, auto_pad, dilations=None, group, kernel_shape=None, pads=None, strides=None):
    geometry = dict(kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad)
    return Convolution(ctx.constant(1), group, **geometry)


def _scatter_add(cols, counts, kernel_shape, strides, dilations, full):
    """Add ``cols`` ``(N, C, K, *counts)`` into ``full`` ``(N, C, *size)``: block ``k``'s cell
    ``i`` lands at ``i*stride + k*dilation`` along each axis."""
    for k, offsets in enumerate(np.ndindex(*kernel_shape)):
        index = (slice(None), slice(None)) + tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in zip(offsets, dilations, counts, strides)
        )
        full[index] += cols[:, :, k]
    return full


def _transpose_weights(w, group):
    """``(C, M/g, *k)`` weights as ``(g, C/g, M/g*K)`` for ``x @ weights``."""
    c = w.shape[0]
    if group <= 0 or c % group:
        raise InvalidArgument(f"ConvTranspose: {c} input channels cannot be split into group={group}")
    return w.astype(conv_compute_dtype(w.dtype)).reshape(group, c // group, math.prod(w.shape[1:]))


@kernel("ConvTranspose", since=(1, 11, 22), factory=True)
def conv_transpose(
    ctx,
    *,
    auto_pad,
    dilations=None,
    group,
    kernel_shape=None,
    output_padding=None,
    output_shape=None,
    pads=None,
    strides=None,
):
    constant_w = ctx.constant(1)
    packed = None if constant_w is None else _transpose_weights(constant_w, group)
    # Wᵀ (M·K, C) for the compiled non-overlapping path, made on its first call
    transposed: list[np.ndarray] = []
    # input shapes whose call took that path (with constant weights): bind() serves those
    interleaved: set[tuple[int, ...]] = set()

    def run(x, w, b=None):
        if x.ndim < 3 or w.ndim != x.ndim:
            raise Fail(f"ConvTranspose: X shape {list(x.shape)} and W shape {list(w.shape)} do not match")
        nd = x.ndim - 2
        n, c = x.shape[:2]
        if c != w.shape[0]:
            raise InvalidArgument(f"ConvTranspose: X has {c} channels but W has {w.shape[0]}")
        ks = w.shape[2:]
        st = tuple(strides) if strides else (1,) * nd
        dl = tuple(dilations) if dilations else (1,) * nd
        op = tuple(output_padding) if output_padding else (0,) * nd
        pd = tuple(pads) if pads else (0,) * (2 * nd)
        natural = tuple(st[i] * (x.shape[2 + i] - 1) + op[i] + (ks[i] - 1) * dl[i] + 1 for i in range(nd))
        target = None
        if output_shape:
            target = tuple(output_shape)[-nd:]
        elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            target = tuple(x.shape[2 + i] * st[i] for i in range(nd))
        if target is not None:
            begin = []
            for i in range(nd):
                total = natural[i] - target[i]
                begin.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
            out = target
        elif auto_pad == "VALID":
            begin, out = (0,) * nd, natural
        else:
            begin = pd[:nd]
            out = tuple(natural[i] - pd[i] - pd[i + nd] for i in range(nd))
        if any(o <= 0 for o in out):
            raise Fail(f"ConvTranspose: computed output size {list(out)} is not positive")
        weights = packed if packed is not None else _transpose_weights(w, group)
        ct = conv_compute_dtype(x.dtype)
        m = w.shape[1] * group
        if (
            nd == 2
            and group == 1
            and ct == np.float32
            and ks == st
            and all(d == 1 for d in dl)
            and not any(begin)
            and out == tuple(x.shape[2 + i] * ks[i] for i in range(2))
        ):
            interleave = _compiled_interleave()
            if interleave is not None:
                if packed is None or not transposed:
                    wt = np.ascontiguousarray(weights[0].T)  # (M·K, C)
                    if packed is not None:
                        transposed.append(wt)
                else:
                    wt = transposed[0]
                if packed is not None:
                    interleaved.add(x.shape)
                # (N, M·K, H·W), on the convolutions' tiles and team where available
                cols = _f32_products.matmul(wt, x.astype(ct, copy=False).reshape(n, c, -1))
                y = np.empty((n, m) + out, dtype=ct)
                bias = np.zeros(m, ct) if b is None else np.ascontiguousarray(b, dtype=ct).reshape(m)
                interleave(cols.reshape((n, m) + ks + x.shape[2:]), bias, b is not None, y)
                return y.astype(x.dtype, copy=False)
        xs = x.astype(ct, copy=False).reshape(n, group, c // group, math.prod(x.shape[2:])).transpose(0, 1, 3, 2)
        cols = _f32_products.matmul(xs, weights)  # (N, g, P, M/g*K)
        k = math.prod(ks)
        # The scatter buffer covers both the natural extent and the requested window.
        lead = tuple(max(0, -bg) for bg in begin)
        size = tuple(lead[i] + max(natural[i], begin[i] + out[i]) for i in range(nd))
        full = np.zeros((n, m) + size, dtype=ct)
        inner = full[(slice(None), slice(None)) + tuple(slice(lo, None) for lo in lead)]
        if ks == st and all(d == 1 for d in dl):
            # Windows tile the output without overlap (the 2×2 stride-2 upsampling of UNets and
            # detection heads): one transposing copy puts every product in place, no adds.
            blocks = cols.reshape((n, group) + x.shape[2:] + (m // group,) + ks)
            order = (0, 1, 2 + nd) + tuple(a for i in range(nd) for a in (2 + i, 3 + nd + i))
            tiled = blocks.transpose(order).reshape((n, m) + tuple(x.shape[2 + i] * ks[i] for i in range(nd)))
            inner[(slice(None), slice(None)) + tuple(slice(0, d) for d in tiled.shape[2:])] = tiled
        else:
            cols = cols.reshape((n, group) + x.shape[2:] + (m // group, k))
            cols = np.moveaxis(cols, (2 + nd, 3 + nd), (2, 3)).reshape((n, m, k) + x.shape[2:])
            _scatter_add(cols, x.shape[2:], ks, st, dl, inner)
        y = full[
            (slice(None), slice(None))
            + tuple(slice(lead[i] + begin[i], lead[i] + begin[i] + out[i]) for i in range(nd))
        ]
        if b is not None:
            y = y + b.astype(ct).reshape((1, -1) + (1,) * nd)
        return y.astype(x.dtype)

    def bind(inputs, output, scratch):
        """The non-overlapping path of one image (:func:`run`'s, for an input shape it took) as
        an ``onnxplug.kernels.Binding`` (the plan's segments): ``Wᵀ @ x`` into the scratch, then
        the interleaving pass into ``output``; ``None`` elsewhere."""
        x, b = inputs[0], inputs[2] if len(inputs) > 2 else None
        settings = run_settings()
        if x.shape not in interleaved or x.shape[0] != 1 or x.dtype != np.float32 or not settings.tiles:
            return None
        if not transposed or not _f32_conv.available() or (b is not None and not is_float32_c(b, 1)):
            return None
        interleave, wt, c, m = _compiled_interleave(), transposed[0], x.shape[1], output.shape[1]
        ks = (output.shape[2] // x.shape[2], output.shape[3] // x.shape[3])
        cols = scratch((wt.shape[0], x.shape[2] * x.shape[3]), np.float32)
        blocks = cols.reshape((1, m) + ks + x.shape[2:])
        bias = np.zeros(m, np.float32) if b is None else b
        bound_x, columns = x, x.reshape(c, -1)

        def call(out, x, *_):
            _f32_products.matrix_product(wt, columns if x is bound_x else x.reshape(c, -1), out=cols)
            interleave(blocks, bias, b is not None, out)

        return Binding(call, run_settings)

    run.bind = bind
    return run


@kernel("Col2Im", since=(18,), host_inputs=(1, 2))
def col2im(x, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    image = tuple(int(d) for d in image_shape)
    block = tuple(int(d) for d in block_shape)
    nd = len(image)
    if len(block) != nd or x.ndim != 3:
        raise InvalidArgument(
            f"Col2Im: input {list(x.shape)}, image_shape {list(image)} and block_shape {list(block)} are inconsistent"
        )
    st = tuple(strides) if strides else (1,) * nd
    dl = tuple(dilations) if dilations else (1,) * nd
    pd = tuple(pads) if pads else (0,) * (2 * nd)
    k = math.prod(block)
    n, ck, length = x.shape
    if k == 0 or ck % k:
        raise InvalidArgument(f"Col2Im: input dim 1 ({ck}) is not a multiple of the block size {k}")
    counts = tuple((image[i] + pd[i] + pd[i + nd] - (block[i] - 1) * dl[i] - 1) // st[i] + 1 for i in range(nd))
    if math.prod(counts) != length:
        raise InvalidArgument(f"Col2Im: input has {length} blocks but the geometry gives {list(counts)}")
    ct = conv_compute_dtype(x.dtype)
    cols = x.astype(ct, copy=False).reshape((n, ck // k, k) + counts)
    padded = (n, ck // k) + tuple(image[i] + pd[i] + pd[i + nd] for i in range(nd))
    full = np.zeros(check_allocation(padded, ct, "Col2Im output"), dtype=ct)
    _scatter_add(cols, counts, block, st, dl, full)
    crop = tuple(slice(pd[i], pd[i] + image[i]) for i in range(nd))
    return full[(slice(None), slice(None)) + crop].astype(x.dtype)


def _bilinear_gather(x, ys, xs):
    """Sample ``x`` ``(N, G, Cg, H, W)`` at float positions ``(N, G, S)``; cells outside are 0."""
    n, g, cg, h, w = x.shape
    flat = x.reshape(n, g, cg, h * w)
    y0 = np.floor(ys)
    x0 = np.floor(xs)
    result = np.zeros((n, g, cg, ys.shape[-1]), dtype=x.dtype)
    for dy in (0, 1):
        for dx in (0, 1):
            yi = y0 + dy
            xi = x0 + dx
            weight = (1 - np.abs(ys - yi)) * (1 - np.abs(xs - xi))
            inside = (yi >= 0) & (yi < h) & (xi >= 0) & (xi < w)
            index = (np.clip(yi, 0, h - 1) * w + np.clip(xi, 0, w - 1)).astype(np.int64)
            values = np.take_along_axis(flat, index[:, :, None, :], axis=-1)
            result += values * np.where(inside, weight, 0).astype(x.dtype)[:, :, None, :]
    return result


@kernel("DeformConv", since=(19, 22))
def deform_conv(
    x, w, offset, b=None, mask=None, *, dilations=None, group, kernel_shape=None, offset_group, pads=None, strides=None
):
    if x.ndim != 4:
        raise Fail(f"DeformConv: only 2-D images are supported, got X shape {list(x.shape)}")
    n, c, h, wd = x.shape
    ks = tuple(kernel_shape) if kernel_shape else w.shape[2:]
    out, begin, _, _ = pool_geometry((h, wd), ks, strides, dilations, pads, "NOTSET", 0, "DeformConv")
    st = tuple(strides) if strides else (1, 1)
    dl = tuple(dilations) if dilations else (1, 1)
    k = math.prod(ks)
    og = offset_group
    if og <= 0 or c % og or offset.shape != (n, og * 2 * k) + out:
        raise InvalidArgument(f"DeformConv: offset shape {list(offset.shape)} does not match {[n, og * 2 * k, *out]}")
    if mask is not None and mask.shape != (n, og * k) + out:
        raise InvalidArgument(f"DeformConv: mask shape {list(mask.shape)} does not match {[n, og * k, *out]}")
    ct = conv_compute_dtype(x.dtype)
    ki, kj = np.unravel_index(np.arange(k), ks)
    base_y = (np.arange(out[0]) * st[0] - begin[0])[None, :, None] + (ki * dl[0])[:, None, None]
    base_x = (np.arange(out[1]) * st[1] - begin[1])[None, None, :] + (kj * dl[1])[:, None, None]
    off = offset.astype(ct).reshape((n, og, k, 2) + out)
    ys = (base_y + off[:, :, :, 0]).reshape(n, og, k * math.prod(out))
    xs = (base_x + off[:, :, :, 1]).reshape(n, og, k * math.prod(out))
    sampled = _bilinear_gather(x.astype(ct).reshape(n, og, c // og, h, wd), ys, xs)
    sampled = sampled.reshape((n, og, c // og, k) + out)
    if mask is not None:
        sampled = sampled * mask.astype(ct).reshape((n, og, 1, k) + out)
    # (N, C, K, P) -> (N, g, C/g*K, P) for the same matmul as Conv.
    cols = sampled.reshape(n, group, (c // group) * k, math.prod(out))
    y = np.matmul(pack_conv_weights(w, group, "DeformConv"), cols).reshape((n, w.shape[0]) + out)
    if b is not None:
        y = y + b.astype(ct).reshape(1, -1, 1, 1)
    return y.astype(x.dtype)


# --- Dropout -----------------------------------------------------------------------------------


@kernel("Dropout", since=(1, 6, 7, 10), factory=True)
def dropout_legacy(ctx, *, ratio, **legacy):
    # Inference is the identity, as every runtime does for these versions (is_test is ignored).
    mask_bool = ctx.since_version >= 10

    def run(data):
        mask = np.ones(data.shape, dtype=bool if mask_bool else data.dtype)
        return data, mask

    return run


@kernel("Dropout", since=(12, 13, 22), factory=True)
def dropout(ctx, *, seed=None):
    # A legacy RandomState drawing uniform [0, 1) samples: with the same seed it reproduces the
    # masks that ONNX's own test data were generated with.  It persists across runs.
    rng = np.random.RandomState(None if seed is None else int(seed) & 0xFFFFFFFF)

    def run(data, ratio=None, training_mode=None):
        training = bool(training_mode) if training_mode is not None else False
        r = 0.5 if ratio is None else float(ratio)
        if not training or r == 0:
            return data, np.ones(data.shape, dtype=bool)
        if not 0 <= r < 1:
            raise InvalidArgument(f"Dropout: ratio must be in [0, 1), got {r}")
        mask = rng.uniform(0.0, 1.0, data.shape) >= r
        scale = 1.0 / (1.0 - r)
        return (data * mask * scale).astype(data.dtype), mask

    return run
