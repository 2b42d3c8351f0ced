"""Exact 8-bit convolution (QLinearConv, ConvInteger) as an implicit GEMM on AVX-512 VNNI.

The spec's sum for one output is ``sum (x - x_zero) * (w - w_zero)`` over the taps inside the
padded input, where padding contributes nothing.  With ``u`` the input moved to uint8 (int8 inputs
are offset by 128, a bit flip) and ``a`` its zero point moved alike, and ``v = w - w_zero``
(which must fit int8; other weights keep the float path of ``kernels._exact_conv``):

    sum (u - a) * v  =  sum u * v  -  a * sum v

when padded positions hold ``a`` — their terms ``(a - a) * v`` vanish, so ``a * sum v`` is one
constant per output channel, folded with the bias.  ``sum u * v`` is what ``kernels._vnni``
computes exactly in int32; the sum then is an int32 exactly as the spec's accumulator, and
QLinearConv's requantization (int32 → float32, times the float32 multiplier, round half to even,
saturate, add the zero point) runs on it in one compiled pass per block of the product.

Layout: the padded image is split into phase images (``kernels._conv_geometry``), each stored as
``[c4][position][4]`` (four channels interleaved per position); every tap reads them at a shifted
offset, so nothing is copied per tap.

Work is split over the run's threads (``kernels._split_rows``) by column tiles, or by row tiles
when the map has too few columns (ResNet's 7×7 stages); each block requantizes what it computed.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from . import _vnni
from ._conv_geometry import PhaseGeometry
from ._jit import compiler
from ._scratch import scratch
from ._split_rows import run_in_row_blocks

__all__ = ["Int8Conv", "int8_conv_for"]

_INT32_LIMIT = 2**31 - 1
_MIN_PACK_WORDS = 16384  # packed words per thread below which one thread packs alone


@functools.cache
def _loops() -> Any | None:
    """``(pack, requantize, widen)`` compiled, or ``None`` without numba."""
    jit = compiler()
    if jit is None:
        return None

    @jit
    def pack(x, flip, fill, sh, sw, pt, pl, phases, hq, wq, planes, c0, c1):  # pragma: no cover - compiled
        # x: (4*c4, H, W) uint8; planes: (phases, c4, length) uint32, four channels per word.
        # One word per position, written in order; the valid span of each row is a branch-free
        # loop over slices (no wraparound checks), which LLVM vectorises for stride 1.
        _, height, width = x.shape
        flips = np.uint32(flip * 0x01010101)
        fills = np.uint32(fill * 0x01010101)
        for p in range(phases.shape[0]):
            py = phases[p, 0]
            px = phases[p, 1]
            first = max(0, -((px - pl) // sw))  # the first ix with ix*sw + px - pl >= 0
            last = min(wq, (width - 1 - px + pl) // sw + 1) if width - 1 - px + pl >= 0 else 0
            for c4 in range(c0, c1):
                plane = planes[p, c4]
                for iy in range(hq):
                    row = plane[iy * wq : (iy + 1) * wq]
                    sy = iy * sh + py - pt
                    if sy < 0 or sy >= height or first >= last:
                        row[:] = fills
                        continue
                    row[:first] = fills
                    row[last:] = fills
                    r0 = x[4 * c4, sy]
                    r1 = x[4 * c4 + 1, sy]
                    r2 = x[4 * c4 + 2, sy]
                    r3 = x[4 * c4 + 3, sy]
                    span = row[first:last]
                    base = first * sw + px - pl
                    for i in range(span.shape[0]):
                        sx = base + i * sw
                        span[i] = (
                            np.uint32(r0[sx])
                            | (np.uint32(r1[sx]) << 8)
                            | (np.uint32(r2[sx]) << 16)
                            | (np.uint32(r3[sx]) << 24)
                        ) ^ flips
                plane[hq * wq :] = fills

    @jit
    def requantize(acc, plus, multiplier, low, high, zero, wq, ow, m0, m1, n0, n1, y):  # pragma: no cover
        # y: (M, OH*OW) of the output type; acc: (M_pad, ldc) int32 sums of columns n = oy*wq + ox.
        # Row by row over slices, so that the inner loop is unit-stride, branch-free and free of
        # negative-index wraparound checks: LLVM vectorises it (indexing ``row[start + ox]`` kept
        # it scalar, with gathers, about 9x slower).
        for m in range(m0, m1):
            k = multiplier[m]
            c = plus[m]
            row = acc[m]
            out = y[m]
            for oy in range(n0 // wq, (n1 + wq - 1) // wq):
                start = oy * wq
                first = max(n0 - start, 0)
                last = min(n1 - start, ow)
                src = row[start + first : start + last]
                dst = out[oy * ow + first : oy * ow + last]
                for i in range(src.shape[0]):
                    dst[i] = min(max(np.rint(np.float32(src[i] + c) * k), low), high) + zero

    @jit
    def widen(acc, plus, wq, ow, m0, m1, n0, n1, y):  # pragma: no cover - compiled
        for m in range(m0, m1):
            c = plus[m]
            row = acc[m]
            out = y[m]
            for oy in range(n0 // wq, (n1 + wq - 1) // wq):
                start = oy * wq
                first = max(n0 - start, 0)
                last = min(n1 - start, ow)
                src = row[start + first : start + last]
                dst = out[oy * ow + first : oy * ow + last]
                for i in range(src.shape[0]):
                    dst[i] = src[i] + c

    return pack, requantize, widen


class Int8Conv:
    """A 2-D, ungrouped convolution with constant weights prepared for :mod:`kernels._vnni`.

    :param w_centred: weights minus their zero point ``(M, C, kh, kw)``, integers in [-128, 127].
    :param x_dtype: the input's type (uint8 or int8); ``x_zero``: its scalar zero point.
    :param geometry: the node's Conv attributes; ``bias``: the int32 bias (QLinearConv's ``B``).
    """

    def __init__(self, w_centred: np.ndarray, x_dtype, x_zero: int, geometry: dict, bias: np.ndarray | None = None):
        self.x_dtype = np.dtype(x_dtype)
        self.flip = 128 if self.x_dtype == np.int8 else 0
        self.fill = int(x_zero) + self.flip  # the zero point in the uint8 domain
        self.geometry = dict(geometry)
        m, c, kh, kw = w_centred.shape
        self.kernel = (kh, kw)
        self.channels = m
        self.c4 = -(-c // 4)
        rows = -(-m // _vnni.ROWS) * _vnni.ROWS
        packed = np.zeros((rows, kh, kw, self.c4 * 4), dtype=np.int8)
        packed[:m, :, :, :c] = w_centred.transpose(0, 2, 3, 1)
        self.weights = packed.reshape(rows, -1)
        plus = -self.fill * w_centred.reshape(m, -1).sum(axis=1)
        if bias is not None:
            plus = plus + bias.astype(np.int64).reshape(-1)
        self.plus64 = plus
        self.plus = plus.astype(np.int32)
        self.sum_bound = int(np.abs(w_centred).reshape(m, -1).sum(axis=1).max(initial=0)) * 255
        self._shapes: dict[tuple, tuple[PhaseGeometry, np.ndarray]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def accepts(w_centred: np.ndarray, x_dtype, geometry: dict) -> bool:
        """Whether this path can compute the node: VNNI present, a 2-D ungrouped convolution
        with int8-sized centred weights (whether the sums fit int32 is :attr:`fits_int32`, which
        also counts the bias)."""
        if not _vnni.available() or _loops() is None:
            return False
        if np.dtype(x_dtype) not in (np.dtype(np.uint8), np.dtype(np.int8)):
            return False
        if w_centred.ndim != 4 or geometry.get("group", 1) != 1 or w_centred.size == 0:
            return False
        return bool(w_centred.min() >= -128 and w_centred.max() <= 127)

    def _geometry(self, shape: tuple) -> tuple[PhaseGeometry, np.ndarray]:
        """The geometry of input shape ``(C, H, W)`` and its tap offsets in bytes of the planes."""
        found = self._shapes.get(shape)
        if found is None:
            geometry = PhaseGeometry(shape[1:], self.kernel, self.geometry, "QLinearConv", _vnni.COLUMNS)
            found = (geometry, geometry.tap_offsets(self.c4 * geometry.length * 4, unit=4))
            with self._lock:
                self._shapes[shape] = found
        return found

    @property
    def fits_int32(self) -> bool:
        """Whether every sum plus the per-channel constant stays an int32 (the spec's accumulator)."""
        return self.sum_bound + int(np.abs(self.plus64).max(initial=0)) <= _INT32_LIMIT

    def _run(self, x: np.ndarray, finish) -> None:
        """Each image's sums, handed to ``finish(acc, geometry, image, m0, m1, n0, n1)`` block by block."""
        pack = _loops()[0]
        geometry, offsets = self._geometry(tuple(x.shape[1:]))
        rows = self.weights.shape[0]
        planes = scratch("planes", (len(geometry.phases), self.c4, geometry.length), np.uint32)
        acc = scratch("sums", (rows, geometry.tiles * _vnni.COLUMNS), np.int32)
        for image in range(x.shape[0]):
            source = x[image].view(np.uint8)
            if source.shape[0] != 4 * self.c4:  # channels padded to whole words: any value, their weights are 0
                source = np.concatenate(
                    [source, np.zeros((4 * self.c4 - source.shape[0], *source.shape[1:]), np.uint8)]
                )

            def pack_groups(c0: int, c1: int, source=source) -> None:
                pack(
                    source,
                    self.flip,
                    self.fill,
                    *geometry.stride,
                    *geometry.pads,
                    geometry.phases,
                    geometry.hq,
                    geometry.wq,
                    planes,
                    c0,
                    c1,
                )

            # Split by channel groups when each thread gets enough bytes to pay for the hand-off.
            run_in_row_blocks(pack_groups, self.c4, min_rows=max(1, _MIN_PACK_WORDS // (geometry.hq * geometry.wq)))

            def block(m0: int, m1: int, n0: int, n1: int, image=image) -> None:
                finish(acc, geometry, image, m0, m1, n0, min(n1, geometry.columns))

            _vnni.product_in_blocks(planes, self.weights, acc, offsets, self.c4, geometry.tiles, self.channels, block)

    def qlinear(self, x: np.ndarray, multiplier: np.ndarray, y_zero: np.ndarray) -> np.ndarray | None:
        """QLinearConv's output ``(N, M, OH, OW)`` for a scalar 8-bit ``y_zero`` and a float32
        multiplier (scalar or ``(M,)``); ``None`` when this path does not apply (sums that could
        overflow int32, another output type)."""
        if y_zero.dtype not in (np.int8, np.uint8) or y_zero.size != 1 or not self.fits_int32:
            return None
        factors = np.ascontiguousarray(np.broadcast_to(multiplier.astype(np.float32).reshape(-1), (self.channels,)))
        low, high = (-128, 127) if y_zero.dtype == np.int8 else (0, 255)
        zero = float(y_zero.reshape(()))
        requantize = _loops()[1]
        geometry = self._geometry(tuple(x.shape[1:]))[0]
        y = np.empty((x.shape[0], self.channels, *geometry.out), dtype=y_zero.dtype)
        flat = y.reshape(x.shape[0], self.channels, -1)
        lo, hi, z = np.float32(low - zero), np.float32(high - zero), np.float32(zero)

        def finish(acc, geometry, image, m0, m1, n0, n1):
            requantize(acc, self.plus, factors, lo, hi, z, geometry.wq, geometry.out[1], m0, m1, n0, n1, flat[image])

        self._run(x, finish)
        return y

    def integer(self, x: np.ndarray) -> np.ndarray | None:
        """ConvInteger's int32 output ``(N, M, OH, OW)``; ``None`` when int32 could overflow."""
        if not self.fits_int32:
            return None
        widen = _loops()[2]
        geometry = self._geometry(tuple(x.shape[1:]))[0]
        y = np.empty((x.shape[0], self.channels, *geometry.out), dtype=np.int32)
        flat = y.reshape(x.shape[0], self.channels, -1)

        def finish(acc, geometry, image, m0, m1, n0, n1):
            widen(acc, self.plus, geometry.wq, geometry.out[1], m0, m1, n0, n1, flat[image])

        self._run(x, finish)
        return y


def int8_conv_for(w_centred: np.ndarray, x_dtype, x_zero: int, geometry: dict, bias=None) -> Int8Conv | None:
    """An :class:`Int8Conv` when it applies to these weights and attributes, else ``None``."""
    if not Int8Conv.accepts(w_centred, x_dtype, geometry):
        return None
    return Int8Conv(w_centred, x_dtype, x_zero, geometry, bias)
