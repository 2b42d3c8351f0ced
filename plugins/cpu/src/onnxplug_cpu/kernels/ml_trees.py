"""ai.onnx.ml tree ensembles: TreeEnsembleRegressor, TreeEnsembleClassifier and TreeEnsemble.

All three are converted once, when the session is created, into one flat :class:`Forest`
(interior nodes as parallel arrays, leaves as a ``[leaves, targets]`` weight matrix).  Evaluation
walks every (sample, tree) pair one level per step, so the Python loop runs over tree depth only.
"""

from __future__ import annotations

import numpy as np
from onnxplug.errors import Fail, InvalidArgument

from ._registry import kernel
from .ml_linear import class_labels, logistic, probit
from .ml_linear import post_transform as apply_post_transform

ML = "ai.onnx.ml"
MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5,
         "BRANCH_MEMBER": 6}
AGGREGATES = {"AVERAGE": 0, "SUM": 1, "MIN": 2, "MAX": 3}
TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


_COMPARISONS = (np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal)


class Forest:
    """A tree ensemble in evaluation form.

    ``true_next``/``false_next``/``roots`` hold an interior node index (>= 0) or a leaf as
    ``-(leaf + 1)``.  Membership sets are a NaN-padded ``[sets, width]`` matrix; ``member_row``
    gives each interior node's set (or -1).
    """

    def __init__(self, *, feature, threshold, mode, missing_true, true_next, false_next, roots,
                 leaf_values, leaf_has, member_sets=None, member_row=None):
        self.feature = np.asarray(feature, np.int64)
        self.threshold = np.asarray(threshold, np.float64)
        self.mode = np.asarray(mode, np.int64)
        self.missing_true = np.asarray(missing_true, bool)
        self.true_next = np.asarray(true_next, np.int64)
        self.false_next = np.asarray(false_next, np.int64)
        self.roots = np.asarray(roots, np.int64)
        self.leaf_values = leaf_values
        self.leaf_has = leaf_has
        self.member_sets = member_sets
        self.member_row = member_row
        nodes, leaves = len(self.feature), len(leaf_values)
        for name, ref in (("true", self.true_next), ("false", self.false_next), ("root", self.roots)):
            if ref.size and (ref.max() >= nodes or ref.min() < -leaves):
                raise Fail(f"a tree's {name} branch points outside the {nodes} nodes / {leaves} leaves")
        if (self.mode < 0).any() or (self.mode > 6).any():
            raise Fail("unknown node mode")
        if self.feature.size and self.feature.min() < 0:
            raise Fail(f"negative feature id {int(self.feature.min())}")
        self.modes_used = tuple(int(m) for m in np.unique(self.mode))
        self.single_mode = self.modes_used[0] if len(self.modes_used) == 1 else None
        self.any_missing_true = bool(self.missing_true.any())
        if 6 in self.modes_used and member_sets is None:
            raise Fail("BRANCH_MEMBER nodes need membership_values")

    def _compare(self, node, v):
        """Whether each (node, value) pair takes the true branch."""
        t = self.threshold[node]
        if self.single_mode is not None and self.single_mode < 6:
            return _COMPARISONS[self.single_mode](v, t)
        mode = self.mode[node]
        go_true = np.zeros(node.shape, bool)
        for code in self.modes_used:
            chosen = mode == code
            if code == 6:
                sets = self.member_sets[self.member_row[node[chosen]]]
                go_true[chosen] = (sets == v[chosen][:, None]).any(axis=1)
            else:
                go_true[chosen] = _COMPARISONS[code](v[chosen], t[chosen])
        return go_true

    def leaves(self, x):
        """The leaf reached by every sample in every tree, ``[N, trees]``."""
        if x.ndim != 2:
            raise InvalidArgument(f"tree ensembles expect [N, F] input, got shape {x.shape}")
        if self.feature.size and self.feature.max() >= x.shape[1]:
            raise InvalidArgument(f"feature id {int(self.feature.max())} is out of range for {x.shape[1]} features")
        width = x.shape[1]
        values = x.astype(np.float64).reshape(-1)
        current = np.broadcast_to(self.roots, (x.shape[0], self.roots.size)).copy()
        flat = current.reshape(-1)
        row_of = np.repeat(np.arange(x.shape[0]) * width, self.roots.size)
        active = np.nonzero(flat >= 0)[0]
        for _ in range(len(self.feature) + 1):
            if active.size == 0:
                return -current - 1
            node = flat[active]
            v = values[row_of[active] + self.feature[node]]
            go_true = self._compare(node, v)
            if self.any_missing_true:
                go_true |= self.missing_true[node] & np.isnan(v)
            step = np.where(go_true, self.true_next[node], self.false_next[node])
            flat[active] = step
            active = active[step >= 0]  # entries that reached a leaf drop out
        raise Fail("tree ensemble has a cycle")

    def aggregate(self, x, how, with_presence=False):
        """Per-target aggregation over trees of the reached leaves' weights, ``[N, targets]``,
        in the leaf weights' precision; with ``with_presence`` also whether any reached leaf
        has a weight for the target (onnxruntime's ``has_score``).

        Samples go through in blocks so that the ``[block, trees]`` leaf table stays small, and
        trees are accumulated one at a time (in order, like onnxruntime) so that no
        ``[N, trees, targets]`` array is ever built.
        """
        if how not in (0, 1, 2, 3):
            raise Fail(f"unknown aggregate_function {how}")
        n, targets = x.shape[0], self.leaf_values.shape[1]
        result = np.zeros((n, targets), self.leaf_values.dtype)
        present = np.zeros((n, targets), bool)
        block = max(1, (1 << 22) // max(self.roots.size, 1))
        for start in range(0, n, block):
            leaves = self.leaves(x[start:start + block])
            out = result[start:start + block]
            seen = present[start:start + block]
            for tree in range(leaves.shape[1]):
                weights = self.leaf_values[leaves[:, tree]]
                has = self.leaf_has[leaves[:, tree]]
                if how in (0, 1):
                    out += weights
                elif how == 2:
                    out[...] = np.where(has & (~seen | (weights < out)), weights, out)
                else:
                    out[...] = np.where(has & (~seen | (weights > out)), weights, out)
                seen |= has
        if how == 0:
            result /= result.dtype.type(max(self.roots.size, 1))
        return (result, present) if with_presence else result


def _leaf_table(leaf_ids, target_ids, weights, leaves, targets, dtype=np.float32):
    """Leaf weights as ``[leaves, targets]``; sums run in ``dtype``, like onnxruntime, which
    accumulates in the threshold type (float unless double tensors are given)."""
    values = np.zeros((leaves, targets), dtype)
    has = np.zeros((leaves, targets), bool)
    target_ids = np.asarray(target_ids, np.int64)
    if target_ids.size and (target_ids.min() < 0 or target_ids.max() >= targets):
        raise Fail(f"target/class id {int(target_ids.max())} is out of range for {targets} targets")
    np.add.at(values, (leaf_ids, target_ids), np.asarray(weights, np.float64).astype(dtype))
    has[leaf_ids, target_ids] = True
    return values, has


def _legacy_forest(*, nodes_treeids, nodes_nodeids, nodes_featureids, nodes_values, nodes_modes, nodes_truenodeids,
                   nodes_falsenodeids, nodes_missing_value_tracks_true, w_treeids, w_nodeids, w_ids, w_weights, targets,
                   dtype=np.float32):
    """Build a Forest from the (treeid, nodeid)-keyed attributes of the pre-v5 ops."""
    count = len(nodes_nodeids)
    lengths = {len(a) for a in (nodes_treeids, nodes_featureids, nodes_values, nodes_modes, nodes_truenodeids,
                                nodes_falsenodeids)}
    if lengths != {count}:
        raise Fail("the nodes_* attributes have different lengths")
    modes = [MODES.get(m, -1) if m != "LEAF" else 7 for m in nodes_modes]
    if -1 in modes:
        raise Fail(f"unknown node mode in {sorted(set(nodes_modes))}")
    keys = list(zip(nodes_treeids, nodes_nodeids))
    if len(set(keys)) != count:
        raise Fail("duplicate (treeid, nodeid) pairs")
    is_leaf = np.array([m == 7 for m in modes], bool)
    interior_index = np.cumsum(~is_leaf) - 1
    leaf_index = np.cumsum(is_leaf) - 1
    position = {key: i for i, key in enumerate(keys)}

    def ref(i):
        return int(interior_index[i]) if not is_leaf[i] else -int(leaf_index[i]) - 1

    def child(tree, node_id):
        if (tree, node_id) not in position:
            raise Fail(f"tree {tree} references missing node {node_id}")
        return ref(position[(tree, node_id)])

    interior = np.nonzero(~is_leaf)[0]
    true_next = [child(nodes_treeids[i], nodes_truenodeids[i]) for i in interior]
    false_next = [child(nodes_treeids[i], nodes_falsenodeids[i]) for i in interior]
    # A tree's root is the node of that tree no other node points to (normally node id 0).
    children = {(nodes_treeids[i], nodes_truenodeids[i]) for i in interior}
    children |= {(nodes_treeids[i], nodes_falsenodeids[i]) for i in interior}
    roots, seen = [], set()
    for i, key in enumerate(keys):
        if key[0] not in seen and key not in children:
            seen.add(key[0])
            roots.append(ref(i))
    missing = list(nodes_missing_value_tracks_true or ()) or [0] * count
    leaf_of = []
    for tree, node in zip(w_treeids, w_nodeids):
        i = position.get((tree, node))
        if i is None or not is_leaf[i]:
            raise Fail(f"weight for ({tree}, {node}) does not point to a leaf")
        leaf_of.append(int(leaf_index[i]))
    values, has = _leaf_table(np.asarray(leaf_of, np.int64), w_ids, w_weights, int(is_leaf.sum()), targets, dtype)
    return Forest(
        feature=np.asarray(nodes_featureids, np.int64)[interior],
        threshold=np.asarray(nodes_values, np.float64)[interior],
        mode=np.asarray(modes)[interior],
        missing_true=np.asarray(missing, bool)[interior],
        true_next=true_next, false_next=false_next, roots=roots, leaf_values=values, leaf_has=has,
    )


def _pick(as_tensor, values):
    """The double-precision ``*_as_tensor`` attribute (v3+) wins over the float list."""
    if as_tensor is not None:
        return tuple(np.asarray(as_tensor, np.float64).reshape(-1))
    return tuple(values or ())


def _score_dtype(as_tensors):
    return np.float64 if any(v is not None for v in as_tensors.values()) else np.float32


@kernel("TreeEnsembleRegressor", since=(1, 3, 5), domain=ML, factory=True)
def tree_ensemble_regressor(ctx, *, aggregate_function, post_transform, n_targets=None, base_values=None,
                            nodes_treeids=None, nodes_nodeids=None, nodes_featureids=None, nodes_values=None,
                            nodes_modes=None, nodes_truenodeids=None, nodes_falsenodeids=None, nodes_hitrates=None,
                            nodes_missing_value_tracks_true=None, target_treeids=None, target_nodeids=None,
                            target_ids=None, target_weights=None, **as_tensors):
    targets = int(n_targets or 1)
    dtype = _score_dtype(as_tensors)
    forest = _legacy_forest(
        nodes_treeids=nodes_treeids or (), nodes_nodeids=nodes_nodeids or (), nodes_featureids=nodes_featureids or (),
        nodes_values=_pick(as_tensors.get("nodes_values_as_tensor"), nodes_values), nodes_modes=nodes_modes or (),
        nodes_truenodeids=nodes_truenodeids or (), nodes_falsenodeids=nodes_falsenodeids or (),
        nodes_missing_value_tracks_true=nodes_missing_value_tracks_true, w_treeids=target_treeids or (),
        w_nodeids=target_nodeids or (), w_ids=target_ids or (),
        w_weights=_pick(as_tensors.get("target_weights_as_tensor"), target_weights), targets=targets, dtype=dtype)
    base = np.asarray(_pick(as_tensors.get("base_values_as_tensor"), base_values) or (0.0,) * targets, dtype)
    how = AGGREGATES.get(aggregate_function)
    if how is None or post_transform not in TRANSFORMS:
        raise Fail(f"unknown aggregate_function {aggregate_function!r} or post_transform {post_transform!r}")

    def run(x):
        scores = forest.aggregate(x.reshape(1, -1) if x.ndim == 1 else x, how) + base
        return apply_post_transform(scores.astype(np.float64), post_transform).astype(np.float32)

    return run


@kernel("TreeEnsembleClassifier", since=(1, 3, 5), domain=ML, factory=True)
def tree_ensemble_classifier(ctx, *, post_transform, base_values=None, classlabels_int64s=None,
                             classlabels_strings=None, nodes_treeids=None, nodes_nodeids=None, nodes_featureids=None,
                             nodes_values=None, nodes_modes=None, nodes_truenodeids=None, nodes_falsenodeids=None,
                             nodes_hitrates=None, nodes_missing_value_tracks_true=None, class_treeids=None,
                             class_nodeids=None, class_ids=None, class_weights=None, **as_tensors):
    labels = class_labels(classlabels_int64s, classlabels_strings)
    classes = len(labels)
    if classes < 2:
        raise Fail(f"TreeEnsembleClassifier needs at least 2 class labels, got {classes}")
    weights = _pick(as_tensors.get("class_weights_as_tensor"), class_weights)
    dtype = _score_dtype(as_tensors)
    forest = _legacy_forest(
        nodes_treeids=nodes_treeids or (), nodes_nodeids=nodes_nodeids or (), nodes_featureids=nodes_featureids or (),
        nodes_values=_pick(as_tensors.get("nodes_values_as_tensor"), nodes_values), nodes_modes=nodes_modes or (),
        nodes_truenodeids=nodes_truenodeids or (), nodes_falsenodeids=nodes_falsenodeids or (),
        nodes_missing_value_tracks_true=nodes_missing_value_tracks_true, w_treeids=class_treeids or (),
        w_nodeids=class_nodeids or (), w_ids=class_ids or (), w_weights=weights, targets=classes, dtype=dtype)
    base = np.asarray(_pick(as_tensors.get("base_values_as_tensor"), base_values), dtype)
    if post_transform not in TRANSFORMS:
        raise Fail(f"unknown post_transform {post_transform!r}")
    finish = _multiclass if classes > 2 else _binary
    rules = {
        "labels": labels, "base": base, "post": post_transform,
        "binary_case": classes == 2 and len(set(class_ids or ())) == 1,
        "all_positive": all(w >= 0 for w in weights),
    }

    def run(x):
        scores, present = forest.aggregate(x.reshape(1, -1) if x.ndim == 1 else x, 1, with_presence=True)
        label, out = finish(scores, present, **rules)
        return label, out.astype(np.float32)

    return run


def _multiclass(scores, present, *, labels, base, post, **_):
    """Base values are added (and count as a score); the label is the best class that has a
    score; classes without any score are reported as 0."""
    if base.size:
        scores = scores + base
        present = present | (np.arange(scores.shape[1]) < base.size)
    best = np.argmax(np.where(present, scores, -np.inf), axis=1)
    values = np.where(present, scores, 0).astype(np.float64)
    return labels[best], apply_post_transform(values, post)


def _binary(scores, present, *, labels, base, post, binary_case, all_positive):
    """onnxruntime's two-class rules (kept for compatibility with converted models):

    * two base values: if class 1 scored, its score becomes ``base[1] + score0`` and class 0's
      its negation; otherwise each class gets its own base value;
    * fewer base values: ``base[0]`` goes to class 0, and a sample where class 1 never scored
      has a single score ``s`` that is expanded to ``[1 - s, s]`` (non-negative weights of a
      single class) or ``[-s, s]`` (``LOGISTIC`` applies to each half);
    * the label is positive when the class-1 score (else class 0's) exceeds 0.5 (single class,
      non-negative weights) or 0.
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
    else:
        won = positive > 0
    label = labels[won.astype(np.int64)]
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


def _member_sets(membership_values, modes):
    """Split the NaN-delimited membership values into one padded row per BRANCH_MEMBER node."""
    member_nodes = np.nonzero(modes == 6)[0]
    if member_nodes.size == 0:
        return None, None
    if membership_values is None:
        raise Fail("BRANCH_MEMBER nodes need membership_values")
    values = np.asarray(membership_values, np.float64).reshape(-1)
    # Segments between NaNs; a trailing NaN leaves an empty last segment, which is not used.
    sets = [g[~np.isnan(g)] for g in np.split(values, np.nonzero(np.isnan(values))[0])]
    if len(sets) < member_nodes.size:
        raise Fail(f"membership_values holds {len(sets)} sets for {member_nodes.size} BRANCH_MEMBER nodes")
    width = max(max((s.size for s in sets), default=1), 1)
    table = np.full((member_nodes.size, width), np.nan)
    for row in range(member_nodes.size):  # one row per member node, set up once
        table[row, : sets[row].size] = sets[row]
    member_row = np.full(modes.size, -1, np.int64)
    member_row[member_nodes] = np.arange(member_nodes.size)
    return table, member_row


@kernel("TreeEnsemble", since=(5,), domain=ML, factory=True)
def tree_ensemble(ctx, *, aggregate_function, post_transform, tree_roots=None, nodes_featureids=None,
                  nodes_splits=None, nodes_modes=None, nodes_truenodeids=None, nodes_trueleafs=None,
                  nodes_falsenodeids=None, nodes_falseleafs=None, nodes_missing_value_tracks_true=None,
                  nodes_hitrates=None, membership_values=None, leaf_targetids=None, leaf_weights=None,
                  n_targets=None):
    if not 0 <= post_transform < len(TRANSFORMS) or aggregate_function not in (0, 1, 2, 3):
        raise Fail(f"unknown post_transform {post_transform} or aggregate_function {aggregate_function}")
    features = np.asarray(nodes_featureids or (), np.int64)
    count = features.size
    modes = np.asarray(nodes_modes if nodes_modes is not None else (), np.int64).reshape(-1)
    splits = np.asarray(nodes_splits if nodes_splits is not None else (), np.float64).reshape(-1)
    parts = [modes, splits, nodes_truenodeids or (), nodes_trueleafs or (), nodes_falsenodeids or (),
             nodes_falseleafs or ()]
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
    values, has = _leaf_table(np.arange(weights.size), target_ids, weights, weights.size, targets, dtype)
    sets, member_row = _member_sets(membership_values, modes)
    missing = nodes_missing_value_tracks_true or (0,) * count
    forest = Forest(
        feature=features, threshold=splits, mode=modes, missing_true=missing,
        true_next=refs(nodes_truenodeids, nodes_trueleafs), false_next=refs(nodes_falsenodeids, nodes_falseleafs),
        roots=np.asarray(tree_roots or (), np.int64), leaf_values=values, leaf_has=has,
        member_sets=sets, member_row=member_row)
    transform = TRANSFORMS[post_transform]

    def run(x):
        scores = forest.aggregate(x.reshape(1, -1) if x.ndim == 1 else x, aggregate_function)
        return apply_post_transform(scores, transform).astype(x.dtype)

    return run
