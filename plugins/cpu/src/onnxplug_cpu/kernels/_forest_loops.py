"""The compiled loops of :mod:`._forest_jit` (imported only when :func:`._jit.compiler` gives a
decorator: this module needs numba).  Module-level functions only: as closures, a loop calling
another loop missed numba's on-disk cache and was compiled again in every process, about 1 s
when a tree model's session was created.

The node tables are packed (see ``Forest._jit_tables``): ``nodes[i] = (feature, true next,
false next, threshold bits)`` as int32, and the threshold is ``splits[i, column]`` -- for float32
comparisons ``splits`` is ``nodes`` itself viewed as float32 and ``column`` 3, so one 16-byte
record holds everything a walk reads at a node (float64 comparisons read a ``[nodes, 1]``
float64 table instead).  The earlier layout read five int64/float64 arrays, 40 bytes a node in
five places.

``simple`` is the forest's one comparison mode (0-5) when no node tracks missing values to the
true branch, else -1; only then is ``rules`` (modes, missing-value tracks, membership tables) read.
Every walk takes at most ``depth`` steps: ``Forest`` refuses cyclic trees when it is built.
"""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler

jit = compiler()
if jit is None:  # pragma: no cover - the caller checks compiler() first
    raise ImportError("numba is disabled (ONNXPLUG_CPU_JIT=0) or not installed")


inline = compiler(inline="always")  # inlined at numba's level: a call per level cost 3x


@inline
def compare(mode, v, t):
    """Comparison modes 0-5 (BRANCH_LEQ, LT, GTE, GT, EQ, NEQ)."""
    if mode == 0:
        return v <= t
    if mode == 1:
        return v < t
    if mode == 2:
        return v >= t
    if mode == 3:
        return v > t
    if mode == 4:
        return v == t
    return v != t


@inline
def simple_leaf(values, n, root, nodes, splits, column, depth, mode):
    """The leaf sample ``n`` reaches from ``root`` (a node index, or a leaf as ``-(leaf + 1)``)
    in a forest whose nodes all compare with ``mode`` and track no missing values."""
    node = root
    for _ in range(depth):
        if node < 0:
            break
        node = nodes[node, 1] if compare(mode, values[n, nodes[node, 0]], splits[node, column]) else nodes[node, 2]
    return -node - 1


@jit
def general_leaf(values, n, root, nodes, splits, column, depth, rules):
    """:func:`simple_leaf` for any forest: per-node modes, BRANCH_MEMBER sets (NaN padding
    never equals) and missing values (NaN) sent to the true branch where ``missing`` says so;
    ``rules`` is ``(modes, missing, member_sets, member_row)``."""
    modes, missing, member_sets, member_row = rules
    node = root
    for _ in range(depth):
        if node < 0:
            break
        v = values[n, nodes[node, 0]]
        mode = modes[node]
        if missing[node] and np.isnan(v):
            taken = True
        elif mode < 6:
            taken = compare(mode, v, splits[node, column])
        else:
            taken = False
            row = member_row[node]
            for k in range(member_sets.shape[1]):
                if member_sets[row, k] == v:
                    taken = True
        node = nodes[node, 1] if taken else nodes[node, 2]
    return -node - 1


@inline
def leaf_of(values, n, root, nodes, splits, column, depth, simple, rules):
    if simple >= 0:
        return simple_leaf(values, n, root, nodes, splits, column, depth, simple)
    return general_leaf(values, n, root, nodes, splits, column, depth, rules)


#: Samples walked together before their weights are gathered: one block's ``[trees, BLOCK]``
#: leaf table stays in cache between the two.
BLOCK = 64


@inline
def walk_four(values, na, nb, nc, nd, ra, rb, rc, rd, nodes, splits, column, depth, mode):
    """Four walks in step in a simple forest: sample ``na`` from root ``ra``, and so on.  The
    next node is picked by index (``nodes[node, 2 - taken]``) rather than by a branch, so the
    four chains of dependent loads overlap and a comparison that goes either way costs no
    mispredicted branch."""
    a, b, c, d = ra, rb, rc, rd
    for _ in range(depth):
        if a < 0 and b < 0 and c < 0 and d < 0:
            break
        if a >= 0:
            a = nodes[a, 2 - compare(mode, values[na, nodes[a, 0]], splits[a, column])]
        if b >= 0:
            b = nodes[b, 2 - compare(mode, values[nb, nodes[b, 0]], splits[b, column])]
        if c >= 0:
            c = nodes[c, 2 - compare(mode, values[nc, nodes[c, 0]], splits[c, column])]
        if d >= 0:
            d = nodes[d, 2 - compare(mode, values[nd, nodes[d, 0]], splits[d, column])]
    return -a - 1, -b - 1, -c - 1, -d - 1


@jit
def walk_block(values, start, stop, nodes, splits, column, roots, depth, simple, rules, leaves):
    """Samples ``start:stop`` through every tree: ``leaves[tree, n - start]`` gets the leaf.

    Trees are the outer loop, so one tree's nodes stay in cache while the block walks it.  In
    simple forests four walks go in step (:func:`walk_four`): four samples through one tree,
    or, for fewer than four samples, one sample through four trees.  Measured at batch 1000,
    2.5-3x faster than one branchy walk at a time."""
    trees = roots.shape[0]
    if simple >= 0 and stop - start < 4:
        for n in range(start, stop):
            j = n - start
            tree = 0
            while tree + 4 <= trees:
                a, b, c, d = walk_four(
                    values, n, n, n, n, roots[tree], roots[tree + 1], roots[tree + 2], roots[tree + 3],
                    nodes, splits, column, depth, simple,
                )  # fmt: skip
                leaves[tree, j] = a
                leaves[tree + 1, j] = b
                leaves[tree + 2, j] = c
                leaves[tree + 3, j] = d
                tree += 4
            for rest in range(tree, trees):
                leaves[rest, j] = simple_leaf(values, n, roots[rest], nodes, splits, column, depth, simple)
        return
    for tree in range(trees):
        root = roots[tree]
        n = start
        if simple >= 0:
            while n + 4 <= stop:
                a, b, c, d = walk_four(
                    values, n, n + 1, n + 2, n + 3, root, root, root, root, nodes, splits, column, depth, simple
                )
                j = n - start
                leaves[tree, j] = a
                leaves[tree, j + 1] = b
                leaves[tree, j + 2] = c
                leaves[tree, j + 3] = d
                n += 4
        while n < stop:
            leaves[tree, n - start] = leaf_of(values, n, root, nodes, splits, column, depth, simple, rules)
            n += 1


@jit
def gather_block(leaves, start, stop, entry_start, entry_target, entry_weight, how, result, present):
    """Per target over trees, for samples ``start:stop`` (``leaves`` from :func:`walk_block`):
    the sum (``how`` 0/1), minimum (2) or maximum (3) of the reached leaves' weights, into
    ``result`` (zero where no reached leaf has a weight for a target under min/max), and
    whether any reached leaf has one into ``present``.

    A leaf's weights are its entries ``entry_start[leaf]:entry_start[leaf + 1]`` (target id and
    weight; see ``Forest._jit_tables``), so a boosted tree that weighs one class of three costs
    one addition, not three.  Weights are added tree by tree, in order, in the leaf weights'
    precision (``result``'s dtype), as onnxruntime adds them."""
    trees, targets = leaves.shape[0], result.shape[1]
    zero = result.dtype.type(0)
    if entry_weight.shape[0] == (entry_start.shape[0] - 1) * targets:
        # Every leaf weighs every target (a random forest): entry ``leaf * targets + t``, and
        # each target's sum runs in a register rather than through ``result``.
        for n in range(start, stop):
            j = n - start
            for t in range(targets):
                acc = zero
                for tree in range(trees):
                    weight = entry_weight[leaves[tree, j] * targets + t]
                    if how <= 1 or tree == 0 or (weight < acc if how == 2 else weight > acc):
                        acc = acc + weight if how <= 1 else weight
                result[n, t] = acc
                present[n, t] = trees > 0
        return
    for n in range(start, stop):
        j = n - start
        for t in range(targets):
            result[n, t] = zero
            present[n, t] = False
        for tree in range(trees):
            leaf = leaves[tree, j]
            for k in range(entry_start[leaf], entry_start[leaf + 1]):
                t = entry_target[k]
                weight = entry_weight[k]
                if how <= 1:
                    result[n, t] += weight
                elif not present[n, t] or (weight < result[n, t] if how == 2 else weight > result[n, t]):
                    result[n, t] = weight
                present[n, t] = True


@jit
def walk(values, nodes, splits, column, roots, depth, simple, rules):
    """The leaf each sample reaches in each tree, ``[samples, trees]`` (leaf indices)."""
    samples, trees = values.shape[0], roots.shape[0]
    out = np.empty((samples, trees), np.int32)
    leaves = np.empty((trees, BLOCK), np.int32)
    for start in range(0, samples, BLOCK):
        stop = min(start + BLOCK, samples)
        walk_block(values, start, stop, nodes, splits, column, roots, depth, simple, rules, leaves)
        out[start:stop, :] = leaves[:, : stop - start].T
    return out


@jit
def scores(
    values, nodes, splits, column, roots, depth, simple, rules, entry_start, entry_target, entry_weight, how,
    result, present, start, stop,
):  # fmt: skip
    """:func:`walk_block` then :func:`gather_block` over every block of samples ``start:stop``."""
    trees = roots.shape[0]
    leaves = np.empty((trees, BLOCK), np.int32)
    for first in range(start, stop, BLOCK):
        last = min(first + BLOCK, stop)
        walk_block(values, first, last, nodes, splits, column, roots, depth, simple, rules, leaves)
        gather_block(leaves, first, last, entry_start, entry_target, entry_weight, how, result, present)


@inline
def across_trees(values, n, records, splits, column, depth, mode, interior, at):
    """Sample ``n`` down every padded tree (``kernels._heap_trees``), one level at a time
    across the trees: ``at[tree]`` goes from the tree's first record to the record of the
    bottom-level position reached.  The true child of heap position ``i`` is ``2·i + 1``, the
    false one ``2·i + 2``: as record indices from a tree's ``base``, ``k → 2·k - base + 1``
    or ``+ 2``."""
    for tree in range(at.shape[0]):
        at[tree] = tree * interior
    for _ in range(depth):
        for tree in range(at.shape[0]):
            k = at[tree]
            at[tree] = 2 * k - tree * interior + 2 - compare(mode, values[n, records[k, 0]], splits[k, column])


@inline
def across_samples(values, start, stop, base, records, splits, column, depth, mode, at):
    """:func:`across_trees` for samples ``start:stop`` down the one tree whose records start at
    ``base``, one level at a time across the samples (``at[j]`` for sample ``start + j``)."""
    for j in range(stop - start):
        at[j] = base
    for _ in range(depth):
        for j in range(stop - start):
            k = at[j]
            at[j] = 2 * k - base + 2 - compare(mode, values[start + j, records[k, 0]], splits[k, column])


@jit
def heap_walk_block(values, start, stop, records, splits, column, depth, mode, slots, leaves):
    """:func:`walk_block` for trees padded to ``depth`` levels: ``slots[tree, i]`` is the leaf a
    walk ending at bottom position ``i`` reached.

    The walks go one level at a time across independent walks, with no branch on the data, so
    the core overlaps them: across the trees for fewer than four samples (one sample through
    300 trees of depth 3, the call included: 1.9-2.2 µs tree by tree, 1.3 level by level),
    else across the block's samples, tree by tree (that tree's records stay in cache).  Each
    descent is compiled once per comparison mode: a mode read inside the loop cost a quarter
    of the walk (LLVM did not hoist it).  The two descents and their mode chains stay apart: one
    inlined function holding both measured 25 % slower on the single row."""
    trees = slots.shape[0]
    interior = (1 << depth) - 1
    if stop - start < 4:
        at = np.empty(trees, np.int64)
        for n in range(start, stop):
            if mode == 0:
                across_trees(values, n, records, splits, column, depth, 0, interior, at)
            elif mode == 1:
                across_trees(values, n, records, splits, column, depth, 1, interior, at)
            elif mode == 2:
                across_trees(values, n, records, splits, column, depth, 2, interior, at)
            elif mode == 3:
                across_trees(values, n, records, splits, column, depth, 3, interior, at)
            elif mode == 4:
                across_trees(values, n, records, splits, column, depth, 4, interior, at)
            else:
                across_trees(values, n, records, splits, column, depth, 5, interior, at)
            for tree in range(trees):
                leaves[tree, n - start] = slots[tree, at[tree] - tree * interior - interior]
        return
    at = np.empty(stop - start, np.int64)
    for tree in range(trees):
        base = tree * interior
        if mode == 0:
            across_samples(values, start, stop, base, records, splits, column, depth, 0, at)
        elif mode == 1:
            across_samples(values, start, stop, base, records, splits, column, depth, 1, at)
        elif mode == 2:
            across_samples(values, start, stop, base, records, splits, column, depth, 2, at)
        elif mode == 3:
            across_samples(values, start, stop, base, records, splits, column, depth, 3, at)
        elif mode == 4:
            across_samples(values, start, stop, base, records, splits, column, depth, 4, at)
        else:
            across_samples(values, start, stop, base, records, splits, column, depth, 5, at)
        for j in range(stop - start):
            leaves[tree, j] = slots[tree, at[j] - base - interior]


@jit
def heap_walk(values, records, splits, column, depth, mode, slots):
    """:func:`walk` for padded trees."""
    samples, trees = values.shape[0], slots.shape[0]
    out = np.empty((samples, trees), np.int32)
    leaves = np.empty((trees, BLOCK), np.int32)
    for start in range(0, samples, BLOCK):
        stop = min(start + BLOCK, samples)
        heap_walk_block(values, start, stop, records, splits, column, depth, mode, slots, leaves)
        out[start:stop, :] = leaves[:, : stop - start].T
    return out


@jit
def heap_scores(
    values, records, splits, column, depth, mode, slots, entry_start, entry_target, entry_weight, how,
    result, present, start, stop,
):  # fmt: skip
    """:func:`scores` for padded trees."""
    leaves = np.empty((slots.shape[0], min(BLOCK, stop - start)), np.int32)
    for first in range(start, stop, BLOCK):
        last = min(first + BLOCK, stop)
        heap_walk_block(values, first, last, records, splits, column, depth, mode, slots, leaves)
        gather_block(leaves, first, last, entry_start, entry_target, entry_weight, how, result, present)


@jit
def softmax_classes(scores, base, best, probabilities):  # pragma: no cover - compiled
    """A multi-class forest's finish, row by row: ``base`` (one per class, or empty) added to
    ``scores`` in place, ``best[r]`` the first class with the row's largest score (the first
    NaN where there is one, as ``np.argmax``), ``probabilities[r]`` the row's softmax computed
    in float64 and rounded to float32 (NaN anywhere makes the row NaN, as numpy's passes do).

    Why: the same steps in numpy are a dozen calls on a 1×3 table at batch 1, 5 µs of a
    gradient-boosted classifier's 12; here, one."""
    rows, classes = scores.shape
    added = base.shape[0] > 0
    wide = np.empty(classes, np.float64)
    for r in range(rows):
        row = scores[r]
        if added:
            for j in range(classes):
                row[j] += base[j]
        top = 0
        for j in range(classes):
            if row[j] != row[j]:
                top = j
                break
            if row[j] > row[top]:
                top = j
        best[r] = top
        largest = np.float64(row[top])  # the row's maximum, or its first NaN
        total = 0.0
        for j in range(classes):
            wide[j] = np.exp(np.float64(row[j]) - largest)
            total += wide[j]
        for j in range(classes):
            probabilities[r, j] = wide[j] / total


_parallel_jit = compiler(parallel=True)


@_parallel_jit
def scores_parallel(
    values, nodes, splits, column, roots, depth, simple, rules, entry_start, entry_target, entry_weight, how,
    result, present, parts,
):  # fmt: skip
    """:func:`scores` over all samples in ``parts`` row ranges on numba's threading layer
    (``kernels._team``), whose threads wait for the next region by spinning a while: Python
    threads sleep between runs, and a core woken from sleep ran its half of a 600 µs forest
    no sooner than the calling thread finished its own (measured after 30 ms pauses)."""
    rows = values.shape[0]
    for part in numba.prange(parts):
        scores(
            values, nodes, splits, column, roots, depth, simple, rules, entry_start, entry_target, entry_weight,
            how, result, present, rows * part // parts, rows * (part + 1) // parts,
        )  # fmt: skip


@_parallel_jit
def heap_scores_parallel(
    values, records, splits, column, depth, mode, slots, entry_start, entry_target, entry_weight, how,
    result, present, parts,
):  # fmt: skip
    """:func:`scores_parallel` for padded trees."""
    rows = values.shape[0]
    for part in numba.prange(parts):
        heap_scores(
            values, records, splits, column, depth, mode, slots, entry_start, entry_target, entry_weight,
            how, result, present, rows * part // parts, rows * (part + 1) // parts,
        )  # fmt: skip
