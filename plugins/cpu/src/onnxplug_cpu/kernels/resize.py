"""Resize and the deprecated Upsample.

Resizing is separable: each resized axis gets a small tap table (for every output position, the
input indices it reads and their weights), built once per axis from the coordinate transform
and the interpolation filter, and is applied with ``take`` along that axis, one call per tap
(a broadcasting copy for integer nearest upsampling measured slower than ``take``).
Nearest uses a single tap and never leaves the input dtype; linear and cubic accumulate in
float32 (float64 for float64) and cast back, rounding and saturating for integer images.
Antialiasing (downscaling with a stretched filter) only widens the tap table.
float32 maps resized on their last two axes only, nearest or linear, take one compiled pass
instead (``kernels._resize_jit``, the same taps and the same bits).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import check_allocation

from ._registry import kernel
from ._resize_jit import compiled as _compiled_2d
from ._resize_jit import compiled_doubled_columns as _compiled_doubled_columns
from ._resize_jit import compiled_doubling as _compiled_doubling
from ._resize_jit import compiled_parallel as _compiled_2d_parallel
from ._split_rows import thread_budget
from ._team import team_joined


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


#: Smaller outputs keep the numpy path: the first compiled call loads numba (once per process).
COMPILED_MIN_ELEMENTS = 4096
#: Output elements per thread from which a run on numba's team splits a resize over it.
PART_ELEMENTS = 1 << 15


@functools.lru_cache(maxsize=128)
def _cached_taps(in_size, out_size, scale, options):
    """:func:`axis_taps` of one axis (no roi), made once per geometry: float32 weights."""
    indices, weights, _ = axis_taps(in_size, out_size, scale, dict(options))
    return indices, None if weights is None else weights.astype(np.float32)


@functools.lru_cache(maxsize=128)
def _doubled(in_size, out_size, scale, options) -> bool:
    """Whether a nearest axis's table reads every input position twice in order (``i // 2``):
    an exact 2× upsampling, for the doubling loop (``_resize_jit.compiled_doubling``)."""
    if out_size != 2 * in_size:
        return False
    indices, _ = _cached_taps(in_size, out_size, scale, options)
    return bool(np.array_equal(indices[:, 0], np.arange(out_size) // 2))


def _double_both_axes(source, target, parts: int = 1) -> None:
    """``target`` ``(B, 2H, 2W)``: ``source`` ``(B, H, W)`` with every value doubled along both
    axes, in one compiled pass (the same values as the gather; numpy's broadcasting copy of the
    doubled rows took 18 of 21 µs on YOLO's 128 planes of 10×10), its rows split into ``parts``
    on numba's team when more than one."""
    rows, width = source.shape[0] * source.shape[1], source.shape[2]
    doubled = np.empty(rows * 2 * width, np.float32)
    arguments = (source.reshape(rows, width), doubled, target.reshape(rows, 2, 2 * width))
    serial, parallel = _compiled_doubling()
    if parts > 1:
        parallel(*arguments, parts)
    else:
        serial(*arguments)


@functools.lru_cache(maxsize=256)
def _plan_2d(shape: tuple, out_shape: tuple, scales: tuple, options: tuple):
    """What :func:`_resize_2d` runs for this geometry, worked out once: ``None`` where the
    compiled pass does not apply, else ``(form, tables)``: ``"double"`` (an exact 2× nearest
    upsampling of both axes), ``"nearest"`` (each axis' source index), ``"linear"`` (each axis'
    two taps and weights) or ``"linear_doubled"`` (those, the columns a bilinear 2×
    upsampling's: :func:`_doubles_columns`)."""
    opts = dict(options)
    if len(shape) < 3 or opts["ctm"] == "tf_crop_and_resize" or opts["antialias"]:
        return None
    if opts["mode"] not in ("nearest", "linear") or math.prod(out_shape) < COMPILED_MIN_ELEMENTS:
        return None
    if tuple(out_shape[:-2]) != shape[:-2] or any(float(s) != 1.0 for s in scales[:-2]) or 0 in shape:
        return None
    tables = []
    for axis in (-2, -1):
        in_size, out_size, scale = shape[axis], out_shape[axis], float(scales[axis])
        if in_size == out_size and scale == 1.0:  # an axis the numpy path leaves alone
            if opts["mode"] == "linear":
                return None  # x·1 + x·0 is not x for infinities
            tables.append((np.arange(in_size, dtype=np.int64)[:, None], None))
        else:
            tables.append(_cached_taps(in_size, out_size, scale, options))
    (iy, wy), (ix, wx) = tables
    if opts["mode"] == "linear":
        form = "linear_doubled" if _doubles_columns(shape[-1], out_shape[-1], ix, wx) else "linear"
        return form, (iy, wy, ix, wx)
    if all(_doubled(shape[axis], out_shape[axis], float(scales[axis]), options) for axis in (-2, -1)):
        return "double", ()
    return "nearest", (np.ascontiguousarray(iy[:, 0]), np.ascontiguousarray(ix[:, 0]))


def _doubles_columns(width: int, out_width: int, ix: np.ndarray, wx: np.ndarray) -> bool:
    """Whether a linear column table doubles a width of at least 3 with repeating interior taps:
    output ``2j + 1`` reads ``(j, j + 1)`` with output 1's weights and ``2j + 2`` the same two
    with output 2's (a bilinear 2× upsampling), for ``_resize_loops.linear_doubled_columns``."""
    if out_width != 2 * width or width < 3:
        return False
    j = np.arange(width - 1)
    pairs = np.stack([j, j + 1], axis=1)
    return (
        np.array_equal(ix[1:-1:2], pairs)
        and np.array_equal(ix[2:-1:2], pairs)
        and bool((wx[1:-1:2] == wx[1]).all())
        and bool((wx[2:-1:2] == wx[2]).all())
    )


def _resize_2d(x, out_shape, scales, opts):
    """The compiled nearest / bilinear pass over the last two axes, or ``None`` when it does not
    apply (another dtype, mode, axis or coordinate mode with a roi, a small output, no numba)."""
    if x.dtype != np.float32:
        return None
    plan = _plan_2d(x.shape, out_shape, scales, _options_key(opts))
    if plan is None:
        return None
    kernels = _compiled_2d()
    if kernels is None:
        return None
    form, tables = plan
    source = np.ascontiguousarray(x).reshape(-1, *x.shape[-2:])
    y = np.empty(out_shape, np.float32)
    target = y.reshape(-1, *out_shape[-2:])
    parts = min(thread_budget(), y.size // PART_ELEMENTS, target.shape[0])
    team = parts > 1 and team_joined()  # between the convolutions of a run on numba's team
    if form == "double":
        _double_both_axes(source, target, parts if team else 1)
        return y
    if form == "nearest":
        arguments = (source, *tables, target)
    else:
        arguments = (source, tables[0], tables[1], tables[2], tables[3], target)
    if form == "linear_doubled":
        serial, parallel = _compiled_doubled_columns()
    else:
        serial, parallel = kernels[form == "linear"], _compiled_2d_parallel()[form == "linear"]
    if team:
        parallel(*arguments, parts)
    else:
        serial(*arguments)
    return y


def _options_key(opts: dict) -> tuple:
    """The options as a hashable key (:func:`_options` makes them in one order)."""
    return tuple(opts.items())


def resize_nd(x, out_shape, scales, opts, roi=None, extrapolation_value=0.0):
    """Resize ``x`` to ``out_shape`` with per-axis ``scales`` (tuples of ints and floats; ``roi``:
    starts + ends)."""
    out_shape = check_allocation(out_shape, x.dtype, "Resize output")
    fast = _resize_2d(x, out_shape, scales, opts)
    if fast is not None:
        return fast
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
    """One Resize node's calls: :func:`_resize`, with the output's geometry kept for the last
    input shape and the last ``roi``/``scales``/``sizes`` objects where those are read-only
    arrays (a model's constants: their values cannot change under the kept geometry).

    Why: working the geometry out again, even from :func:`_geometry`'s cache, turned each of the
    three inputs into a key (an array, a copy, its bytes): nine numpy calls a Resize, each several
    µs right after a convolution has filled the caches (YOLO's two 2× upsamplings 48-67 µs each
    inside its runs, 16 alone)."""

    __slots__ = ("_opts", "_axes", "_policy", "_extrapolation", "_last")

    def __init__(self, opts: dict, *, axes=None, policy="stretch", extrapolation_value=0.0) -> None:
        self._opts, self._policy, self._extrapolation = opts, policy, extrapolation_value
        self._axes = None if axes is None else tuple(axes)
        # (input shape, roi, scales, sizes, out_shape, full_scales, full_roi) of the last call
        self._last: tuple | None = None

    def __call__(self, x, roi=None, scales=None, sizes=None):
        last = self._last
        if last is not None and last[0] == x.shape and last[1] is roi and last[2] is scales and last[3] is sizes:
            return resize_nd(x, last[4], last[5], self._opts, last[6], self._extrapolation)
        key = (x.shape, _raw(roi), _raw(scales), _raw(sizes), self._axes, self._policy)
        out_shape, full_scales, full_roi = _geometry(*key, _options_key(self._opts))
        if all(t is None or (isinstance(t, np.ndarray) and not t.flags.writeable) for t in (roi, scales, sizes)):
            self._last = (x.shape, roi, scales, sizes, out_shape, full_scales, full_roi)
        return resize_nd(x, out_shape, full_scales, self._opts, full_roi, self._extrapolation)


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
