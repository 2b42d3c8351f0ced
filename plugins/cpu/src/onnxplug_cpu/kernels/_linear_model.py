"""Linear models' scores and outputs, with a single row computed in Python floats.

LinearClassifier and LinearRegressor are the models scikit-learn's converters write for linear
and logistic regression, and a served model is called with one row at a time.  For one row the
arithmetic is a handful of floats, and numpy's cost is its calls: each ufunc on a ``[1, 3]``
table costs about 0.6 µs on our machines, and the batch path's post-transform, argmax and casts
make a dozen of them (6 µs for a three-class softmax classifier against onnxruntime's 4.4 µs for
its whole ``run``).  The one-row path keeps the product in numpy (one float64 ``dot``) and does
the rest on the row as a list: bias, argmax, softmax or logistic, the L1 normalization.

:class:`LinearScores` may also carry a Scaler folded into its weights, and the classifier an L1
Normalizer on its probabilities: the CPU provider fuses ``Scaler → LinearClassifier →
Normalizer`` (what skl2onnx writes for ``make_pipeline(StandardScaler(), LogisticRegression())``)
into one step (:mod:`._linear_chain`).  Both stay in float64 until the outputs are rounded to
float32, so the fused results are as close as the three ops run one by one (within a unit in
the last place of float32; the tests compare them).
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._post_transforms import checked_post_transform, logistic, post_transform, probit, row_reduce, softmax

__all__ = [
    "LinearClassifierModel",
    "LinearRegressorModel",
    "LinearScores",
    "classifier_weights",
    "feature_rows",
    "regressor_weights",
]

#: Post-transforms the one-row path computes; the others (PROBIT, SOFTMAX_ZERO) take the batch path.
_ROW_TRANSFORMS = frozenset({"NONE", "LOGISTIC", "SOFTMAX"})


def classifier_weights(coefficients, intercepts, labels) -> tuple[np.ndarray, np.ndarray]:
    """LinearClassifier's ``[classes or 1, features]`` float64 weights and its bias, checked
    against the labels the way onnxruntime reads them (one score column for two labels)."""
    weights = np.asarray(coefficients, np.float64)
    bias = np.asarray(intercepts or (), np.float64)
    targets = bias.size if bias.size else max(len(labels), 1)
    if weights.size % targets:
        raise Fail(f"{weights.size} coefficients do not split into {targets} classes")
    if targets == 1 and len(labels) != 2:
        raise Fail(f"a single-score LinearClassifier needs exactly 2 class labels, got {len(labels)}")
    if targets != 1 and len(labels) != targets:
        raise Fail(f"{targets} score columns but {len(labels)} class labels")
    return weights.reshape(targets, -1), bias if bias.size else np.zeros(targets)


def regressor_weights(coefficients, intercepts, targets) -> tuple[np.ndarray, np.ndarray]:
    """LinearRegressor's ``[targets, features]`` float64 weights and bias, checked."""
    weights = np.asarray(coefficients or (), np.float64)
    if targets <= 0 or weights.size % targets:
        raise Fail(f"{weights.size} coefficients do not split into {targets} targets")
    bias = np.asarray(intercepts or (0.0,) * targets, np.float64)
    if bias.size != targets:
        raise Fail(f"{bias.size} intercepts for {targets} targets")
    return weights.reshape(targets, -1), bias


def feature_rows(x: np.ndarray, width: int, what: str, dtype=np.float64) -> np.ndarray:
    """``x`` as ``[N, width]`` features in ``dtype`` (a 1-D input is one row), or
    :class:`InvalidArgument` naming ``what`` expected them."""
    table = x.reshape(1, -1) if x.ndim == 1 else x
    if table.ndim != 2 or table.shape[1] != width:
        raise InvalidArgument(f"{what} expects [N, {width}] features, got shape {x.shape}")
    return table.astype(dtype)


class LinearScores:
    """``x @ weights.T + bias`` in float64, for ``[N, F]`` (or ``[F]``) features.

    ``offset`` and ``scale`` (one value, or one per feature) fold a Scaler, ``(x - offset) *
    scale``, into the weights and the bias: ``x @ (scale * W).T + (bias - (offset * scale) @
    W.T)``.  In float64 this loses nothing a float32 result would show, even for features far
    from zero: the inputs are float32 (or ints) and exact in float64.
    """

    def __init__(self, weights: np.ndarray, bias: np.ndarray, what: str, *, offset=None, scale=None) -> None:
        transposed = weights.T  # [features, targets]
        self.width = transposed.shape[0]
        self.what = what
        if scale is not None or offset is not None:
            factor = np.broadcast_to(np.asarray(1.0 if scale is None else scale, np.float64), (self.width,))
            shift = np.broadcast_to(np.asarray(0.0 if offset is None else offset, np.float64), (self.width,))
            bias = bias - (shift * factor) @ transposed
            transposed = factor[:, None] * transposed
        self.transposed = np.ascontiguousarray(transposed, np.float64)
        self.bias = np.ascontiguousarray(bias, np.float64)
        self._bias_list = self.bias.tolist()

    def table(self, x: np.ndarray) -> np.ndarray:
        """The ``[N, targets]`` float64 scores (a fresh array the caller may overwrite)."""
        scores = feature_rows(x, self.width, self.what) @ self.transposed
        scores += self.bias
        return scores

    def row(self, x: np.ndarray) -> list[float] | None:
        """The scores of a single row as floats; ``None`` when ``x`` is not one row of the
        right width (the batch path takes it, and raises for a wrong shape)."""
        shape = x.shape
        if shape == (1, self.width):
            x = x[0]
        elif shape != (self.width,):
            return None
        return [value + bias for value, bias in zip(np.dot(x, self.transposed).tolist(), self._bias_list)]


def _logistic(value: float) -> float:
    # numpy's 1 / (1 + exp(-x)) gives 0 where exp overflows; math.exp would raise there.
    return 1.0 / (1.0 + (math.inf if value < -709.0 else math.exp(-value)))


def _l1_rows(table: np.ndarray) -> np.ndarray:
    """Each row divided by its L1 norm, in place; an all-zero row stays zero (Normalizer)."""
    norm = row_reduce(np.add, np.abs(table))
    norm[norm == 0] = 1
    table /= norm
    return table


class LinearClassifierModel:
    """LinearClassifier's ``(labels, probabilities)``, optionally followed by an L1 Normalizer
    on the probabilities (``normalize``).

    The two-label, one-score-column case follows onnxruntime: the label is the second one when
    the raw score is positive, the probabilities ``[1 - s, s]`` after the post-transform.
    """

    def __init__(
        self, scores: LinearScores, labels: np.ndarray, post_transform: str, *, normalize: bool = False
    ) -> None:
        self.scores = scores
        self.labels = labels
        self.post_transform = checked_post_transform(post_transform)
        self.binary = scores.bias.size == 1
        # A softmax's probabilities, and a logistic's [1 - s, s], already sum to one: dividing
        # them by that sum again moves them by a few units in the last place of float64, which
        # the float32 results do not show.
        already_one = post_transform == ("LOGISTIC" if self.binary else "SOFTMAX")
        self.normalize = normalize and not already_one
        # Labels 0, 1, ... (what scikit-learn's converters write): the best class is its label.
        self._counting = labels.dtype == np.int64 and np.array_equal(labels, np.arange(len(labels)))
        self._row_path = post_transform in _ROW_TRANSFORMS

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._row_path:
            row = self.scores.row(x)
            # A NaN or an infinity (or a sum that overflows) takes the batch path, whose numpy
            # reductions give NaN its meaning there (the first NaN is the best class).
            if row is not None and math.isfinite(sum(row)):
                return self._one_row(row)
        return self._batch(x)

    def _one_row(self, row: list[float]) -> tuple[np.ndarray, np.ndarray]:
        transform = self.post_transform
        if self.binary:
            score = row[0]
            best = 1 if score > 0 else 0
            if transform == "LOGISTIC":
                score = _logistic(score)
            probabilities = [1.0 - score, score]
        else:
            top = max(row)
            best = row.index(top)
            if transform == "SOFTMAX":
                exps = [math.exp(value - top) for value in row]
                total = sum(exps)
                probabilities = [value / total for value in exps]
            elif transform == "LOGISTIC":
                probabilities = [_logistic(value) for value in row]
            else:
                probabilities = row
        if self.normalize:
            norm = sum(map(abs, probabilities))
            if norm:
                probabilities = [value / norm for value in probabilities]
        return self.labels[best : best + 1].copy(), np.array([probabilities], np.float32)

    def _batch(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        scores = self.scores.table(x)
        transform = self.post_transform
        if self.binary:
            s = scores[:, 0]
            label = self.labels[np.where(s > 0, 1, 0)]
            if transform == "PROBIT":
                out = probit(scores)
            else:
                s = logistic(s) if transform == "LOGISTIC" else s
                out = np.stack([1.0 - s, s], axis=1)
        else:
            best = scores.argmax(axis=1)
            label = best.astype(np.int64, copy=False) if self._counting else self.labels[best]
            # ``scores`` is this call's own table: the softmax may overwrite it.
            out = softmax(scores, in_place=True) if transform == "SOFTMAX" else post_transform(scores, transform)
        if self.normalize:
            out = _l1_rows(np.asarray(out, np.float64))  # every ``out`` above is this call's own
        return label, out.astype(np.float32, order="C")


class LinearRegressorModel:
    """LinearRegressor's float32 ``[N, targets]`` values."""

    def __init__(self, scores: LinearScores, post_transform: str) -> None:
        self.scores = scores
        self.post_transform = checked_post_transform(post_transform)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.post_transform == "NONE":
            row = self.scores.row(x)
            if row is not None:
                return np.array([row], np.float32)
        return post_transform(self.scores.table(x), self.post_transform).astype(np.float32)
