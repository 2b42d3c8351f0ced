"""Score post-transforms shared by the linear models, SVMs and tree ensembles, and the class labels.

ONNX describes some corner cases only loosely; these follow onnxruntime, whose behaviour converted
models (skl2onnx, onnxmltools) are validated against: the probit transform uses the Winitzki
approximation of ``erfinv``, like onnxruntime.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail

__all__ = [
    "POST_TRANSFORMS",
    "checked_post_transform",
    "class_labels",
    "logistic",
    "post_transform",
    "probit",
    "row_reduce",
    "softmax",
]

POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


#: Below this many columns a row reduction runs column by column (see :func:`row_reduce`).
_SHORT_ROWS = 8


def row_reduce(ufunc, table):
    """``ufunc.reduce`` over each row of a ``[N, C]`` table, as a ``[N, 1]`` column.

    Scores have a few columns (classes), and numpy reduces a short axis one row at a time:
    18 us for the sums of 1000 rows of 3, against 2.6 us column by column.  With fewer than 8
    columns numpy adds a row in order, left to right, so the column-by-column sums are the same
    bits; wider tables and small batches keep numpy's own reduction."""
    columns = table.shape[1]
    if table.shape[0] < 64 or not 1 < columns < _SHORT_ROWS:
        return ufunc.reduce(table, axis=1, keepdims=True)
    out = ufunc(table[:, 0], table[:, 1])
    for column in range(2, columns):
        ufunc(out, table[:, column], out=out)
    return out[:, None]


def softmax(scores, *, in_place=False):
    """Row-wise softmax; ``in_place`` overwrites ``scores`` (a table the caller made) instead of
    allocating two temporaries."""
    exp = np.subtract(scores, row_reduce(np.maximum, scores), out=scores if in_place else None)
    np.exp(exp, out=exp)
    exp /= row_reduce(np.add, exp)
    return exp


def logistic(x):
    return 1.0 / (1.0 + np.exp(-x))


def probit(x):
    """sqrt(2) * erfinv(2x - 1), with Winitzki's closed-form erfinv (a = 0.147)."""
    y = 2.0 * x - 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        log_term = np.log((1.0 - y) * (1.0 + y))
        first = 2.0 / (np.pi * 0.147) + 0.5 * log_term
        inverse = np.sign(y) * np.sqrt(-first + np.sqrt(first * first - log_term / 0.147))
    return np.sqrt(2.0) * np.where(y == 0, 0.0, inverse)


def softmax_zero(scores):
    """Softmax over the non-zero entries of each row; zeros stay zero, an all-zero row is 0.5."""
    nonzero = np.abs(scores) > 1e-7
    top = row_reduce(np.maximum, scores)
    exp = np.where(nonzero, np.exp(scores - top), 0.0)
    total = row_reduce(np.add, exp)
    return np.where(total == 0, 0.5, exp / np.where(total == 0, 1.0, total))


def post_transform(scores, name):
    """Apply a post_transform (given by name) row-wise to ``[N, C]`` float64 scores."""
    if name == "NONE":
        return scores
    if name == "LOGISTIC":
        return logistic(scores)
    if name == "SOFTMAX":
        return softmax(scores)
    if name == "SOFTMAX_ZERO":
        return softmax_zero(scores)
    if name == "PROBIT":
        return probit(scores)
    raise Fail(f"unknown post_transform {name!r}")


def checked_post_transform(name):
    """``name``, refused with :class:`Fail` when :func:`post_transform` does not know it (so that
    a model naming an unknown one fails when its session is created, not on its first run)."""
    if name not in POST_TRANSFORMS:
        raise Fail(f"unknown post_transform {name!r}")
    return name


def class_labels(ints, strings):
    """The class labels as an int64 or object array (strings win when both are set)."""
    if strings:
        labels = np.empty(len(strings), dtype=object)
        labels[:] = list(strings)
        return labels
    return np.asarray(ints or (), dtype=np.int64)
