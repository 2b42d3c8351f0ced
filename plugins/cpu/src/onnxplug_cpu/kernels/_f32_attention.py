"""Attention's core, ``softmax(scale · q kᵀ + term) v`` per head, one block of query rows at a
time: the scores of a block stay in the core's cache between the two products.

Why: done as three whole-array steps (``kernels._f32_matmul.batched`` for ``q kᵀ``, numpy's
scale and mask passes, the softmax, ``batched`` for ``p v``, then the heads merged back into
``(B, S, N·H)`` by a transposing copy), a ViT-B layer's scores (12 heads of 197 × 197, 1.9 MB)
went out to the shared cache and came back four times, and each step was a parallel region of
its own.  Here one compiled call (``kernels._f32_attention_loops.attend_parallel``) takes every
block of :data:`BLOCK_ROWS` query rows of every head in turn: the block's scores on the tile
into a scratch of a few kilobytes, scaled and the mask or bias added, its softmax
(``kernels._softmax_loops``), then its product with the head's values stored at the head's
columns of the merged output.

Numerics: the products are the tiles' (each sum ``k`` in order, one rounding a multiply-add),
the scale and the term are added with one rounding each, and the softmax is the compiled one,
so the output has the same bits as the three-step path; only the order in which blocks are
computed differs, and no value depends on it.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from . import _f32_matmul
from ._team import parallel_ready

__all__ = ["BLOCK_ROWS", "attend_merged"]

#: Query rows a block computes at once: four row tiles, whose scores for 197 keys (ViT-B) take
#: 19 KB, in L1 beside the head's keys and values (50 KB each at 64 features, in L2).
BLOCK_ROWS = 24


@functools.cache
def loops() -> Any:
    """The compiled module ``kernels._f32_attention_loops`` (the caller has checked
    ``kernels._f32_matmul.available``)."""
    from . import _f32_attention_loops

    return _f32_attention_loops


def attend_merged(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float,
    term: np.ndarray | None = None,
    shifts: tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None] | None = None,
) -> np.ndarray | None:
    """``softmax(scale · (q + q_shift) (k + k_shift)ᵀ + term) (v + v_shift)`` for float32 ``q``
    ``(B, N, S, H)``, ``k`` and ``v`` ``(B, N, T, H)`` (views: they are laid out per head as
    the products read them, the shifts added on the way), ``term`` a float32 mask or bias
    broadcastable to ``(B, N, S, T)`` and ``shifts`` per-head biases ``(1, N, 1, H)``: an
    ``(B, S, N·H)`` array (the heads merged), or ``None`` where this path does not apply (the
    tiles off or unusable, another dtype, a term that does not broadcast so): the caller's
    steps then."""
    if q.dtype != np.float32 or k.dtype != np.float32 or v.dtype != np.float32 or q.ndim != 4:
        return None
    batch, heads, length, head_size = q.shape
    keys = k.shape[2]
    if k.shape != (batch, heads, keys, head_size) or v.shape != k.shape or min(q.size, k.size) == 0:
        return None
    if length < _f32_matmul.MIN_ROWS or not _f32_matmul.available() or not parallel_ready():
        return None
    if term is not None:
        term = _term(term, batch, heads, length, keys)
        if term is None:
            return None
    else:
        term = _NO_TERM
    groups = batch * heads
    q_shift, k_shift, v_shift = shifts or (None, None, None)
    if k_shift is not None:
        k_shift = np.swapaxes(k_shift, -1, -2)
    parts = _f32_matmul.team_parts(groups, length, keys)
    laid_out, per_group = _f32_matmul.laid_out, _f32_matmul.per_group
    left = laid_out(q.reshape(groups, length, head_size), parts, per_group(q_shift, q.shape, groups))
    kt = np.swapaxes(k, -1, -2)
    right = laid_out(kt.reshape(groups, head_size, keys), parts, per_group(k_shift, kt.shape, groups))
    values = laid_out(v.reshape(groups, keys, head_size), parts, per_group(v_shift, v.shape, groups))
    out = np.empty((batch, length, heads * head_size), dtype=np.float32)
    scratch = np.empty((parts, min(BLOCK_ROWS, length), keys), dtype=np.float32)
    offsets = (_offsets(head_size, keys), _offsets(keys, head_size))  # rows of kᵀ, of v
    operands = (left, right, values, term, heads, np.float32(scale), out)
    loops().attend_parallel(*operands, *offsets, scratch, BLOCK_ROWS, parts)
    return out


_NO_TERM = np.zeros((0, 1, 1, 1), dtype=np.float32)
_NO_TERM.flags.writeable = False


def _term(term: np.ndarray, batch: int, heads: int, length: int, keys: int) -> np.ndarray | None:
    """``term`` as a C-contiguous float32 ``(B, 1 or N, S, T)`` array, or ``None`` where it does
    not broadcast to ``(B, N, S, T)``."""
    if term.dtype != np.float32 or term.ndim > 4:
        return None
    term = term.reshape((1,) * (4 - term.ndim) + term.shape)
    try:
        shape = np.broadcast_shapes(term.shape, (batch, heads, length, keys))
    except ValueError:
        return None
    if shape != (batch, heads, length, keys):
        return None
    per_head = heads if term.shape[1] == heads else 1
    return np.ascontiguousarray(np.broadcast_to(term, (batch, per_head, length, keys)))


@functools.lru_cache(maxsize=64)
def _offsets(depth: int, width: int) -> np.ndarray:
    """``k · width`` for the ``depth`` rows ``k`` of a product's right operand (read-only: kept)."""
    offsets = np.arange(depth, dtype=np.int64) * width
    offsets.flags.writeable = False
    return offsets
