"""The compiled loops of :mod:`._forest_jit` (imported only when :func:`._jit.compiler` gives a
decorator: this module needs numba).  Module-level functions only: as closures, ``aggregate``
calling ``walk`` and ``gather`` (and ``walk`` calling ``goes_true``) missed numba's on-disk cache
and were compiled again in every process, about 1 s when a tree model's session was created."""

from __future__ import annotations

import numpy as np

from ._jit import compiler

jit = compiler()
if jit is None:  # pragma: no cover - the caller checks compiler() first
    raise ImportError("numba is disabled (ONNXPLUG_CPU_JIT=0) or not installed")


@jit
def goes_true(mode, v, t, member_sets, row):
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
    if mode == 5:
        return v != t
    for k in range(member_sets.shape[1]):  # BRANCH_MEMBER: NaN padding never equals
        if member_sets[row, k] == v:
            return True
    return False


@jit
def walk(values, feature, threshold, mode, missing_true, true_next, false_next, roots, member_sets, member_row):
    """The leaf each sample reaches in each tree, ``[samples, trees]`` (leaf indices)."""
    samples, trees = values.shape[0], roots.shape[0]
    leaves = np.empty((samples, trees), np.int64)
    limit = feature.shape[0] + 1
    for n in range(samples):
        for tree in range(trees):
            node = roots[tree]
            steps = 0
            while node >= 0:
                v = values[n, feature[node]]
                if (missing_true[node] and np.isnan(v)) or goes_true(
                    mode[node], v, threshold[node], member_sets, member_row[node]
                ):
                    node = true_next[node]
                else:
                    node = false_next[node]
                steps += 1
                if steps > limit:
                    return leaves, False  # a cycle (refused at creation; never reached)
            leaves[n, tree] = -node - 1
    return leaves, True


@jit
def gather(leaves, leaf_values, leaf_has, how, zero, result, present):
    """Per target over trees: the sum (``how`` 0/1), minimum (2) or maximum (3) of the
    reached leaves' weights, into ``result`` (zeros where no leaf has a weight for a target
    under min/max), and whether any reached leaf has one into ``present``.  ``zero`` is 0 in
    the weights' precision, which the sums keep."""
    samples, trees = leaves.shape
    targets = leaf_values.shape[1]
    for n in range(samples):
        for t in range(targets):
            acc = zero
            has = False
            for tree in range(trees):
                leaf = leaves[n, tree]
                weight = leaf_values[leaf, t]
                if how <= 1:
                    acc += weight
                    has = has or leaf_has[leaf, t]
                elif leaf_has[leaf, t]:
                    if not has or (weight < acc if how == 2 else weight > acc):
                        acc = weight
                    has = True
            result[n, t] = acc
            present[n, t] = has


@jit
def aggregate(
    values, feature, threshold, mode, missing_true, true_next, false_next, roots, member_sets, member_row,
    leaf_values, leaf_has, how, zero, result, present,
):  # fmt: skip
    """``walk`` then ``gather`` in one call (a small batch pays the call overhead once)."""
    leaves, finished = walk(
        values, feature, threshold, mode, missing_true, true_next, false_next, roots, member_sets, member_row
    )
    if finished:
        gather(leaves, leaf_values, leaf_has, how, zero, result, present)
    return finished
