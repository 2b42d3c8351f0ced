"""Exact 8-bit matrix products (MatMulInteger, QLinearMatMul) with constant weights on AVX-512 VNNI.

Dynamically quantized transformers (``quantize_dynamic``) run every projection as
``DynamicQuantizeLinear → MatMulInteger``; without an integer GEMM the CPU provider computed those
in float64 BLAS from int64 copies of both operands, several times slower than the float model.

``Y[n, m] = sum_k (a[n, k] - za) * (b[k, m] - zb[m])``.  As for convolutions
(``kernels._int8_conv``), ``u`` is ``a`` moved to uint8 (int8 inputs flipped by 128), ``v = b - zb``
must fit int8, and ``sum (u - za') v = sum u v - za' * sum_k v``: the product of ``kernels._vnni``
plus one constant per output column.  The rows of ``a`` are the product's columns (its *planes*
hold them four bytes of ``k`` at a time, one transpose copy of ``a``), the columns of ``b`` its
weight rows (prepared once).
"""

from __future__ import annotations

import numpy as np

from . import _vnni
from ._scratch import scratch

__all__ = ["Int8MatMul"]

_INT32_LIMIT = 2**31 - 1
_NO_OFFSET = np.zeros(1, dtype=np.int64)


class Int8MatMul:
    """Constant centred weights ``(K, M)`` (``b - b_zero``, integers in [-128, 127]) prepared for
    :func:`kernels._vnni.tile_product`."""

    def __init__(self, b_centred: np.ndarray):
        depth, self.columns = b_centred.shape
        self.depth = depth
        self.c4 = -(-depth // 4)
        rows = -(-self.columns // _vnni.ROWS) * _vnni.ROWS
        weights = np.zeros((rows, self.c4 * 4), dtype=np.int8)
        weights[: self.columns, :depth] = b_centred.T
        self.weights = weights
        self.column_sums = b_centred.sum(axis=0).astype(np.int64)
        self.sum_bound = int(np.abs(b_centred).sum(axis=0).max(initial=0)) * 255

    @staticmethod
    def accepts(b_centred: np.ndarray) -> bool:
        """Whether VNNI is there and the centred weights are a 2-D int8-sized matrix."""
        if b_centred.ndim != 2 or b_centred.size == 0 or not _vnni.available():
            return False
        return bool(b_centred.min() >= -128 and b_centred.max() <= 127)

    def _sums(self, a: np.ndarray, a_zero: int, finish) -> bool:
        """Packs ``a`` (rows of ``depth`` 8-bit values) and runs the product; ``finish(acc, plus,
        m0, m1, n0, n1)`` reads each block's int32 sums (``acc[m, n]``: output column ``m`` of
        row ``n``) with ``plus`` the per-column constant.  ``False`` (nothing run) when int32
        could overflow."""
        flip = 128 if a.dtype == np.int8 else 0
        plus = -(int(a_zero) + flip) * self.column_sums
        if self.sum_bound + int(np.abs(plus).max(initial=0)) > _INT32_LIMIT:
            return False
        matrix = a.reshape(-1, self.depth).view(np.uint8)
        count = matrix.shape[0]
        if self.depth != 4 * self.c4:  # whole words of k: the padding's weights are 0
            matrix = np.pad(matrix, ((0, 0), (0, 4 * self.c4 - self.depth)))
        words = np.ascontiguousarray(matrix).view(np.uint32)  # (count, c4)
        tiles = max(1, -(-count // _vnni.COLUMNS))
        planes = scratch("planes", (self.c4, tiles * _vnni.COLUMNS), np.uint32)
        if flip:
            np.bitwise_xor(words.T, np.uint32(0x80808080), out=planes[:, :count])
        else:
            planes[:, :count] = words.T
        planes[:, count:] = 0
        acc = scratch("sums", (self.weights.shape[0], tiles * _vnni.COLUMNS), np.int32)
        plus32 = plus.astype(np.int32)

        def block(m0: int, m1: int, n0: int, n1: int) -> None:
            if n0 < count:
                finish(acc, plus32, m0, m1, n0, min(n1, count))

        _vnni.product_in_blocks(planes, self.weights, acc, _NO_OFFSET, self.c4, tiles, self.columns, block)
        return True

    def integer(self, a: np.ndarray, a_zero: int) -> np.ndarray | None:
        """MatMulInteger's int32 ``(..., M)``; ``None`` when int32 could overflow."""
        y = np.empty((a.size // self.depth, self.columns), dtype=np.int32)

        def finish(acc, plus, m0, m1, n0, n1):
            np.add(acc[m0:m1, n0:n1].T, plus[m0:m1], out=y[n0:n1, m0:m1])

        return y.reshape(*a.shape[:-1], self.columns) if self._sums(a, a_zero, finish) else None

    def qlinear(self, a: np.ndarray, a_zero: int, multiplier: np.ndarray, y_zero: np.ndarray) -> np.ndarray | None:
        """QLinearMatMul's ``(..., M)`` of ``y_zero``'s 8-bit type, with the float32
        ``multiplier`` (scalar or ``(M,)``): the int32 sum converted to float32, scaled, rounded
        half to even, saturated after adding the zero point; ``None`` when int32 could overflow."""
        low, high = (-128, 127) if y_zero.dtype == np.int8 else (0, 255)
        zero = np.float32(y_zero.reshape(()))
        factors = np.ascontiguousarray(np.broadcast_to(multiplier.astype(np.float32).reshape(-1), (self.columns,)))
        bounds = (np.float32(low - zero), np.float32(high - zero))
        y = np.empty((a.size // self.depth, self.columns), dtype=y_zero.dtype)

        def finish(acc, plus, m0, m1, n0, n1):
            values = np.add(acc[m0:m1, n0:n1].T, plus[m0:m1]).astype(np.float32)
            values *= factors[m0:m1]
            np.rint(values, out=values)
            np.clip(values, *bounds, out=values)
            np.add(values, zero, out=y[n0:n1, m0:m1], casting="unsafe")

        return y.reshape(*a.shape[:-1], self.columns) if self._sums(a, a_zero, finish) else None
