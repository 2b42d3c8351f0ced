"""ai.onnx.ml linear models and SVMs: LinearClassifier, LinearRegressor, SVMClassifier, SVMRegressor.

ONNX describes the binary-classification corner cases only loosely; these kernels follow
onnxruntime, whose behaviour converted models (skl2onnx, onnxmltools) are validated against: one
score column with two class labels is expanded to two columns, ``[1 - s, s]`` (linear models) or
``[-s, s]`` (SVMs and trees with mixed-sign weights).  The linear models themselves, with their
one-row path, live in :mod:`._linear_model`; the post-transforms in :mod:`._post_transforms`.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail

from ._linear_model import (
    LinearClassifierModel,
    LinearRegressorModel,
    LinearScores,
    classifier_weights,
    feature_rows,
    regressor_weights,
)
from ._post_transforms import class_labels, logistic, probit
from ._post_transforms import post_transform as apply_post_transform
from ._registry import kernel

ML = "ai.onnx.ml"


# --- linear models ---------------------------------------------------------------------------


@kernel("LinearClassifier", since=(1,), domain=ML, factory=True)
def linear_classifier(
    ctx, *, coefficients, intercepts=None, classlabels_ints=None, classlabels_strings=None, multi_class, post_transform
):
    labels = class_labels(classlabels_ints, classlabels_strings)
    weights, bias = classifier_weights(coefficients, intercepts, labels)
    return LinearClassifierModel(LinearScores(weights, bias, "LinearClassifier"), labels, post_transform)


@kernel("LinearRegressor", since=(1,), domain=ML, factory=True)
def linear_regressor(ctx, *, coefficients=None, intercepts=None, post_transform, targets):
    weights, bias = regressor_weights(coefficients, intercepts, targets)
    return LinearRegressorModel(LinearScores(weights, bias, "LinearRegressor"), post_transform)


# --- SVMs ------------------------------------------------------------------------------------


def _kernel_function(kernel_type, kernel_params):
    """The kernel matrix in float32, the way onnxruntime computes it (so that near-zero pair
    scores, and the labels they decide, come out the same): a float32 GEMM
    ``gamma * x @ v.T + coef0`` then the power or tanh for POLY / SIGMOID; RBF sums the squared
    differences feature by feature in float32."""
    params = tuple(kernel_params or ()) + (0.0, 0.0, 0.0)
    gamma, coef0, degree = (np.float32(p) for p in params[:3])

    def apply(x, vectors):
        """Kernel matrix [N, V] (float32) between float32 samples and support vectors."""
        if kernel_type == "RBF":
            total = np.zeros((x.shape[0], vectors.shape[0]), np.float32)
            for feature in range(x.shape[1]):
                diff = x[:, feature, None] - vectors[None, :, feature]
                total += diff * diff
            return np.exp(-gamma * total)
        if kernel_type == "LINEAR":
            return x @ vectors.T
        if kernel_type not in ("POLY", "SIGMOID"):
            raise Fail(f"unknown kernel_type {kernel_type!r}")
        k = gamma * (x @ vectors.T) + coef0
        if kernel_type == "SIGMOID":
            return np.tanh(k)
        if degree == 2:
            return k * k
        if degree == 3:
            return k * k * k
        return np.power(k, degree)

    return apply


def _pair_probabilities(pair_scores, prob_a, prob_b, classes):
    """libsvm's pairwise coupling, iterated for all samples at once (converged rows freeze)."""
    n = pair_scores.shape[0]
    r = np.zeros((n, classes, classes))
    index = 0
    for i in range(classes):
        for j in range(i + 1, classes):
            p = logistic(-(pair_scores[:, index] * prob_a[index] + prob_b[index]))
            p = np.clip(p, 1e-7, 1 - 1e-7)
            r[:, i, j] = p
            r[:, j, i] = 1 - p
            index += 1
    q = -r.transpose(0, 2, 1) * r  # q[t, u] = -r[u, t] * r[t, u]
    diagonal = (r * r).sum(axis=1)  # sum over u != t of r[u, t]^2 (r[t, t] is 0)
    idx = np.arange(classes)
    q[:, idx, idx] = diagonal
    p = np.full((n, classes), 1.0 / classes)
    eps = 0.005 / classes
    active = np.ones(n, dtype=bool)
    for _ in range(max(100, classes)):
        qp = np.einsum("ntu,nu->nt", q, p)
        pqp = (p * qp).sum(axis=1)
        active &= np.abs(qp - pqp[:, None]).max(axis=1) >= eps
        if not active.any():
            break
        for t in range(classes):
            diff = np.where(active, (pqp - qp[:, t]) / q[:, t, t], 0.0)
            p[:, t] += diff
            pqp = (pqp + diff * (diff * q[:, t, t] + 2 * qp[:, t])) / (1 + diff) ** 2
            p /= (1 + diff)[:, None]
            qp = (qp + diff[:, None] * q[:, t, :]) / (1 + diff)[:, None]
    return p


@kernel("SVMClassifier", since=(1,), domain=ML, factory=True)
def svm_classifier(
    ctx,
    *,
    classlabels_ints=None,
    classlabels_strings=None,
    coefficients=None,
    kernel_params=None,
    kernel_type,
    post_transform,
    prob_a=None,
    prob_b=None,
    rho=None,
    support_vectors=None,
    vectors_per_class=None,
):
    labels = class_labels(classlabels_ints, classlabels_strings)
    classes = max(len(labels), 1)
    coefs = np.asarray(coefficients or (), np.float64)
    rhos = np.asarray(rho or (0.0,), np.float64)
    per_class = np.asarray(vectors_per_class or (), np.int64)
    n_vectors = int(per_class.sum()) if per_class.size else 0
    all_positive = bool(coefs.size) and coefs.min() >= 0
    use_proba = bool(prob_a) and n_vectors > 0
    if n_vectors > 0:
        if per_class.size != classes:
            raise Fail(f"vectors_per_class has {per_class.size} entries for {classes} classes")
        vectors = np.asarray(support_vectors or (), np.float32)
        if vectors.size % n_vectors:
            raise Fail(f"{vectors.size} support vector values do not split into {n_vectors} vectors")
        vectors = vectors.reshape(n_vectors, -1)
        if coefs.size % n_vectors:
            raise Fail(f"{coefs.size} coefficients do not split into rows of {n_vectors} support vectors")
        coefs = coefs.astype(np.float32).reshape(-1, n_vectors)
        if coefs.shape[0] < classes - 1:
            raise Fail(f"{coefs.shape[0]} coefficient rows for {classes} classes (one-vs-one needs {classes - 1})")
        starts = np.concatenate([[0], np.cumsum(per_class)[:-1]])
        pairs = [(i, j) for i in range(classes) for j in range(i + 1, classes)]
        if rhos.size < len(pairs):
            raise Fail(f"rho has {rhos.size} values for {len(pairs)} class pairs")
        kernel_of = _kernel_function(kernel_type, kernel_params)
        width = vectors.shape[1]
    else:
        if coefs.size == 0 or coefs.size % classes:
            raise Fail(f"{coefs.size} coefficients do not split into {classes} classes")
        coefs = coefs.reshape(classes, -1)
        kernel_of = _kernel_function("LINEAR", None)
        width = coefs.shape[1]

    def run(x):
        n = x.shape[0] if x.ndim > 1 else 1
        if n_vectors > 0:
            k = kernel_of(feature_rows(x, width, "SVMClassifier", np.float32), vectors)
            scores = np.empty((n, len(pairs)))
            votes = np.zeros((n, classes))
            rows = np.arange(n)
            for p, (i, j) in enumerate(pairs):
                si, sj = slice(starts[i], starts[i] + per_class[i]), slice(starts[j], starts[j] + per_class[j])
                # onnxruntime: float products, summed in double, then the score rounded to float.
                terms = np.concatenate([k[:, si] * coefs[j - 1, si], k[:, sj] * coefs[i, sj]], axis=1)
                s = (terms.astype(np.float64).sum(axis=1) + np.float64(np.float32(rhos[p]))).astype(np.float32)
                scores[:, p] = s
                winner = np.where(s > 0, i, j)
                np.add.at(votes, (rows, winner), 1)
            decision = votes
            if use_proba:
                scores = _pair_probabilities(scores, np.asarray(prob_a), np.asarray(prob_b or ()), classes)
        else:
            scores = rhos[0] + feature_rows(x, width, "SVMClassifier") @ coefs.T
            decision = scores
        best = decision.argmax(axis=1)
        label = labels[best] if len(labels) else best.astype(np.int64)
        if rhos.size == 1 and len(labels) == 2 and not use_proba:
            # onnxruntime's two-class labels: the best score decides between the second label
            # and the winner (votes in SVC mode, scores in linear mode).
            top = decision[np.arange(n), best]
            if all_positive:
                label = np.where(top >= 0.5, labels[1], labels[best])
            elif n_vectors == 0:
                label = np.where(top > 0, labels[1], labels[best])
        if scores.shape[1] == 1:
            s = scores[:, 0]
            if post_transform == "PROBIT":
                out = probit(scores)
            elif post_transform == "LOGISTIC":
                out = np.stack([logistic(-s), logistic(s)], axis=1)
            elif post_transform in ("SOFTMAX", "SOFTMAX_ZERO"):
                out = np.stack([1.0 - s, s], axis=1)  # onnxruntime's expansion; no softmax is applied
            else:
                out = np.stack([-s, s], axis=1)
        else:
            out = apply_post_transform(scores, post_transform)
        return label, out.astype(np.float32)

    return run


@kernel("SVMRegressor", since=(1,), domain=ML, factory=True)
def svm_regressor(
    ctx,
    *,
    coefficients=None,
    kernel_params=None,
    kernel_type,
    n_supports,
    one_class,
    post_transform,
    rho=None,
    support_vectors=None,
):
    coefs = np.asarray(coefficients or (), np.float64)
    bias = float((rho or (0.0,))[0])
    if n_supports > 0:
        vectors = np.asarray(support_vectors or (), np.float32)
        if vectors.size % n_supports or coefs.size < n_supports:
            raise Fail(f"{vectors.size} support vector values / {coefs.size} coefficients for {n_supports} supports")
        vectors = vectors.reshape(n_supports, -1)
        kernel_of = _kernel_function(kernel_type, kernel_params)
        width = vectors.shape[1]
    else:
        width = coefs.size

    def run(x):
        if n_supports > 0:
            # float32 kernels as onnxruntime computes them; onnxruntime then sums them in a float32
            # GEMM whose order cannot be reproduced, so the sum runs in float64 (the closer one).
            k = kernel_of(feature_rows(x, width, "SVMRegressor", np.float32), vectors)
            scores = k.astype(np.float64) @ coefs[:n_supports].astype(np.float32).astype(np.float64) + bias
        else:
            scores = feature_rows(x, width, "SVMRegressor") @ coefs + bias
        scores = scores[:, None]
        if one_class:
            scores = np.where(scores > 0, 1.0, -1.0)
        return apply_post_transform(scores, post_transform).astype(np.float32)

    return run
