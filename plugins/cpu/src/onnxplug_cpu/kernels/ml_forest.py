"""The tree-ensemble engine behind the ai.onnx.ml tree kernels (``ml_trees``).

Every tree op is converted once, when the session is created, into one flat :class:`Forest`
(interior nodes as parallel arrays, leaves as a ``[leaves, targets]`` weight matrix).  Evaluation
walks every (sample, tree) pair one level per step, so the Python loop runs over tree depth (and
over trees when summing leaf weights), never over samples.

Where numba is installed, walks and weight sums run compiled instead (``_forest_jit``: packed
16-byte node records, four walks in step; single-comparison forests padded to complete trees,
``_heap_trees``, and walked one level at a time across walks; the same numerics); the numpy
walk is the fallback.

This module registers no kernels.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._forest_jit import compiled
from ._heap_trees import fits, heap_layout
from ._split_rows import thread_budget
from ._team import run_parts

MODES = {
    "BRANCH_LEQ": 0,
    "BRANCH_LT": 1,
    "BRANCH_GTE": 2,
    "BRANCH_GT": 3,
    "BRANCH_EQ": 4,
    "BRANCH_NEQ": 5,
    "BRANCH_MEMBER": 6,
}
AGGREGATES = {"AVERAGE": 0, "SUM": 1, "MIN": 2, "MAX": 3}
TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


_COMPARISONS = (np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal)
#: Up to this many (sample, tree) pairs, leaves are found by fixed-depth walks (see Forest._walk).
_WALK_LIMIT = 1 << 16
#: Below this many samples per thread a compiled walk stays on the calling thread.
_ROWS_PER_THREAD = 64


class Forest:
    """A tree ensemble in evaluation form.

    ``true_next``/``false_next``/``roots`` hold an interior node index (>= 0) or a leaf as
    ``-(leaf + 1)``.  Membership sets are a NaN-padded ``[sets, width]`` matrix; ``member_row``
    gives each interior node's set (or -1).  ``threshold_dtype`` is the precision the
    thresholds were given in (float32 for the float attributes), which integer inputs are
    converted to before comparing.
    """

    def __init__(
        self,
        *,
        feature,
        threshold,
        mode,
        missing_true,
        true_next,
        false_next,
        roots,
        leaf_values,
        leaf_has,
        member_sets=None,
        member_row=None,
        threshold_dtype=np.float64,
    ):
        self.threshold_dtype = np.dtype(threshold_dtype)
        self.feature = np.asarray(feature, np.int64)
        # The input width the trees need, found once: the max over every node cost a single-row
        # run a quarter of its time.
        self.width_needed = int(self.feature.max()) + 1 if self.feature.size else 0
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
        self.depth = self._depth()
        self.always_scored = self._always_scored()
        self._walk_tables()
        self._float32_ok = False
        self._jit = compiled()
        if self._jit is not None:
            self._jit_tables()

    def _jit_tables(self) -> None:
        """Packed tables for the compiled loops (see ``_forest_loops``); the scores loop is run
        once here on one sample so that the first ``run`` finds it compiled (or loaded from
        numba's cache).

        Thresholds that are all exact float32 values (every float attribute, and most double
        tensors written from float models) are compared in float32 against float32 or integer
        input: the same answers as comparing both in float64, with no float64 copy of the input
        and half the bytes a node.  Other thresholds and float64 input compare in float64."""
        count = self.feature.size
        if max(count, self.leaf_values.size, self.width_needed) >= 2**31:
            self._jit = None  # beyond int32 indices: the numpy engine
            return
        nodes = np.zeros((count, 4), np.int32)
        nodes[:, 0] = self.feature
        nodes[:, 1] = self.true_next
        nodes[:, 2] = self.false_next
        single = self.threshold.astype(np.float32)
        self._float32_ok = bool(np.array_equal(single.astype(np.float64), self.threshold, equal_nan=True))
        nodes.view(np.float32)[:, 3] = single
        sets = self.member_sets if self.member_sets is not None else np.full((1, 1), np.nan)
        rows = self.member_row if self.member_row is not None else np.full(count, -1, np.int64)
        simple = self.single_mode if self.single_mode is not None and self.single_mode < 6 else -1
        if self.any_missing_true:
            simple = -1
        rules = (  # read only by the general walk (``simple`` is -1)
            np.ascontiguousarray(self.mode, np.int8),
            np.ascontiguousarray(self.missing_true),
            np.ascontiguousarray(sets, np.float64),
            np.ascontiguousarray(rows, np.int64),
        )
        self._scores_tables = {}
        if simple >= 0 and fits(self.depth, self.roots.size, count + self.leaf_values.shape[0]):
            records, thresholds, slots = heap_layout(
                self.roots, self.feature, self.threshold, self.true_next, self.false_next, self.depth
            )
            self._tables32 = (records, records.view(np.float32), 1, self.depth, simple, slots)
            self._tables64 = (records, thresholds, 0, self.depth, simple, slots)
            self._loops = (self._jit.heap_walk, self._jit.heap_scores, self._jit.heap_scores_parallel)
        else:
            rest = (max(self.depth, 1), simple, rules)
            roots = np.ascontiguousarray(self.roots, np.int32)
            self._tables32 = (nodes, nodes.view(np.float32), 3, roots, *rest)
            self._tables64 = (nodes, self.threshold.reshape(-1, 1).copy(), 0, roots, *rest)
            self._loops = (self._jit.walk, self._jit.scores, self._jit.scores_parallel)
        # Each leaf's weights as entries (target id, weight), leaf by leaf: a boosted tree weighs
        # one class of several, and the gather then adds one weight per tree, not one per class.
        leaf_ids, target_ids = np.nonzero(self.leaf_has)
        starts = np.zeros(self.leaf_has.shape[0] + 1, np.int32)
        np.cumsum(np.bincount(leaf_ids, minlength=self.leaf_has.shape[0]), out=starts[1:])
        self._leaf_tables = (
            starts,
            target_ids.astype(np.int32),
            np.ascontiguousarray(self.leaf_values[leaf_ids, target_ids]),
        )
        width = max(self.width_needed, 1)
        self._aggregate_jit(np.zeros((1, width), np.float32 if self._float32_ok else np.float64), 1)

    def _depth(self) -> int:
        """The longest root-to-leaf path (interior nodes on it); a cycle is refused."""
        frontier = self.roots[self.roots >= 0]
        depth = 0
        while frontier.size:
            depth += 1
            if depth > len(self.feature):
                raise Fail("tree ensemble has a cycle")
            frontier = np.unique(np.concatenate([self.true_next[frontier], self.false_next[frontier]]))
            frontier = frontier[frontier >= 0]
        return depth

    def _always_scored(self) -> np.ndarray:
        """Per target, whether every sample's reached leaves include a weight for it: true when
        some tree has a weight for the target on all of its leaves (every tree of a random
        forest, one tree per class in gradient boosting).  Classifiers then skip masking the
        classes that were never scored."""
        targets, leaves = self.leaf_values.shape[1], self.leaf_values.shape[0]
        if self.roots.size == 0 or targets == 0:
            return np.zeros(targets, bool)
        span = self.feature.size + leaves  # (tree, node or leaf) pairs as one key
        lacking = np.zeros((self.roots.size, targets), bool)  # a tree has a leaf without the target
        owner, frontier = np.arange(self.roots.size), self.roots
        for _ in range(self.depth + 1):  # one level a step; depth bounds it (cycles were refused)
            at_leaf = frontier < 0
            np.logical_or.at(lacking, owner[at_leaf], ~self.leaf_has[-frontier[at_leaf] - 1])
            owner, inner = owner[~at_leaf], frontier[~at_leaf]
            if inner.size == 0:
                break
            frontier = np.concatenate([self.true_next[inner], self.false_next[inner]])
            # Trees that share nodes must not multiply the frontier: one entry per (tree, node).
            keys = np.unique(np.concatenate([owner, owner]) * span + frontier + leaves)
            owner, frontier = keys // span, keys % span - leaves
        return ~lacking.all(axis=0)

    def _walk_tables(self) -> None:
        """Tables for :meth:`_walk`: leaves become nodes ``interior + leaf`` that lead to
        themselves, so every (sample, tree) pair can take ``depth`` steps with no bookkeeping of
        which pairs are done; ``children[2 * node + went_false]`` is the next node."""
        interior, leaves = len(self.feature), len(self.leaf_values)

        def resolve(ref):
            return np.where(ref >= 0, ref, interior - ref - 1)

        own = np.arange(interior, interior + leaves)
        true_next = np.concatenate([resolve(self.true_next), own])
        false_next = np.concatenate([resolve(self.false_next), own])
        self._children = np.stack([true_next, false_next], axis=1).reshape(-1)
        self._feature_all = np.concatenate([self.feature, np.zeros(leaves, np.int64)])
        # A leaf compares against NaN: either branch is itself, so the answer does not matter.
        self._threshold_all = np.concatenate([self.threshold, np.full(leaves, np.nan)])
        self._missing_all = np.concatenate([self.missing_true, np.zeros(leaves, bool)])
        self._root_nodes = resolve(self.roots)
        self._interior = interior

    def _walk(self, values, samples, width):
        """:meth:`leaves` for single-comparison forests: ``depth`` steps of a few whole-array
        operations, the fastest form when the per-call overhead of numpy dominates (small batches)."""
        compare = _COMPARISONS[self.single_mode]
        offsets = np.repeat(np.arange(samples) * width, self.roots.size)
        current = np.tile(self._root_nodes, samples)
        for _ in range(self.depth):
            v = values[offsets + self._feature_all[current]]
            went_false = ~compare(v, self._threshold_all[current])
            if self.any_missing_true:
                went_false &= ~(self._missing_all[current] & np.isnan(v))
            current = self._children[2 * current + went_false]
        return (current - self._interior).reshape(samples, self.roots.size)

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

    def _values(self, x):
        """The input checked and converted to the values the walks compare: float64, or
        float32 where the compiled loops compare in float32 (see :meth:`_jit_tables`)."""
        if x.ndim != 2:
            raise InvalidArgument(f"tree ensembles expect [N, F] input, got shape {x.shape}")
        if self.width_needed > x.shape[1]:
            raise InvalidArgument(f"feature id {self.width_needed - 1} is out of range for {x.shape[1]} features")
        if x.dtype.kind in "iu" and self.threshold_dtype == np.float32:
            x = x.astype(np.float32)  # onnxruntime compares an integer with a float threshold as a float
        if self._float32_ok and x.dtype == np.float32:  # only ever set with compiled tables
            return np.ascontiguousarray(x)
        return np.ascontiguousarray(x, np.float64)

    def _tables(self, values):
        return self._tables32 if values.dtype == np.float32 else self._tables64

    def _leaves_jit(self, values):
        return self._loops[0](values, *self._tables(values))

    def _aggregate_jit(self, values, how):
        n, targets = values.shape[0], self.leaf_values.shape[1]
        result = np.empty((n, targets), self.leaf_values.dtype)
        present = np.empty((n, targets), bool)
        key = (values.dtype == np.float32, how)
        tables = self._scores_tables.get(key)
        if tables is None:  # built once per input precision and aggregate
            tables = self._scores_tables[key] = (*self._tables(values), *self._leaf_tables, how)
        tables = (*tables, result, present)
        parts = 1 if n < 2 * _ROWS_PER_THREAD else min(thread_budget(), n // _ROWS_PER_THREAD)
        if parts <= 1:  # a small batch reads no thread budget: its run is microseconds
            self._loops[1](values, *tables, 0, n)
        else:  # the compiled loops release the GIL: row ranges run in parallel
            run_parts(self._loops[1], self._loops[2], n, parts, values, *tables)
        return result, present

    def leaves(self, x):
        """The leaf reached by every sample in every tree, ``[N, trees]``."""
        values = self._values(x)
        if self._jit is not None:
            return self._leaves_jit(values)
        width = x.shape[1]
        values = values.reshape(-1)
        if self.single_mode is not None and self.single_mode < 6 and x.shape[0] * self.roots.size <= _WALK_LIMIT:
            return self._walk(values, x.shape[0], width)
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

        Samples go through in blocks so that the ``[block, trees, targets]`` weight table stays
        small; sums accumulate tree by tree in order (``cumsum`` is sequential), in the leaf
        weights' precision, as onnxruntime adds them.
        """
        if how not in (0, 1, 2, 3):
            raise Fail(f"unknown aggregate_function {how}")
        if self._jit is not None:
            result, present = self._aggregate_jit(self._values(x), how)
            if how == 0:
                result /= result.dtype.type(max(self.roots.size, 1))
            return (result, present) if with_presence else result
        n, targets = x.shape[0], self.leaf_values.shape[1]
        result = np.zeros((n, targets), self.leaf_values.dtype)
        present = np.zeros((n, targets), bool)
        block = max(1, (1 << 21) // max(self.roots.size * targets, 1))
        for start in range(0, n, block):
            leaves = self.leaves(x[start : start + block])
            weights = self.leaf_values[leaves]  # [block, trees, targets]
            has = self.leaf_has[leaves]
            if how in (0, 1):
                if weights.shape[1]:
                    result[start : start + block] = np.cumsum(weights, axis=1, dtype=weights.dtype)[:, -1]
            else:
                fill = np.inf if how == 2 else -np.inf
                masked = np.where(has, weights, weights.dtype.type(fill))
                extreme = masked.min(axis=1) if how == 2 else masked.max(axis=1)
                any_has = has.any(axis=1)
                result[start : start + block] = np.where(any_has, extreme, 0)
            present[start : start + block] = has.any(axis=1)
        if how == 0:
            result /= result.dtype.type(max(self.roots.size, 1))
        return (result, present) if with_presence else result


def leaf_table(leaf_ids, target_ids, weights, leaves, targets, dtype=np.float32):
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


def legacy_forest(
    *,
    nodes_treeids,
    nodes_nodeids,
    nodes_featureids,
    nodes_values,
    nodes_modes,
    nodes_truenodeids,
    nodes_falsenodeids,
    nodes_missing_value_tracks_true,
    w_treeids,
    w_nodeids,
    w_ids,
    w_weights,
    targets,
    dtype=np.float32,
):
    """Build a Forest from the (treeid, nodeid)-keyed attributes of the pre-v5 ops.

    Weights are read the way onnxruntime reads them: a weight on an interior node is ignored
    (old onnxmltools wrote such models), and with a single target only the first weight listed
    for each leaf counts, whatever its target id (onnxruntime keeps it as the leaf's "unique
    weight"; skl2onnx's ``decision_path`` regressors list each leaf once per class and rely on
    it).  With several targets every weight is added to its target.
    """
    count = len(nodes_nodeids)
    lengths = {
        len(a)
        for a in (nodes_treeids, nodes_featureids, nodes_values, nodes_modes, nodes_truenodeids, nodes_falsenodeids)
    }
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
    if len(missing) != count:
        raise Fail(f"nodes_missing_value_tracks_true has {len(missing)} entries for {count} nodes")
    if not len(w_treeids) == len(w_nodeids) == len(w_ids) == len(w_weights):
        raise Fail("the weight attributes (tree ids, node ids, target ids, weights) have different lengths")
    leaf_of, kept, weighted = [], [], set()
    for k, (tree, node) in enumerate(zip(w_treeids, w_nodeids)):
        i = position.get((tree, node))
        if i is None:
            raise Fail(f"weight for ({tree}, {node}) points to no node")
        leaf = int(leaf_index[i])
        if not is_leaf[i] or (targets == 1 and leaf in weighted):
            continue
        weighted.add(leaf)
        leaf_of.append(leaf)
        kept.append(k)
    ids = np.asarray(w_ids, np.int64)[kept] if targets > 1 else np.zeros(len(kept), np.int64)
    weights = np.asarray(w_weights, np.float64).reshape(-1)[kept]
    values, has = leaf_table(np.asarray(leaf_of, np.int64), ids, weights, int(is_leaf.sum()), targets, dtype)
    return Forest(
        feature=np.asarray(nodes_featureids, np.int64)[interior],
        threshold=np.asarray(nodes_values, np.float64)[interior],
        mode=np.asarray(modes)[interior],
        missing_true=np.asarray(missing, bool)[interior],
        true_next=true_next,
        false_next=false_next,
        roots=roots,
        leaf_values=values,
        leaf_has=has,
        threshold_dtype=np.float32,  # onnxruntime's threshold type for any non-double input
    )


def member_sets(membership_values, modes):
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
