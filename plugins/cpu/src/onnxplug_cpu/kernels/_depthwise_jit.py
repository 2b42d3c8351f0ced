"""3×3 depthwise convolutions (dilation 1, stride 1 or 2) compiled with numba, with the bias and
a clamp (Relu, Clip: what FusedConv carries) in the same store.

Why: the numpy path (``_depthwise``) makes nine passes over each block — a multiply into a
temporary and an add into the accumulator per kernel offset — so every output cell is read and
written nine times.  Here each output cell is one local sum of its nine taps, plus the bias,
clamped and written once.  A generic loop that accumulated into the output row per offset
(``out[ox] += row[ox*sw+j] * t``) measured slower than numpy: the read-modify-write of an array
LLVM cannot prove distinct from the input stays scalar.  A local sum with one store per cell,
with the kernel size and the stride fixed at compile time, vectorises.

No padded copy of the input (on MobileNetV2's first blocks that copy cost about as much as
onnxruntime's whole layer).  Stride 1 reads the input rows themselves: the interior columns in a
loop without checks, the border columns with them, and rows above or below the map read a row of
zeros.  Stride 2 with PyTorch's ``padding=1`` splits each plane into its four phase planes and
computes it as one flat run (``_depthwise_loops.stride_2_phases``); other stride-2 layers first
split each input row of a plane, once, into its even and odd padded columns (the padding cells
are never written, so they stay zero), so that a window's columns are
unit-stride loads (``even[ox]``, ``odd[ox]``, ``even[ox + 1]``) that vectorise where
``row[2 * ox + j]`` did not (measured: 96 channels at 112×112, 0.69 against 1.62 ms).  Every
index is into a view that starts at the first cell read, so it is provably non-negative: numba's
negative-index wraparound otherwise keeps a loop scalar.

The nine products are added in the numpy path's order (offset ``(0, 0)``, ``(0, 1)``, …
``(2, 2)``; the first one is the start value), then the bias, with no fused multiply-add (numba
does not contract without ``fastmath``), and the clamp is ``max`` then ``min`` with NaN kept, so
results are the numpy passes' bits (``y + b`` then ``np.clip``/``np.maximum``).  The exception is
the ``*_fma`` forms (float32 ``flat`` and ``phases`` layers where the CPU has AVX-512F,
:func:`fused_planes`): fused multiply-adds of masked loads from the input
(``kernels._depthwise_ir``), one rounding per tap, within float32 accuracy of those bits.

The kernels release the GIL, so concurrent runs proceed in parallel.  A layer is split over
threads only on numba's own team, where the convolution tiles run (``kernels._f32_conv``); on
Python threads beside OpenBLAS it measured slower (``_depthwise.BoundDepthwise``).  ``None`` without numba or with
``ONNXPLUG_CPU_JIT=0``: the caller uses the numpy path.
"""

from __future__ import annotations

import functools
from typing import Any

from ._jit import compiler, cpu_has, switched_on

__all__ = ["avx512", "compiled", "compiled_parallel", "fused_planes"]


@functools.cache
def compiled() -> dict[int, Any] | None:
    """``{stride: kernel(x, taps, bias, has_bias, low, high, top, left, y)}`` for
    stride 1 and 2 on both axes, and ``"flat"``: stride 1 with one cell of padding on every side
    (the output the input's size) computed over each plane as one flat run, ``"phases"``: stride 2
    with one cell of padding before each axis and a ``ceil(H/2) × ceil(W/2)`` output, each plane
    split into its four phases, then one flat run; or ``None``.

    ``x`` ``(P, H, W)`` is the input as ``N·C`` planes, ``taps`` ``(C, 9)``, ``bias`` ``(C,)``
    (added when ``has_bias``), ``low``/``high`` the clamp (``-inf``/``inf`` for none) in ``x``'s
    dtype, ``top`` and ``left`` the padding before the map, ``y`` ``(P, oh, ow)`` (plane ``p`` has channel
    ``p % C``)."""
    return _forms("")


@functools.cache
def compiled_parallel() -> dict[int, Any] | None:
    """``{stride: kernel(..., y, parts)}``: :func:`compiled`'s kernels with one image's channels
    split into ``parts`` on numba's threading layer, for sessions whose convolutions run on that
    team (``kernels._f32_conv``); ``None`` without numba."""
    return _forms("_parallel")


#: Each form's loop in ``_depthwise_loops`` (its parallel form adds ``_parallel``); the ``*_fma``
#: forms are float32 ``flat`` and ``phases`` layers on AVX-512F (``kernels._depthwise_ir``).
_FORMS = {
    1: "stride_1",
    2: "stride_2",
    "flat": "stride_1_flat",
    "phases": "stride_2_phases",
    "flat_fma": "stride_1_fma",
    "phases_fma": "stride_2_fma",
}


def fused_planes() -> bool:
    """Whether float32 ``flat`` and ``phases`` layers take the ``*_fma`` forms: numba usable, the
    CPU with AVX-512F, and ``ONNXPLUG_CPU_DEPTHWISE_FMA`` not ``0`` (read when a layer is planned)."""
    return avx512() and switched_on("ONNXPLUG_CPU_DEPTHWISE_FMA")


@functools.cache
def avx512() -> bool:
    """Whether numba is usable and the CPU has AVX-512F: the kernels written as AVX-512 IR
    (``kernels._depthwise_ir``) may run."""
    return compiler() is not None and cpu_has(("avx512f",), ("avx512f",))


def _forms(suffix: str) -> dict[Any, Any] | None:
    if compiler() is None:
        return None
    from . import _depthwise_loops

    return {form: getattr(_depthwise_loops, name + suffix) for form, name in _FORMS.items()}
