"""Trees padded to complete binary trees in heap order, for the compiled walks' branch-free form.

Why: a linked walk (``kernels._forest_loops.simple_leaf``) follows each node's own child
indices, so every level is a load of the node record, a load of the input value and a load of
the next index, and the loop stops early at shallow leaves.  With every tree padded to the
forest's depth, the node at heap position ``i`` has its children at ``2·i + 1`` (true) and
``2·i + 2`` (false): a level is one comparison and one multiply-add on the position, no early
exit, and the walks overlap in the core.  The compiled walk and gather at batch 1, the call
included: a gradient-boosted classifier's 300 trees of depth 3 5.1 → 3.0 µs, a regressor's 100
2.3 → 1.4, a random forest's 100 trees of depth 10 3.9 → 2.5 (docs/benchmarks.md).

A leaf above the last level is copied into every slot below it, so the padding below it may
compare anything and still end on that leaf: a padded slot reads feature 0 against 0, and
whichever way it goes, the answer is the same.  Only single-comparison forests without
missing-value tracks take this form (``Forest``'s ``simple`` case); padding costs
``trees · 2**depth`` slots, bounded by :func:`fits`.
"""

from __future__ import annotations

import numpy as np

#: Deepest forest padded: 2**12 slots a tree (48 KiB of records and leaves).
MAX_DEPTH = 12
#: Padded slots allowed whatever the forest's own size...
MIN_BUDGET = 1 << 16
#: ... and otherwise at most this many per node or leaf the forest has.
SLOTS_PER_NODE = 4


def fits(depth: int, trees: int, nodes: int) -> bool:
    """Whether ``trees`` trees padded to ``depth`` stay within the slot budget."""
    slots = trees << depth
    return depth <= MAX_DEPTH and slots <= max(MIN_BUDGET, SLOTS_PER_NODE * nodes)


def heap_layout(roots, feature, threshold, true_next, false_next, depth: int):
    """``(records, thresholds, leaves)`` of the padded trees: ``records[tree · (2**depth - 1) + i]``
    is ``(feature, float32 threshold bits)`` of heap position ``i`` (int32), ``thresholds`` the
    same thresholds in float64 (a ``[slots, 1]`` column), ``leaves[tree, j]`` the leaf index a
    walk ending at bottom position ``j`` reached.  References are as ``Forest`` holds them: an
    interior node index, or a leaf as ``-(leaf + 1)``; ``depth`` bounds every root-to-leaf path."""
    trees = len(roots)
    interior = (1 << depth) - 1
    records = np.zeros((trees, interior, 2), np.int32)
    thresholds = np.zeros((trees, interior), np.float64)
    level = np.asarray(roots, np.int64).reshape(trees, 1)
    for d in range(depth):
        first = (1 << d) - 1
        inner = level >= 0
        node = np.where(inner, level, 0)
        records[:, first : first + level.shape[1], 0] = np.where(inner, feature[node], 0)
        thresholds[:, first : first + level.shape[1]] = np.where(inner, threshold[node], 0.0)
        # A leaf's two "children" are itself: both ways down end on it.
        true_ref = np.where(inner, true_next[node], level)
        false_ref = np.where(inner, false_next[node], level)
        level = np.stack([true_ref, false_ref], axis=2).reshape(trees, -1)
    if (level >= 0).any():
        raise ValueError(f"a tree is deeper than {depth} levels")  # the caller measured depth
    records.view(np.float32)[..., 1] = thresholds.astype(np.float32)
    return records.reshape(-1, 2), thresholds.reshape(-1, 1), np.ascontiguousarray(-level - 1, np.int32)
