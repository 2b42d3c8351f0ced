"""Matrix products: Gemm, MatMul."""

from __future__ import annotations

import numpy as np

from ._registry import kernel


@kernel("Gemm", since=(7, 9, 11, 13))
def gemm(a, b, c=None, *, alpha, beta, transA, transB):
    a = a.T if transA else a
    b = b.T if transB else b
    result = a @ b
    if alpha != 1:
        result = result * a.dtype.type(alpha)
    if c is not None and beta != 0:
        result = result + (c if beta == 1 else c * c.dtype.type(beta))
    return result.astype(a.dtype, copy=False)


@kernel("MatMul", since=(1, 9, 13))
def matmul(a, b):
    return np.matmul(a, b)
