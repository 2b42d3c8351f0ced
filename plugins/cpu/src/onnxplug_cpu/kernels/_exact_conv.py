"""Exact integer convolution (ConvInteger, QLinearConv) on the float32 convolution paths.

Why float32 can be exact: every term of an output's sum is a product of two integers, the input
minus a centre ``c`` (``|x - c| <= x_bound``) and a weight minus its zero point.  If, for every
output channel, ``x_bound * sum(|w|)`` over the terms one BLAS reduction adds stays below 2**24,
every partial sum BLAS can form — in any order, with or without FMA, in the pointwise, im2col or
shifted path — is an integer of magnitude below 2**24, which float32 represents exactly, so no
operation rounds.  Winograd is not used: its transforms have fractional coefficients.

Two things keep the reductions long, so that most ResNet-50 layers need a single block:

- **the bound is measured, per output channel**: ``sum(|w|)`` of the constant weights, not
  ``terms * max|w|``;
- **the input is centred at its type's midpoint** (0 for int8, 128 for uint8), so
  ``x_bound`` is 128 rather than the 255 that ``x - x_zero_point`` can reach.  The spec
  convolves ``x - x_zero_point`` with zero padding; with ``v = x - c`` (also zero-padded),
  ``conv(x - zp) = conv(v) + (c - zp) * conv(ones)``, where ``conv(ones)`` — the sum of the
  weights over the taps inside the image — depends only on the output position.  That map, plus
  the bias, is computed once per input shape in float64 (exact integers) and added to the sums
  (in float32 when that is exact, or, for QLinearConv, when it rounds as the spec's conversion of
  the int32 sum to float32 does: see :meth:`ExactConv.sums`).

Weights whose bound is too large for one block are split into contiguous input-channel blocks
that each respect it; block results are added in float64 (exact below 2**53).  A stride-1 2-D
layer on a map the shifted layout pays for (``kernels._shifted``) avoids the blocks when the
bound holds **per kernel offset** (``x_bound * sum_c |w[m, c, i, j]| < 2**24``, k² times looser):
its one float32 matmul gives each offset's exact contribution, and the k² shifted adds are done
in float64.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ..numerics import SHIFTED_MIN_CELLS, PackedConv, convolve, pool_geometry
from ._shifted import shifted_conv, stacked_filters

__all__ = ["ExactConv", "type_range"]

_EXACT = 2**24  # float32 represents every integer of smaller magnitude
_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def type_range(dtype) -> tuple[int, int] | None:
    """``(low, high)`` of the 8-bit integer inputs this path takes, else ``None``."""
    return _RANGES.get(np.dtype(dtype))


class ExactConv:
    """Constant centred integer weights ``(M, C, *k)`` (an ungrouped Conv) prepared once.

    :param w_centred: weights minus their zero point, integers.
    :param x_dtype: the input's 8-bit type; ``x_zero``: its (scalar) zero point.
    :param geometry: the node's Conv attributes (``convolve`` keywords).
    :param bias: the int32 bias (QLinearConv's ``B``) when constant, added in the same map.
    """

    def __init__(self, w_centred: np.ndarray, x_dtype, x_zero: int, geometry: dict, bias: np.ndarray | None = None):
        low, high = _RANGES[np.dtype(x_dtype)]
        self.x_dtype = np.dtype(x_dtype)
        self.centre = (low + high + 1) // 2
        self.x_bound = max(self.centre - low, high - self.centre)
        self.offset = self.centre - int(x_zero)
        self.geometry = dict(geometry)
        self.kernel = tuple(w_centred.shape[2:])
        w64 = w_centred.astype(np.float64)
        # conv(ones) over C channels is conv(ones) over one with the channels' summed weights:
        # the correction maps need only these (M, 1, *k) sums, not a float64 copy of the weights.
        self.w_summed = w64.sum(axis=1, keepdims=True)
        self.bias = None if bias is None else bias.astype(np.float64).reshape(-1)
        taps = np.abs(w64).reshape(w_centred.shape[0], w_centred.shape[1], -1).sum(axis=2)  # (M, C)
        self.blocks = _channel_blocks(taps, self.x_bound)
        self.packed = []
        self.sum_bound = 0.0  # the largest |sum| of all blocks together
        if self.blocks:
            for start, stop in self.blocks:
                block = np.ascontiguousarray(w_centred[:, start:stop].astype(np.float32))
                self.packed.append((start, stop, block, PackedConv(block, 1, winograd=False)))
            self.sum_bound = float(self.x_bound * taps.sum(axis=1).max(initial=0))
        self.tap_stacked = None  # (k²·M, C) float32 filters of the per-offset shifted path
        strides = self.geometry.get("strides") or (1,)
        if (
            len(self.blocks) > 1
            and w_centred.ndim == 4
            and w_centred.shape[2:] != (1, 1)
            and all(s == 1 for s in strides)
        ):
            per_offset = np.abs(w64).sum(axis=1).max(initial=0)  # max over (m, i, j) of sum_c |w|
            if self.x_bound * per_offset < _EXACT:
                self.tap_stacked = stacked_filters(w_centred.astype(np.float32))
        self._maps: dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    @property
    def exact_in_float32(self) -> bool:
        """Whether the float32 path applies (every single input channel respects the bound)."""
        return bool(self.blocks)

    def _correction(self, shape: tuple) -> tuple[np.ndarray, np.ndarray | None, bool, np.ndarray | None]:
        """For inputs of ``shape``: ``offset * conv(ones) + bias``, float64 ``(M, *out)``; the
        same in float32 when every value is a float32 (else ``None``); whether a single block's
        sums plus it stay below 2**24 (an exact float32 addition); and, when that float32 map is
        the same at every position of a channel (no padding reaches the sums), its ``(M,)``
        values."""
        key = tuple(shape[1:])
        found = self._maps.get(key)
        if found is not None:
            return found
        ones = np.ones((1, 1) + key[1:], dtype=np.float64)
        correction = convolve(ones, self.w_summed, **self.geometry)[0] * float(self.offset)
        if self.bias is not None:
            correction += self.bias.reshape((-1,) + (1,) * (correction.ndim - 1))
        as_float32 = correction.astype(np.float32)
        representable = bool(np.array_equal(as_float32, correction))
        small = self.sum_bound + float(np.abs(correction).max(initial=0)) < _EXACT
        rows = as_float32.reshape(as_float32.shape[0], -1)
        channel = np.ascontiguousarray(rows[:, 0]) if representable and (rows == rows[:, :1]).all() else None
        found = (correction, as_float32 if representable else None, small, channel)
        with self._lock:
            self._maps[key] = found
        return found

    def _blocks_sum(self, x: np.ndarray) -> np.ndarray:
        """``conv(x - centre)``: float32 for one block (exact), float64 for several or for the
        per-offset shifted path."""
        v = np.subtract(x, np.float32(self.centre), dtype=np.float32)  # exact: |.| <= 128
        if self.tap_stacked is not None and v.ndim == 4:
            g = self.geometry
            out, begin, end, _ = pool_geometry(
                v.shape[2:],
                self.kernel,
                g.get("strides"),
                g.get("dilations"),
                g.get("pads"),
                g.get("auto_pad", "NOTSET"),
                0,
                "QLinearConv",
            )
            if math.prod(out) >= SHIFTED_MIN_CELLS:
                dilations = tuple(g.get("dilations") or (1, 1))
                return shifted_conv(v, self.tap_stacked, self.kernel, dilations, begin, end, out, accumulate=np.float64)
        total = None
        for start, stop, block, packed in self.packed:
            part = convolve(v[:, start:stop], block, packed=packed, **self.geometry)
            if total is None:
                total = part
            else:
                if total.dtype != np.float64:
                    total = total.astype(np.float64)
                total += part
        return total

    def rounded_parts(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """``(acc, plus)`` whose float32 sum ``acc + plus`` is :meth:`sums` with
        ``rounded=True``, for a caller that adds ``plus`` in a pass of its own (QLinearConv's
        requantization): ``plus`` is the float32 correction, ``(M,)`` when constant over the
        positions else ``(M, P)`` with ``P`` the output positions; ``None`` when ``acc``
        already includes it (several blocks, or a map float32 cannot hold)."""
        total = self._blocks_sum(x)
        correction, correction32, small, channel = self._correction(x.shape)
        if total.dtype == np.float32 and correction32 is not None:
            plus = channel if channel is not None else correction32.reshape(correction32.shape[0], -1)
            return total, plus
        total = total.astype(np.float64, copy=False)
        total += correction
        return total, None

    def sums(self, x: np.ndarray, *, rounded: bool = False) -> np.ndarray:
        """The integer sums ``conv(x - x_zero) [+ bias]``, a fresh array: exact (float32 when
        every one is below 2**24, else float64), or with ``rounded=True`` possibly already
        rounded to float32 — the correctly rounded exact sum, as the int32 → float32
        conversion that requantization starts with would give.

        Why ``rounded`` is safe: one block's sums are exact float32 integers; when the correction
        map's values are float32 too, IEEE addition returns the exact sum correctly rounded,
        the single rounding the spec's float32 conversion of the int32 sum performs."""
        total = self._blocks_sum(x)
        correction, correction32, small, _ = self._correction(x.shape)
        if total.dtype == np.float32 and correction32 is not None and (small or rounded):
            total += correction32
            return total
        total = total.astype(np.float64, copy=False)
        total += correction
        return total


def _channel_blocks(taps: np.ndarray, x_bound: int) -> list[tuple[int, int]]:
    """Contiguous input-channel ranges, as few and as even as possible, such that for every
    output channel ``x_bound * sum(taps[m, block]) < 2**24``; ``[]`` when one channel alone
    breaks the bound (the caller then convolves in float64)."""
    channels = taps.shape[1]
    if channels == 0 or x_bound * taps.max(initial=0) >= _EXACT:
        return []
    cumulative = np.concatenate([np.zeros((taps.shape[0], 1)), np.cumsum(taps, axis=1)], axis=1)

    def fits(start: int, stop: int) -> bool:
        return x_bound * float((cumulative[:, stop] - cumulative[:, start]).max(initial=0)) < _EXACT

    for count in range(1, channels + 1):
        size = -(-channels // count)
        edges = [(s, min(s + size, channels)) for s in range(0, channels, size)]
        if all(fits(s, e) for s, e in edges):
            return edges
    return [(c, c + 1) for c in range(channels)]  # unreachable: one channel fits (checked above)
