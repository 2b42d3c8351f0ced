"""Kernels that build tensors whose size comes from values: Constant, ConstantOfShape, Range,
EyeLike, Trilu, Expand, Tile, Pad, CenterCropPad.

Every size computed from an input value goes through ``check_allocation`` before anything is
allocated, so a hostile shape fails with InvalidArgument instead of exhausting memory.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import InvalidArgument
from onnxplug.graph import np_dtype
from onnxplug.kernels import check_allocation

from ._registry import kernel
from .shape import int_values, normalize_axes

_LATEST = (21, 23, 24, 25)


def _dense_from_sparse(sparse):
    """A SparseTensorProto (values, indices, dims) as a dense array of its values' type."""
    from onnx import numpy_helper

    if isinstance(sparse, np.ndarray):
        return sparse
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dims = [int(d) for d in sparse.dims]
    dense = np.zeros(check_allocation(dims, values.dtype, "Constant sparse_value"), dtype=values.dtype)
    if indices.ndim == 2:  # COO coordinates, one row per value
        dense[tuple(indices.T)] = values
    else:  # linearised indices
        dense.reshape(-1)[indices] = values
    return dense


@kernel("Constant", since=(1, 9), factory=True)
def constant_1(ctx, *, value=None):
    return constant(ctx, value=value)


@kernel("Constant", since=(11,), factory=True)
def constant_11(ctx, *, value=None, sparse_value=None):
    return constant(ctx, value=value, sparse_value=sparse_value)


@kernel("Constant", since=(12, 13, 19) + _LATEST, factory=True)
def constant(
    ctx,
    *,
    value=None,
    value_float=None,
    value_floats=None,
    value_int=None,
    value_ints=None,
    value_string=None,
    value_strings=None,
    sparse_value=None,
):
    given = {
        "value": value,
        "value_float": value_float,
        "value_floats": value_floats,
        "value_int": value_int,
        "value_ints": value_ints,
        "value_string": value_string,
        "value_strings": value_strings,
        "sparse_value": sparse_value,
    }
    present = [name for name, v in given.items() if v is not None]
    if len(present) != 1:
        raise InvalidArgument(f"{ctx.describe()}: Constant needs exactly one value attribute, got {present}")
    if value is not None:
        result = value
    elif sparse_value is not None:
        result = _dense_from_sparse(sparse_value)
    elif value_float is not None:
        result = np.array(value_float, dtype=np.float32)
    elif value_floats is not None:
        result = np.array(value_floats, dtype=np.float32).reshape(-1)
    elif value_int is not None:
        result = np.array(value_int, dtype=np.int64)
    elif value_ints is not None:
        result = np.array(value_ints, dtype=np.int64).reshape(-1)
    elif value_string is not None:
        result = np.array(_text(value_string), dtype=object)
    else:
        result = np.empty(len(value_strings), dtype=object)
        result[:] = [_text(s) for s in value_strings]
    return lambda: result


def _text(s):
    return s.decode("utf-8") if isinstance(s, bytes) else s


@kernel("ConstantOfShape", since=(9, 20) + _LATEST, host_inputs=(0,))
def constant_of_shape(shape, *, value=None):
    fill = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value)
    if fill.size != 1:
        raise InvalidArgument(f"ConstantOfShape: value must hold one element, it has {fill.size}")
    dims = check_allocation(int_values(shape), fill.dtype, "ConstantOfShape output")
    return np.full(dims, fill.reshape(()), dtype=fill.dtype)


def _scalar(x, op, name):
    x = np.asarray(x)
    if x.size != 1:
        raise InvalidArgument(f"{op}: {name} must be a scalar, got shape {list(x.shape)}")
    return x.reshape(())


def _range(start, limit, delta, compute_dtype=None):
    dtype = start.dtype
    start, limit, delta = (_scalar(v, "Range", n) for v, n in ((start, "start"), (limit, "limit"), (delta, "delta")))
    if delta == 0:
        raise InvalidArgument("Range: delta must not be 0")
    if dtype.kind in "iu":
        first, stop, step = int(start), int(limit), int(delta)
        count = max(-(-(stop - first) // step), 0)  # exact ceil division on Python ints
        check_allocation((count,), dtype, "Range output")
        return (first + np.arange(count, dtype=np.int64) * step).astype(dtype)
    span = (float(limit) - float(start)) / float(delta)
    if not math.isfinite(span):
        raise InvalidArgument(f"Range: start {start}, limit {limit} and delta {delta} give no finite length")
    count = max(math.ceil(span), 0)
    check_allocation((count,), dtype, "Range output")
    work = compute_dtype or dtype
    return (np.arange(count).astype(work) * delta.astype(work) + start.astype(work)).astype(dtype)


@kernel("Range", since=(11,), host_inputs=(0, 1, 2))
def range_11(start, limit, delta):
    return _range(start, limit, delta)


@kernel("Range", since=(27,), host_inputs=(0, 1, 2))
def range_27(start, limit, delta, *, stash_type):
    low_precision = start.dtype == np.float16 or start.dtype.name == "bfloat16"
    work = np_dtype(stash_type) if low_precision and stash_type else None
    return _range(start, limit, delta, work)


@kernel("EyeLike", since=(9, 22))
def eye_like(x, *, dtype=None, k):
    if x.ndim != 2:
        raise InvalidArgument(f"EyeLike: input must be 2-D, got shape {list(x.shape)}")
    out_dtype = x.dtype if dtype is None else np_dtype(dtype)
    check_allocation(x.shape, out_dtype, "EyeLike output")
    out = np.zeros(x.shape, dtype=out_dtype)
    rows = np.arange(max(0, -k), min(x.shape[0], x.shape[1] - k)) if x.size else np.arange(0)
    out[rows, rows + k] = 1
    return out


@kernel("Trilu", since=(14,), host_inputs=(1,))
def trilu(x, k=None, *, upper):
    if x.ndim < 2:
        raise InvalidArgument(f"Trilu: input must have rank >= 2, got shape {list(x.shape)}")
    k = 0 if k is None else int(_scalar(k, "Trilu", "k"))
    rows, cols = x.shape[-2:]
    # Clamp k so the mask arithmetic cannot overflow for huge values; the result is the same.
    k = min(max(k, -rows - 1), cols + 1)
    r = np.arange(rows)[:, None]
    c = np.arange(cols)[None, :]
    keep = (c - r >= k) if upper else (c - r <= k)
    return np.where(keep, x, np.zeros((), dtype=x.dtype) if x.dtype != object else "")


@kernel("Expand", since=(8, 13), host_inputs=(1,))
def expand(x, shape):
    requested = int_values(shape)
    try:
        dims = np.broadcast_shapes(x.shape, tuple(requested))
    except ValueError:
        raise InvalidArgument(f"Expand: input shape {list(x.shape)} cannot broadcast to {requested}") from None
    check_allocation(dims, x.dtype, "Expand output")
    return np.array(np.broadcast_to(x, dims))


@kernel("Tile", since=(1,), host_inputs=(1, 2))
def tile_1(x, tiles, axis):
    count = int(_scalar(tiles, "Tile", "tiles"))
    axis_value = int(_scalar(axis, "Tile", "axis"))
    repeats = [1] * x.ndim
    repeats[normalize_axes((axis_value,), x.ndim, "Tile", "axis")[0]] = count
    return _tile(x, repeats)


@kernel("Tile", since=(6, 13), host_inputs=(1,))
def tile_6(x, repeats):
    return _tile(x, int_values(repeats))


def _tile(x, repeats):
    if len(repeats) != x.ndim:
        raise InvalidArgument(f"Tile: {len(repeats)} repeats {repeats} for an input of rank {x.ndim}")
    if any(r < 0 for r in repeats):
        raise InvalidArgument(f"Tile: repeats {repeats} must not be negative")
    check_allocation([d * r for d, r in zip(x.shape, repeats)], x.dtype, "Tile output")
    return np.tile(x, repeats)


def _pad(x, pads, mode, value, axes=None):
    rank = x.ndim
    axes = list(range(rank)) if axes is None else list(normalize_axes(axes, rank, "Pad"))
    if len(pads) != 2 * len(axes):
        raise InvalidArgument(f"Pad: {len(pads)} pads {pads} for {len(axes)} axes (need twice as many)")
    before = [0] * rank
    after = [0] * rank
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + len(axes)]
    out_shape = [d + b + e for d, b, e in zip(x.shape, before, after)]
    if any(d < 0 for d in out_shape):
        raise InvalidArgument(f"Pad: pads {pads} crop input shape {list(x.shape)} below zero")
    check_allocation(out_shape, x.dtype, "Pad output")
    # Negative pads crop first; the rest is ordinary padding.
    crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for d, b, e in zip(x.shape, before, after))
    x = x[crop]
    widths = [(max(b, 0), max(e, 0)) for b, e in zip(before, after)]
    if not any(b or e for b, e in widths):
        return np.array(x)
    if mode == "constant":
        out = np.full(out_shape, value, dtype=x.dtype)
        out[tuple(slice(b, b + d) for (b, _), d in zip(widths, x.shape))] = x
        return out
    if mode not in ("reflect", "edge", "wrap"):
        raise InvalidArgument(f"Pad: mode {mode!r} is not constant, reflect, edge or wrap")
    for a, (b, e) in enumerate(widths):
        if (b or e) and x.shape[a] == 0:
            raise InvalidArgument(f"Pad: {mode} padding of axis {a}, which is empty")
        if mode == "reflect" and max(b, e) > x.shape[a] - 1:
            # Reflection cannot reach past the far edge; numpy would reflect again, ORT refuses.
            raise InvalidArgument(f"Pad: reflect pads {[b, e]} on axis {a} exceed its length {x.shape[a]} minus 1")
    return np.pad(x, widths, mode=mode)


def _pad_value(x, constant_value):
    if constant_value is None:
        return np.zeros((), dtype=x.dtype) if x.dtype != object else ""
    value = np.asarray(constant_value)
    if value.size != 1:
        raise InvalidArgument(f"Pad: constant_value must be a scalar, got shape {list(value.shape)}")
    return value.reshape(()).astype(x.dtype)


@kernel("Pad", since=(1,))
def pad_1(x, *, paddings, mode, value):
    return _pad(x, list(paddings), mode, np.asarray(value).astype(x.dtype))


@kernel("Pad", since=(2,))
def pad_2(x, *, pads, mode, value):
    return _pad(x, list(pads), mode, np.asarray(value).astype(x.dtype))


@kernel("Pad", since=(11, 13), host_inputs=(1,))
def pad_11(x, pads, constant_value=None, *, mode):
    return _pad(x, int_values(pads), mode, _pad_value(x, constant_value))


@kernel("Pad", since=(18, 19) + _LATEST, host_inputs=(1, 3))
def pad_18(x, pads, constant_value=None, axes=None, *, mode):
    return _pad(x, int_values(pads), mode, _pad_value(x, constant_value), None if axes is None else int_values(axes))


@kernel("CenterCropPad", since=(18,), host_inputs=(1,))
def center_crop_pad(x, shape, *, axes=None):
    axes = list(range(x.ndim)) if axes is None else list(normalize_axes(axes, x.ndim, "CenterCropPad"))
    target = int_values(shape)
    if len(target) != len(axes):
        raise InvalidArgument(f"CenterCropPad: shape {target} has {len(target)} values for {len(axes)} axes")
    if any(t < 0 for t in target):
        raise InvalidArgument(f"CenterCropPad: negative size in shape {target}")
    out_shape = list(x.shape)
    src = [slice(None)] * x.ndim
    dst = [slice(None)] * x.ndim
    for a, t in zip(axes, target):
        d = x.shape[a]
        out_shape[a] = t
        if d > t:  # crop, window start rounded down
            start = (d - t) // 2
            src[a] = slice(start, start + t)
        elif d < t:  # pad, the odd extra pixel goes to the end
            start = (t - d) // 2
            dst[a] = slice(start, start + d)
    check_allocation(out_shape, x.dtype, "CenterCropPad output")
    out = np.zeros(out_shape, dtype=x.dtype)
    out[tuple(dst)] = x[tuple(src)]
    return out
