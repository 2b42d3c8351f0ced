"""Where each tap of a 2-D convolution reads, for the implicit-GEMM tiles (int8 and float32).

Both compiled convolutions (``kernels._int8_conv`` on AVX-512 VNNI, ``kernels._f32_conv`` on
AVX-512F) compute an output row of 64 columns by reading the input at one shifted position per
kernel tap, so that no im2col copy is made.  This module is the one place that works out those
positions from the node's attributes.

The padded image is split into ``stride²`` *phase* images (rows ``py::sh``, columns ``px::sw``) of
a common width ``Wq``.  Tap ``(ky, kx)`` reads phase ``(ky·dh mod sh, kx·dw mod sw)`` at position
``n + (ky·dh div sh)·Wq + (kx·dw div sw)`` for output column ``n = oy·Wq + ox``: every tap is the
same buffer at a shifted offset.  Columns with ``ox >= OW`` are computed and dropped (``Wq - OW``
per row).  A stride-1 convolution has one phase, the padded image itself.
"""

from __future__ import annotations

import numpy as np

from .pool import pool_geometry

__all__ = ["PhaseGeometry"]


class PhaseGeometry:
    """Phases, tap shifts and output columns of one input shape.

    :ivar out: ``(OH, OW)``; ``stride``, ``pads``: ``(sh, sw)`` and the top/left pads.
    :ivar hq, wq: rows and columns of each phase image.
    :ivar phases: ``(P, 2)`` int64 ``(py, px)`` of the phases some tap reads, in order.
    :ivar tap_phase, shifts: per tap (row-major over the kernel), the index into ``phases`` and
        the position shift within it.
    :ivar columns: ``OH·Wq`` computed output columns; ``tiles``: 64-column tiles covering them.
    :ivar length: positions per phase image a tile may read, whole tiles included (at least
        ``Hq·Wq``; the cells past the image hold the padding value).
    """

    def __init__(self, spatial: tuple[int, int], kernel: tuple[int, int], conv: dict, op: str, columns: int = 64):
        (oh, ow), begin, end, _ = pool_geometry(
            spatial,
            kernel,
            conv.get("strides"),
            conv.get("dilations"),
            conv.get("pads"),
            conv.get("auto_pad", "NOTSET"),
            0,
            op,
        )
        sh, sw = tuple(conv.get("strides") or (1, 1))
        dh, dw = tuple(conv.get("dilations") or (1, 1))
        hp, wp = spatial[0] + begin[0] + end[0], spatial[1] + begin[1] + end[1]
        self.hq, self.wq = -(-hp // sh), -(-wp // sw)
        self.out = (oh, ow)
        self.stride, self.pads = (sh, sw), (begin[0], begin[1])
        taps = [(ky * dh, kx * dw) for ky in range(kernel[0]) for kx in range(kernel[1])]
        phases = sorted({(ry % sh, rx % sw) for ry, rx in taps})
        self.phases = np.array(phases, dtype=np.int64).reshape(-1, 2)
        self.tap_phase = [phases.index((ry % sh, rx % sw)) for ry, rx in taps]
        self.shifts = [(ry // sh) * self.wq + rx // sw for ry, rx in taps]
        self.columns = oh * self.wq
        self.tiles = -(-self.columns // columns)
        self.length = max(self.hq * self.wq, self.tiles * columns + max(self.shifts))

    def tap_offsets(self, phase_size: int, unit: int = 1) -> np.ndarray:
        """Each tap's start in a buffer of phase images ``phase_size`` apart, in ``unit``s per
        position (int64)."""
        return np.array(
            [p * phase_size + unit * s for p, s in zip(self.tap_phase, self.shifts)],
            dtype=np.int64,
        )
