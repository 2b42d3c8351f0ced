"""Pooling: AveragePool, MaxPool, LpPool, their Global forms, MaxUnpool and MaxRoiPool.

Windowed pools pad the input once and take a strided, dilated
``sliding_window_view`` of it, so each reduction is one numpy call over a view; MaxPool (without
indices) and AveragePool reduce one axis at a time (:func:`separable_reduce`); the geometry
(output size, begin/end pads, the extra cells ``ceil_mode`` needs) is worked out by
:func:`pool_geometry`, which the convolution kernels share.  float32 2-D MaxPool (without
Indices) and AveragePool with dilation 1 run compiled (``kernels._pool_compiled``: AVX-512 planes
planned once per input shape, numba loops otherwise), blocks of planes on the session's threads,
when numba is loaded (``kernels._jit.numba_loaded``: a session with a float32 convolution loads
it; a pool alone does not).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import check_allocation

from . import _pool_compiled
from ._registry import kernel
from .reduce import trailing_mean


def pool_geometry(in_shape, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode=0, op="Pool"):
    """Output sizes and ``(begin, end)`` pads per spatial axis.

    ``end`` may exceed the declared pad when ``ceil_mode`` makes the last window run past the
    padded input; the caller pads that far (with the reduction's neutral value).
    Returns ``(out, begin, end, declared_end)``; kept per geometry (every Conv and pool call
    asks, with the same attributes each run).
    """

    def key(values):
        return tuple(int(v) for v in values) if values is not None and len(values) else None

    steps = (key(strides), key(dilations), key(pads))
    return _geometry(tuple(in_shape), key(kernel_shape), *steps, auto_pad, ceil_mode, op)


@functools.lru_cache(maxsize=1024)
def _geometry(in_shape, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, op):
    nd = len(in_shape)
    if kernel_shape is None:
        kernel_shape = ()
    kernel_shape = tuple(kernel_shape)
    if len(kernel_shape) != nd:
        raise Fail(f"{op}: kernel_shape {list(kernel_shape)} does not match {nd} spatial dims")
    strides = tuple(strides) if strides else (1,) * nd
    dilations = tuple(dilations) if dilations else (1,) * nd
    pads = tuple(pads) if pads else (0,) * (2 * nd)
    if len(strides) != nd or len(dilations) != nd or len(pads) != 2 * nd:
        raise Fail(
            f"{op}: strides {list(strides)}, dilations {list(dilations)} or pads {list(pads)} "
            f"do not match {nd} spatial dims"
        )
    if any(s <= 0 for s in strides) or any(d <= 0 for d in dilations) or any(k <= 0 for k in kernel_shape):
        raise InvalidArgument(f"{op}: kernel_shape, strides and dilations must be positive")
    out, begin, end, declared = [], [], [], []
    for i in range(nd):
        size, k, s, d = in_shape[i], kernel_shape[i], strides[i], dilations[i]
        ek = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-size // s)
            total = max(0, (o - 1) * s + ek - size)
            small = total // 2
            pb, pe = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
        elif auto_pad == "VALID":
            pb = pe = 0
            o = (-(-(size - ek) // s) if ceil_mode else (size - ek) // s) + 1
        elif auto_pad in ("NOTSET", "", None):
            pb, pe = pads[i], pads[i + nd]
            span = size + pb + pe - ek
            if ceil_mode:
                o = -(-span // s) + 1
                # A last window that starts entirely in the end padding is dropped.
                if (o - 1) * s >= size + pb:
                    o -= 1
            else:
                o = span // s + 1
        else:
            raise Fail(f"{op}: unknown auto_pad {auto_pad!r}")
        if o <= 0:
            raise Fail(f"{op}: input size {size} is too small for kernel {k} (dilation {d}, pads {pb}+{pe})")
        out.append(o)
        begin.append(pb)
        declared.append(pe)
        end.append(max(pe, (o - 1) * s + ek - size - pb))
    return tuple(out), tuple(begin), tuple(end), tuple(declared)


def _padded(x, nd, begin, end, fill):
    if not any(begin) and not any(end):
        return x
    lead = x.ndim - nd
    shape = x.shape[:lead] + tuple(b + d + e for b, d, e in zip(begin, x.shape[lead:], end))
    padded = np.full(check_allocation(shape, x.dtype, "pool's padded input"), fill, x.dtype)
    padded[(slice(None),) * lead + tuple(slice(b, b + d) for b, d in zip(begin, x.shape[lead:]))] = x
    return padded


def separable_reduce(x, out, begin, end, kernel_shape, strides, dilations, fill, ufunc):
    """``ufunc`` (``np.maximum``, ``np.add``) over each window of ``x`` padded with ``fill``,
    one spatial axis at a time.

    Why: a window is a product of per-axis ranges, so reducing along one axis and then the next
    gives the same result with ``Σk`` instead of ``Πk`` passes per output cell, and the first
    passes run over whole contiguous rows instead of strided views of every window offset.
    Returns a fresh ``(N, C, *out)`` array.
    """
    nd = len(out)
    current = _padded(x, nd, begin, end, fill)
    strides = tuple(strides) if strides else (1,) * nd
    dilations = tuple(dilations) if dilations else (1,) * nd
    lead = x.ndim - nd
    # The innermost axis last: its passes then read the already-shrunk array.
    for axis in range(nd):
        k, s, d, o = kernel_shape[axis], strides[axis], dilations[axis], out[axis]
        bands = [
            current[(slice(None),) * (lead + axis) + (slice(offset * d, offset * d + (o - 1) * s + 1, s),)]
            for offset in range(k)
        ]
        reduced = bands[0].copy()
        for band in bands[1:]:
            ufunc(reduced, band, out=reduced)
        current = reduced
    return current


def windows(x, out, begin, end, kernel_shape, strides, dilations, fill):
    """A view ``(N, C, *out, *kernel)`` of the input padded with ``fill``."""
    nd = len(out)
    padded = _padded(x, nd, begin, end, fill)
    strides = tuple(strides) if strides else (1,) * nd
    dilations = tuple(dilations) if dilations else (1,) * nd
    spans = tuple((k - 1) * d + 1 for k, d in zip(kernel_shape, dilations))
    axes = tuple(range(x.ndim - nd, x.ndim))
    view = sliding_window_view(padded, spans, axis=axes)
    index = (slice(None),) * (x.ndim - nd)
    index += tuple(slice(0, (o - 1) * s + 1, s) for o, s in zip(out, strides))
    index += tuple(slice(None, None, d) for d in dilations)
    return view[index]


def offset_views(x, out, begin, end, kernel_shape, strides, dilations, fill):
    """Yield ``(k, view)`` per kernel offset: the ``(N, C, *out)`` cells that offset ``k``
    (row-major over the kernel) reads; reductions fold these without a window copy."""
    nd = len(out)
    padded = _padded(x, nd, begin, end, fill)
    strides = tuple(strides) if strides else (1,) * nd
    dilations = tuple(dilations) if dilations else (1,) * nd
    lead = (slice(None),) * (x.ndim - nd)
    for k, offsets in enumerate(np.ndindex(*kernel_shape)):
        yield (
            k,
            padded[
                lead
                + tuple(
                    slice(o * d, o * d + (n - 1) * s + 1, s) for o, d, n, s in zip(offsets, dilations, out, strides)
                )
            ],
        )


def _window_counts(in_shape, out, begin, end, declared, kernel_shape, strides, dilations, include_pad, dtype):
    """How many cells each window averages over, as a read-only ``dtype`` array broadcastable to
    ``out``; kept per geometry (working it out took 30 µs, as long as a small pool)."""
    key = tuple(tuple(v) if v is not None else None for v in (in_shape, out, begin, end, declared, kernel_shape))
    steps = tuple(tuple(v) if v is not None else None for v in (strides, dilations))
    compute = _cached_counts if math.prod(out) <= _CACHED_COUNTS_MAX else _cached_counts.__wrapped__
    return compute(*key, *steps, bool(include_pad), np.dtype(dtype))


#: Window-count arrays up to this many cells are kept (256 geometries at most).
_CACHED_COUNTS_MAX = 1 << 16


@functools.lru_cache(maxsize=256)
def _cached_counts(in_shape, out, begin, end, declared, kernel_shape, strides, dilations, include_pad, dtype):
    nd = len(out)
    strides = tuple(strides) if strides else (1,) * nd
    dilations = tuple(dilations) if dilations else (1,) * nd
    counts = np.ones((), dtype=np.float64)
    for i in range(nd):
        valid = np.zeros(begin[i] + in_shape[i] + end[i], dtype=np.float64)
        if include_pad:
            valid[: begin[i] + in_shape[i] + declared[i]] = 1
        else:
            valid[begin[i] : begin[i] + in_shape[i]] = 1
        ek = (kernel_shape[i] - 1) * dilations[i] + 1
        w = sliding_window_view(valid, ek)[: (out[i] - 1) * strides[i] + 1 : strides[i], :: dilations[i]]
        counts = np.multiply.outer(counts, w.sum(axis=-1))
    counts = counts.astype(dtype)
    counts.flags.writeable = False
    return counts


def _accumulator(dtype):
    return np.float64 if dtype == np.float64 else np.float32


def _spatial_setup(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, op):
    if kernel_shape is None:
        raise Fail(f"{op}: kernel_shape is required")
    if x.ndim < 3:
        raise Fail(f"{op}: input must be at least 3-D (N, C, ...), got shape {list(x.shape)}")
    geometry = pool_geometry(x.shape[2:], kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, op)
    check_allocation((*x.shape[:2], *geometry[0]), x.dtype, f"{op} output")  # (pads can be any size)
    return geometry


class _PlannedPool:
    """A MaxPool (without Indices) or AveragePool node's calls: a float32 input through the
    compiled plan (``kernels._pool_compiled.plan``) kept for the last input shape, anything else
    (and a shape no plan serves) through ``generic``.  The shape and its plan are kept as one
    tuple, replaced whole: concurrent runs of a session share the node, and a plan runs its loop
    on the shape it was made for without checking.

    Why: working the geometry, the loop and the thread split out again on every call cost 4-6 µs
    of Python, as much as a small pool's arithmetic (an OCR recognizer's 2×1 pools: 5 µs)."""

    __slots__ = ("_generic", "_plan_for", "_last", "_pair")

    def __init__(self, generic, plan_for, *, pair: bool = False) -> None:
        """``pair``: the node's schema has a second output (MaxPool's Indices, not asked for),
        returned as ``None`` beside the plan's result (``generic`` returns both itself)."""
        self._generic, self._plan_for, self._pair = generic, plan_for, pair
        self._last: tuple = (None, None)  # (input shape, its plan or None)

    def __call__(self, x):
        if x.dtype == np.float32:
            last = self._last
            if x.shape != last[0]:
                self._last = last = (x.shape, self._plan_for(x))
            if last[1] is not None:
                return (last[1](x), None) if self._pair else last[1](x)
        return self._generic(x)

    def bind(self, inputs, output, scratch):
        """The plan kept for this input's shape as an ``onnxplug.kernels.Binding`` (the plan's
        segments), or ``None`` where there is none."""
        x = inputs[0]
        shape, plan = self._last
        if x.dtype != np.float32 or x.shape != shape or plan is None:
            return None
        return plan.bind(x, output)


@kernel("AveragePool", since=(1, 7, 10, 11, 19, 22), factory=True)
def average_pool_node(ctx, *, kernel_shape=None, auto_pad, pads=None, strides=None, **attrs):
    dilations = attrs.get("dilations")
    geometry = (kernel_shape, strides, dilations, pads, auto_pad, attrs.get("ceil_mode", 0), "AveragePool")

    def plan_for(x):
        out, begin, end, declared = _spatial_setup(x, *geometry)
        if _one_window_over_the_map(x.shape[2:], out, begin, end, kernel_shape, dilations, attrs):
            return None  # a global average: average_pool's matrix-vector product (ResNet-50's head 105 → 20 µs)
        include_pad = attrs.get("count_include_pad", 0)
        counts = _window_counts(
            x.shape[2:], out, begin, end, declared, kernel_shape, strides, dilations, include_pad, np.float32
        )
        return _pool_compiled.plan(x.shape, out, begin, kernel_shape, strides, dilations, False, counts)

    def generic(x):
        return average_pool(x, kernel_shape=kernel_shape, auto_pad=auto_pad, pads=pads, strides=strides, **attrs)

    return _PlannedPool(generic, plan_for)


def _one_window_over_the_map(shape, out, begin, end, kernel_shape, dilations, attrs) -> bool:
    """Whether an AveragePool's only window covers the whole map and averages exactly its cells:
    unpadded, or its padding not counted (``count_include_pad`` 0)."""
    if any(o != 1 for o in out) or (dilations and any(d != 1 for d in dilations)):
        return False
    if not any(begin) and not any(end):
        return tuple(kernel_shape) == tuple(shape)
    return not attrs.get("count_include_pad", 0) and all(k - b >= n for k, b, n in zip(kernel_shape, begin, shape))


def average_pool(x, *, kernel_shape=None, auto_pad, pads=None, strides=None, **attrs):
    """AveragePool of any input (the node's path where no compiled plan serves it)."""
    dilations = attrs.get("dilations")
    ceil_mode = attrs.get("ceil_mode", 0)
    out, begin, end, declared = _spatial_setup(
        x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, "AveragePool"
    )
    if _one_window_over_the_map(x.shape[2:], out, begin, end, kernel_shape, dilations, attrs):
        # One window that is the whole map (Inception's 7×7 head on a 7×7 map; a 7×7 window
        # padded past a 6×6 map, its padding not counted): a global average, one matrix-vector
        # product (1024 channels: 70 against ~20 µs; Inception-v1's 6×6 head in its run 131 → 66-72).
        fast = trailing_mean(x, tuple(range(2, x.ndim)), True)
        if fast is not None:
            return fast
    acc = _accumulator(x.dtype)
    counts = _window_counts(
        x.shape[2:], out, begin, end, declared, kernel_shape, strides, dilations, attrs.get("count_include_pad", 0), acc
    )
    sums, divided = _pool_compiled.compiled_reduce(x, out, begin, kernel_shape, strides, dilations, False, counts)
    if divided:
        return sums
    if sums is None:
        sums = separable_reduce(x.astype(acc, copy=False), out, begin, end, kernel_shape, strides, dilations, 0, np.add)
    # In the accumulator's type and in place: float64 counts would promote a float32 sum.
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.divide(sums, counts, out=sums).astype(x.dtype, copy=False)


@kernel("LpPool", since=(1, 2, 11, 18, 22))
def lp_pool(x, *, kernel_shape=None, auto_pad, pads=None, strides=None, p, **attrs):
    dilations = attrs.get("dilations")
    out, begin, end, _ = _spatial_setup(
        x, kernel_shape, strides, dilations, pads, auto_pad, attrs.get("ceil_mode", 0), "LpPool"
    )
    acc = _accumulator(x.dtype)
    total = None
    for _, view in offset_views(np.abs(x.astype(acc)), out, begin, end, kernel_shape, strides, dilations, 0):
        term = view ** acc(p)
        total = term if total is None else np.add(total, term, out=total)
    return (total ** acc(1.0 / p)).astype(x.dtype)


def _lowest(dtype):
    if dtype.kind == "f" or dtype.kind == "V" or dtype.name == "bfloat16":
        return -np.inf
    return np.iinfo(dtype).min


@kernel("MaxPool", since=(1, 8, 10, 11, 12, 22), factory=True)
def max_pool(ctx, *, kernel_shape=None, auto_pad, pads=None, strides=None, **attrs):
    dilations = attrs.get("dilations")
    ceil_mode = attrs.get("ceil_mode", 0)
    storage_order = attrs.get("storage_order", 0)
    want_indices = ctx.num_outputs > 1 and ctx.outputs_used[1]
    multi_output = ctx.since_version >= 8  # the schema declares Indices from opset 8

    def plan_for(x):
        out, begin, _, _ = _spatial_setup(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, "MaxPool")
        return _pool_compiled.plan(x.shape, out, begin, kernel_shape, strides, dilations, True)

    def run(x):
        out, begin, end, _ = _spatial_setup(x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, "MaxPool")
        if not want_indices:
            best, _ = _pool_compiled.compiled_reduce(x, out, begin, kernel_shape, strides, dilations, True)
            if best is not None:
                return (best, None) if multi_output else best
            lowest = _lowest(x.dtype)
            best = separable_reduce(x, out, begin, end, kernel_shape, strides, dilations, lowest, np.maximum)
            return (best, None) if multi_output else best
        best = arg = None
        for k, view in offset_views(x, out, begin, end, kernel_shape, strides, dilations, _lowest(x.dtype)):
            if best is None:
                best = view.copy()
                arg = np.zeros(best.shape, dtype=np.int64) if want_indices else None
            elif want_indices:
                better = view > best  # strict: the first maximum wins
                np.copyto(best, view, where=better)
                np.copyto(arg, k, where=better)
            else:
                np.maximum(best, view, out=best)
        if not want_indices:
            return (best, None) if multi_output else best
        return best, _argmax_indices(x, arg, out, begin, kernel_shape, strides, dilations, storage_order)

    return run if want_indices else _PlannedPool(run, plan_for, pair=multi_output)


def _argmax_indices(x, arg, out, begin, kernel_shape, strides, dilations, storage_order):
    """Flat indices into the unpadded input of each window's (first) maximum, from the
    row-major kernel offset ``arg`` of that maximum."""
    nd = len(out)
    strides = tuple(strides) if strides else (1,) * nd
    dilations = tuple(dilations) if dilations else (1,) * nd
    offsets = np.unravel_index(arg, tuple(kernel_shape))
    spatial = x.shape[2:]
    positions = []
    for i in range(nd):
        grid = np.arange(out[i]).reshape((-1,) + (1,) * (nd - 1 - i)) * strides[i] - begin[i]
        positions.append(grid + offsets[i] * dilations[i])
    index = np.zeros_like(positions[0])
    # Row-major over the spatial axes, or column-major (last axis slowest) for storage_order 1.
    for i in reversed(range(nd)) if storage_order else range(nd):
        index = index * spatial[i] + positions[i]
    plane = math.prod(spatial)
    nc = np.arange(x.shape[0] * x.shape[1]).reshape((x.shape[0], x.shape[1]) + (1,) * nd) * plane
    return (index + nc).astype(np.int64)


@kernel("GlobalAveragePool", since=(1, 22))
def global_average_pool(x):
    axes = tuple(range(2, x.ndim))
    fast = trailing_mean(x, axes, True)  # float32: one matrix-vector product (kernels.reduce)
    if fast is not None:
        return fast
    acc = _accumulator(x.dtype)
    return x.astype(acc, copy=False).mean(axis=axes, keepdims=True).astype(x.dtype, copy=False)


@kernel("GlobalMaxPool", since=(1, 22))
def global_max_pool(x):
    return x.max(axis=tuple(range(2, x.ndim)), keepdims=True)


@kernel("GlobalLpPool", since=(1, 2, 22))
def global_lp_pool(x, *, p):
    acc = _accumulator(x.dtype)
    powered = np.abs(x.astype(acc)) ** acc(p)
    return (powered.sum(axis=tuple(range(2, x.ndim)), keepdims=True) ** acc(1.0 / p)).astype(x.dtype)


@kernel("MaxUnpool", since=(9, 11, 22), host_inputs=(2,))
def max_unpool(x, indices, output_shape=None, *, kernel_shape=None, pads=None, strides=None):
    nd = x.ndim - 2
    strides = tuple(strides) if strides else (1,) * nd
    pads = tuple(pads) if pads else (0,) * (2 * nd)
    inferred = x.shape[:2] + tuple(
        (x.shape[2 + i] - 1) * strides[i] - pads[i] - pads[i + nd] + kernel_shape[i] for i in range(nd)
    )
    inferred = check_allocation(inferred, x.dtype, "MaxUnpool output")
    if indices.shape != x.shape:
        raise InvalidArgument(f"MaxUnpool: indices shape {list(indices.shape)} differs from X {list(x.shape)}")
    total = math.prod(inferred)
    flat_indices = indices.reshape(-1).astype(np.int64)
    if flat_indices.size and (flat_indices.min() < 0 or flat_indices.max() >= total):
        raise InvalidArgument(f"MaxUnpool: an index is outside the unpooled output of {total} elements")
    out = np.zeros(total, dtype=x.dtype)
    out[flat_indices] = x.reshape(-1)
    out = out.reshape(inferred)
    if output_shape is None:
        return out
    # Indices address the inferred shape; a larger output_shape pads it at the end of each axis.
    shape = tuple(int(d) for d in output_shape)
    if len(shape) != x.ndim or any(s < i for s, i in zip(shape, inferred)):
        raise InvalidArgument(
            f"MaxUnpool: output_shape {list(shape)} must have rank {x.ndim} and be at least {list(inferred)}"
        )
    shape = check_allocation(shape, x.dtype, "MaxUnpool output")
    result = np.zeros(shape, dtype=x.dtype)
    result[tuple(slice(0, i) for i in inferred)] = out
    return result


@kernel("MaxRoiPool", since=(1, 22))
def max_roi_pool(x, rois, *, pooled_shape=None, spatial_scale):
    if pooled_shape is None or len(pooled_shape) != 2:
        raise Fail(f"MaxRoiPool: pooled_shape must have 2 values, got {pooled_shape}")
    n, c, height, width = x.shape
    if rois.ndim != 2 or rois.shape[1] != 5:
        raise InvalidArgument(f"MaxRoiPool: rois must have shape (num_rois, 5), got {list(rois.shape)}")
    batch = rois[:, 0].astype(np.int64)
    if batch.size and (batch.min() < 0 or batch.max() >= n):
        raise InvalidArgument(f"MaxRoiPool: a batch index in rois is outside [0, {n})")
    box = np.round(rois[:, 1:].astype(np.float64) * spatial_scale).astype(np.int64)
    ph, pw = pooled_shape

    def bins(start, stop, pooled, size):
        # Each bin's [lo, hi) cells per roi, Caffe style, as a (rois, pooled, size) mask.
        extent = np.maximum(stop - start + 1, 1).astype(np.float64)[:, None] / pooled
        steps = np.arange(pooled)[None, :]
        lo = np.clip(np.floor(steps * extent).astype(np.int64) + start[:, None], 0, size)
        hi = np.clip(np.ceil((steps + 1) * extent).astype(np.int64) + start[:, None], 0, size)
        cells = np.arange(size)
        return (cells >= lo[..., None]) & (cells < hi[..., None])

    mask_h = bins(box[:, 1], box[:, 3], ph, height)  # (R, ph, H)
    mask_w = bins(box[:, 0], box[:, 2], pw, width)  # (R, pw, W)
    low = _lowest(x.dtype)
    picked = x[batch]  # (R, C, H, W)
    over_w = np.where(mask_w[:, None, None, :, :], picked[:, :, :, None, :], low).max(axis=-1)  # R,C,H,pw
    over_h = np.where(mask_h[:, None, :, :, None], over_w[:, :, None, :, :], low).max(axis=3)  # R,C,ph,pw
    empty = ~mask_h.any(axis=-1)[:, :, None] | ~mask_w.any(axis=-1)[:, None, :]
    return np.where(empty[:, None], x.dtype.type(0), over_h).astype(x.dtype)
