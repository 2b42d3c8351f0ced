"""MaxPool (values only), AveragePool, GlobalAveragePool, GlobalMaxPool.

Windows are folded tap by tap over strided slices of the padded input (see ``_windows``).
AveragePool divides by the window sum of a 0/1 mask over the same padded shape: ones on the
input (and on the explicit pads when ``count_include_pad``), zeros elsewhere, which gives every
border and ceil_mode window its own divisor without a per-window loop.
"""

from __future__ import annotations

import math

from onnxplug.errors import InvalidArgument

from ._common import FLOATS, declines, namespace, registry
from ._windows import geometry, pad_spatial, taps

_T = {"T": FLOATS}


def _window_geometry(op, x, kernel_shape, auto_pad, pads, strides, dilations, ceil_mode):
    if x.ndim < 3:
        raise InvalidArgument(f"{op}: input must be [N, C, *spatial], got shape {x.shape}")
    if not kernel_shape:
        raise InvalidArgument(f"{op}: kernel_shape is required")
    return geometry(
        op,
        x.shape[2:],
        tuple(kernel_shape),
        auto_pad=auto_pad,
        pads=pads,
        strides=strides,
        dilations=dilations,
        ceil_mode=ceil_mode,
    )


@registry.kernel("MaxPool", since=(10, 11, 12, 22), types=_T)
def max_pool(
    x,
    *,
    auto_pad,
    ceil_mode=0,
    dilations=None,
    kernel_shape=None,
    pads=None,
    storage_order,
    strides=None,
):
    """``storage_order`` only concerns the Indices output, which is declined at claim time."""
    xp = namespace(x)
    kernel = tuple(kernel_shape or ())
    begin, end, out, strides, dilations = _window_geometry(
        "MaxPool", x, kernel, auto_pad, pads, strides, dilations, ceil_mode
    )
    padded = pad_spatial(xp, x, begin, end, -math.inf)
    y = None
    for _, spatial in taps(kernel, out, strides, dilations):
        window = padded[(slice(None), slice(None), *spatial)]
        y = window if y is None else xp.maximum(y, window)
    return (y,)  # the schema has an optional second output: multi-output kernels return tuples


@registry.kernel("MaxPool", since=(8,), types=_T)
def max_pool_8(x, *, auto_pad, kernel_shape=None, pads=None, storage_order, strides=None):
    return max_pool(
        x, auto_pad=auto_pad, kernel_shape=kernel_shape, pads=pads, storage_order=storage_order, strides=strides
    )


@declines("MaxPool")
def _values_only(node):
    if len(node.outputs) > 1 and node.outputs[1]:
        return "the Indices output (positions in the flattened input) is left to the CPU provider"
    return None


def _average(xp, x, kernel, begin, end, out, strides, dilations, count_include_pad, explicit_pads):
    padded = pad_spatial(xp, x, begin, end, 0.0)
    inside = xp.ones((1, 1, *x.shape[2:]), dtype=x.dtype)
    if count_include_pad:
        rank = x.ndim - 2
        lead, tail = explicit_pads[:rank], explicit_pads[rank:]
        inside = pad_spatial(xp, inside, lead, tail, 1.0)
        mask = pad_spatial(xp, inside, [b - p for b, p in zip(begin, lead)], [e - t for e, t in zip(end, tail)], 0.0)
    else:
        mask = pad_spatial(xp, inside, begin, end, 0.0)
    total = counts = None
    for _, spatial in taps(kernel, out, strides, dilations):
        where = (slice(None), slice(None), *spatial)
        total = padded[where] if total is None else total + padded[where]
        counts = mask[where] if counts is None else counts + mask[where]
    return total / counts


@registry.kernel("AveragePool", since=(19, 22), types=_T)
def average_pool(
    x,
    *,
    auto_pad,
    ceil_mode,
    count_include_pad,
    dilations=None,
    kernel_shape=None,
    pads=None,
    strides=None,
):
    xp = namespace(x)
    kernel = tuple(kernel_shape or ())
    begin, end, out, strides, dilations = _window_geometry(
        "AveragePool", x, kernel, auto_pad, pads, strides, dilations, ceil_mode
    )
    # count_include_pad counts the explicit pads (with auto_pad it is declined at claim time),
    # never the room ceil_mode adds past them.
    explicit = list(pads or [0] * 2 * (x.ndim - 2))
    return _average(xp, x, kernel, begin, end, out, strides, dilations, count_include_pad, explicit)


@registry.kernel("AveragePool", since=(10, 11), types=_T)
def average_pool_11(x, *, auto_pad, ceil_mode, count_include_pad, kernel_shape=None, pads=None, strides=None):
    return average_pool(
        x,
        auto_pad=auto_pad,
        ceil_mode=ceil_mode,
        count_include_pad=count_include_pad,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )


@registry.kernel("AveragePool", since=(7,), types=_T)
def average_pool_7(x, *, auto_pad, count_include_pad, kernel_shape=None, pads=None, strides=None):
    return average_pool_11(
        x,
        auto_pad=auto_pad,
        ceil_mode=0,
        count_include_pad=count_include_pad,
        kernel_shape=kernel_shape,
        pads=pads,
        strides=strides,
    )


@declines("AveragePool")
def _average_pool_cases(node):
    attributes = node.attributes
    if attributes.get("count_include_pad", 0) and attributes.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return "count_include_pad with auto_pad is left to the CPU provider"
    return None


@registry.kernel("GlobalAveragePool", since=(1, 22), types=_T)
def global_average_pool(x):
    xp = namespace(x)
    return xp.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@registry.kernel("GlobalMaxPool", since=(1, 22), types=_T)
def global_max_pool(x):
    xp = namespace(x)
    return xp.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@declines("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")
def _ranked(node):
    shape = node.input_shapes[0]
    if shape is None or len(shape) < 3:
        return "pooling needs a ranked [N, C, *spatial] input to run on the CUDA kernels"
    return None
