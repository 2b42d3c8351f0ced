"""Reading by index: Slice, Gather, GatherElements, GatherND, Compress, NonZero, OneHot,
ReverseSequence.

Index values are checked against the dimension they address and a bad one raises
InvalidArgument naming it and the valid range: numpy would wrap negative values silently and
raise IndexError for the rest, and neither may reach the caller.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import check_allocation

from ._registry import kernel
from .shape import int_values, normalize_axes, normalize_axis


def checked_indices(indices, size, op, axis, *, negative=True, error=InvalidArgument):
    """``indices`` as int64 in ``[0, size)`` for an axis of length ``size``; negative values count
    from the back when allowed.

    :raises InvalidArgument: (or ``error``, where onnxruntime raises another class) a value
        outside ``[-size, size - 1]`` (or ``[0, size - 1]``), naming the first offending value,
        the axis and the valid range.
    """
    indices = np.asarray(indices)
    if indices.dtype.kind not in "iu":
        raise InvalidArgument(f"{op}: indices must be integers, got {indices.dtype}")
    indices = indices.astype(np.int64, copy=False)
    low = -size if negative else 0
    bad = (indices < low) | (indices >= size)
    if bad.any():
        value = int(indices[bad].reshape(-1)[0])
        raise error(f"{op}: index {value} on axis {axis} (length {size}) is out of range [{low}, {size - 1}]")
    return np.where(indices < 0, indices + size, indices) if negative else indices


def _slice(x, starts, ends, axes, steps):
    return x[_slice_index(x.shape, starts, ends, axes, steps)]


def _slice_index(shape, starts, ends, axes, steps):
    """The numpy index of a Slice of an input of ``shape`` (starts and ends clamped as ONNX
    says)."""
    rank = len(shape)
    if axes is None:
        axes = list(range(len(starts)))
    if steps is None:
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise InvalidArgument(f"Slice: starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    axes = normalize_axes(axes, rank, "Slice")
    index = [slice(None)] * rank
    for axis, start, end, step in zip(axes, starts, ends, steps):
        dim = shape[axis]
        if step == 0:
            raise InvalidArgument(f"Slice: step 0 on axis {axis}")
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start = min(max(start, 0), dim)
            end = min(max(end, 0), dim)
            index[axis] = slice(start, end, step)
        else:
            start = min(max(start, 0), dim - 1)
            end = min(max(end, -1), dim - 1)
            # end == -1 means "through index 0", which a Python slice spells as None.
            index[axis] = slice(start, None if end < 0 else end, step)
    return tuple(index)


@kernel("Slice", since=(1,))
def slice_1(x, *, starts, ends, axes=None):
    return _slice(x, list(starts), list(ends), None if axes is None else list(axes), None)


#: Input shapes whose index a Slice with constant parameters remembers.
_SLICE_SHAPES = 8


@kernel("Slice", since=(10, 11, 13), host_inputs=(1, 2, 3, 4), factory=True)
def slice_10(ctx):
    """Slice's call.  Constant starts, ends, axes and steps (every exported model's) are read
    once and the index they make is kept per input shape: a run then indexes alone (reading four
    small tensors again was ~3 µs a call, ShuffleNetV2's 26 channel splits a run)."""
    given = [ctx.constant(i) for i in range(1, ctx.num_inputs)]
    if ctx.num_inputs < 3 or any(value is None for value in given):
        return _slice_10
    starts, ends, *rest = (int_values(value) for value in given)
    axes = rest[0] if rest else None
    steps = rest[1] if len(rest) > 1 else None
    indices: dict[tuple[int, ...], tuple] = {}

    def run(x, *_):
        index = indices.get(x.shape)
        if index is None:
            index = _slice_index(x.shape, starts, ends, axes, steps)
            if len(indices) < _SLICE_SHAPES:
                indices[x.shape] = index
        return x[index]

    return run


def _slice_10(x, starts, ends, axes=None, steps=None):
    return _slice(
        x,
        int_values(starts),
        int_values(ends),
        None if axes is None else int_values(axes),
        None if steps is None else int_values(steps),
    )


@kernel("Gather", since=(1, 11, 13))
def gather(x, indices, *, axis):
    axis = normalize_axis(axis, x.ndim, "Gather")
    indices = checked_indices(indices, x.shape[axis], "Gather", axis)
    return np.take(x, indices, axis=axis)


@kernel("GatherElements", since=(11, 13))
def gather_elements(x, indices, *, axis):
    axis = normalize_axis(axis, x.ndim, "GatherElements")
    if indices.ndim != x.ndim:
        raise InvalidArgument(f"GatherElements: indices rank {indices.ndim} differs from data rank {x.ndim}")
    for d in range(x.ndim):
        if d != axis and indices.shape[d] > x.shape[d]:
            raise InvalidArgument(
                f"GatherElements: indices shape {list(indices.shape)} exceeds data shape {list(x.shape)} on axis {d}"
            )
    indices = checked_indices(indices, x.shape[axis], "GatherElements", axis, error=Fail)
    # Indices may be smaller than data outside `axis`; only that corner of data is read.
    corner = tuple(slice(None) if d == axis else slice(0, indices.shape[d]) for d in range(x.ndim))
    return np.take_along_axis(x[corner], indices, axis=axis)


def _gather_nd(x, indices, batch_dims):
    if indices.ndim < 1:
        raise InvalidArgument("GatherND: indices must have rank >= 1")
    k = indices.shape[-1]
    b = batch_dims
    if not 0 <= b < min(x.ndim, indices.ndim):
        raise InvalidArgument(f"GatherND: batch_dims {b} must be below the ranks of data and indices")
    if x.shape[:b] != indices.shape[:b]:
        raise InvalidArgument(
            f"GatherND: batch dimensions of data {list(x.shape[:b])} and indices {list(indices.shape[:b])} differ"
        )
    if k > x.ndim - b:
        raise InvalidArgument(
            f"GatherND: index tuples of length {k} address more than the {x.ndim - b} non-batch axes of data"
        )
    batch = math.prod(x.shape[:b])
    count = math.prod(indices.shape[b:-1])
    data = x.reshape((batch,) + x.shape[b:])
    idx = indices.reshape(batch, count, k)
    coords = tuple(checked_indices(idx[..., j], x.shape[b + j], "GatherND", b + j) for j in range(k))
    rows = np.arange(batch).reshape(batch, 1)
    out = data[(rows,) + coords]
    if k == 0:  # empty index tuples select whole slices, once per tuple
        out = np.repeat(out, count, axis=1)
    return out.reshape(indices.shape[:-1] + x.shape[b + k :])


@kernel("GatherND", since=(11,))
def gather_nd_11(x, indices):
    return _gather_nd(x, indices, 0)


@kernel("GatherND", since=(12, 13))
def gather_nd_12(x, indices, *, batch_dims):
    return _gather_nd(x, indices, batch_dims)


@kernel("Compress", since=(9, 11, 28))
def compress(x, condition, *, axis=None):
    condition = np.asarray(condition).reshape(-1).astype(bool)
    if axis is None:
        data, axis_ = x.reshape(-1), 0
    else:
        data, axis_ = x, normalize_axis(axis, x.ndim, "Compress")
    if condition.size > data.shape[axis_]:
        raise InvalidArgument(
            f"Compress: condition has {condition.size} entries for an axis of length {data.shape[axis_]}"
        )
    # A shorter condition selects among the leading slices only, as numpy.compress does.
    return np.compress(condition, data, axis=axis_)


@kernel("NonZero", since=(9, 13))
def non_zero(x):
    x = x.reshape(1) if x.ndim == 0 else x
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@kernel("OneHot", since=(9, 11, 28), host_inputs=(1,))
def one_hot(indices, depth, values, *, axis):
    depth = np.asarray(depth)
    if depth.size != 1:
        raise InvalidArgument(f"OneHot: depth must be a scalar, got shape {list(depth.shape)}")
    depth = int(depth.reshape(()))
    if depth < 1:
        raise InvalidArgument(f"OneHot: depth {depth} must be positive")
    values = np.asarray(values)
    if values.size != 2:
        raise InvalidArgument(f"OneHot: values must hold [off_value, on_value], got shape {list(values.shape)}")
    values = values.reshape(2)
    rank = indices.ndim + 1
    if not -rank <= axis < rank:
        raise InvalidArgument(f"OneHot: axis {axis} is out of range [{-rank}, {rank - 1}]")
    axis = axis + rank if axis < 0 else axis
    out_shape = indices.shape[:axis] + (depth,) + indices.shape[axis:]
    check_allocation(out_shape, values.dtype, "OneHot output")
    check_allocation((depth,), np.int64, "OneHot depth")  # the positions compared against
    # Float indices truncate; negatives count from the back; anything else out of range
    # selects nothing (all off_value), as the spec says.
    idx = np.trunc(indices).astype(np.int64) if indices.dtype.kind == "f" else indices.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    positions = np.arange(depth, dtype=np.int64).reshape((depth,) + (1,) * (rank - 1 - axis))
    hot = np.expand_dims(idx, axis) == positions
    return np.where(hot, values[1], values[0])


@kernel("ReverseSequence", since=(10, 28))
def reverse_sequence(x, sequence_lens, *, batch_axis, time_axis):
    if x.ndim < 2:
        raise InvalidArgument(f"ReverseSequence: input must have rank >= 2, got shape {list(x.shape)}")
    if {batch_axis, time_axis} != {0, 1}:
        raise InvalidArgument(f"ReverseSequence: batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1")
    batch, steps = x.shape[batch_axis], x.shape[time_axis]
    lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
    if lens.size != batch:
        raise InvalidArgument(f"ReverseSequence: {lens.size} sequence_lens for a batch of {batch}")
    bad = (lens < 0) | (lens > steps)
    if bad.any():
        raise InvalidArgument(f"ReverseSequence: sequence length {int(lens[bad][0])} is out of range [0, {steps}]")
    t = np.arange(steps).reshape(1, steps)
    ln = lens.reshape(batch, 1)
    source = np.where(t < ln, ln - 1 - t, t)  # (batch, time)
    if time_axis == 0:
        source = source.T
    source = source.reshape(source.shape + (1,) * (x.ndim - 2))
    return np.take_along_axis(x, np.broadcast_to(source, x.shape), axis=time_axis)
