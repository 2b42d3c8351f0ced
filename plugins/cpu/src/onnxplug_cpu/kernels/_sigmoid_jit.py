"""Sigmoid and SiLU (``x * sigmoid(alpha * x)``) of float32 arrays in one compiled pass.

Why: numpy makes ``1 / (1 + exp(-x))`` four passes over the map (negate, exp, add, reciprocal)
and a SiLU one more pass and one more array for its Mul; YOLO-style detectors follow every
convolution with a SiLU, and those passes were 19 % of the ``yolo`` benchmark model's run.
numba alone does not help: its ``exp`` is a scalar libm call per element (5× slower than numpy's
SIMD exp), and a division carries a zero-division check, either of which keeps LLVM from
vectorising the loop.  So the loop (``kernels._sigmoid_loops``) uses the branch-free float32
``exp`` of ``kernels._vexp`` (the one Gelu and softmax use) and ``np.divide``.

Results are within a few ulp of ``x / (1 + exp(-alpha x))`` in float64 (the tests check 1e-6
relative); where ``exp`` overflows (``alpha x`` below about -88.4) the power of two is +inf and
the result is an exact (signed) 0, as numpy's; NaN stays NaN.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._jit import compiler
from ._split_rows import thread_budget
from ._team import team_joined

__all__ = ["BLOCK", "MIN_ELEMENTS", "PART_ELEMENTS", "compiled", "logistic", "silu"]

#: Elements per block of the compiled loop: its copy of the block, the input and the output stay in L1.
BLOCK = 2048


@functools.cache
def compiled() -> tuple[Any, Any] | None:
    """``(sigmoid(x, out), silu(x, alpha, out))`` on contiguous float32 arrays of one shape
    (``out`` may be ``x``), or ``None`` without numba or with ``ONNXPLUG_CPU_JIT=0``."""
    if compiler() is None:
        return None
    from ._sigmoid_loops import logistic_flat

    def sigmoid(x, out):
        logistic_flat(x.reshape(-1), np.float32(-1.0), False, out.reshape(-1))

    def silu(x, alpha, out):
        logistic_flat(x.reshape(-1), np.float32(-alpha), True, out.reshape(-1))

    return sigmoid, silu


#: Smaller arrays keep numpy's passes: the first compiled call loads numba (about half a
#: second and 60 MiB, once per process), which a few thousand elements never pay back.
MIN_ELEMENTS = 4096
#: Elements per thread from which a run already on numba's team (``kernels._team``) splits the
#: pass over it: YOLO's SiLU after every convolution ran on one core beside an idle one.
PART_ELEMENTS = 1 << 15


def logistic(x: np.ndarray, alpha: float | None = None, out: np.ndarray | None = None) -> np.ndarray | None:
    """``sigmoid(x)`` (``alpha`` None) or ``x * sigmoid(alpha * x)`` of a contiguous float32
    ``x`` into ``out`` (a fresh array when ``None``; ``x`` itself is allowed), or ``None`` when
    the compiled loops do not apply (another dtype or layout, a small array, no numba)."""
    if x.dtype != np.float32 or x.size < MIN_ELEMENTS or not x.flags.c_contiguous:
        return None
    kernels = compiled()
    if kernels is None:
        return None
    if out is None:
        out = np.empty(x.shape, np.float32)
    parts = min(thread_budget(), x.size // PART_ELEMENTS) if x.size >= 2 * PART_ELEMENTS else 1
    if parts > 1 and team_joined():  # between the convolutions of a run on numba's team
        from ._sigmoid_loops import logistic_parallel

        scale = np.float32(-1.0 if alpha is None else -alpha)
        logistic_parallel(x.reshape(-1), scale, alpha is not None, out.reshape(-1), parts)
    elif alpha is None:
        kernels[0](x, out)
    else:
        kernels[1](x, np.float32(alpha), out)
    return out


def silu(x: np.ndarray, alpha: float = 1.0, out: np.ndarray | None = None) -> np.ndarray:
    """``x * sigmoid(alpha * x)`` (SiLU, Swish, com.microsoft QuickGelu) of a float array, into
    ``out`` when given (``x`` itself allowed), computed as ``x / (1 + exp(-alpha x))``: the
    compiled pass (:func:`logistic`) where it applies, else numpy's."""
    y = logistic(x, alpha, out)
    if y is not None:
        return y
    e = np.multiply(x, x.dtype.type(-alpha)) if alpha != 1.0 else np.negative(x)
    with np.errstate(over="ignore"):
        np.exp(e, out=e)
    e += 1
    return np.divide(x, e, out=e if out is None else out)
