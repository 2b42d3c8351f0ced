"""Exact (erf) Gelu in float32 as one compiled pass, the bias add fused in (numba).

Why: in numpy (``_numeric.gelu_single``) Gelu is about fifteen passes over the tensor, and
BiasGelu one more for the add; on MiniLM that was a third of a run (2.8 ms for 128×1536 values,
~14 ns a value).  Here each value is read once, computed in registers and written once.

The arithmetic is ``gelu_single``'s: ``erfc(a) ~ t exp(P(t) - a^2)`` with ``t = 1/(1 + a/2)``
and the same ten-coefficient fit (relative error under 1.2e-7 of erfc), ``x/2 erfc(-x/sqrt 2)``
below zero and ``x/2 (2 - erfc(x/sqrt 2))`` above.  ``exp`` is :mod:`._vexp`'s, branch-free (libm's
scalar ``expf`` would keep the loop scalar), and ``-a^2`` is ``-(x/2) x`` fused into one rounding,
so the result is more accurate than the numpy path's: relative error 8.1e-7 for |x| < 4 (numpy
1.7e-6) and 4.1e-6 on [-13, -4] (numpy 1.9e-5).  Every step is a plain float32 operation and
``fastmath={"contract"}`` the only flag, so LLVM vectorises the loop (16 lanes with AVX-512;
check ``compiled().inspect_asm()`` for ``zmm`` registers in a process whose ``NUMBA_CACHE_DIR``
is empty, as numba cannot show the assembly of a loop loaded from its cache).

NaN stays NaN (it multiplies the result); ``+inf`` gives ``inf``; ``-inf`` gives NaN as the
numpy path does (``-inf * 0``).  ``None`` without numba or with ``ONNXPLUG_CPU_JIT=0``: callers
use the numpy path.

One thread, not row blocks over Python threads (``_split_rows``): Gelu follows a MatMul, whose
OpenBLAS workers keep polling for about a tenth of a second, so a second block competes with
them for the other core (MatMul 128×384·384×1536 then BiasGelu: the BiasGelu took 208 µs in two
blocks against 175 µs in one).  Inside a run that started numba's team (``kernels._team``: its
MatMuls run on the tiles, ``kernels._f32_matmul``, and BLAS is pinned to one thread) the rows
split over the team instead.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._jit import compiler
from ._team import team_parts

__all__ = ["compiled", "gelu_float32", "tanh_gelu_float32"]

_NO_BIAS = np.zeros(0, dtype=np.float32)


@functools.cache
def compiled(form: str = "erf") -> Any | None:
    """``gelu_rows(x, bias, out)``: ``out[i, j] = gelu(x[i, j] + bias[j])`` for ``x`` and ``out``
    ``(rows, cols)`` float32 (``out`` may be ``x``) and ``bias`` ``(cols,)`` float32 or empty
    (no bias); ``form="tanh"``: the tanh approximation (FastGelu); or ``None``."""
    if compiler() is None:
        return None
    from . import _gelu_loops

    return _gelu_loops.tanh_gelu_rows if form == "tanh" else _gelu_loops.gelu_rows


@functools.cache
def compiled_parallel(form: str = "erf") -> Any:
    """:func:`compiled`'s loop with the rows split into ``parts`` on numba's threading layer:
    ``gelu_rows_parallel(x, bias, out, parts)`` (the caller has a compiled loop)."""
    from . import _gelu_loops

    return _gelu_loops.tanh_gelu_rows_parallel if form == "tanh" else _gelu_loops.gelu_rows_parallel


def gelu_float32(x: np.ndarray, bias: np.ndarray | None = None, form: str = "erf") -> np.ndarray | None:
    """Gelu of ``x + bias`` in float32 (a new array of ``x``'s shape), the add in float32 as
    numpy's; ``bias`` is 1-D with ``x``'s last dimension; ``form`` ``"erf"`` (exact) or
    ``"tanh"``.  ``None`` when there is no compiled loop (the caller computes it in numpy)."""
    loop = compiled(form)
    if loop is None:
        return None
    x = np.asarray(x)
    fresh = x.dtype != np.float32 or not x.flags.c_contiguous
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = x if fresh else np.empty_like(x)  # a copy made here is written over in place
    if x.size == 0:
        return out
    if bias is None:
        rows, bias = x.reshape(1, -1) if x.ndim < 2 else x.reshape(-1, x.shape[-1]), _NO_BIAS
    else:
        bias = np.ascontiguousarray(bias, dtype=np.float32).reshape(-1)
        if x.ndim == 0 or bias.shape[0] != x.shape[-1]:
            raise ValueError(f"gelu bias of shape {bias.shape} does not match x's last dimension {x.shape[-1:]}")
        rows = x.reshape(-1, x.shape[-1])
    parts = team_parts(x.size, rows.shape[0])
    if parts > 1:
        compiled_parallel(form)(rows, bias, out.reshape(rows.shape), parts)
    else:
        loop(rows, bias, out.reshape(rows.shape))
    return out


def tanh_gelu_float32(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray | None:
    """:func:`gelu_float32` of the tanh approximation (``_gelu_loops.tanh_gelu_rows``)."""
    return gelu_float32(x, bias, "tanh")
