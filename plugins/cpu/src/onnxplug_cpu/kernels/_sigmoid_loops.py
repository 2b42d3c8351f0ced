"""The compiled loop of :mod:`._sigmoid_jit` (imported only when :func:`._jit.compiler` gives a
decorator: this module needs numba).  Module globals only, as in :mod:`._vexp`, whose
vectorisable ``exp`` it shares with Gelu and softmax."""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler
from ._sigmoid_jit import BLOCK
from ._vexp import exp_value, jit

_ONE = np.float32(1)


@jit
def logistic_flat(flat, scale, with_x, dest):  # pragma: no cover - compiled
    """``dest = (flat if with_x else 1) / (1 + exp(scale * flat))`` over 1-D float32 arrays.

    Block by block through a local copy, so that ``dest`` may be ``flat``: an output that may
    alias its input keeps LLVM's loop scalar (8× slower).  ``np.divide``: no zero-division branch."""
    xs = np.empty(BLOCK, np.float32)
    for start in range(0, flat.size, BLOCK):
        stop = min(flat.size, start + BLOCK)
        block, target = flat[start:stop], dest[start:stop]
        for j in range(stop - start):
            xs[j] = block[j]
        for j in range(stop - start):
            v = xs[j]
            target[j] = np.divide(v if with_x else _ONE, _ONE + exp_value(scale * v))


@compiler(parallel=True)
def logistic_parallel(flat, scale, with_x, dest, parts):  # pragma: no cover - compiled
    """:func:`logistic_flat` split into ``parts`` ranges on numba's threading layer; each element
    is computed as there (the same bits)."""
    for part in numba.prange(parts):
        lo, hi = flat.size * part // parts, flat.size * (part + 1) // parts
        logistic_flat(flat[lo:hi], scale, with_x, dest[lo:hi])
