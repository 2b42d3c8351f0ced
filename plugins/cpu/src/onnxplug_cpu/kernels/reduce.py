"""Reductions and index reductions: ArgMax, ArgMin."""

from __future__ import annotations

import numpy as np

from ._registry import kernel


def _arg_reduce(fn, x, axis, keepdims, select_last_index):
    if select_last_index:
        flipped = np.flip(x, axis=axis)
        index = x.shape[axis] - 1 - fn(flipped, axis=axis)
    else:
        index = fn(x, axis=axis)
    index = index.astype(np.int64)
    return np.expand_dims(index, axis) if keepdims else index


@kernel("ArgMax", since=(1, 11))
def argmax_1(x, *, axis, keepdims):
    return _arg_reduce(np.argmax, x, axis, keepdims, 0)


@kernel("ArgMax", since=(12, 13))
def argmax_12(x, *, axis, keepdims, select_last_index):
    return _arg_reduce(np.argmax, x, axis, keepdims, select_last_index)


@kernel("ArgMin", since=(1, 11))
def argmin_1(x, *, axis, keepdims):
    return _arg_reduce(np.argmin, x, axis, keepdims, 0)


@kernel("ArgMin", since=(12, 13))
def argmin_12(x, *, axis, keepdims, select_last_index):
    return _arg_reduce(np.argmin, x, axis, keepdims, select_last_index)
