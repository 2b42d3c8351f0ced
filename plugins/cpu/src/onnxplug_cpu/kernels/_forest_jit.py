"""Tree-ensemble evaluation compiled with numba: walks over packed node records, four at a time.

The numpy engine in ``ml_forest`` walks every (sample, tree) pair one level per step with whole-
array operations; that costs a few microseconds of numpy overhead per level, which dominates at
batch 1 (hundreds of microseconds for a 100-tree forest) and moves big temporaries at batch
1000.  Compiled, a walk is a handful of loads and one comparison per level; blocks of samples
walk tree by tree, then their leaf weights are summed (``_forest_loops`` says how).

Numerics match the numpy engine: values compared in float64 against float64 thresholds, or in
float32 where both the input and every threshold are float32 values, which gives the same
answers (the caller converts integer inputs first), a missing value (NaN) takes the true branch where
``missing_true`` says so, and weights are added tree by tree, in order, in the leaf weights'
precision, as onnxruntime adds them.

numba is optional: without it (or with ``ONNXPLUG_CPU_JIT=0``) :func:`compiled` returns ``None``
and the numpy engine runs.  Functions are compiled once per machine (``cache=True`` keeps them
under numba's cache directory) and loaded when the first tree model's session is created.
"""

from __future__ import annotations

import functools
from typing import Any

from ._jit import compiler

__all__ = ["compiled"]


@functools.cache
def compiled() -> Any | None:
    """The compiled kernels (a module with ``walk`` and ``scores``), or ``None``
    when numba is unavailable or disabled."""
    if compiler() is None:
        return None
    from . import _forest_loops

    return _forest_loops
