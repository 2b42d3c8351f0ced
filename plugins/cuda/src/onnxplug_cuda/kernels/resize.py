"""Resize: nearest (every coordinate mode but tf_crop_and_resize, every nearest_mode) and
linear, one axis at a time.

Output sizes and source coordinates depend only on shapes and on the scales/sizes inputs, which
are ``host_inputs``: they are computed with numpy on the host, and only the small index and
weight vectors travel to the device (a copy, not a sync).  Linear interpolation is separable,
so N-linear is linear along each resized axis in turn.  Cubic, antialiasing, crop-and-resize and
keep_aspect_ratio_policy other than stretch are declined (they run on the CPU provider).
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import InvalidArgument

from ._common import ALL, FLOATS, declines, namespace, registry

_COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric")


def _source(mode: str, size_in: int, size_out: int, scale: float) -> np.ndarray:
    """The input coordinate of every output position along one axis."""
    x = np.arange(size_out, dtype=np.float64)
    if mode == "asymmetric":
        return x / scale
    if mode == "align_corners":  # the unrounded output length, as the standard writes it
        length = size_in * scale
        return np.zeros_like(x) if length == 1 else x * (size_in - 1) / (length - 1)
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if size_out > 1 else np.zeros_like(x)
    if mode == "half_pixel_symmetric":
        adjustment = size_out / (scale * size_in)
        offset = size_in / 2 * (1 - adjustment)
        return offset + (x + 0.5) / scale - 0.5
    return (x + 0.5) / scale - 0.5  # half_pixel


def _nearest(coordinate: np.ndarray, mode: str) -> np.ndarray:
    if mode == "round_prefer_ceil":
        return np.floor(coordinate + 0.5)
    if mode == "floor":
        return np.floor(coordinate)
    if mode == "ceil":
        return np.ceil(coordinate)
    return np.ceil(coordinate - 0.5)  # round_prefer_floor


def _take(xp, x, index: np.ndarray, axis: int):
    return xp.take(x, xp.asarray(index.astype(np.int64)), axis=axis)


def _plan(x, scales, sizes, axes):
    """Per resized axis: (axis, output size, scale)."""
    rank = x.ndim
    chosen = [a % rank for a in axes] if axes else list(range(rank))
    if sizes is not None and np.asarray(sizes).size:
        wanted = [int(v) for v in np.asarray(sizes).reshape(-1)]
        if len(wanted) != len(chosen):
            raise InvalidArgument(f"Resize: {len(wanted)} sizes for {len(chosen)} axes")
        return [(a, n, n / x.shape[a] if x.shape[a] else 1.0) for a, n in zip(chosen, wanted)]
    if scales is None or not np.asarray(scales).size:
        raise InvalidArgument("Resize: one of scales and sizes is required")
    factors = [float(v) for v in np.asarray(scales).reshape(-1)]
    if len(factors) != len(chosen):
        raise InvalidArgument(f"Resize: {len(factors)} scales for {len(chosen)} axes")
    if any(f <= 0 for f in factors):
        raise InvalidArgument(f"Resize: scales must be positive, got {factors}")
    return [(a, math.floor(x.shape[a] * f), f) for a, f in zip(chosen, factors)]


def _resize(x, scales, sizes, axes, mode, coordinate_mode, nearest_mode):
    xp = namespace(x)
    y = x
    for axis, size_out, scale in _plan(x, scales, sizes, axes):
        size_in = x.shape[axis]
        if size_out == size_in and scale == 1.0:
            continue
        source = _source(coordinate_mode, size_in, size_out, scale)
        if mode == "nearest":
            y = _take(xp, y, np.clip(_nearest(source, nearest_mode), 0, size_in - 1), axis)
            continue
        source = np.clip(source, 0, size_in - 1)
        low = np.floor(source)
        high = np.minimum(low + 1, size_in - 1)
        shape = [1] * y.ndim
        shape[axis] = size_out
        weight = xp.reshape(xp.asarray((source - low).astype(np.float64)), tuple(shape))
        weight = xp.astype(weight, y.dtype)
        y = _take(xp, y, low, axis) * (1 - weight) + _take(xp, y, high, axis) * weight
    return y


@registry.kernel("Resize", since=(11, 13), host_inputs=(1, 2, 3), types={"T1": ALL, "T2": FLOATS})
def resize_11(
    x,
    roi=None,
    scales=None,
    sizes=None,
    *,
    coordinate_transformation_mode,
    cubic_coeff_a,
    exclude_outside,
    extrapolation_value,
    mode,
    nearest_mode,
):
    """cubic_coeff_a, exclude_outside (cubic only) and extrapolation_value and roi
    (tf_crop_and_resize only) concern modes that are declined at claim time."""
    return _resize(x, scales, sizes, (), mode, coordinate_transformation_mode, nearest_mode)


@registry.kernel("Resize", since=(18, 19), host_inputs=(1, 2, 3), types={"T1": ALL, "T2": FLOATS})
def resize(
    x,
    roi=None,
    scales=None,
    sizes=None,
    *,
    axes=None,
    mode,
    coordinate_transformation_mode,
    nearest_mode,
    **_declined_features,
):
    return _resize(x, scales, sizes, list(axes or ()), mode, coordinate_transformation_mode, nearest_mode)


@declines("Resize")
def _resize_modes(node):
    attributes = node.attributes
    mode = attributes.get("mode", "nearest")
    if mode not in ("nearest", "linear"):
        return f"Resize mode {mode!r} is left to the CPU provider"
    if mode == "linear" and node.input_types[0] not in FLOATS:
        return "linear Resize of integer tensors (rounding) is left to the CPU provider"
    coordinates = attributes.get("coordinate_transformation_mode", "half_pixel")
    if coordinates not in _COORDINATES:
        return f"coordinate_transformation_mode {coordinates!r} is left to the CPU provider"
    if attributes.get("antialias", 0):
        return "antialiased Resize is left to the CPU provider"
    if attributes.get("keep_aspect_ratio_policy", "stretch") != "stretch":
        return "keep_aspect_ratio_policy other than stretch is left to the CPU provider"
    return None
