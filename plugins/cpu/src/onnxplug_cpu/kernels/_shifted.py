"""Stride-1 2-D convolution as one matmul over the padded input and k×k shifted adds.

Why: im2col copies the input once per kernel offset (k²·C rows per output position) before its
matmul.  When a layer has no more output channels than input ones (UNet decoders, detection
necks, DenseNet's 3×3 bottleneck outputs), it is cheaper to multiply first and shift after:

1. the padded input is laid out as ``(C, N·Hp·Wp)`` — every image row by row, with its padding;
2. one matmul with all offsets' filters stacked, ``(k²·M, C) @ (C, N·Hp·Wp)``, gives each
   offset's contribution at every padded position;
3. with stride 1, the output at padded position ``p`` takes offset ``(i, j)``'s contribution at
   ``p + i·d·Wp + j·d``: k² adds of shifted column ranges.  Positions in the padding columns
   and rows come out as garbage and are cropped in the final copy.

Every intermediate is contiguous or a plain column slice, so nothing but the padding is copied.
For float32 the adds, the crop and the bias are one compiled pass (``kernels._shifted_jit``) when
numba is loaded (a session with a float32 convolution loads it: ``kernels._jit``).
"""

from __future__ import annotations

import numpy as np

from ._f32_products import matmul
from ._jit import numba_loaded
from ._shifted_jit import compiled as _compiled_shift_add
from ._winograd import copy_plus_bias

__all__ = ["stacked_filters", "shifted_conv"]


def stacked_filters(w: np.ndarray) -> np.ndarray:
    """``(M, C, kh, kw)`` filters as ``(kh·kw·M, C)``, offset-major."""
    m, c = w.shape[:2]
    return np.ascontiguousarray(w.transpose(2, 3, 0, 1).reshape(-1, c))


def shifted_conv(x, stacked, kernel, dilations, begin, end, out, bias=None, accumulate=None):
    """``x`` ``(N, C, H, W)`` convolved at stride 1 with :func:`stacked_filters` ``stacked``;
    ``begin``/``end`` pads, ``out`` = ``(OH, OW)``, plus the per-channel ``bias`` if given (added
    in the final copy); returns ``(N, M, OH, OW)``.  ``accumulate`` (default ``x``'s dtype) is
    the dtype the k² offsets' contributions are added in and returned: float64 keeps exact
    integer contributions exact however large their sum (``kernels._exact_conv``)."""
    n, c, h, w = x.shape
    kh, kw = kernel
    dh, dw = dilations
    m = stacked.shape[0] // (kh * kw)
    hp, wp = h + begin[0] + end[0], w + begin[1] + end[1]
    length = n * hp * wp
    # The last image's garbage columns read up to (kw - 1)·dw cells past its padding.
    flat = np.zeros((c, length + (kw - 1) * dw), dtype=x.dtype)
    flat[:, :length].reshape(c, n, hp, wp)[:, :, begin[0] : begin[0] + h, begin[1] : begin[1] + w] = x.transpose(
        1, 0, 2, 3
    )
    z = matmul(stacked, flat)  # (K·M, length + extra)
    # compiled where numba is loaded (a float32 convolution's session loads it: kernels._jit)
    compiled = x.dtype == np.float32 and accumulate in (None, x.dtype) and numba_loaded()
    shift_add = _compiled_shift_add() if compiled else None
    if shift_add is not None:
        offsets = np.array([i * dh * wp + j * dw for i in range(kh) for j in range(kw)], np.int64)
        y = np.empty((n, m) + tuple(out), np.float32)
        b = np.zeros(m, np.float32) if bias is None else np.ascontiguousarray(bias, dtype=np.float32).reshape(m)
        for image in range(n):
            shift_add(z, offsets, b, bias is not None, y, image, image * hp * wp, wp)
        return y
    span = length - (kh - 1) * dh * wp  # every output row of every image lies below this
    full = np.empty((m, length), dtype=accumulate or x.dtype)  # cells past ``span`` are never output rows
    acc = full[:, :span]
    np.copyto(acc, z[:m, :span])
    for index in range(1, kh * kw):
        i, j = divmod(index, kw)
        offset = i * dh * wp + j * dw
        acc += z[index * m : (index + 1) * m, offset : offset + span]
    y = full.reshape(m, n, hp, wp)[:, :, : out[0], : out[1]].transpose(1, 0, 2, 3)
    return copy_plus_bias(y, bias)
