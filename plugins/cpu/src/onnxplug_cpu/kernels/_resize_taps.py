"""Resize's tap tables: for each output position of one axis, the input positions it reads and
their weights, from the coordinate transform and the interpolation filter (every coordinate mode,
nearest rounding, linear and cubic, antialiasing, exclude_outside).  Shared by the numpy path
(``kernels.resize``) and the compiled 2-D pass (``kernels._resize_2d``)."""

from __future__ import annotations

import functools
import math

import numpy as np

from onnxplug.errors import Fail

__all__ = ["axis_taps", "cached_taps", "doubled"]


def _source_coords(out_size, in_size, scale, mode, roi_start, roi_end):
    """Input-space coordinate of every output index along one axis."""
    i = np.arange(out_size, dtype=np.float64)
    length = scale * in_size  # the unrounded output length, as the spec's formulas use it
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / length)
        return offset + (i + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if length > 1 else np.full(out_size, -0.5)
    if mode == "align_corners":
        return i * (in_size - 1) / (length - 1) if length != 1 else np.zeros(out_size)
    if mode == "asymmetric":
        return i / scale
    if mode == "tf_half_pixel_for_nn":
        return (i + 0.5) / scale
    if mode == "tf_crop_and_resize":
        # The roi products stay in the roi's own precision (float32 usually), as other runtimes
        # compute them: 0.1f * 5 is then exactly 0.5, which decides a nearest tie.
        last = roi_start.dtype.type(in_size - 1)
        span = float((roi_end - roi_start) * last)
        if length > 1:
            x = i * span / (length - 1)
        else:
            x = np.full(out_size, span / 2)
        return x + float(roi_start * last)
    raise Fail(f"Resize: unknown coordinate_transformation_mode {mode!r}")


def _nearest_index(x, nearest_mode, scale):
    if nearest_mode == "round_prefer_floor":
        return np.ceil(x - 0.5)
    if nearest_mode == "round_prefer_ceil":
        return np.floor(x + 0.5)
    if nearest_mode == "floor":
        return np.floor(x)
    if nearest_mode == "ceil":
        return np.ceil(x)
    if nearest_mode == "simple":  # opset 10 and Upsample: truncate up-, round up downsampling
        return np.floor(x) if scale >= 1 else np.ceil(x)
    raise Fail(f"Resize: unknown nearest_mode {nearest_mode!r}")


def _cubic(d, a):
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def axis_taps(in_size, out_size, scale, opts, roi_start=None, roi_end=None):
    """``(indices (out, T), weights (out, T) or None, outside (out,) bool or None)``."""
    roi_start = np.float64(0) if roi_start is None else roi_start
    roi_end = np.float64(1) if roi_end is None else roi_end
    x = _source_coords(out_size, in_size, scale, opts["ctm"], roi_start, roi_end)
    outside = None
    if opts["ctm"] == "tf_crop_and_resize":
        outside = (x < 0) | (x > in_size - 1)
    mode = opts["mode"]
    if mode == "nearest":
        index = _nearest_index(x, opts["nearest_mode"], scale)
        return np.clip(index, 0, in_size - 1).astype(np.int64)[:, None], None, outside
    support = 1.0 if mode == "linear" else 2.0
    stretch = min(scale, 1.0) if opts["antialias"] else 1.0
    reach = int(math.ceil(support / stretch))
    base = np.floor(x)
    taps = base[:, None] + np.arange(1 - reach, reach + 1)[None, :]
    distance = (taps - x[:, None]) * stretch
    if mode == "linear":
        weights = np.clip(1 - np.abs(distance), 0, None)
    else:
        weights = _cubic(distance, opts["cubic_coeff_a"])
    if opts["exclude_outside"]:
        weights = np.where((taps < 0) | (taps > in_size - 1), 0.0, weights)
    if opts["exclude_outside"] or opts["antialias"]:
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(taps, 0, in_size - 1).astype(np.int64), weights, outside


@functools.lru_cache(maxsize=128)
def cached_taps(in_size, out_size, scale, options):
    """:func:`axis_taps` of one axis (no roi), made once per geometry: float32 weights."""
    indices, weights, _ = axis_taps(in_size, out_size, scale, dict(options))
    return indices, None if weights is None else weights.astype(np.float32)


@functools.lru_cache(maxsize=128)
def doubled(in_size, out_size, scale, options) -> bool:
    """Whether a nearest axis's table reads every input position twice in order (``i // 2``):
    an exact 2× upsampling, for the doubling loop (``_resize_jit.compiled_doubling``)."""
    if out_size != 2 * in_size:
        return False
    indices, _ = cached_taps(in_size, out_size, scale, options)
    return bool(np.array_equal(indices[:, 0], np.arange(out_size) // 2))
