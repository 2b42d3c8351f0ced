"""float32 products with a constant right operand (a transformer's weights) on the convolutions'
AVX-512 tile (``kernels._f32_tile_ir``), the weights read where the graph stores them.

Why: a transformer's run is its MatMuls and Gemms (80-90 % of BERT-base's time), and numpy's
OpenBLAS reaches 370-410 G multiply-adds/s at two threads on this project's AMD Zen 5 machines
where onnxruntime's MLAS reaches about 510.  The tile (6 rows × 64 columns) reads the right
operand's row ``k`` at ``k · N``: each ``k`` is a new page, which the hardware's prefetchers do
not follow, so on the weights as stored it reached only 270-350 G/s.  Two changes make it
faster than OpenBLAS without a second copy of the weights (a copy packed in 64-column panels was
faster still in whole models, but held BERT-base's 340 MB of weights twice; docs/benchmarks.md,
eighth session):

- each tile of whole columns prefetches the rows it will read two rows ahead
  (``_f32_tile_ir.prefetching_tile``);
- ``k`` runs in blocks of 768 rows, each block's tiles adding to what the blocks before stored
  (through the tile's residual), so a block's rows stay in the caches while every row tile of
  the left operand passes over them (blocks of 192 to 768 measured within a few per cent of
  each other; 768 leaves BERT's 768-deep products one block, with no copy of the left operand).

Measured with the weights out of the caches (different matrices in turn), 128 rows at two
threads: 768×768 in 335-400 µs against OpenBLAS's 410-450; the 3072-wide and 3072-deep products
within this machine's noise of OpenBLAS (1.4-1.9 ms each); BERT-base's MatMuls inside its run
53.7 ms against 58 (with 384-row blocks).  The tiles split over numba's team (``kernels._team``), which pins BLAS to
one thread for the rest of the run, as in a CNN's run.

Numerics: each block's sum runs over its ``k`` in order with one rounding per multiply-add, and
the blocks' sums are added in order: not OpenBLAS's order, within float32 accuracy of the exact
sum, and the same bits however the tiles are split over threads.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._jit import cpu_has
from ._split_rows import thread_budget
from ._team import join_run, parallel_ready, tiles_enabled

__all__ = ["ConstantRight", "batched", "laid_out", "per_group", "prepare", "team_parts"]

#: Right operands of fewer values are left to numpy (their products take microseconds).
MIN_VALUES = 1 << 14
#: Left operands of fewer rows are left to numpy (the tile computes 6 rows at once).
MIN_ROWS = 8
#: Tiles per thread below which one thread computes a product alone.
_MIN_TILES_PER_PART = 4
#: The tile's columns and the rows of a block of depth: ``kernels._f32_matmul_loops``' ``COLUMNS``
#: and ``BLOCK`` (which imports numba; a test checks they agree).
COLUMNS, BLOCK = 64, 768


def available() -> bool:
    """Whether the tiles may run: switched on (``ONNXPLUG_CPU_CONV_TILE``, ``ONNXPLUG_CPU_JIT``),
    numba usable and the CPU with AVX-512F.  As ``kernels._f32_conv.available``, without
    importing the convolutions' loops (a transformer's session then loads only its own: the
    convolutions' cost BERT-base 130 MB of resident memory).  Asked on every product: the
    switches come from the run's notes, and whether numba and AVX-512F are there is kept."""
    return tiles_enabled() and _compilable()


@functools.cache
def _compilable() -> bool:
    """numba importable and the CPU with AVX-512F, found once (``compiler()`` builds a decorator
    on each call: a GPT-2 run asked 72 times).  ``ONNXPLUG_CPU_JIT=0`` is :func:`tiles_enabled`'s
    to read, run by run."""
    try:
        import numba  # noqa: F401
    except ImportError:
        return False
    return cpu_has(("avx512f",), ("avx512f",))


@functools.cache
def loops() -> Any:
    """The compiled module ``kernels._f32_matmul_loops`` (the caller has checked :func:`available`)."""
    from . import _f32_matmul_loops

    return _f32_matmul_loops


class ConstantRight:
    """A constant float32 C-contiguous ``(K, N)`` right operand with the row offsets the tile
    reads it at (``k · N``); the matrix itself is the caller's, not copied, except where its
    rows lie a multiple of :data:`PANEL_STRIDE` bytes apart or it holds at least
    :data:`PANEL_MIN_BYTES` (:attr:`panels`)."""

    __slots__ = ("b", "offsets", "shape", "panels")

    def __init__(self, b: np.ndarray) -> None:
        self.b, self.shape = b, b.shape
        in_panels = (b.shape[1] * b.itemsize) % PANEL_STRIDE == 0 or b.nbytes >= PANEL_MIN_BYTES
        self.panels = panels(b) if in_panels else None
        if self.panels is None:
            offsets = np.arange(b.shape[0], dtype=np.int64) * b.shape[1]
        else:  # a block's rows in a panel, each block read from its own first row on
            offsets = np.arange(min(b.shape[0], BLOCK), dtype=np.int64) * COLUMNS
        offsets.flags.writeable = False
        self.offsets = offsets

    def applies(self, a: np.ndarray) -> bool:
        """Whether :meth:`times` should compute ``a @ b`` now: a float32 ``a`` of at least
        :data:`MIN_ROWS` rows ending in ``K``, with the tiles on and numba's team usable (the
        product is split over it; Python threads cost more than they gain here)."""
        return (
            a.dtype == np.float32
            and a.ndim >= 2
            and a.shape[-1] == self.shape[0]
            and a.size >= MIN_ROWS * self.shape[0]
            and available()
            and parallel_ready()
        )

    def times(self, a: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
        """``a @ b`` for float32 ``a`` ``(..., K)`` (see :meth:`applies`), plus ``start`` (float32,
        broadcastable to ``(rows, N)``: a Gemm's ``C``, added by the tiles' stores instead of a
        pass of its own) where given: a fresh ``(..., N)`` array."""
        depth, width = self.shape
        rows = np.ascontiguousarray(a).reshape(-1, depth)
        y = np.empty((rows.shape[0], width), dtype=np.float32)
        if start is not None:
            np.copyto(y, start)
        compiled = loops()
        parts = team_parts(1, rows.shape[0], width)
        if self.panels is None:
            right, serial, parallel = self.b, compiled.product, compiled.product_parallel
        else:
            right, serial, parallel = self.panels, compiled.panel_product, compiled.panel_product_parallel
        if parts > 1:
            parallel(rows, right, self.offsets, y, start is not None, parts)
        else:
            serial(rows, right, self.offsets, y, start is not None)
        return y.reshape(*a.shape[:-1], width)


#: A right operand whose rows lie a multiple of this many bytes apart is copied into panels of
#: 64 columns (:func:`panels`): rows 12 KiB apart (3072 columns, a transformer's feed-forward
#: width) fall on so few of the caches' sets that the 64 columns a tile reads, 192 KiB over
#: 768 rows, did not stay in a 1 MiB L2 while the left operand's row tiles passed over them.
#: 128 rows times 768 × 3072 at two threads, weights out of the caches: 166-179 G multiply-adds
#: a second as stored, 192-199 in panels (768 × 768, whose rows are 3 KiB apart: 221-233 either
#: way).  The panels are a second copy of those weights (BERT-base: 113 MB).
PANEL_STRIDE = 4096
#: A right operand of at least this many bytes is copied into panels whatever its width: in
#: panels a tile's reads are one run and the panel read next is prefetched while the current
#: one is in use (``_f32_matmul_loops.PREFETCHING_ROW_TILES``), which weights streamed from
#: memory need (a transformer's, each read once a run).  128 rows at two threads, a rotation of
#: 60 MB of weights, as stored against in panels (two runs): 3072 × 768 199 / 174 → 209 / 205 G
#: multiply-adds a second, 768 × 2304 (GPT-2's fused Q, K, V) 191 / 205 → 213 / 226, 768 × 3072
#: 156 / 165 → 220 / 228.  Smaller ones stay as stored: 768 × 768 gains too (202 / 193 →
#: 214 / 217), but BERT-base's 48 of them would cost another 113 MB copy for 2-3 % of its run.
PANEL_MIN_BYTES = 4 << 20


def panels(b: np.ndarray) -> np.ndarray:
    """``b`` ``(K, N)`` as ``(ceil(N / 64), K, 64)`` float32: panel ``j`` holds columns ``64·j``
    to ``64·j + 63`` of every row in turn, zeros past the last column."""
    depth, width = b.shape
    count = -(-width // COLUMNS)
    copied = np.zeros((count, depth, COLUMNS), dtype=np.float32)
    for j in range(count):
        part = b[:, j * COLUMNS : (j + 1) * COLUMNS]
        copied[j, :, : part.shape[1]] = part
    copied.flags.writeable = False
    return copied


def team_parts(matrices: int, rows: int, width: int) -> int:
    """Threads for ``matrices`` products of ``rows × width`` tiles' worth: the run's budget, at
    most one per :data:`_MIN_TILES_PER_PART` tiles; more than one joins the run to the team
    (BLAS pinned to one thread for the rest of it)."""
    compiled = loops()
    tiles = matrices * -(-width // compiled.COLUMNS) * -(-rows // compiled.ROWS)
    parts = max(1, min(thread_budget(), tiles // _MIN_TILES_PER_PART))
    if parts > 1:
        join_run()
    return parts


def prepare(b: Any) -> ConstantRight | None:
    """:class:`ConstantRight` of ``b`` when it is a C-contiguous float32 matrix of at least
    :data:`MIN_VALUES` values and the tiles are available; else ``None`` (numpy's product)."""
    if not isinstance(b, np.ndarray) or b.dtype != np.float32 or b.ndim != 2 or b.size < MIN_VALUES:
        return None
    if not b.flags.c_contiguous or not available():
        return None
    return ConstantRight(b)


def batched(
    a: np.ndarray, b: np.ndarray, a_shift: np.ndarray | None = None, b_shift: np.ndarray | None = None
) -> np.ndarray | None:
    """``np.matmul(a + a_shift, b + b_shift)`` for float32 ``a`` ``(..., M, K)`` and ``b`` ``(...,
    K, N)`` with the same leading dimensions, every product's tiles split over numba's team in
    one call (attention's ``q kᵀ`` and ``p v``, which BLAS, pinned to one thread in a team run,
    computed on one core); ``None`` where that does not apply (numpy's product then).  A shift
    (float32, broadcastable to its operand with a 1 in one of the last two axes: attention's
    per-head biases) is added in the copy that lays the operand out for the tiles."""
    if a.dtype != np.float32 or b.dtype != np.float32 or a.ndim < 3 or a.shape[:-2] != b.shape[:-2]:
        return None
    m, depth, width = a.shape[-2], a.shape[-1], b.shape[-1]
    if b.shape[-2] != depth or m < MIN_ROWS or a.size == 0 or b.size == 0 or not available() or not parallel_ready():
        return None
    lead = a.shape[:-2]
    groups = a.size // (m * depth)
    parts = team_parts(groups, m, width)
    left = laid_out(a.reshape(groups, m, depth), parts, per_group(a_shift, a.shape, groups))
    right = laid_out(b.reshape(groups, depth, width), parts, per_group(b_shift, b.shape, groups))
    y = np.empty((groups, m, width), dtype=np.float32)
    offsets = np.arange(depth, dtype=np.int64) * width
    loops().batched_parallel(left, right, offsets, y, parts)
    return y.reshape(*lead, m, width)


def per_group(shift: np.ndarray | None, shape: tuple[int, ...], groups: int) -> tuple[np.ndarray, bool] | None:
    """``shift`` (broadcastable to ``shape``, a 1 in one of its last two axes) as ``(groups, n)``
    float32 rows and whether it runs along the rows (one value a row) rather than the columns."""
    if shift is None:
        return None
    along_rows = shift.shape[-1] == 1 and shape[-1] != 1
    kept = shape[-2] if along_rows else shape[-1]
    full = np.broadcast_to(shift, (*shape[:-2], kept, 1) if along_rows else (*shape[:-2], 1, kept))
    return np.ascontiguousarray(full, dtype=np.float32).reshape(groups, kept), along_rows


def laid_out(x: np.ndarray, parts: int, shift: tuple[np.ndarray, bool] | None = None) -> np.ndarray:
    """``x`` ``(G, R, C)`` C-contiguous (plus ``shift``, see :func:`per_group`): itself, or a
    copy made on the run's threads (``_f32_matmul_loops.gather_groups``: attention's per-head
    views)."""
    if shift is None and x.flags.c_contiguous:
        return x
    copy = np.empty(x.shape, dtype=np.float32)
    if shift is None:
        loops().gather_groups(x, copy, parts)
    else:
        loops().gather_groups_shifted(x, shift[0], shift[1], copy, parts)
    return copy
