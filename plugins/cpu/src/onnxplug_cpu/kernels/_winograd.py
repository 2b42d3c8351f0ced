"""Winograd F(m×m, 3×3) convolution for 3×3, stride-1, dilation-1, ungrouped 2-D Conv.

Why: im2col multiplies every input cell 9 times per output channel and copies the input 9 times;
Winograd's minimal filtering computes an m×m output tile from an (m+2)×(m+2) input tile with
(m+2)² products per channel pair instead of 9m², so F(4×4) needs 36 where the direct method needs
144 (4×), F(2×2) 16 where it needs 36 (2.25×).  Every step is a matrix product on contiguous data
(``kernels._f32_products.matmul``: the compiled tiles where available, else numpy's BLAS), in an order
that needs no transposing copy between them:

1. the input tiles (overlapping by 2) are gathered once, tile-cell major: ``d`` ``(α, α, C, N·T)``;
2. ``V = Bᵀ d B`` as one matmul with ``Bᵀ ⊗ Bᵀ`` over the flattened tiles;
3. per tile cell, ``(M, C) @ (C, N·T)``: α² matmuls in one batched call (``U = G w Gᵀ`` is
   computed once, at session creation, by :func:`winograd_weights`);
4. ``Y = Aᵀ M A`` as one matmul with ``Aᵀ ⊗ Aᵀ``, then one copy into ``(N, M, H, W)`` that also
   adds the bias (a separate ``y += b`` would be one more pass over the output).

Accuracy: the transforms are computed in float32; F(4×4) with the points 0, ±1, ±2 amplifies
rounding by about an order of magnitude over the direct sum (relative errors ~1e-6 on random
layers, within onnxruntime's and the ONNX node cases' float32 tolerances), F(2×2) barely at all.
float64 convolutions never take this path (they are exact-sum references for many users).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ._f32_products import matmul

__all__ = ["copy_plus_bias", "winograd_weights", "winograd_conv"]

# Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks" (2016), points 0, ±1, ±2, ∞.
_F4 = (
    np.array(
        [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0]]
        + [[0, 4, 0, -5, 0, 1]],
        dtype=np.float64,
    ),
    np.array(
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6]]
        + [[1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        dtype=np.float64,
    ),
    np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]], dtype=np.float64),
)
# Points 0, ±1, ∞.
_F2 = (
    np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64),
    np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64),
    np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64),
)
_MATRICES = {2: _F2, 4: _F4}
# Both sides of each transform as one matrix over the flattened tile (Bᵀ ⊗ Bᵀ: α² × α²,
# Aᵀ ⊗ Aᵀ: m² × α²): one matmul with a 36-long inner dimension runs near BLAS speed, where two
# matmuls with a 6-long one are memory-bound passes.
_BT = {m: np.kron(bt, bt).astype(np.float32) for m, (bt, _, _) in _MATRICES.items()}
_AT = {m: np.kron(at, at).astype(np.float32) for m, (_, _, at) in _MATRICES.items()}


# G ⊗ G: α² × 9, both sides of the filter transform over the flattened 3×3 filter.
_G = {m: np.kron(g, g) for m, (_, g, _) in _MATRICES.items()}


def winograd_weights(w: np.ndarray, m: int) -> np.ndarray:
    """``(M, C, 3, 3)`` filters as ``U = G w Gᵀ``, laid out ``(α², M, C)`` float32 (α = m + 2).

    One float64 matmul with ``G ⊗ G`` lands in that layout directly (two tensordots with a
    3-long inner dimension and a transposing copy took most of ResNet-50's session creation).
    """
    mm, c = w.shape[:2]
    flat = w.reshape(mm * c, 9).astype(np.float64, copy=False)
    u = np.matmul(_G[m], flat.T)  # (α², M·C)
    return u.astype(np.float32).reshape(-1, mm, c)


def winograd_conv(
    x: np.ndarray, u: np.ndarray, m: int, begin: tuple[int, int], out: tuple[int, int], bias: np.ndarray | None = None
) -> np.ndarray:
    """The convolution of float32 ``x`` ``(N, C, H, W)`` (``begin`` = top/left pads) with filters
    :func:`winograd_weights` ``u``, cropped to ``out`` = ``(OH, OW)``, plus the float32 per-channel
    ``bias`` if given (added in the final copy, not in a pass of its own); returns ``(N, M, OH, OW)``."""
    n, c, h, w = x.shape
    alpha = m + 2
    th, tw = -(-out[0] // m), -(-out[1] // m)
    # Zeros beyond the declared bottom/right pads only reach output cells that are cropped away.
    padded = np.zeros((n, c, th * m + 2, tw * m + 2), dtype=np.float32)
    rows, cols = min(h, th * m + 2 - begin[0]), min(w, tw * m + 2 - begin[1])
    padded[:, :, begin[0] : begin[0] + rows, begin[1] : begin[1] + cols] = x[:, :, :rows, :cols]
    sn, sc, sh, sw = padded.strides
    tiles = as_strided(padded, (alpha, alpha, c, n, th, tw), (sh, sw, sc, sn, sh * m, sw * m), writeable=False)
    d = np.ascontiguousarray(tiles).reshape(alpha * alpha, c * n * th * tw)
    v = matmul(_BT[m], d)  # Bᵀ d B for every tile and channel
    prod = matmul(u, v.reshape(alpha * alpha, c, n * th * tw))  # (α², M, N·T)
    mm = u.shape[1]
    y = matmul(_AT[m], prod.reshape(alpha * alpha, mm * n * th * tw))  # Aᵀ · A: (m², M·N·T)
    y = y.reshape(m, m, mm, n, th, tw).transpose(3, 2, 4, 0, 5, 1).reshape(n, mm, th * m, tw * m)
    return copy_plus_bias(y[:, :, : out[0], : out[1]], bias)


def copy_plus_bias(view: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """A contiguous copy of ``view`` ``(N, M, ...)``, with the per-channel ``bias`` added on the way."""
    if bias is None:
        return np.ascontiguousarray(view)
    return np.add(view, bias.reshape((1, -1) + (1,) * (view.ndim - 2)), out=np.empty(view.shape, view.dtype))
