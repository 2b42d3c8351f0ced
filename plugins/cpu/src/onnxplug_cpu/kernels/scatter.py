"""Writing by index: Scatter (deprecated), ScatterElements, ScatterND, TensorScatter.

Each kernel copies ``data`` and writes into the copy; inputs are never touched.  Reductions use
the ufuncs' unbuffered ``.at`` so repeated indices all contribute; with reduction "none" a
repeated index keeps the last update (the spec leaves that order undefined).
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument

from ._registry import kernel
from .indexing import checked_indices
from .shape import normalize_axis

_REDUCTIONS = {
    "add": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
}


def _write(out, index, updates, reduction, op):
    if reduction == "none":
        out[index] = updates
        return out
    ufunc = _REDUCTIONS.get(reduction)
    if ufunc is None:
        raise InvalidArgument(f"{op}: reduction {reduction!r} is not none, add, mul, max or min")
    if out.dtype == np.bool_ and ufunc in (np.add, np.multiply):
        # numpy has no bool add/mul loops for .at; for booleans they are or/and.
        ufunc = np.logical_or if ufunc is np.add else np.logical_and
    ufunc.at(out, index, updates)
    return out


def _scatter_elements(x, indices, updates, axis, reduction, op):
    axis = normalize_axis(axis, x.ndim, op)
    if indices.shape != updates.shape:
        raise InvalidArgument(
            f"{op}: indices shape {list(indices.shape)} differs from updates shape {list(updates.shape)}"
        )
    if indices.ndim != x.ndim:
        raise InvalidArgument(f"{op}: indices rank {indices.ndim} differs from data rank {x.ndim}")
    for d in range(x.ndim):
        if d != axis and indices.shape[d] > x.shape[d]:
            raise InvalidArgument(
                f"{op}: indices shape {list(indices.shape)} exceeds data shape {list(x.shape)} on axis {d}"
            )
    idx = checked_indices(indices, x.shape[axis], op, axis)
    # Every other coordinate is the element's own position in `indices`.
    grid = list(np.indices(indices.shape, sparse=True))
    grid[axis] = idx
    return _write(np.array(x), tuple(grid), updates.astype(x.dtype, copy=False), reduction, op)


@kernel("Scatter", since=(9, 11))
def scatter(x, indices, updates, *, axis):
    return _scatter_elements(x, indices, updates, axis, "none", "Scatter")


@kernel("ScatterElements", since=(11, 13))
def scatter_elements_11(x, indices, updates, *, axis):
    return _scatter_elements(x, indices, updates, axis, "none", "ScatterElements")


@kernel("ScatterElements", since=(16, 18))
def scatter_elements_16(x, indices, updates, *, axis, reduction):
    return _scatter_elements(x, indices, updates, axis, reduction, "ScatterElements")


def _scatter_nd(x, indices, updates, reduction):
    if indices.ndim < 1:
        raise InvalidArgument("ScatterND: indices must have rank >= 1")
    k = indices.shape[-1]
    if k > x.ndim:
        raise InvalidArgument(f"ScatterND: index tuples of length {k} for data of rank {x.ndim}")
    expected = indices.shape[:-1] + x.shape[k:]
    if updates.shape != expected:
        raise InvalidArgument(
            f"ScatterND: updates shape {list(updates.shape)} should be {list(expected)} "
            f"(indices {list(indices.shape)}, data {list(x.shape)})"
        )
    index = tuple(checked_indices(indices[..., j], x.shape[j], "ScatterND", j) for j in range(k))
    return _write(np.array(x), index, updates.astype(x.dtype, copy=False), reduction, "ScatterND")


@kernel("ScatterND", since=(11, 13))
def scatter_nd_11(x, indices, updates):
    return _scatter_nd(x, indices, updates, "none")


@kernel("ScatterND", since=(16, 18))
def scatter_nd_16(x, indices, updates, *, reduction):
    return _scatter_nd(x, indices, updates, reduction)


@kernel("TensorScatter", since=(24,))
def tensor_scatter(past_cache, update, write_indices=None, *, axis, mode):
    rank = past_cache.ndim
    axis = normalize_axis(axis, rank, "TensorScatter")
    if axis == 0:
        raise InvalidArgument("TensorScatter: axis must not be 0 (the batch axis)")
    if update.ndim != rank or any(u != p for d, (u, p) in enumerate(zip(update.shape, past_cache.shape)) if d != axis):
        raise InvalidArgument(
            f"TensorScatter: update shape {list(update.shape)} must match past_cache shape "
            f"{list(past_cache.shape)} outside axis {axis}"
        )
    batch, capacity, length = past_cache.shape[0], past_cache.shape[axis], update.shape[axis]
    if length > capacity:
        raise InvalidArgument(f"TensorScatter: update length {length} exceeds the cache length {capacity}")
    if write_indices is None:
        start = np.zeros(batch, dtype=np.int64)
    else:
        start = np.asarray(write_indices).astype(np.int64).reshape(-1)
        if start.size != batch:
            raise InvalidArgument(f"TensorScatter: {start.size} write_indices for a batch of {batch}")
    positions = start[:, None] + np.arange(length, dtype=np.int64)[None, :]  # (batch, length)
    if mode == "circular":
        positions = positions % capacity if capacity else positions
    elif mode == "linear":
        bad = (start < 0) | (start + length > capacity)
        if bad.any():
            b = int(np.flatnonzero(bad)[0])
            raise InvalidArgument(
                f"TensorScatter: write index {int(start[b])} for batch {b} is out of range "
                f"[0, {capacity - length}] (update length {length}, cache length {capacity})"
            )
    else:
        raise InvalidArgument(f"TensorScatter: mode {mode!r} is not linear or circular")
    out = np.array(past_cache)
    if length == 0:
        return out
    # View the sequence axis as axis 1 so one advanced index writes every batch row at once.
    target = np.moveaxis(out, axis, 1)
    source = np.moveaxis(update, axis, 1)
    target[np.arange(batch)[:, None], positions] = source
    return out
