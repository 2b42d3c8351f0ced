"""The tree-ensemble engine's leaf search against a plain per-sample traversal.

``Forest.leaves`` takes one of three routes: the compiled walk (numba, where installed), or with
numpy fixed-depth walks for small batches and the shrinking active set for large ones; all must
reach the same leaves for every comparison mode, with NaN inputs and missing-value tracks, on
unbalanced trees, and sum, average, min and max the same weights.
"""

from __future__ import annotations

import numpy as np
import pytest
import threadpoolctl

from onnxplug_cpu.kernels import _forest_jit, _heap_trees, ml_forest
from onnxplug_cpu.kernels.ml_forest import Forest

ENGINES = ["numpy-walk", "numpy-active-set", "compiled", "compiled-linked"]


@pytest.fixture(params=ENGINES)
def engine(request, monkeypatch):
    """Which route Forests built in the test take: ``compiled`` pads single-comparison forests to
    complete trees (``kernels._heap_trees``), ``compiled-linked`` never does."""
    if request.param.startswith("compiled"):
        if _forest_jit.compiled() is None:
            pytest.skip("numba is not installed (or ONNXPLUG_CPU_JIT=0): the compiled walk is not available")
        if request.param == "compiled-linked":
            monkeypatch.setattr(_heap_trees, "MAX_DEPTH", -1)
    else:
        monkeypatch.setattr(ml_forest, "compiled", lambda: None)
        monkeypatch.setattr(ml_forest, "_WALK_LIMIT", 1 << 16 if request.param == "numpy-walk" else 0)
    return request.param


_OPS = (
    lambda v, t: v <= t,
    lambda v, t: v < t,
    lambda v, t: v >= t,
    lambda v, t: v > t,
    lambda v, t: v == t,
    lambda v, t: v != t,
)


def _random_forest(rng, trees, mode, features, tracks_missing=True, float32=False, unweighted=0.0):
    """Random unbalanced trees: each interior node's children are new interior nodes or leaves.
    ``tracks_missing=False`` leaves every missing-value track off (the compiled walks' simple
    path); ``float32`` rounds the thresholds to float32 values (its float32 comparisons);
    ``unweighted`` is the share of (leaf, target) pairs without a weight (zero, as
    ``leaf_table`` writes them)."""
    feature, threshold, true_next, false_next, missing, roots = [], [], [], [], [], []
    leaves = 0

    def grow(depth):
        nonlocal leaves
        if depth > 0 and (depth >= 7 or rng.random() < 0.3):
            leaves += 1
            return -leaves  # leaf index leaves - 1, as -(leaf + 1)
        index = len(feature)
        feature.append(int(rng.integers(features)))
        value = float(rng.integers(-2, 3)) if mode in (4, 5) else float(rng.normal())
        threshold.append(float(np.float32(value)) if float32 else value)
        missing.append(bool(tracks_missing and rng.random() < 0.5))
        true_next.append(0)
        false_next.append(0)
        true_next[index] = grow(depth + 1)
        false_next[index] = grow(depth + 1)
        return index

    for _ in range(trees):
        roots.append(grow(0))
    values = rng.normal(size=(leaves, 2)).astype(np.float32)
    has = rng.random(values.shape) >= unweighted
    values[~has] = 0
    return Forest(
        feature=feature,
        threshold=threshold,
        mode=[mode] * len(feature),
        missing_true=missing,
        true_next=true_next,
        false_next=false_next,
        roots=roots,
        leaf_values=values,
        leaf_has=has,
    )


def _reference(forest, x):
    out = np.zeros((x.shape[0], forest.roots.size), np.int64)
    for row in range(x.shape[0]):
        for tree, node in enumerate(forest.roots):
            while node >= 0:
                v = float(x[row, forest.feature[node]])
                taken = _OPS[forest.mode[node]](v, forest.threshold[node])
                if np.isnan(v) and forest.missing_true[node]:
                    taken = True
                node = forest.true_next[node] if taken else forest.false_next[node]
            out[row, tree] = -node - 1
    return out


@pytest.mark.parametrize("tracks_missing", [True, False], ids=["tracks-missing", "simple"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("rows", [13, 1, 2])
@pytest.mark.parametrize("mode", range(6))
def test_leaves_match_a_plain_traversal(mode, rows, dtype, tracks_missing, engine):
    """13 rows: four samples walk a tree in step, then three alone; 1 and 2 rows: one sample
    walks four trees in step (9 trees: two groups and one alone).  float32 input against
    float32-exact thresholds is compared in float32 by the compiled walks."""
    rng = np.random.default_rng(mode)
    forest = _random_forest(rng, trees=9, mode=mode, features=4, tracks_missing=tracks_missing, float32=True)
    x = rng.normal(size=(rows, 4)) if mode < 4 else rng.integers(-2, 3, size=(rows, 4)).astype(np.float64)
    x[rng.random(x.shape) < 0.15] = np.nan
    x = x.astype(dtype)
    np.testing.assert_array_equal(forest.leaves(x), _reference(forest, x))


def test_thresholds_that_are_not_float32_values_compare_in_float64(engine):
    """A threshold between two float32 values: float32 input must still be compared with it in
    float64 (rounding the threshold would send 1.0000000001 > x = 1.0 the other way)."""
    forest = Forest(
        feature=[0], threshold=[1.0000000001], mode=[1], missing_true=[False], true_next=[-1], false_next=[-2],
        roots=[0], leaf_values=np.array([[1.0], [2.0]], np.float32), leaf_has=np.ones((2, 1), bool),
    )  # fmt: skip
    x = np.array([[1.0], [1.0000001]], np.float32)
    np.testing.assert_array_equal(forest.leaves(x), [[0], [1]])


@pytest.mark.parametrize("unweighted", [0.0, 0.3], ids=["every-target", "some-targets"])
@pytest.mark.parametrize("how", [0, 1, 2, 3])
def test_aggregates_follow_the_reached_leaves(how, unweighted, engine):
    """Leaves weighing every target (a random forest's) and leaves weighing some (boosted trees')
    take different gathers in the compiled engine."""
    rng = np.random.default_rng(7)
    forest = _random_forest(rng, trees=5, mode=0, features=3, unweighted=unweighted)
    x = rng.normal(size=(6, 3))
    leaves = _reference(forest, x)
    weights, has = forest.leaf_values[leaves], forest.leaf_has[leaves]
    if how in (0, 1):
        expected = weights.sum(axis=1) / (forest.roots.size if how == 0 else 1)
    else:
        masked = np.where(has, weights, np.inf if how == 2 else -np.inf)
        expected = np.where(has.any(axis=1), masked.min(axis=1) if how == 2 else masked.max(axis=1), 0)
    np.testing.assert_allclose(forest.aggregate(x, how), expected, rtol=1e-6)


@pytest.mark.parametrize("unweighted", [0.0, 0.3], ids=["every-target", "some-targets"])
@pytest.mark.parametrize("how", [0, 1, 2, 3])
def test_a_large_batch_split_over_threads_matches_row_by_row(how, unweighted, engine):
    """From 128 rows the compiled engine splits the rows over the run's threads (numba's team, or
    Python threads without a safe layer); each row's scores and presence are those of a batch
    of one."""
    rng = np.random.default_rng(11)
    forest = _random_forest(rng, trees=7, mode=1, features=3, tracks_missing=False, unweighted=unweighted)
    x = rng.normal(size=(300, 3)).astype(np.float32)
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        scores, present = forest.aggregate(x, how, with_presence=True)
    singles = [forest.aggregate(x[i : i + 1], how, with_presence=True) for i in range(x.shape[0])]
    np.testing.assert_array_equal(scores, np.concatenate([s for s, _ in singles]))
    np.testing.assert_array_equal(present, np.concatenate([p for _, p in singles]))


def test_always_scored_targets():
    """Random-forest leaves weigh every class; boosted trees weigh one class each; a class
    weighed on some leaves of a tree only is not always scored."""
    one_split = dict(feature=[0, 0], threshold=[0.0, 0.0], mode=[0, 0], missing_true=[False, False])
    two_trees = dict(true_next=[-1, -3], false_next=[-2, -4], roots=[0, 1])
    values = np.ones((4, 2), np.float32)
    every = Forest(**one_split, **two_trees, leaf_values=values, leaf_has=np.ones((4, 2), bool))
    per_tree = np.array([[1, 0], [1, 0], [0, 1], [0, 1]], bool)  # tree 0: class 0, tree 1: class 1
    boosted = Forest(**one_split, **two_trees, leaf_values=values, leaf_has=per_tree)
    patchy_has = np.array([[1, 1], [1, 0], [1, 0], [1, 0]], bool)  # class 1 on one leaf of tree 0 only
    patchy = Forest(**one_split, **two_trees, leaf_values=values, leaf_has=patchy_has)
    assert every.always_scored.tolist() == [True, True]
    assert boosted.always_scored.tolist() == [True, True]
    assert patchy.always_scored.tolist() == [True, False]


def test_always_scored_with_shared_nodes():
    """Trees may share nodes (a DAG): 40 levels whose both branches lead to the next node would
    be 2**40 paths; the search keeps one entry per (tree, node).  The leaf both trees share
    lacks class 1, so neither tree scores class 1 on all of its leaves."""
    levels = 40
    nexts = list(range(1, levels)) + [-1]  # the last level ends in leaf 0
    forest = Forest(
        feature=[0] * levels,
        threshold=[0.0] * levels,
        mode=[0] * levels,
        missing_true=[False] * levels,
        true_next=nexts,
        false_next=nexts,
        roots=[0, 1],
        leaf_values=np.ones((1, 2), np.float32),
        leaf_has=np.array([[True, False]]),
    )
    assert forest.always_scored.tolist() == [True, False]


def test_membership_nodes_take_the_true_branch_for_listed_values(engine):
    """BRANCH_MEMBER (TreeEnsemble 5): one node per tree tests set membership, NaN never a member."""
    sets = np.array([[1.0, 3.0, np.nan], [2.0, np.nan, np.nan]])
    forest = Forest(
        feature=[0, 1],
        threshold=[0.0, 0.0],
        mode=[6, 6],
        missing_true=[False, True],
        true_next=[-1, -3],
        false_next=[-2, -4],
        roots=[0, 1],
        leaf_values=np.arange(8, dtype=np.float32).reshape(4, 2),
        leaf_has=np.ones((4, 2), bool),
        member_sets=sets,
        member_row=np.array([0, 1]),
    )
    x = np.array([[1.0, 2.0], [2.0, 3.0], [3.0, np.nan], [np.nan, 2.0]])
    np.testing.assert_array_equal(forest.leaves(x), [[0, 2], [1, 3], [0, 2], [1, 2]])


def test_trees_of_one_leaf_and_shared_subtrees(engine):
    """A tree that is only a leaf (depth 0 for the whole forest, then beside a deeper tree), and
    two trees sharing a subtree, padded or linked, reach the leaves a plain traversal does."""
    only_leaves = Forest(
        feature=[], threshold=[], mode=[], missing_true=[], true_next=[], false_next=[], roots=[-2, -1],
        leaf_values=np.array([[1.0], [2.0]], np.float32), leaf_has=np.ones((2, 1), bool),
    )  # fmt: skip
    x = np.zeros((5, 3), np.float32)
    np.testing.assert_array_equal(only_leaves.leaves(x), [[1, 0]] * 5)
    np.testing.assert_array_equal(only_leaves.aggregate(x, 1), [[3.0]] * 5)
    # tree 0: node 0 splits on feature 0 into node 1 or leaf 0; node 1 into leaves 1 and 2;
    # tree 1 starts at node 1 (shared); tree 2 is leaf 3.
    mixed = Forest(
        feature=[0, 1], threshold=[0.5, -0.5], mode=[0, 0], missing_true=[False, False], true_next=[1, -2],
        false_next=[-1, -3], roots=[0, 1, -4], leaf_values=np.arange(4, dtype=np.float32).reshape(4, 1),
        leaf_has=np.ones((4, 1), bool),
    )  # fmt: skip
    x = np.array([[0.0, -1.0], [0.0, 0.0], [1.0, -1.0], [np.nan, np.nan], [0.0, np.nan], [0.5, -0.5]] * 2, np.float32)
    for rows in (1, 2, 12):
        np.testing.assert_array_equal(mixed.leaves(x[:rows]), _reference(mixed, x[:rows]))


def test_heap_layout_pads_shallow_leaves_into_every_slot_below():
    """The padded form of a tree with a leaf on its first level: that leaf fills both bottom
    slots below it, whatever the padded slot above them compares."""
    records, thresholds, slots = _heap_trees.heap_layout(
        roots=np.array([0]), feature=np.array([2, 1]), threshold=np.array([0.25, 0.5]),
        true_next=np.array([-1, -2]), false_next=np.array([1, -3]), depth=2,
    )  # fmt: skip
    np.testing.assert_array_equal(records[:, 0], [2, 0, 1])  # root, padding under leaf 0, node 1
    np.testing.assert_array_equal(thresholds[:, 0], [0.25, 0.0, 0.5])
    np.testing.assert_array_equal(records.view(np.float32)[:, 1], [0.25, 0.0, 0.5])
    np.testing.assert_array_equal(slots, [[0, 0, 1, 2]])
    assert _heap_trees.fits(3, 300, 2000) and not _heap_trees.fits(13, 1, 10**9)
    assert not _heap_trees.fits(12, 1000, 100_000)  # 4M slots for 100k nodes: linked


@pytest.mark.numba
def test_a_new_process_loads_the_loops_from_numba_cache(cache_misses_in_new_processes):
    code = (
        "import numpy as np\n"
        "from onnxplug_cpu.kernels.ml_forest import Forest\n"
        "from onnxplug_cpu.kernels import _forest_loops as loops\n"
        "f = Forest(feature=[0], threshold=[0.5], mode=[0], missing_true=[False], true_next=[-1],\n"
        "    false_next=[-2], roots=[0], leaf_values=np.array([[1.0], [2.0]], np.float32),\n"
        "    leaf_has=np.ones((2, 1), bool))\n"
        "assert f.aggregate(np.array([[0.2], [0.9]], np.float32), 1).tolist() == [[1.0], [2.0]]\n"
        "import threadpoolctl\n"
        "with threadpoolctl.threadpool_limits(2, user_api='blas'):\n"
        "    assert f.aggregate(np.full((200, 1), 0.9, np.float32), 1).sum() == 400\n"
        "g = Forest(feature=[0], threshold=[0.5], mode=[0], missing_true=[True], true_next=[-1],\n"
        "    false_next=[-2], roots=[0], leaf_values=np.array([[1.0], [2.0]], np.float32),\n"
        "    leaf_has=np.ones((2, 1), bool))\n"
        "assert g.aggregate(np.array([[np.nan]], np.float32), 1).tolist() == [[1.0]]\n"
        "loops_used = (loops.heap_scores, loops.heap_walk_block, loops.heap_scores_parallel, loops.scores)\n"
        "print(sum(sum(f.stats.cache_misses.values()) for f in loops_used))\n"
    )
    first, second = cache_misses_in_new_processes(code)
    assert first > 0 and second == 0


@pytest.mark.parametrize("base_dtype", [None, np.float32, np.float64])
def test_compiled_softmax_finish_matches_the_numpy_one(base_dtype):
    """The multi-class softmax finish in one compiled loop gives the numpy steps' labels and
    probabilities bit for bit, NaN rows and all-``-inf`` rows included."""
    from onnxplug_cpu.kernels import ml_trees

    loops = _forest_jit.compiled()
    if loops is None:
        pytest.skip("numba is not installed (or ONNXPLUG_CPU_JIT=0): the compiled finish is not available")
    rng = np.random.default_rng(7)
    for trial in range(40):
        classes, rows = int(rng.integers(3, 30)), int(rng.integers(1, 40))
        scores = (rng.standard_normal((rows, classes)) * (0.1, 3.0, 50.0)[trial % 3]).astype(np.float32)
        scores[0, trial % classes] = np.nan if trial % 4 == 0 else scores[0, trial % classes]
        if trial % 5 == 0:
            scores[-1] = -np.inf
        base = np.zeros(0, np.float32) if base_dtype is None else rng.standard_normal(classes).astype(base_dtype)
        labels = np.arange(10, 10 + classes)
        with np.errstate(all="ignore"):
            expected_labels, expected = ml_trees._multiclass(
                scores.copy(), None, labels=labels, base=base, post="SOFTMAX", always_scored=True
            )
        got_labels, got = ml_trees._softmax_classes(loops.softmax_classes, labels, base, scores.copy(), None)
        np.testing.assert_array_equal(got_labels, expected_labels)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected.astype(np.float32))
