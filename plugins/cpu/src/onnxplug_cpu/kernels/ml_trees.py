"""ai.onnx.ml tree ensembles: TreeEnsembleRegressor, TreeEnsembleClassifier and TreeEnsemble.

The attributes are turned into a :class:`~.ml_forest.Forest` once per node; this module holds
the kernels and the classifier's label/score conventions (onnxruntime's, for compatibility with
converted models).
"""

from __future__ import annotations

import functools

import numpy as np

from onnxplug.errors import Fail

from ._forest_jit import compiled as compiled_forest_loops
from ._post_transforms import class_labels, logistic, probit, softmax
from ._post_transforms import post_transform as apply_post_transform
from ._registry import kernel
from .ml_forest import AGGREGATES, TRANSFORMS, Forest, leaf_table, legacy_forest, member_sets

ML = "ai.onnx.ml"


def _pick(as_tensor, values):
    """The double-precision ``*_as_tensor`` attribute (v3+) wins over the float list."""
    if as_tensor is not None:
        return tuple(np.asarray(as_tensor, np.float64).reshape(-1))
    return tuple(values or ())


def _score_dtype(as_tensors):
    return np.float64 if any(v is not None for v in as_tensors.values()) else np.float32


@kernel("TreeEnsembleRegressor", since=(1, 3, 5), domain=ML, factory=True)
def tree_ensemble_regressor(
    ctx,
    *,
    aggregate_function,
    post_transform,
    n_targets=None,
    base_values=None,
    nodes_treeids=None,
    nodes_nodeids=None,
    nodes_featureids=None,
    nodes_values=None,
    nodes_modes=None,
    nodes_truenodeids=None,
    nodes_falsenodeids=None,
    nodes_hitrates=None,
    nodes_missing_value_tracks_true=None,
    target_treeids=None,
    target_nodeids=None,
    target_ids=None,
    target_weights=None,
    **as_tensors,
):
    targets = int(n_targets or 1)
    dtype = _score_dtype(as_tensors)
    forest = legacy_forest(
        nodes_treeids=nodes_treeids or (),
        nodes_nodeids=nodes_nodeids or (),
        nodes_featureids=nodes_featureids or (),
        nodes_values=_pick(as_tensors.get("nodes_values_as_tensor"), nodes_values),
        nodes_modes=nodes_modes or (),
        nodes_truenodeids=nodes_truenodeids or (),
        nodes_falsenodeids=nodes_falsenodeids or (),
        nodes_missing_value_tracks_true=nodes_missing_value_tracks_true,
        w_treeids=target_treeids or (),
        w_nodeids=target_nodeids or (),
        w_ids=target_ids or (),
        w_weights=_pick(as_tensors.get("target_weights_as_tensor"), target_weights),
        targets=targets,
        dtype=dtype,
    )
    base = np.asarray(_pick(as_tensors.get("base_values_as_tensor"), base_values) or (0.0,) * targets, dtype)
    if base.size != targets:
        raise Fail(f"{base.size} base_values for {targets} targets")
    how = AGGREGATES.get(aggregate_function)
    if how is None or post_transform not in TRANSFORMS:
        raise Fail(f"unknown aggregate_function {aggregate_function!r} or post_transform {post_transform!r}")

    with_base = bool(base.any())  # a random forest's are zeros: no add, 0.6 µs of a single row's run

    def run(x):
        scores = forest.aggregate(x.reshape(1, -1) if x.ndim == 1 else x, how)
        if with_base:
            scores += base  # the forest's own fresh table
        if post_transform == "NONE":  # no float64 round trip: the same values
            return scores.astype(np.float32, copy=False)
        return apply_post_transform(scores.astype(np.float64), post_transform).astype(np.float32)

    return run


@kernel("TreeEnsembleClassifier", since=(1, 3, 5), domain=ML, factory=True)
def tree_ensemble_classifier(
    ctx,
    *,
    post_transform,
    base_values=None,
    classlabels_int64s=None,
    classlabels_strings=None,
    nodes_treeids=None,
    nodes_nodeids=None,
    nodes_featureids=None,
    nodes_values=None,
    nodes_modes=None,
    nodes_truenodeids=None,
    nodes_falsenodeids=None,
    nodes_hitrates=None,
    nodes_missing_value_tracks_true=None,
    class_treeids=None,
    class_nodeids=None,
    class_ids=None,
    class_weights=None,
    **as_tensors,
):
    labels = class_labels(classlabels_int64s, classlabels_strings)
    classes = len(labels)
    if classes < 1:
        raise Fail("TreeEnsembleClassifier needs class labels (classlabels_int64s or classlabels_strings)")
    weights = _pick(as_tensors.get("class_weights_as_tensor"), class_weights)
    dtype = _score_dtype(as_tensors)
    forest = legacy_forest(
        nodes_treeids=nodes_treeids or (),
        nodes_nodeids=nodes_nodeids or (),
        nodes_featureids=nodes_featureids or (),
        nodes_values=_pick(as_tensors.get("nodes_values_as_tensor"), nodes_values),
        nodes_modes=nodes_modes or (),
        nodes_truenodeids=nodes_truenodeids or (),
        nodes_falsenodeids=nodes_falsenodeids or (),
        nodes_missing_value_tracks_true=nodes_missing_value_tracks_true,
        w_treeids=class_treeids or (),
        w_nodeids=class_nodeids or (),
        w_ids=class_ids or (),
        w_weights=weights,
        targets=classes,
        dtype=dtype,
    )
    base = np.asarray(_pick(as_tensors.get("base_values_as_tensor"), base_values), dtype)
    if post_transform not in TRANSFORMS:
        raise Fail(f"unknown post_transform {post_transform!r}")
    finish = _multiclass if classes > 2 else _binary if classes == 2 else _single
    rules = {
        "labels": labels,
        "base": base,
        "post": post_transform,
        "binary_case": classes == 2 and len(set(class_ids or ())) == 1,
        "all_positive": all(w >= 0 for w in weights),
        "always_scored": bool(forest.always_scored.all()),
    }

    finish_scores = functools.partial(finish, **rules)  # keywords bound once, not per call
    loops = compiled_forest_loops()
    if finish is _multiclass and post_transform == "SOFTMAX" and rules["always_scored"] and loops is not None:
        finish_scores = functools.partial(_softmax_classes, loops.softmax_classes, labels, base)
        finish_scores(np.zeros((1, classes), dtype), None)  # compiled (or loaded from numba's cache) now

    def run(x):
        scores, present = forest.aggregate(x.reshape(1, -1) if x.ndim == 1 else x, 1, with_presence=True)
        label, out = finish_scores(scores, present)
        return label, out.astype(np.float32, copy=False)

    return run


def _multiclass(scores, present, *, labels, base, post, always_scored, **_):
    """Base values are added (and count as a score); the label is the best class that has a
    score; classes without any score are reported as 0."""
    if base.size:
        scores += base  # the forest's own fresh table
    if always_scored:  # every sample has a score for every class (``Forest.always_scored``)
        best = scores.argmax(axis=1)  # the method: np.argmax costs a single row 0.6 us more
        if post == "NONE":  # no float64 round trip: the same values
            return labels[best], scores
        wide = scores.astype(np.float64)
        return labels[best], softmax(wide, in_place=True) if post == "SOFTMAX" else apply_post_transform(wide, post)
    if base.size:
        present = present | (np.arange(scores.shape[1]) < base.size)
    best = np.where(present, scores, -np.inf).argmax(axis=1)
    values = np.where(present, scores, 0).astype(np.float64)
    return labels[best], apply_post_transform(values, post)


def _softmax_classes(loop, labels, base, scores, present):
    """:func:`_multiclass` for a softmax over classes every sample scores, in one compiled loop
    (``kernels._forest_loops.softmax_classes``): the same labels and probabilities, bit for bit
    (``plugins/cpu/tests/test_forest_walk.py`` compares them, NaN and all-``-inf`` rows too)."""
    best = np.empty(scores.shape[0], np.intp)
    probabilities = np.empty(scores.shape, np.float32)
    loop(scores, base, best, probabilities)
    return labels[best], probabilities


def _single(scores, present, *, labels, base, post, **_):
    """onnxruntime's one-class rules (scikit-learn forests fitted on a single class export so):

    * the score ``s`` is the sum of the reached leaves' weights, plus ``base[1]`` when there
      are two base values (the pair is then ``[-s, s]``) or ``base[0]`` when there is one;
    * the label is ``1`` when ``s > 0``, else ``0`` -- onnxruntime's default positive and
      negative labels, not the class label (with string labels, where onnxruntime would read
      past the one-entry list, the one label is returned);
    * the single probability column is ``s`` as it is (only PROBIT applies), or, with two base
      values, the first entry of the post-transformed pair.
    """
    s = scores[:, 0].astype(np.float64)
    if base.size == 2:
        s = s + base[1]
        out = apply_post_transform(np.stack([-s, s], axis=1), post)[:, :1]
    else:
        if base.size == 1:
            s = s + base[0]
        out = (probit(s) if post == "PROBIT" else s)[:, None]
    won = (s > 0).astype(np.int64)
    label = np.full(s.shape, labels[0], object) if labels.dtype == object else won
    return label, out


def _binary(scores, present, *, labels, base, post, binary_case, all_positive, **_):
    """onnxruntime's two-class rules (kept for compatibility with converted models):

    * two base values: if class 1 scored, its score becomes ``base[1] + score0`` and class 0's
      its negation; otherwise each class gets its own base value;
    * fewer base values: ``base[0]`` goes to class 0, and a sample where class 1 never scored
      has a single score ``s`` that is expanded to ``[1 - s, s]`` (non-negative weights of a
      single class) or ``[-s, s]`` (``LOGISTIC`` applies to each half);
    * the label is positive when the class-1 score (else class 0's) exceeds 0.5 (single class,
      non-negative weights) or 0;
    * when both class ids carry weights, the int64 label is ``1`` or ``0`` itself rather than
      ``labels[1]`` / ``labels[0]`` (string labels are indexed as usual).
    """
    s0, s1 = scores[:, 0].astype(np.float64), scores[:, 1].astype(np.float64)
    h0, h1 = present[:, 0], present[:, 1]
    expand = 3 if base.size == 0 else -1
    if base.size == 2:
        s1, s0 = np.where(h1, base[1] + s0, s1 + base[1]), np.where(h1, -(base[1] + s0), s0 + base[0])
        single = np.zeros_like(h1)
    else:
        if base.size == 1:
            s0 = s0 + base[0]
        single = ~h1
    positive = np.where(h1, s1, np.where(h0, s0, 0.0))
    if binary_case:
        expand = 0 if all_positive else 2
        won = positive > 0.5 if all_positive else positive > 0
        label = labels[won.astype(np.int64)]
    else:
        won = positive > 0
        # onnxruntime's default positive / negative labels: 1 and 0 themselves with int64 labels
        # (an index into the labels with string ones).
        label = labels[won.astype(np.int64)] if labels.dtype == object else won.astype(np.int64)
    pair = np.stack([np.where(h0, s0, 0.0), np.where(h1, s1, 0.0)], axis=1)
    out = apply_post_transform(pair, post)
    if single.any():
        s = s0[single]
        if post == "PROBIT":
            expanded = np.stack([probit(s), np.zeros_like(s)], axis=1)
        elif expand in (0, 1):
            s = logistic(s) if post == "LOGISTIC" else s
            expanded = np.stack([1.0 - s, s], axis=1)
        elif expand in (2, 3):
            expanded = np.stack([logistic(-s), logistic(s)] if post == "LOGISTIC" else [-s, s], axis=1)
        else:
            expanded = np.stack([s, np.zeros_like(s)], axis=1)
        out[single] = expanded
    return label, out


@kernel("TreeEnsemble", since=(5,), domain=ML, factory=True)
def tree_ensemble(
    ctx,
    *,
    aggregate_function,
    post_transform,
    tree_roots=None,
    nodes_featureids=None,
    nodes_splits=None,
    nodes_modes=None,
    nodes_truenodeids=None,
    nodes_trueleafs=None,
    nodes_falsenodeids=None,
    nodes_falseleafs=None,
    nodes_missing_value_tracks_true=None,
    nodes_hitrates=None,
    membership_values=None,
    leaf_targetids=None,
    leaf_weights=None,
    n_targets=None,
):
    if not 0 <= post_transform < len(TRANSFORMS) or aggregate_function not in (0, 1, 2, 3):
        raise Fail(f"unknown post_transform {post_transform} or aggregate_function {aggregate_function}")
    features = np.asarray(nodes_featureids or (), np.int64)
    count = features.size
    modes = np.asarray(nodes_modes if nodes_modes is not None else (), np.int64).reshape(-1)
    splits = np.asarray(nodes_splits if nodes_splits is not None else (), np.float64).reshape(-1)
    parts = [
        modes,
        splits,
        nodes_truenodeids or (),
        nodes_trueleafs or (),
        nodes_falsenodeids or (),
        nodes_falseleafs or (),
    ]
    if any(len(p) != count for p in parts):
        raise Fail("the nodes_* attributes have different lengths")

    def refs(ids, leafs):
        ids = np.asarray(ids, np.int64)
        return np.where(np.asarray(leafs, bool), -ids - 1, ids)

    weights = np.asarray(leaf_weights if leaf_weights is not None else (), np.float64).reshape(-1)
    target_ids = np.asarray(leaf_targetids or (), np.int64)
    if weights.size != target_ids.size:
        raise Fail(f"{weights.size} leaf_weights for {target_ids.size} leaf_targetids")
    targets = int(n_targets or 1)
    dtype = np.float64 if np.asarray(leaf_weights).dtype == np.float64 else np.float32
    values, has = leaf_table(np.arange(weights.size), target_ids, weights, weights.size, targets, dtype)
    sets, member_row = member_sets(membership_values, modes)
    missing = nodes_missing_value_tracks_true or (0,) * count
    if len(missing) != count:
        raise Fail(f"nodes_missing_value_tracks_true has {len(missing)} entries for {count} nodes")
    forest = Forest(
        feature=features,
        threshold=splits,
        mode=modes,
        missing_true=missing,
        true_next=refs(nodes_truenodeids or (), nodes_trueleafs or ()),
        false_next=refs(nodes_falsenodeids or (), nodes_falseleafs or ()),
        roots=np.asarray(tree_roots or (), np.int64),
        leaf_values=values,
        leaf_has=has,
        member_sets=sets,
        member_row=member_row,
    )
    transform = TRANSFORMS[post_transform]

    def run(x):
        scores = forest.aggregate(x.reshape(1, -1) if x.ndim == 1 else x, aggregate_function)
        return apply_post_transform(scores, transform).astype(x.dtype)

    return run
