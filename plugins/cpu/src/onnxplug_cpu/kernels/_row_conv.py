"""float32 2-D convolutions on row tiles: output channels in the vector lanes, positions along one
output row in registers (``kernels._row_conv_ir``), read from the input in place.

Why: ``kernels._f32_conv``'s tiles put 64 output columns in the lanes, so a tap that falls in the
padding for some of them is multiplied (by zeros) for all; on small maps that is much of the
work (18 % of a 7×7 map's 3×3 taps, 9 % at 14×14, 18 % on a 4×40 map, 35 % of a 2×2 layer's on
a 2×40 one), and a strided layer first copies its input into phase images and computes the
phase width's extra column every row.  Here a tile is up to 12 positions of one output row × 32
output channels: a top or bottom row leaves its padding rows' taps out of its table, a row's
first and last positions leave out their padding column's taps, and a strided layer reads its
input in place (each position's broadcast ``stride`` cells on).  Measured one layer at a time
against the other tiles (hand-made prototype, one thread, same machine): 512 → 512 3×3 at 7×7
930 → 790 µs, 256 → 256 at 14×14 904 → 847, at 4×40 720 → 577, 256 → 256 at stride 2 on 28×28
1236 → 1006, 64 → 64 at 56×56 942 → 923.

Which layers (:func:`plan`): ungrouped, dilation 1, kernels of up to 25 taps (pointwise ones
only at a stride: the column tiles read the others in place with nothing wasted), at least 32
output channels and 16 input channels, sums at least 128 long (but a strided pointwise layer's),
output rows of at least ``MIN_POSITIONS`` positions, maps of at most ``MAX_CELLS`` cells,
and a geometry whose taps each skip at most ``SKIPPED`` positions at either end of a tile (pads
of up to 2 at stride 1, 3 at stride 2).

Numerics: each output is ``sum w[m, c, ky, kx] · x[c, iy, ix]`` accumulated in float32 with one
rounding per multiply-add, taps in row-major order and channels in order within each tap (the
other tiles sum channel-major); the taps that read the padding are skipped, not multiplied by
zero.  The epilogue adds the bias, then the residual, then clamps, then applies the SiLU.

:func:`available` is ``False`` (callers keep the other tiles) without numba, with
``ONNXPLUG_CPU_JIT=0``, on a CPU without AVX-512F, or with ``ONNXPLUG_CPU_ROW_TILES=0``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ._conv_bindings import is_float32_c, no_residuals, store_arguments, tile_binding
from ._epilogue import finish
from ._jit import avx512_module, direct_call, switched_on
from ._sigmoid_jit import silu as silu_pass
from ._split_rows import run_in_row_blocks
from ._team import join_run, run_settings

__all__ = ["BoundRows", "RowPlan", "available", "pack", "plan"]

#: Output channels a tile computes (``kernels._row_conv_ir``: two 16-lane vectors).
CHANNELS = 32
#: Positions a tile computes (``kernels._row_conv_ir.MIN_POSITIONS`` … ``MAX_POSITIONS``).
MIN_POSITIONS, MAX_POSITIONS = 4, 12
#: Positions at either end of a tile a tap may skip (``kernels._row_conv_ir.SKIPPED``).
SKIPPED = 2
#: Fewer output channels than this keep the other tiles: a block of 32 half empty.
MIN_MAPS = 32
#: Layers whose output sums are shorter than this (input channels × taps) keep the other tiles,
#: whose store costs less against so little arithmetic: a 3 → 32 channel 3×3 layer at 32×160
#: took 77 µs on row tiles against 56, 16 → 32 at 80×80 269 against 271 (one thread).  Not for
#: a strided pointwise layer, whose column tiles first copy a phase of its input: 32 → 64 at
#: stride 2 on 80×80 60 → 55 µs, 64 → 128 on 40×40 47 → 38, 128 → 256 on 20×20 49 → 35.
MIN_DEPTH = 128
#: ... and layers with fewer input channels than this: each tap's loop over the channels is the
#: tile's inner loop (a 3-channel 7×7 stem at stride 2: 1140 against 946 µs on the column tiles).
MIN_CHANNELS = 16
#: Taps a kernel may have (5×5: 70 against 84 µs for 16 → 32 channels at 27×27).
MAX_TAPS = 25
#: Output maps larger than this keep the column tiles, which ran as fast there (64 → 64 3×3 at
#: 224×224 14.9 ms either way, 128 → 128 at 112×112 13.6 against 14.0): the plan's tables, worked
#: out in Python on a layer's first call, stay under ~20 ms and 2 MB.
MAX_CELLS = 160 * 160
#: Work items (tiles × blocks of channels) per thread below which one thread computes a layer.
MIN_ITEMS_PER_PART = 8
#: Packed weights up to which the threads split a layer by its output rows, each computing all
#: channels of its rows (every thread reads all the weights, from its own cache), rather than by
#: blocks of channels (each thread reads its blocks' weights once): the next layer, whose column
#: tiles split by positions, then finds its input in the cache of the thread that reads it.
WEIGHTS_IN_CACHE = 512 << 10

_NO_BIAS = np.zeros(0, dtype=np.float32)


@functools.cache
def loops() -> Any | None:
    """The compiled module ``kernels._row_conv_loops``, or ``None`` where it cannot run."""
    return avx512_module("_row_conv_loops")


def available() -> bool:
    """Whether row tiles may run: switched on (``ONNXPLUG_CPU_ROW_TILES``, read on each call) and
    :func:`loops` there."""
    return switched_on("ONNXPLUG_CPU_ROW_TILES") and loops() is not None


def _positions(width: int) -> list[int]:
    """A row of ``width`` positions as tiles of at most ``MAX_POSITIONS``, as even as possible."""
    count = -(-width // MAX_POSITIONS)
    return [width * (i + 1) // count - width * i // count for i in range(count)]


class RowPlan:
    """The tiles of one input shape: ``tiles`` ``(T, 3)`` int64 rows of (first output cell,
    positions, taps in the table) and ``tables`` ``(T, taps, 4)`` int64 rows of (input offset of
    the tile's first position at channel 0, weight offset, first live position, end); ``shape``
    the output's ``(N, M, OH, OW)``, ``step`` the column stride."""

    __slots__ = ("shape", "tiles", "tables", "step", "taps")

    def __init__(self, shape, maps, kernel, strides, out, tiles, tables) -> None:
        self.shape = (shape[0], maps, *out)
        self.tiles, self.tables = tiles, tables
        self.step = int(strides[1])
        self.taps = kernel[0] * kernel[1]

    def parts(self, budget: int) -> int:
        """Threads at a run's thread ``budget``: one per ``MIN_ITEMS_PER_PART`` work items."""
        items = self.tiles.shape[0] * -(-self.shape[1] // CHANNELS)
        return max(1, min(budget, items // MIN_ITEMS_PER_PART)) if budget > 1 else 1


@functools.lru_cache(maxsize=256)
def plan(shape: tuple, maps: int, kernel: tuple, strides: tuple, dilations: tuple, pads: tuple, out: tuple):
    """The :class:`RowPlan` of an input ``shape`` ``(N, C, H, W)`` convolved to ``maps`` channels
    of ``out`` ``(OH, OW)`` (ungrouped; ``pads`` as ``(top, left, bottom, right)``), or ``None``
    where row tiles do not take the layer (see the module's docstring)."""
    if len(shape) != 4 or len(kernel) != 2 or maps < MIN_MAPS or any(d != 1 for d in dilations):
        return None
    _, _, height, width = shape
    (kh, kw), (sh, sw) = kernel, strides
    top, left, bottom, right = pads
    oh, ow = (height + top + bottom - kh) // sh + 1, (width + left + right - kw) // sw + 1
    if (oh, ow) != tuple(out) or ow < MIN_POSITIONS or oh * ow > MAX_CELLS:
        return None
    if kh * kw > MAX_TAPS or shape[1] < MIN_CHANNELS:
        return None
    if kh * kw == 1:
        if (sh, sw) == (1, 1):
            return None  # the column tiles read a pointwise layer in place, nothing wasted
    elif shape[1] * kh * kw < MIN_DEPTH:
        return None
    rows_tiles, rows_tables = [], []
    for oy in range(oh):
        ox0 = 0
        for positions in _positions(ow):
            table = []
            for ky in range(kh):
                iy = oy * sh + ky - top
                if not 0 <= iy < height:
                    continue  # a padding row: this tap reads nothing here
                for kx in range(kw):
                    # positions p with 0 <= (ox0 + p)·sw + kx - left < width
                    lo = max(0, -((kx - left) // sw) - ox0)
                    hi = min(positions, (width - 1 + left - kx) // sw + 1 - ox0)
                    if hi <= lo:
                        continue
                    if lo > SKIPPED or hi < positions - SKIPPED:
                        return None  # a range the tile has no loop for
                    table.append((iy * width + ox0 * sw + kx - left, (ky * kw + kx) * CHANNELS * shape[1], lo, hi))
            rows_tiles.append((oy * ow + ox0, positions, len(table)))
            rows_tables.append(table)
            ox0 += positions
    tables = np.zeros((len(rows_tables), kh * kw, 4), dtype=np.int64)
    for i, table in enumerate(rows_tables):
        if table:
            tables[i, : len(table)] = table
    tiles = np.array(rows_tiles, dtype=np.int64).reshape(-1, 3)
    for array in (tiles, tables):
        array.flags.writeable = False
    return RowPlan(shape, maps, kernel, strides, (oh, ow), tiles, tables)


def pack(w: np.ndarray, taps: int) -> np.ndarray:
    """The weights ``(M, C·taps)`` (channel-major, as the node's) laid out for the row tiles:
    ``(B, taps·C·32)`` float32, block ``b`` holding channels ``[32b, 32b + 32)`` (zeros past
    ``M``) tap-major, then input channel, then output channel."""
    maps = w.shape[0]
    channels = w.shape[1] // taps
    blocks = -(-maps // CHANNELS)
    padded = np.zeros((blocks * CHANNELS, channels, taps), dtype=np.float32)
    padded[:maps] = w.reshape(maps, channels, taps)
    packed = padded.reshape(blocks, CHANNELS, channels, taps).transpose(0, 3, 2, 1)
    return np.ascontiguousarray(packed).reshape(blocks, -1)


class BoundRows:
    """A :class:`RowPlan` with one node's packed weights, called as ``kernels._f32_conv.BoundLayer``
    is (``numerics.Convolution`` keeps it per input shape): ``(x, bias, residual, clamp, silu,
    settings, out)``; :meth:`again` and :meth:`bind` as there."""

    __slots__ = ("layer", "w", "out_shape", "by_tiles", "_rows", "_no_residual", "_stores", "_last")

    def __init__(self, layer: RowPlan, w: np.ndarray, packed: np.ndarray | None = None) -> None:
        """``w`` the node's weights ``(M, C·taps)``; ``packed`` their :func:`pack` where the caller
        keeps it (a node's layers for several input shapes share it), else packed here."""
        self.layer, self.w = layer, pack(w, layer.taps) if packed is None else packed
        self.by_tiles = self.w.nbytes <= WEIGHTS_IN_CACHE
        self.out_shape = layer.shape
        n, m, oh, ow = layer.shape
        self._rows = (n, m, oh * ow)
        self._no_residual = no_residuals(n)
        self._stores: dict[tuple, tuple] = {}
        # (bias, clamp, silu, settings, (kernel, parts, arguments), with a residual) of the last
        # call that ran compiled on the team or one thread
        self._last: tuple | None = None

    def __call__(self, x, bias=None, residual=None, clamp=None, silu=None, settings=None, out=None) -> np.ndarray:
        if settings is None:
            settings = run_settings()
        y = self.again(x, bias, residual, clamp, silu, settings, out)
        if y is not None:
            return y
        y = self._output(out)
        if bias is None:
            b = _NO_BIAS
        elif bias.dtype == np.float32 and bias.ndim == 1 and bias.flags.c_contiguous:
            b = bias
        else:
            b = np.ascontiguousarray(bias, dtype=np.float32).reshape(self.out_shape[1])
        z = self._residual(residual, y)
        if z is None:  # a residual to broadcast: added after the bias, then clamped, in a pass of its own
            self._run(x, y, b, self._no_residual, None, None, settings)
            y = finish(y, None, residual, clamp)
            return y if silu is None else silu_pass(y, silu, out=y)
        store = self._run(x, y, b, z, clamp, silu, settings)
        if store is not None and (b is bias or bias is None):
            self._last = (bias, clamp, silu, settings, store, residual is not None)
        return y

    def again(self, x, bias, residual, clamp, silu, settings, out) -> np.ndarray | None:
        """The layer where the last call had these ``bias``, ``clamp``, ``silu`` and ``settings``
        objects and a residual exactly where this one has one, else ``None``."""
        last = self._last
        if (
            last is None
            or last[0] is not bias
            or last[1] is not clamp
            or last[2] is not silu
            or last[3] is not settings
        ):
            return None
        if (residual is not None) != last[5]:
            return None
        y = self._output(out)
        z = self._residual(residual, y)
        if z is None:
            return None
        kernel, parts, arguments = last[4]
        if parts > 1:
            join_run()
        layer = self.layer
        kernel(
            np.ascontiguousarray(x),
            self.w,
            y.reshape(self._rows),
            layer.tiles,
            layer.tables,
            arguments[0],
            z,
            *arguments[1:],
            parts,
            self.by_tiles,
        )
        return y

    def bind(self, x, bias, residual, clamp, silu, output, scratch, residual_index=None):
        """This layer as an ``onnxplug.kernels.Binding`` over ``output`` (``kernels._conv_bindings``),
        or ``None`` where it would not run compiled on this thread or the team."""

        settings = run_settings()
        if not settings.tiles or (bias is not None and not is_float32_c(bias, 1)):
            return None
        if residual is not None and (
            residual_index is None or residual.shape != self.out_shape or not is_float32_c(residual, 4)
        ):
            return None
        parts = self.layer.parts(settings.budget)
        if parts > 1 and not settings.team:
            return None
        z = self._no_residual if residual is None else residual.reshape(self._rows)
        low, high, alpha = self._store(clamp, silu)
        layer = self.layer
        b = _NO_BIAS if bias is None else bias
        arguments = (layer.tiles, layer.tables, b, z, low, high, alpha, layer.step, parts, self.by_tiles)
        kernel = direct_call(loops().convolve_rows)
        return tile_binding(kernel, (self.w,), self._rows, arguments, 3, output, residual, residual_index, parts > 1)

    def _output(self, out) -> np.ndarray:
        fits = out is not None and out.shape == self.out_shape and out.dtype == np.float32 and out.flags.c_contiguous
        return out if fits else np.empty(self.out_shape, dtype=np.float32)

    def _residual(self, residual, y) -> np.ndarray | None:
        """The residual as the output's rows, the empty one for none, or ``None`` for one that
        must be broadcast."""
        if residual is None:
            return self._no_residual
        if residual.shape == y.shape and residual.dtype == np.float32:
            return np.ascontiguousarray(residual).reshape(self._rows)
        return None

    def _run(self, x, y, b, z, clamp, silu, settings) -> tuple | None:
        """The compiled call; ``(kernel, parts, (b, low, high, alpha, step))`` where it ran on
        the team or one thread (what :meth:`again` repeats), ``None`` on Python threads."""
        layer = self.layer
        low, high, alpha = self._store(clamp, silu)
        parts = layer.parts(settings.budget)
        x = np.ascontiguousarray(x)
        rows = y.reshape(self._rows)
        compiled = loops()
        if parts > 1 and not settings.team:
            items = layer.tiles.shape[0] * -(-self.out_shape[1] // CHANNELS)

            def block(lo, hi):
                serial_range(compiled, x, self.w, rows, layer, b, z, low, high, alpha, lo, hi, self.by_tiles)

            run_in_row_blocks(block, items, min_rows=max(1, items // parts))
            return None
        if parts > 1:
            join_run()
        arguments = (b, z, low, high, alpha, layer.step, parts, self.by_tiles)
        compiled.convolve_rows(x, self.w, rows, layer.tiles, layer.tables, *arguments)
        return (direct_call(compiled.convolve_rows), parts, (b, low, high, alpha, layer.step))

    def _store(self, clamp, silu) -> tuple:
        """The store's float32 clamp bounds and SiLU alpha (NaN: none), kept per node setting."""
        return store_arguments(self._stores, clamp, silu)


def serial_range(compiled, x, w, rows, layer: RowPlan, b, z, low, high, alpha, lo, hi, by_tiles) -> None:
    """Work items ``[lo, hi)`` of every image on the calling thread (the Python threads' share)."""
    for image in range(x.shape[0]):
        compiled.tiles_range(
            x[image],
            w,
            rows[image],
            layer.tiles,
            layer.tables,
            b,
            z[image],
            low,
            high,
            alpha,
            layer.step,
            lo,
            hi,
            by_tiles,
        )
