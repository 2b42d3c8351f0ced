"""Reductions (ReduceSum ... ReduceSumSquare) and index reductions (ArgMax, ArgMin).

All reductions share one driver: axes come from the attribute (old versions) or the optional
second input (new versions); missing or empty axes reduce everything unless
``noop_with_empty_axes`` is set, in which case numpy's ``axis=()`` reduces nothing while the
composite steps (log, exp, square, abs, sqrt) still run, as the spec requires.  Reducing an empty
set gives the operation's identity: 0 for sums, 1 for products, -inf/+inf (or the type's
lowest/highest value) for max/min, -inf for the log-sums.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from onnxplug.errors import InvalidArgument

from . import _gemv
from ._registry import kernel
from ._split_rows import thread_budget
from ._team import team_joined
from .shape import int_values, normalize_axes, normalize_axis


def _extreme(dtype, lowest):
    if dtype == np.bool_:
        return np.bool_(not lowest)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if lowest else info.max
    return dtype.type(-np.inf if lowest else np.inf)


def _sum(x, axes, keepdims):
    if x.dtype == np.bool_:
        raise InvalidArgument("reduction of a boolean tensor by sum is not defined")
    fast = middle_sum(x, axes, keepdims)
    if fast is not None:
        return fast
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


#: The most slices :func:`middle_sum` adds one numpy call each, and the fewest values a slice
#: must hold for that to beat numpy's reduction.
_MIDDLE_MAX_SLICES = 64
_MIDDLE_MIN_INNER = 16


def middle_sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray | None:
    """The sum of a C-contiguous float ``x`` over consecutive axes that stop before its last
    (OCR's mean over a feature map's 3 rows: ``(1, 256, 3, 41)`` over axis 2), as the reduced
    block's slices added in order; ``None`` where that does not apply.  Why: numpy's reduction
    over a middle axis walks it in small steps, 28-40 µs there, against 11 for the slices.  numpy
    also adds a middle axis's values one slice after another, so the bits are the same."""
    if x.dtype.kind != "f" or not x.flags.c_contiguous or not axes:
        return None
    first, last = min(axes), max(axes)
    if len(axes) != last - first + 1 or last >= x.ndim - 1:
        return None
    count, inner = math.prod(x.shape[first : last + 1]), math.prod(x.shape[last + 1 :])
    if not 1 < count <= _MIDDLE_MAX_SLICES or inner < _MIDDLE_MIN_INNER:
        return None
    blocks = x.reshape(math.prod(x.shape[:first]), count, inner)
    total = blocks[:, 0].copy()
    for index in range(1, count):
        np.add(total, blocks[:, index], out=total)
    if keepdims:
        return total.reshape(tuple(1 if a in axes else n for a, n in enumerate(x.shape)))
    return total.reshape(tuple(n for a, n in enumerate(x.shape) if a not in axes))


#: Rows from which a float32 mean over trailing axes is a matrix-vector product with ones.
_ROW_MEAN_MIN_ROWS = 64
#: ... and the most values per row it sums that way (sequential sums; numpy's are pairwise).
_ROW_MEAN_MAX_COLUMNS = 4096


@functools.lru_cache(maxsize=16)
def _ones(count: int) -> np.ndarray:
    ones = np.ones(count, dtype=np.float32)
    ones.flags.writeable = False
    return ones


def trailing_mean(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray | None:
    """The mean of a C-contiguous float32 ``x`` over its trailing ``axes`` (a global average
    pool, a CNN head's ReduceMean over H and W) as ``x2d @ ones / n`` (BLAS's ``sgemv``; in a
    run on numba's team, ``kernels._gemv``'s rows split over it), or ``None`` where that does not
    apply.  Why: numpy reduces each row in a call of its own, about
    30 ns a row: 1280 channels of 7×7 took 100-150 µs (onnxruntime: 20)."""
    k = x.ndim - len(axes)
    trailing = len(axes) > 0 and k > 0 and tuple(sorted(axes)) == tuple(range(k, x.ndim))
    if x.dtype != np.float32 or not x.flags.c_contiguous or not trailing:
        return None
    rows, cols = math.prod(x.shape[:k]), math.prod(x.shape[k:])
    if rows < _ROW_MEAN_MIN_ROWS or not 0 < cols <= _ROW_MEAN_MAX_COLUMNS:
        return None
    matrix, ones = x.reshape(rows, cols), _ones(cols)
    parts = min(thread_budget(), rows // _ROW_MEAN_MIN_ROWS)
    mean = None
    if parts > 1 and team_joined():
        # In a run on numba's team, each thread sums the rows that the last convolution's
        # threads left in its own cache (one thread reading both halves: 1280 channels of 7×7,
        # 40-50 µs, against 7 once in cache), and divides them in the same call.
        mean = _gemv.row_means(matrix, ones, parts)
    if mean is None:
        sums = matrix @ ones
        mean = np.divide(sums, np.float32(cols), out=sums)
    return mean.reshape(x.shape[:k] + ((1,) * len(axes) if keepdims else ()))


def _mean(x, axes, keepdims):
    fast = trailing_mean(x, tuple(axes), keepdims)
    if fast is not None:
        return fast
    total = middle_sum(x, tuple(axes), keepdims)
    if total is not None:  # np.mean's own division: the float sum by the count, in its dtype
        return np.divide(total, x.dtype.type(math.prod(x.shape[a] for a in axes)), out=total)
    if x.dtype.kind in "iu":
        # Integer mean truncates toward zero, computed without a float round trip.
        count = math.prod(x.shape[a] for a in axes) if axes != () else 1
        total = np.sum(x, axis=axes, keepdims=keepdims, dtype=np.int64)
        if count == 0:
            return total.astype(x.dtype)
        quotient = np.abs(total) // count
        return np.where(total < 0, -quotient, quotient).astype(x.dtype)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.mean(x, axis=axes, keepdims=keepdims).astype(x.dtype)


def _max(x, axes, keepdims):
    return np.max(x, axis=axes, keepdims=keepdims, initial=_extreme(x.dtype, True))


def _min(x, axes, keepdims):
    return np.min(x, axis=axes, keepdims=keepdims, initial=_extreme(x.dtype, False))


def _prod(x, axes, keepdims):
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _l1(x, axes, keepdims):
    return _sum(np.abs(x), axes, keepdims)


def _l2(x, axes, keepdims):
    squares = _sum(np.square(x.astype(np.float64)) if x.dtype.kind in "iu" else np.square(x), axes, keepdims)
    return np.sqrt(squares).astype(x.dtype)


def _log_sum(x, axes, keepdims):
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(_sum(x, axes, keepdims)).astype(x.dtype)


def _log_sum_exp(x, axes, keepdims):
    peak = np.max(x, axis=axes, keepdims=True, initial=_extreme(x.dtype, True))
    # A slice of all -inf (or an empty one) has no finite peak to shift by; use 0 there.
    shift = np.where(np.isfinite(peak), peak, np.zeros((), dtype=peak.dtype))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        total = np.sum(np.exp(x - shift), axis=axes, keepdims=True)
        result = np.log(total) + shift
    if not keepdims:
        result = np.squeeze(result, axis=axes) if axes != () else result
    return result.astype(x.dtype)


def _sum_square(x, axes, keepdims):
    return _sum(np.square(x), axes, keepdims)


def _axes_to_reduce(x, axes, noop_with_empty_axes, op):
    if axes is None or len(axes) == 0:
        return () if noop_with_empty_axes else tuple(range(x.ndim))
    return normalize_axes(axes, x.ndim, op, "axes")


_WIDENED = (_sum, _mean, _prod, _l1, _l2, _log_sum, _log_sum_exp, _sum_square)


def _reduce(fn, op, x, axes, keepdims, noop_with_empty_axes):
    if not isinstance(x, np.ndarray):
        raise InvalidArgument(f"{op}: expected a tensor input")
    reduce_axes = _axes_to_reduce(x, axes, noop_with_empty_axes, op)
    if fn in _WIDENED and x.dtype.itemsize == 2 and x.dtype.kind not in "iu":
        # float16/bfloat16 accumulate in float32: summing in 16 bits loses digits quickly.
        return np.asarray(fn(x.astype(np.float32), reduce_axes, bool(keepdims))).astype(x.dtype)
    return np.asarray(fn(x, reduce_axes, bool(keepdims)))


def _register(op, fn, attr_versions, input_versions):
    """Register ``op`` with axes as an attribute at ``attr_versions`` and as input 1 after."""

    def with_attribute(x, *, axes=None, keepdims):
        return _reduce(fn, op, x, axes, keepdims, 0)

    def with_input(x, axes=None, *, keepdims, noop_with_empty_axes):
        return _reduce(fn, op, x, None if axes is None else int_values(axes), keepdims, noop_with_empty_axes)

    with_attribute.__qualname__ = with_attribute.__name__ = f"{op}_attribute_axes"
    with_input.__qualname__ = with_input.__name__ = f"{op}_input_axes"
    kernel(op, since=attr_versions)(with_attribute)
    kernel(op, since=input_versions, host_inputs=(1,))(with_input)


_register("ReduceSum", _sum, (1, 11), (13,))
_register("ReduceMean", _mean, (1, 11, 13), (18,))
_register("ReduceMax", _max, (1, 11, 12, 13), (18, 20))
_register("ReduceMin", _min, (1, 11, 12, 13), (18, 20))
_register("ReduceProd", _prod, (1, 11, 13), (18,))
_register("ReduceL1", _l1, (1, 11, 13), (18,))
_register("ReduceL2", _l2, (1, 11, 13), (18,))
_register("ReduceLogSum", _log_sum, (1, 11, 13), (18, 28))
_register("ReduceLogSumExp", _log_sum_exp, (1, 11, 13), (18, 28))
_register("ReduceSumSquare", _sum_square, (1, 11, 13), (18,))


def _arg_reduce(fn, op, x, axis, keepdims, select_last_index):
    axis = normalize_axis(axis, x.ndim, op)
    if x.shape[axis] == 0:
        raise InvalidArgument(f"{op}: axis {axis} of shape {list(x.shape)} is empty")
    if select_last_index:
        flipped = np.flip(x, axis=axis)
        index = x.shape[axis] - 1 - fn(flipped, axis=axis)
    else:
        index = fn(x, axis=axis)
    index = np.asarray(index).astype(np.int64)
    return np.expand_dims(index, axis) if keepdims else index


@kernel("ArgMax", since=(1, 11))
def argmax_1(x, *, axis, keepdims):
    return _arg_reduce(np.argmax, "ArgMax", x, axis, keepdims, 0)


@kernel("ArgMax", since=(12, 13))
def argmax_12(x, *, axis, keepdims, select_last_index):
    return _arg_reduce(np.argmax, "ArgMax", x, axis, keepdims, select_last_index)


@kernel("ArgMin", since=(1, 11))
def argmin_1(x, *, axis, keepdims):
    return _arg_reduce(np.argmin, "ArgMin", x, axis, keepdims, 0)


@kernel("ArgMin", since=(12, 13))
def argmin_12(x, *, axis, keepdims, select_last_index):
    return _arg_reduce(np.argmin, "ArgMin", x, axis, keepdims, select_last_index)
