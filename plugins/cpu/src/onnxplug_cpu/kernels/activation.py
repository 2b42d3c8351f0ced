"""Activations: Relu, Sigmoid, Tanh, Softmax family."""

from __future__ import annotations

import numpy as np

from ._registry import kernel


@kernel("Relu", since=(6, 13, 14))
def relu(x):
    return np.maximum(x, x.dtype.type(0))


@kernel("Sigmoid", since=(6, 13))
def sigmoid(x):
    # Split by sign so that exp never overflows.
    out = np.empty_like(x)
    positive = x >= 0
    out[positive] = 1 / (1 + np.exp(-x[positive]))
    exp_x = np.exp(x[~positive])
    out[~positive] = exp_x / (1 + exp_x)
    return out


@kernel("Tanh", since=(6, 13))
def tanh(x):
    return np.tanh(x)


def _softmax_along(x, axis):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    exp_x = np.exp(shifted)
    return exp_x / np.sum(exp_x, axis=axis, keepdims=True)


def _coerced_2d(x, axis, fn):
    """Opsets before 13 flatten to 2-D at ``axis`` and normalise each row."""
    axis = axis + x.ndim if axis < 0 else axis
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return fn(x.reshape(rows, -1), 1).reshape(x.shape)


@kernel("Softmax", since=(1, 11))
def softmax_1(x, *, axis):
    return _coerced_2d(x, axis, _softmax_along)


@kernel("Softmax", since=(13,))
def softmax_13(x, *, axis):
    return _softmax_along(x, axis)
