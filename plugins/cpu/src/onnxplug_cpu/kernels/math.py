"""Linear algebra and scans: Gemm, MatMul, Einsum, Det, CumSum, CumProd.

Narrow floats (float16, bfloat16) are multiplied and accumulated in float32 and rounded back
once, which is both faster (BLAS) and closer to what accelerators with wide accumulators produce.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from . import _f32_matmul, _gemv
from ._numeric import as_dtype, widen
from ._registry import kernel
from ._split_rows import one_blas_thread, thread_budget
from ._team import team_joined

#: Float products with ``low <= multiply-adds < high`` run on one BLAS thread
#: (``_split_rows.one_blas_thread``): OpenBLAS would thread them, yet a second thread gains
#: little there and leaves a worker polling.  Below ``low`` OpenBLAS stays on one thread itself.
_SMALL_PRODUCT = (1 << 16, 1 << 22)


def _product(left, right):
    """``left @ right``, on one BLAS thread when the product is small (see :data:`_SMALL_PRODUCT`).

    A single float32 row times a matrix stored transposed (Gemm's ``transB``: a CNN's classifier)
    inside a run on numba's team, whose BLAS is pinned to one thread, is split over the team
    instead (``kernels._gemv``: ShuffleNet's 544×1000 classifier, 250-300 → about 140 µs)."""
    single_row = left.ndim == 2 and right.ndim == 2 and left.shape[0] == 1 and right.T.flags.c_contiguous
    if single_row and left.dtype == right.dtype == np.float32 and team_joined() and _gemv.compiled() is not None:
        parts = max(1, min(thread_budget(), right.shape[1] // 64))
        return _gemv.row_times_matrix(left[0], right.T, parts)[None, :]
    macs = left.size * (right.shape[-1] if right.ndim > 1 else 1)
    if _SMALL_PRODUCT[0] <= macs < _SMALL_PRODUCT[1] and left.dtype.kind == "f":
        with one_blas_thread():
            return np.matmul(left, right)
    return np.matmul(left, right)


def gemm_product(a, b, c, alpha, beta, trans_a, trans_b, weights=None):
    """``alpha · op(A) · op(B) + beta · C`` in ``A``'s type; ``weights`` (``_f32_matmul.prepare`` of
    a constant ``B`` as stored) runs it on the tiles where they apply (``numerics.Gemm``)."""
    if a.ndim != 2 or b.ndim != 2:
        raise InvalidArgument(f"Gemm: A and B must be 2-D, got shapes {a.shape} and {b.shape}")
    if a.dtype != b.dtype or (c is not None and c.dtype != a.dtype):
        raise InvalidArgument("Gemm: A, B and C must have the same type")
    dtype = a.dtype
    left = widen(a).T if trans_a else widen(a)
    right = widen(b).T if trans_b else widen(b)
    if left.shape[1] != right.shape[0]:
        raise InvalidArgument(f"Gemm: inner dimensions differ: op(A) is {left.shape}, op(B) is {right.shape}")
    with np.errstate(all="ignore"):
        if weights is not None and weights.applies(left):
            if c is not None and alpha == 1 and beta == 1 and c.dtype == np.float32:
                # C goes in first and the tiles add the product to it: no pass of its own
                return weights.times(left, _broadcast_c(c, (left.shape[0], right.shape[1])))
            result = weights.times(left)
        else:
            result = _product(left, right)
        if alpha != 1:
            result = result * result.dtype.type(alpha)
        if c is not None and beta != 0:
            bias = _broadcast_c(widen(c), result.shape)
            result = result + (bias if beta == 1 else bias * result.dtype.type(beta))
    return as_dtype(result, dtype)


def _broadcast_c(c, shape):
    try:
        return np.broadcast_to(c, shape)
    except ValueError:
        raise InvalidArgument(f"Gemm: C of shape {c.shape} does not broadcast to {shape}") from None


class Gemm:
    """One Gemm node's product (``Gemm``, com.microsoft ``FusedGemm``; public as
    ``numerics.Gemm``): ``alpha · op(A) · op(B) + beta · C`` by :func:`gemm_product`, its
    attributes fixed and a constant float32 ``B`` stored as ``op(B)`` (``transB=0``) prepared for
    the tiles once (``kernels._f32_matmul``); a transposed one stays numpy's (the tiles would
    need a copy).  Called as ``gemm(a, b, c)``.

    Why one class for both: FusedGemm computed ``a @ b`` with numpy, whose BLAS a run on the
    convolutions' team has pinned to one thread: VGG-19's 411 MB classifier was read by one core
    (12.8 ms against onnxruntime's 8.9), where this Gemm splits a single row over the team."""

    __slots__ = ("alpha", "beta", "trans_a", "trans_b", "weights")

    def __init__(self, b: np.ndarray | None, alpha: float = 1.0, beta: float = 1.0, trans_a=0, trans_b=0) -> None:
        self.alpha, self.beta, self.trans_a, self.trans_b = alpha, beta, trans_a, trans_b
        self.weights = None if trans_b or b is None else _f32_matmul.prepare(b)

    def __call__(self, a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None) -> np.ndarray:
        """:raises InvalidArgument: operands that are not 2-D, of different types, or whose
        inner dimensions or ``C`` do not fit."""
        if self.trans_b and not self.trans_a and c is not None and self.alpha == 1 and self.beta == 1:
            y = _classifier(a, b, c)
            if y is not None:
                return y
        return gemm_product(a, b, c, self.alpha, self.beta, self.trans_a, self.trans_b, self.weights)


def _classifier(a, b, c):
    """A CNN's classifier, ``a @ b.T + c`` for one float32 row ``a`` ``(1, K)``, ``b`` ``(N, K)``
    stored C-contiguous and ``c`` of ``N`` values, inside a run on numba's team, in one compiled
    call (``_gemv.row_times_matrix_plus``: the same bits as :func:`gemm_product`'s product then
    add); ``None`` for anything else, which :func:`gemm_product` computes."""
    f32 = np.float32
    if a.dtype != f32 or b.dtype != f32 or c.dtype != f32 or a.ndim != 2 or b.ndim != 2 or a.shape[0] != 1:
        return None
    rows = b.shape[0]
    if a.shape[1] != b.shape[1] or not b.flags.c_contiguous or c.shape not in ((rows,), (1, rows)):
        return None
    if not team_joined():
        return None
    parts = max(1, min(thread_budget(), rows // 64))
    return _gemv.row_times_matrix_plus(a[0], b, np.ascontiguousarray(c).reshape(rows), parts)


@kernel("Gemm", since=(11, 13), factory=True)
def gemm(ctx, *, alpha, beta, transA, transB):
    return Gemm(ctx.constant(1), alpha, beta, transA, transB)


@kernel("Gemm", since=(7, 9))
def gemm_7(a, b, c, *, alpha, beta, transA, transB):
    return gemm_product(a, b, c, alpha, beta, transA, transB)


@kernel("Gemm", since=(1, 6))
def gemm_1(a, b, c, *, alpha, beta, transA, transB, broadcast):
    # Before opset 7, C had to match the output unless broadcast=1; numpy's rule is a superset.
    return gemm_product(a, b, c, alpha, beta, transA, transB)


def _matmul(a, b):
    if a.dtype != b.dtype:
        raise InvalidArgument(f"MatMul: input types differ ({a.dtype} and {b.dtype})")
    if a.ndim == 0 or b.ndim == 0:
        raise InvalidArgument(f"MatMul: inputs must have rank >= 1, got shapes {a.shape} and {b.shape}")
    try:
        with np.errstate(all="ignore"):
            return as_dtype(_product(widen(a), widen(b)), a.dtype)
    except ValueError as error:
        # Fail, as onnxruntime raises for dimensions that do not fit.
        raise Fail(f"MatMul: shapes {a.shape} and {b.shape} do not match: {error}") from None


@kernel("MatMul", since=(1, 9, 13), factory=True)
def matmul(ctx):
    """A constant float32 matrix ``B`` (a transformer's weights) is multiplied on the tiles
    (``kernels._f32_matmul``); everything else is numpy's product."""
    weights = _f32_matmul.prepare(ctx.constant(1))
    if weights is None:
        return _matmul

    def run(a, b):
        if weights.applies(a):
            return weights.times(a)
        return _matmul(a, b)

    return run


@kernel("Einsum", since=(12, 28))
def einsum(*inputs, equation):
    if not inputs:
        raise InvalidArgument("Einsum: needs at least one input")
    dtype = inputs[0].dtype
    if any(x.dtype != dtype for x in inputs):
        raise InvalidArgument("Einsum: all inputs must have the same type")
    try:
        with np.errstate(all="ignore"):
            result = np.einsum(equation.replace(" ", ""), *[widen(x) for x in inputs], optimize=len(inputs) > 2)
    except ValueError as error:
        raise InvalidArgument(f"Einsum: equation {equation!r} does not fit the inputs: {error}") from None
    return as_dtype(result, dtype)


@kernel("Det", since=(11, 22))
def det(x):
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise InvalidArgument(f"Det: input must be [..., M, M], got shape {x.shape}")
    work = widen(x)
    return as_dtype(np.linalg.det(work), x.dtype)


def _scan(op, ufunc, identity, x, axis, exclusive, reverse):
    """Inclusive or exclusive running sum/product along ``axis``, optionally from the end."""
    axis = np.asarray(axis)
    if axis.size != 1 or axis.dtype.kind not in "iu":
        raise InvalidArgument(f"{op}: axis must be a single integer, got {axis!r}")
    axis = int(axis.reshape(()))
    rank = max(x.ndim, 1)
    if not -rank <= axis < rank:
        raise InvalidArgument(f"{op}: axis {axis} is out of range for rank {x.ndim}")
    if x.ndim == 0:
        return _scan(op, ufunc, identity, x.reshape(1), 0, exclusive, reverse).reshape(())
    axis %= x.ndim
    work = widen(x)
    if reverse:
        work = np.flip(work, axis)
    with np.errstate(all="ignore"):
        result = ufunc.accumulate(work, axis=axis, dtype=work.dtype)
    if exclusive:
        # Shift by one along the axis, starting from the identity.
        head = np.full(result.shape[:axis] + (1,) + result.shape[axis + 1 :], identity, dtype=result.dtype)
        result = np.concatenate([head, np.delete(result, -1, axis=axis)], axis=axis)
    if reverse:
        result = np.flip(result, axis)
    return as_dtype(result, x.dtype)


@kernel("CumSum", since=(11, 14))
def cumsum(x, axis, *, exclusive, reverse):
    return _scan("CumSum", np.add, 0, x, axis, exclusive, reverse)


@kernel("CumProd", since=(26,))
def cumprod(x, axis, *, exclusive, reverse):
    return _scan("CumProd", np.multiply, 1, x, axis, exclusive, reverse)
