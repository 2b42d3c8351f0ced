"""Order-based selection: TopK and Unique.

TopK's order is fully determined: values by the requested direction, equal values by ascending
index.  That needs a stable sort in both directions, which is why the largest-first path sorts the
reversed axis instead of negating values (negation breaks unsigned and boolean inputs, and the
most negative integer).
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument

from ._registry import kernel
from .shape import normalize_axis


def _top_k(x, k, axis, largest):
    axis = normalize_axis(axis, x.ndim, "TopK")
    k = np.asarray(k)
    if k.size != 1:
        raise InvalidArgument(f"TopK: K must hold one value, got shape {list(k.shape)}")
    k = int(k.reshape(()))
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise InvalidArgument(f"TopK: k {k} is out of range [0, {n}] for axis {axis} of shape {list(x.shape)}")
    if largest:
        # Stable ascending sort of the reversed axis, read backwards: descending values, and
        # among equal values the lower original index first.
        order = np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable")
        order = (n - 1) - np.flip(order, axis=axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    indices = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return np.take_along_axis(x, indices, axis=axis), indices


@kernel("TopK", since=(1,))
def top_k_1(x, *, axis, k):
    return _top_k(x, k, axis, True)


@kernel("TopK", since=(10,), host_inputs=(1,))
def top_k_10(x, k, *, axis):
    return _top_k(x, k, axis, True)


@kernel("TopK", since=(11, 24), host_inputs=(1,))
def top_k_11(x, k, *, axis, largest, sorted):  # noqa: A002 (the schema's name)
    # sorted=0 leaves the order unspecified; returning it sorted satisfies that too.
    return _top_k(x, k, axis, largest)


@kernel("Unique", since=(11, 28))
def unique(x, *, axis=None, sorted):  # noqa: A002 (the schema's name)
    if axis is None:
        data, axis_ = x.reshape(-1), None
    else:
        axis_ = normalize_axis(axis, x.ndim, "Unique")
        data = x
    if axis_ is not None and data.dtype == object:
        raise InvalidArgument("Unique: an axis is not supported for string tensors")
    values, first, inverse, counts = np.unique(
        data, return_index=True, return_inverse=True, return_counts=True, axis=axis_
    )
    inverse = inverse.reshape(-1)
    if not sorted:
        # Reorder the (sorted) uniques by first occurrence and relabel the inverse map.
        order = np.argsort(first, kind="stable")
        relabel = np.empty_like(order)
        relabel[order] = np.arange(order.size)
        values = np.take(values, order, axis=0 if axis_ is None else axis_)
        first, counts, inverse = first[order], counts[order], relabel[inverse]
    return (
        values,
        first.astype(np.int64),
        inverse.astype(np.int64),
        counts.astype(np.int64),
    )
