"""An exact uint8 × int8 → int32 matrix product on AVX-512 VNNI, compiled through numba.

Why: numpy has no integer GEMM, so quantized convolutions ran as float32 (or float64) BLAS
products kept exact by bounds — as costly as the float model's convolutions, and without its
Winograd.  ``vpdpbusd`` multiplies 64 unsigned bytes by 64 signed bytes and adds each group of
four products to one of 16 int32 lanes, with no intermediate rounding or saturation: four times
the multiply-adds of a float32 FMA per instruction, and exact.  numba does not expose SIMD types,
so the innermost tile is written as LLVM IR (``numba.extending.intrinsic``) that calls the
instruction's LLVM intrinsic; the loops around it are ordinary numba code, compiled and cached
like the provider's other kernels (``kernels._jit``).

The product is an implicit-GEMM convolution: the right-hand operand is read straight from a
*plane* buffer — 8-bit values laid out ``[plane][c4][position][4]`` (four consecutive channels
interleaved at each position, the layout ``vpdpbusd`` consumes) — at a list of byte *offsets*,
one per kernel tap.  A tap of a stride-1 convolution is the same plane read at a shifted
position, so no im2col copy is made (``kernels._int8_conv`` builds the planes and offsets).

``C[m, n] = sum_t sum_c4 sum_q W[m, t, c4, q] * plane(t)[c4, n + shift(t), q]`` for ``n`` in
tiles of 64 columns (four 16-lane vectors) and ``m`` in tiles of :data:`ROWS` rows, all int32.

:func:`available` is ``False`` (callers keep their float paths) without numba, with
``ONNXPLUG_CPU_JIT=0`` or ``ONNXPLUG_CPU_VNNI=0``, or on a CPU without AVX-512 VNNI/BW.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ._jit import compiler, cpu_has
from ._split_rows import run_in_row_blocks, thread_budget

__all__ = ["COLUMNS", "ROWS", "available", "enabled", "product_in_blocks", "tile_product"]

#: Output rows (weight rows) one tile computes: 6 rows × 4 vectors = 24 of the 32 zmm registers
#: hold accumulators, 4 hold the right-hand vectors, 1 the broadcast weights.
ROWS = 6
#: Output columns one tile computes (four 16-lane int32 vectors).
COLUMNS = 64
_VECTORS = COLUMNS // 16
_MIN_TILES_PER_BLOCK = 2


def _cpu_has_vnni() -> bool:
    """Whether the CPU has AVX-512 F, BW and VNNI."""
    return cpu_has(("avx512f", "avx512bw", "avx512_vnni"), ("avx512f", "avx512bw", "avx512vnni"))


def enabled() -> bool:
    """Whether this machine and configuration should take the int8 path, without importing
    numba: the CPU has VNNI and neither ``ONNXPLUG_CPU_JIT=0`` nor ``ONNXPLUG_CPU_VNNI=0`` is set.
    :func:`available` also compiles the kernel (and is ``False`` where numba is missing)."""
    if os.environ.get("ONNXPLUG_CPU_VNNI", "1") == "0" or os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
        return False
    return _cpu_has_vnni()


def available() -> bool:
    """Whether :func:`tile_product` can be used on this machine and configuration."""
    return enabled() and compiled() is not None


@functools.cache
def compiled() -> Any | None:
    """The compiled tile driver (see :func:`tile_product`), or ``None``.

    It lives in ``kernels._vnni_tile``, imported here: a module-level numba function that
    numba's cache can key (defined in a closure, as the other kernel modules do, the intrinsic
    it calls made every process miss the cache and compile it again, two seconds)."""
    if compiler() is None or not _cpu_has_vnni():
        return None
    from . import _vnni_tile

    return _vnni_tile.drive


def tile_product(planes, weights, out, offsets, c4: int, plane_stride: int, nt0: int, nt1: int) -> None:
    """Column tiles ``[nt0, nt1)`` of ``out`` (int32 ``(M_pad, ldc)``, ``M_pad`` a multiple of
    :data:`ROWS`, ``ldc`` of :data:`COLUMNS`) from ``weights`` (int8 ``(M_pad, taps·c4·4)``,
    C-contiguous) and the uint8 ``planes`` buffer read at ``offsets`` (int64 byte offsets, one
    per tap; channel group ``c`` of a tap is ``plane_stride`` bytes after group ``c - 1``).
    The caller guarantees that every byte read (``offset + c·plane_stride + 4·(column + 63)``)
    lies inside ``planes``: the kernel does no bounds checks.  Releases the GIL."""
    compiled()(planes, weights, out, offsets, c4, plane_stride, nt0, nt1)


def product_in_blocks(
    planes: np.ndarray,
    weights: np.ndarray,
    acc: np.ndarray,
    offsets: np.ndarray,
    c4: int,
    tiles: int,
    rows: int,
    finish: Callable[[int, int, int, int], None],
) -> None:
    """:func:`tile_product` over all ``tiles`` column tiles, spread over the run's threads
    (``kernels._split_rows``): by column tiles, or by row tiles when there are too few columns
    for two blocks (a 7×7 map, a one-row matmul).  Each block then calls ``finish(m0, m1, n0, n1)``
    for the output rows (of ``rows``) and columns it computed, on its own thread, so that the
    pass that reads the sums runs in parallel too.  ``planes`` is C-contiguous with its channel
    groups on axis -2."""
    stride = planes.strides[-2]
    columns = tiles * COLUMNS
    if tiles >= 2 * _MIN_TILES_PER_BLOCK or thread_budget() == 1:

        def by_columns(t0: int, t1: int) -> None:
            tile_product(planes, weights, acc, offsets, c4, stride, t0, t1)
            finish(0, rows, t0 * COLUMNS, min(t1 * COLUMNS, columns))

        run_in_row_blocks(by_columns, tiles, min_rows=_MIN_TILES_PER_BLOCK)
        return

    def by_rows(r0: int, r1: int) -> None:
        lo, hi = r0 * ROWS, r1 * ROWS
        tile_product(planes, weights[lo:hi], acc[lo:hi], offsets, c4, stride, 0, tiles)
        finish(lo, min(hi, rows), 0, columns)

    run_in_row_blocks(by_rows, weights.shape[0] // ROWS, min_rows=1)
