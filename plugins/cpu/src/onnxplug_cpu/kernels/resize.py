"""Resize and the deprecated Upsample.

Resizing is separable: each resized axis gets a small tap table (for every output position, the
input indices it reads and their weights), built once per axis from the coordinate transform
and the interpolation filter, and is applied with ``take`` along that axis, one call per tap
(a broadcasting copy for integer nearest upsampling measured slower than ``take``).
Nearest uses a single tap and never leaves the input dtype; linear and cubic accumulate in
float32 (float64 for float64) and cast back, rounding and saturating for integer images.
Antialiasing (downscaling with a stretched filter) only widens the tap table.
The tap tables are ``kernels._resize_taps``'.  float32 maps resized on their last two axes only,
nearest or linear, take one compiled pass instead (``kernels._resize_2d``, the same taps and the
same bits).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import check_allocation

from . import _resize_2d
from ._registry import kernel
from ._resize_taps import axis_taps


def _apply_axis(x, axis, indices, weights, acc):
    if weights is None:
        return np.take(x, indices[:, 0], axis=axis)
    shape = [1] * x.ndim
    shape[axis] = -1
    result = None
    for t in range(indices.shape[1]):
        term = np.take(x, indices[:, t], axis=axis)
        term *= weights[:, t].astype(acc).reshape(shape)  # a fresh gathered array: in place
        if result is None:
            result = term
        else:
            result += term
    return result


def _options_key(opts: dict) -> tuple:
    """The options as a hashable key (:func:`_options` makes them in one order)."""
    return tuple(opts.items())


def resize_nd(x, out_shape, scales, opts, roi=None, extrapolation_value=0.0):
    """Resize ``x`` to ``out_shape`` with per-axis ``scales`` (tuples of ints and floats; ``roi``:
    starts + ends)."""
    out_shape = check_allocation(out_shape, x.dtype, "Resize output")
    if x.dtype == np.float32:
        fast = _resize_2d.bound(x.shape, out_shape, scales, _options_key(opts))
        if fast is not None:
            return fast(x)
    rank = x.ndim
    interpolating = opts["mode"] != "nearest"
    acc = np.float64 if x.dtype == np.float64 else np.float32
    y = x.astype(acc) if interpolating else x
    outside_mask = None
    for axis in range(rank):
        in_size, out_size, scale = x.shape[axis], out_shape[axis], float(scales[axis])
        crop = opts["ctm"] == "tf_crop_and_resize"
        if in_size == out_size and scale == 1.0 and not crop:
            continue
        if in_size == 0:
            raise InvalidArgument(f"Resize: cannot resize an empty axis {axis} to {out_size}")
        start, end = (roi[axis], roi[axis + rank]) if crop else (np.float64(0), np.float64(1))
        indices, weights, outside = axis_taps(in_size, out_size, scale, opts, start, end)
        y = _apply_axis(y, axis, indices, weights, acc)
        if outside is not None and outside.any():
            shape = [1] * rank
            shape[axis] = -1
            mask = outside.reshape(shape)
            outside_mask = mask if outside_mask is None else outside_mask | mask
    if outside_mask is not None:
        y = np.where(outside_mask, np.asarray(extrapolation_value, dtype=y.dtype), y)
    if y.dtype == x.dtype:
        return y
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return np.clip(np.rint(y), info.min, info.max).astype(x.dtype)
    return y.astype(x.dtype)


def _present(t):
    return t is not None and np.asarray(t).size > 0


def _raw(t):
    """A host input as a hashable key (``None`` when absent): its dtype, shape and bytes."""
    if not _present(t):
        return None
    array = np.ascontiguousarray(t)
    return array.dtype.str, array.shape, array.tobytes()


def _resize(x, roi, scales, sizes, opts, *, axes=None, policy="stretch", extrapolation_value=0.0):
    """``x`` resized as the node's inputs and attributes say; the output's shape, scales and roi
    are worked out once per input shape and input values (a small map's resize spent most of its
    time on them, ~15 µs a call)."""
    key = (x.shape, _raw(roi), _raw(scales), _raw(sizes), None if axes is None else tuple(axes), policy)
    out_shape, full_scales, full_roi = _geometry(*key, _options_key(opts))
    return resize_nd(x, out_shape, full_scales, opts, full_roi, extrapolation_value)


class _ResizeNode:
    """One Resize node's calls: :func:`_resize`, with the output's geometry (and the compiled
    pass bound to it, ``kernels._resize_2d.bound``, where that serves it) kept for the last input
    shape and the last ``roi``/``scales``/``sizes`` objects where those are read-only arrays (a
    model's constants: their values cannot change under the kept geometry).

    Why: working the geometry out again, even from :func:`_geometry`'s cache, turned each of the
    three inputs into a key (an array, a copy, its bytes): nine numpy calls a Resize, each several
    µs right after a convolution has filled the caches (YOLO's two 2× upsamplings 48-67 µs each
    inside its runs, 16 alone)."""

    __slots__ = ("_opts", "_axes", "_policy", "_extrapolation", "_last")

    def __init__(self, opts: dict, *, axes=None, policy="stretch", extrapolation_value=0.0) -> None:
        self._opts, self._policy, self._extrapolation = opts, policy, extrapolation_value
        self._axes = None if axes is None else tuple(axes)
        # (input shape, roi, scales, sizes, out_shape, full_scales, full_roi, the bound compiled
        # pass or None) of the last call
        self._last: tuple | None = None

    def __call__(self, x, roi=None, scales=None, sizes=None):
        last = self._last
        if last is not None and last[0] == x.shape and last[1] is roi and last[2] is scales and last[3] is sizes:
            if last[7] is not None and x.dtype == np.float32:
                return last[7](x)
            return resize_nd(x, last[4], last[5], self._opts, last[6], self._extrapolation)
        key = (x.shape, _raw(roi), _raw(scales), _raw(sizes), self._axes, self._policy)
        out_shape, full_scales, full_roi = _geometry(*key, _options_key(self._opts))
        y = resize_nd(x, out_shape, full_scales, self._opts, full_roi, self._extrapolation)
        if all(t is None or (isinstance(t, np.ndarray) and not t.flags.writeable) for t in (roi, scales, sizes)):
            fast = None
            if x.dtype == np.float32:  # (the output's size was checked by resize_nd)
                fast = _resize_2d.bound(x.shape, out_shape, full_scales, _options_key(self._opts))
            self._last = (x.shape, roi, scales, sizes, out_shape, full_scales, full_roi, fast)
        return y

    def bind(self, inputs, output, scratch):
        """The compiled pass kept for this input's shape and these constant ``roi``, ``scales`` and
        ``sizes`` as an ``onnxplug.kernels.Binding`` (the plan's segments), or ``None``."""
        x, roi, scales, sizes = (*inputs, None, None, None)[:4]
        last = self._last
        if last is None or last[7] is None or x.dtype != np.float32 or last[0] != x.shape:
            return None
        if last[1] is not roi or last[2] is not scales or last[3] is not sizes:
            return None
        return last[7].bind(x, output, scratch)


def _array(raw):
    return None if raw is None else np.frombuffer(raw[2], dtype=np.dtype(raw[0])).reshape(raw[1])


@functools.lru_cache(maxsize=256)
def _geometry(shape, roi, scales, sizes, axes, policy, options):
    """``(out_shape, scales, roi)`` of a resize of an input of ``shape`` (the inputs as
    :func:`_raw` keys); the roi read-only."""
    out_shape, full_scales, full_roi = _output_geometry(
        shape, _array(roi), _array(scales), _array(sizes), dict(options), axes=axes, policy=policy
    )
    if full_roi is not None:
        full_roi = np.array(full_roi)
        full_roi.flags.writeable = False
    return tuple(out_shape), tuple(full_scales), full_roi


def _output_geometry(shape, roi, scales, sizes, opts, *, axes=None, policy="stretch"):
    rank = len(shape)
    axes = list(range(rank)) if axes is None else [a + rank if a < 0 else a for a in axes]
    if any(not 0 <= a < rank for a in axes) or len(set(axes)) != len(axes):
        raise InvalidArgument(f"Resize: axes {list(axes)} are invalid for rank {rank}")
    full_scales = [1.0] * rank
    out_shape = list(shape)
    if _present(scales) and _present(sizes):
        raise InvalidArgument("Resize: only one of scales and sizes may be given")
    if _present(scales):
        scales = np.asarray(scales, dtype=np.float64).reshape(-1)
        if len(scales) != len(axes):
            raise InvalidArgument(f"Resize: {len(scales)} scales for {len(axes)} axes")
        if np.any(scales <= 0):
            raise InvalidArgument(f"Resize: scales must be positive, got {scales.tolist()}")
        for a, s in zip(axes, scales):
            full_scales[a] = float(s)
            out_shape[a] = int(math.floor(shape[a] * s))
    elif _present(sizes):
        sizes = [int(v) for v in np.asarray(sizes).reshape(-1)]
        if len(sizes) != len(axes) or any(v < 0 for v in sizes):
            raise InvalidArgument(f"Resize: sizes {sizes} do not fit axes {axes}")
        ratios = [sizes[i] / shape[a] if shape[a] else 1.0 for i, a in enumerate(axes)]
        if policy in ("not_larger", "not_smaller"):
            common = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                full_scales[a] = common
                out_shape[a] = int(math.floor(common * shape[a] + 0.5))
        elif policy == "stretch":
            for i, a in enumerate(axes):
                full_scales[a] = ratios[i]
                out_shape[a] = sizes[i]
        else:
            raise Fail(f"Resize: unknown keep_aspect_ratio_policy {policy!r}")
    else:
        raise InvalidArgument("Resize: one of scales and sizes must be given")
    full_roi = None
    if opts["ctm"] == "tf_crop_and_resize":
        if not _present(roi):
            raise InvalidArgument("Resize: tf_crop_and_resize needs a roi")
        roi = np.asarray(roi).reshape(-1)
        if roi.dtype.kind != "f":
            roi = roi.astype(np.float64)
        if len(roi) == 2 * rank:
            full_roi = roi
        elif len(roi) == 2 * len(axes):
            full_roi = np.array([0.0] * rank + [1.0] * rank, dtype=roi.dtype)
            for i, a in enumerate(axes):
                full_roi[a], full_roi[a + rank] = roi[i], roi[i + len(axes)]
        else:
            raise InvalidArgument(f"Resize: roi has {len(roi)} values, expected {2 * len(axes)}")
    return out_shape, full_scales, full_roi


def _options(
    mode, ctm="half_pixel", nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75, exclude_outside=0, antialias=0
):
    if mode not in ("nearest", "linear", "cubic"):
        raise Fail(f"Resize: unknown mode {mode!r}")
    return {
        "mode": mode,
        "ctm": ctm,
        "nearest_mode": nearest_mode,
        "cubic_coeff_a": cubic_coeff_a,
        "exclude_outside": exclude_outside,
        "antialias": antialias and mode != "nearest",
    }


@kernel("Resize", since=(10,), host_inputs=(1,))
def resize_10(x, scales, *, mode):
    # Opset 10 predates the coordinate modes: it samples asymmetrically.
    return _resize(x, None, scales, None, _options(mode, "asymmetric", "simple"))


def resize_11(x, roi=None, scales=None, sizes=None, **attributes):
    """One Resize-11/13 call with the node's ``attributes`` (its kernel is
    :func:`resize_11_node`, which keeps its geometry from call to call)."""
    return resize_11_node(None, **attributes)(x, roi, scales, sizes)


@kernel("Resize", since=(11, 13), factory=True, host_inputs=(1, 2, 3))
def resize_11_node(
    ctx,
    *,
    coordinate_transformation_mode,
    cubic_coeff_a,
    exclude_outside,
    extrapolation_value,
    mode,
    nearest_mode,
):
    opts = _options(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside)
    return _ResizeNode(opts, extrapolation_value=extrapolation_value)


@kernel("Resize", since=(18, 19), factory=True, host_inputs=(1, 2, 3))
def resize_18_node(
    ctx,
    *,
    antialias,
    axes=None,
    coordinate_transformation_mode,
    cubic_coeff_a,
    exclude_outside,
    extrapolation_value,
    keep_aspect_ratio_policy,
    mode,
    nearest_mode,
):
    opts = _options(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a, exclude_outside, antialias)
    return _ResizeNode(opts, axes=axes, policy=keep_aspect_ratio_policy, extrapolation_value=extrapolation_value)


def _upsample(x, scales, mode):
    mode = "linear" if mode in ("linear", "bilinear") else mode
    scales = [float(s) for s in np.asarray(scales).reshape(-1)]
    if len(scales) != x.ndim:
        raise InvalidArgument(f"Upsample: {len(scales)} scales for rank {x.ndim}")
    if any(s < 1 for s in scales):
        raise InvalidArgument(f"Upsample: scales must be >= 1, got {scales}")
    return _resize(x, None, scales, None, _options(mode, "asymmetric", "simple"))


@kernel("Upsample", since=(1,))
def upsample_1(x, *, height_scale=None, mode, width_scale=None):
    if x.ndim != 4 or height_scale is None or width_scale is None:
        raise Fail("Upsample-1: needs a 4-D input and both height_scale and width_scale")
    return _upsample(x, [1.0, 1.0, height_scale, width_scale], mode)


@kernel("Upsample", since=(7,))
def upsample_7(x, *, mode, scales=None):
    if scales is None:
        raise Fail("Upsample-7: the scales attribute is required")
    return _upsample(x, scales, mode)


@kernel("Upsample", since=(9, 10), host_inputs=(1,))
def upsample_9(x, scales, *, mode):
    return _upsample(x, scales, mode)
