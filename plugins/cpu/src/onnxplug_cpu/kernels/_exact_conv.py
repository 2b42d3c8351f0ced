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
  the bias, is computed once per input shape in float64 (exact integers) and added to the sums.

Weights whose bound is too large for one block are split into contiguous input-channel blocks
that each respect it; block results are added in float64 (exact below 2**53).
"""

from __future__ import annotations

import threading

import numpy as np

from ..numerics import PackedConv, convolve, pool_geometry
from . import _quant_jit
from ._shifted import stacked_filters

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
        self.w64 = w_centred.astype(np.float64)
        self.bias = None if bias is None else bias.astype(np.float64).reshape(-1)
        taps = np.abs(self.w64).reshape(w_centred.shape[0], w_centred.shape[1], -1).sum(axis=2)  # (M, C)
        self.blocks = _channel_blocks(taps, self.x_bound)
        self.packed = []
        self.sum_bound = 0.0  # the largest |sum| of all blocks together
        if self.blocks:
            for start, stop in self.blocks:
                block = np.ascontiguousarray(self.w64[:, start:stop].astype(np.float32))
                self.packed.append((start, stop, block, PackedConv(block, 1, winograd=False)))
            self.sum_bound = float(self.x_bound * taps.sum(axis=1).max(initial=0))
        self._maps: dict[tuple, tuple] = {}
        self._lock = threading.Lock()
        self.shifted = _Shifted.prepare(w_centred, self.x_bound, self.geometry) if self.blocks else None

    @property
    def exact_in_float32(self) -> bool:
        """Whether the float32 path applies (every single input channel respects the bound)."""
        return bool(self.blocks)

    def _correction(self, shape: tuple) -> tuple[np.ndarray, np.ndarray | None]:
        """``offset * conv(ones) + bias`` for inputs of ``shape`` (per image), float64
        ``(M, *out)``, and the same in float32 when the sums may be added to it in float32
        (single block, every value below 2**24 in magnitude), else ``None``."""
        key = tuple(shape[1:])
        found = self._maps.get(key)
        if found is not None:
            return found
        ones = np.ones((1,) + key, dtype=np.float64)
        correction = convolve(ones, self.w64, **self.geometry)[0] * float(self.offset)
        if self.bias is not None:
            correction += self.bias.reshape((-1,) + (1,) * (correction.ndim - 1))
        single = len(self.packed) == 1 and self.sum_bound + float(np.abs(correction).max(initial=0)) < _EXACT
        found = (correction, correction.astype(np.float32) if single else None)
        with self._lock:
            self._maps[key] = found
        return found

    def sums(self, x: np.ndarray, *, corrected: bool = True) -> np.ndarray:
        """The exact integer sums ``conv(x - x_zero) [+ bias]``: float32 when every one is below
        2**24, else float64; a fresh array.  ``corrected=False``: ``conv(x - centre)`` only (the
        caller adds the correction map)."""
        v = np.subtract(x, np.float32(self.centre), dtype=np.float32)  # exact: |.| <= 128
        total = None
        for start, stop, block, packed in self.packed:
            part = convolve(v[:, start:stop], block, packed=packed, **self.geometry)
            if total is None:
                total = part
            else:
                if total.dtype != np.float64:
                    total = total.astype(np.float64)
                total += part
        if not corrected:
            return total
        correction, correction32 = self._correction(x.shape)
        if correction32 is not None:
            total += correction32  # exact: integers below 2**24 throughout
            return total
        total = total.astype(np.float64, copy=False)
        total += correction
        return total

    def requantized(self, x: np.ndarray, multiplier: np.ndarray, y_zero: np.ndarray) -> np.ndarray | None:
        """QLinearConv's output from the exact sums in one compiled epilogue pass (bias and
        correction map added in float64, then ``saturate(rint(float32(sum) * multiplier[m]) + z)``,
        as ``quantization._requantize``); ``None`` without numba.  ``multiplier``: ``(M,)``
        finite float32; ``y_zero``: an 8-bit scalar."""
        jit = _quant_jit.compiled()
        if jit is None:
            return None
        low, high = _RANGES[np.dtype(y_zero.dtype)]
        zero = int(y_zero)
        bounds = (np.float32(low - zero), np.float32(high - zero), zero)
        if self.shifted is not None and x.ndim == 4:
            return self.shifted.requantized(self, x, multiplier, bounds, y_zero.dtype, jit)
        acc = self.sums(x, corrected=False)
        correction = self._correction(x.shape)[0]
        n, m = acc.shape[:2]
        out = np.empty(acc.shape, dtype=y_zero.dtype)
        flat = (n, m, -1)
        jit.requantize(acc.reshape(flat), correction.reshape(m, -1), multiplier, *bounds, out.reshape(flat))
        return out


class _Shifted:
    """The stride-1 2-D layers (and 1×1 ones at any stride without padding) in the shifted layout
    of ``kernels._shifted``: one matmul per input-channel block, ``(k·k·M, C_b) @ (C_b, N·Hp·Wp)``,
    whose BLAS reductions run over channels only — so the bound is per kernel tap, ``x_bound *
    sum_c |w[m, c, tap]|``, and 512-channel 3×3 layers need one block — then one compiled pass
    adds the k·k shifted taps and the blocks in float64 (exact), the correction map, and
    requantizes."""

    def __init__(self, w_centred: np.ndarray, blocks, dilations, stride):
        m, c, kh, kw = w_centred.shape
        stacked = stacked_filters(w_centred.astype(np.float32))  # (k·k·M, C), offset-major
        self.filters = [np.ascontiguousarray(stacked[:, start:stop]) for start, stop in blocks]
        self.blocks = blocks
        self.kernel = (kh, kw)
        self.dilations = dilations
        self.stride = stride  # > 1 only for 1×1 kernels: the input is subsampled first
        self.maps = m

    @classmethod
    def prepare(cls, w_centred: np.ndarray, x_bound: int, geometry: dict) -> _Shifted | None:
        if w_centred.ndim != 4:
            return None
        strides = tuple(geometry.get("strides") or (1, 1))
        dilations = tuple(geometry.get("dilations") or (1, 1))
        pointwise = w_centred.shape[2:] == (1, 1)
        if any(s != 1 for s in strides):
            unpadded = not any(geometry.get("pads") or ()) and geometry.get("auto_pad", "NOTSET") in ("NOTSET", "VALID")
            if not (pointwise and unpadded):
                return None
        m, c = w_centred.shape[:2]
        rows = np.abs(w_centred.astype(np.float64)).transpose(0, 2, 3, 1).reshape(-1, c)  # (M·taps, C)
        blocks = _channel_blocks(rows, x_bound)
        return cls(w_centred, blocks, dilations, strides) if blocks else None

    def requantized(self, conv: ExactConv, x, multiplier, bounds, out_dtype, jit) -> np.ndarray:
        correction = conv._correction(x.shape)[0]  # (M, OH, OW): subsampling keeps the output grid
        if any(s != 1 for s in self.stride):
            x = x[:, :, :: self.stride[0], :: self.stride[1]]
            geometry = dict(conv.geometry, strides=None)
        else:
            geometry = conv.geometry
        n, c, h, w = x.shape
        kh, kw = self.kernel
        dh, dw = self.dilations
        out_hw, begin, end, _ = pool_geometry(
            (h, w),
            self.kernel,
            None,
            self.dilations,
            geometry.get("pads"),
            geometry.get("auto_pad", "NOTSET"),
            0,
            "QLinearConv",
        )
        hp, wp = h + begin[0] + end[0], w + begin[1] + end[1]
        length = n * hp * wp
        flat = np.zeros((c, length + (kw - 1) * dw), dtype=np.float32)
        inner = flat[:, :length].reshape(c, n, hp, wp)[:, :, begin[0] : begin[0] + h, begin[1] : begin[1] + w]
        np.subtract(x.transpose(1, 0, 2, 3), np.float32(conv.centre), out=inner, casting="unsafe")
        taps = self.filters[0].shape[0]
        z = np.empty((len(self.blocks), taps, flat.shape[1]), dtype=np.float32)
        for index, ((start, stop), filters) in enumerate(zip(self.blocks, self.filters)):
            np.matmul(filters, flat[start:stop], out=z[index])
        offsets = np.array([i * dh * wp + j * dw for i in range(kh) for j in range(kw)], dtype=np.int64)
        out = np.empty((n, self.maps) + tuple(out_hw), dtype=out_dtype)
        jit.shifted_requantize(z, offsets, hp, wp, correction, multiplier, *bounds, out)
        return out


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
