"""float32 2-D convolution as an implicit GEMM on AVX-512, compiled through numba.

Why: the numpy paths (im2col then an OpenBLAS product, Winograd, shifted products) copy the
input several times per layer and leave everything around the product single-threaded, while
OpenBLAS's second thread polls between products (docs/benchmarks.md, "Where the remaining CNN
gap is").  Here each output tile of 6 channels × 64 columns is computed straight from the input:
every kernel tap reads the same phase images at a shifted offset (``kernels._conv_geometry``), so
the only copy is one padded (and, for strides, phase-split) image.  A pointwise stride-1
convolution reads its input in place, and so does a stride-1 layer on a small map whose output
rows are as wide as its input's (3×3 with padding 1): each tap's loads are masked to the lanes
that fall inside the map (:func:`kernels._f32_conv_layout.masked_layout`), so there is no copy and no padding column is
computed.  Grouped layers run as one convolution whose groups read
their own blocks of channels.  The tiles store the output themselves with the bias, the
residual, the clamp (Relu/Clip) and FusedConv's SiLU, cropping a padded layer's extra columns as
they store (``kernels._f32_tile_ir``), so there is no epilogue pass.  The gather and the tiles
are each split over the run's threads on numba's threading layer (``kernels._team``), both from
one compiled call per layer (each extra call from Python cost 5-10 µs, as much as a small
layer's tiles), or over Python threads where that layer is not safe.  What a layer computes
where (:class:`ConvPlan`) is worked out once per input shape.

Numerics: each output is ``sum_k w[m, k] · x[...]`` accumulated in float32 with one rounding per
multiply-add, ``k`` in the weights' order (channel, then tap row, then tap column); not
OpenBLAS's bits, within float32 accuracy of the exact sum (the ONNX node cases and onnxruntime
agree to their tolerances), and exact for integer-valued data whose sums stay below 2**24.  The
epilogue adds the bias, then the residual, then clamps: ``kernels._epilogue``'s order.

On by default; ``ONNXPLUG_CPU_CONV_TILE=0`` keeps the numpy paths.  Layers run 1.2-3x faster
than on the numpy paths at 2 threads (docs/benchmarks.md, "float32 convolutions on compiled
tiles").  A run that uses the team pins BLAS to one thread until it ends (``kernels._team``):
OpenBLAS's worker otherwise polls for ~0.1 s after any threaded product while the team waits
for its second thread, which made whole models slower than their layers promised.

:func:`available` is ``False`` (callers keep the numpy paths) with ``ONNXPLUG_CPU_CONV_TILE=0``,
without numba, with ``ONNXPLUG_CPU_JIT=0``, or on a CPU without AVX-512F.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ._conv_bindings import is_float32_c, no_residuals, store_arguments, tile_binding
from ._epilogue import finish
from ._f32_conv_layout import COLUMNS, crop_tables, layout, masked_layout, tail_columns
from ._f32_conv_threads import on_python_threads
from ._jit import avx512_module, direct_call
from ._scratch import scratch
from ._sigmoid_jit import silu as silu_pass
from ._split_rows import thread_budget
from ._team import join_run, run_settings, tiles_enabled

__all__ = ["BoundLayer", "ConvPlan", "available", "in_weight_order", "plan", "run", "thread_parts"]

_NO_BIAS = np.zeros(0, dtype=np.float32)
_NO_PLANES = np.zeros((0, 0, 0), dtype=np.float32)
_NO_KEEP = np.zeros(0, dtype=np.uint16)
_NO_AT = np.zeros(0, dtype=np.int64)
#: Tiles (6 channels × 64 columns) per thread below which one thread computes a layer alone.
MIN_TILES_PER_PART = 4
#: Values per thread below which one thread gathers alone.
_MIN_VALUES_PER_PART = 1 << 14
#: Column tiles up to which a layer's tiles are split by their rows (weights first).
_FEW_COLUMN_TILES = 4
#: Input values a column reads (channels, times phases) up to which a layer's tiles run in chunks
#: of column tiles (``ConvPlan.chunk``): the stems.
_STEM_VALUES = 12
#: Bytes of input a chunk of column tiles reads (``_f32_conv_tile.tiles``' order), to stay in a
#: core's L2 cache (1 MiB here) beside the weights and the output's rows.
_CHUNK_INPUT_BYTES = 256 << 10


@functools.cache
def loops() -> Any | None:
    """The compiled module ``kernels._f32_conv_tile``, or ``None`` without numba or AVX-512F."""
    return avx512_module("_f32_conv_tile")


def available() -> bool:
    """Whether :func:`run` may be called: not switched off (``ONNXPLUG_CPU_CONV_TILE=0``), numba
    usable and the CPU with AVX-512F."""
    return tiles_enabled() and loops() is not None


def thread_parts(work: int, minimum: int, budget: int | None = None) -> int:
    """Threads for ``work`` units: the run's budget, at most one per ``minimum`` units."""
    budget = thread_budget() if budget is None else budget
    return max(1, min(budget, work // minimum)) if budget > 1 else 1


def in_weight_order(weights: int, read: int, column_tiles: int) -> bool:
    """Whether a product's tiles run row tile after row tile, each across the column tiles (one
    chunk of them all): where its weights outweigh the input the tiles read, or on few columns
    (see :class:`ConvPlan`)."""
    return weights > read or column_tiles <= _FEW_COLUMN_TILES


class ConvPlan:
    """What a convolution of one input shape computes and where, worked out once (a layer's call
    then costs a few µs of Python around the compiled driver, not 15).

    :ivar geometry: the ``PhaseGeometry``; ``offsets``, ``in_place``, ``group_stride``: as
        ``kernels._f32_conv_layout.layout`` gives them, or, ``masked``, the input read in place
        with the padding's lanes masked off (``masked_layout``: ``keep``/``at`` are then its taps
        and lane masks); ``columns``: the computed columns, the last ``tail`` of them as dot
        products (``TAIL_COLUMNS``); ``direct``: they are the output's, else ``keep``/``at`` say
        which the tiles store where (``crop_tables``).
    :ivar shape: the output ``(N, M, OH, OW)``; ``channels``: the input's; ``groups``: the
        weights' row groups; ``driver``: the geometry arguments of ``convolve_images``.
    """

    __slots__ = (
        "geometry",
        "offsets",
        "in_place",
        "masked",
        "group_stride",
        "columns",
        "tail",
        "direct",
        "keep",
        "at",
        "chunk",
        "shape",
        "channels",
        "groups",
        "driver",
        "_parts",
    )

    def __init__(self, shape: tuple, maps: int, groups: int, kernel, strides, dilations, pads, auto_pad: str) -> None:
        n, c = shape[:2]
        attributes = (tuple(shape[1:]), groups, kernel, strides, dilations, pads, auto_pad)
        geometry, offsets, in_place, group_stride = layout(*attributes)
        masked = masked_layout(*attributes)
        oh, ow = geometry.out
        self.geometry, self.masked = geometry, masked is not None
        if masked is not None:
            self.offsets, self.keep, self.at = masked
            self.in_place, self.group_stride = True, c // groups * shape[2] * shape[3]
            self.columns, self.direct = oh * ow, True
        else:
            self.offsets, self.in_place, self.group_stride = offsets, in_place, group_stride
            self.columns, self.direct = geometry.columns, geometry.wq == ow
            self.keep, self.at = (_NO_KEEP, _NO_AT) if self.direct else crop_tables(geometry.columns, geometry.wq, ow)
        # The last few columns of a layer read in place as dot products, where the tiles would
        # spend a whole 16-lane vector on them (the inputs they read are copied out first).
        self.tail = tail_columns(self.columns, self.offsets.size) if self.in_place else 0
        self.shape = (n, maps, oh, ow)
        self.channels, self.groups = c, groups
        # Tiles in weight order where the weights outweigh what the tiles read of the input, and
        # on small maps: with four column tiles or fewer (a 14×14 map's 196 columns are 3 tiles
        # and a short one), splitting by column tiles gave one thread a third more work.
        # A stem (a few input channels, often phase-split) runs in chunks of column tiles whose
        # input stays in cache, each chunk's row tiles in turn, so that each output row is
        # written a chunk at a time: column-major order wrote 64 columns of every channel in
        # turn, a stream per channel, which on maps larger than the caches cost more than the
        # arithmetic (3 → 64 channels at 224×224: 659 → 596 µs, and after a cache flush 1365 →
        # 866).  Wider inputs keep column-major order, whose input columns stay in L1 across
        # the row tiles (chunked: 16 → 96 pointwise at 112×112 146 → 160 µs, 64 → 256 at 56×56
        # 251 → 272).
        read = c * shape[2] * shape[3] if self.in_place else len(geometry.phases) * c * geometry.length
        column_tiles = -(-(self.columns - self.tail) // COLUMNS)
        read_per_column = c * (1 if self.in_place else len(geometry.phases))
        if in_weight_order(maps * self.offsets.size, read, column_tiles):
            self.chunk = column_tiles
        elif read_per_column <= _STEM_VALUES:
            self.chunk = max(1, min(column_tiles, _CHUNK_INPUT_BYTES // (COLUMNS * 4 * read_per_column)))
        else:
            self.chunk = 1
        top, left = geometry.pads
        # convolve_images' geometry arguments
        self.driver = (*geometry.stride, top, left, geometry.phases, geometry.hq, geometry.wq, self.in_place)
        self._parts: dict[int, tuple[int, int]] = {}

    def parts(self, budget: int) -> tuple[int, int]:
        """Threads for the gather and the tiles at a run's thread ``budget``."""
        parts = self._parts.get(budget)
        if parts is None:
            geometry = self.geometry
            gathered = len(geometry.phases) * self.channels * geometry.length
            parts = (
                1 if self.in_place else thread_parts(gathered, _MIN_VALUES_PER_PART, budget),
                thread_parts(
                    loops().tile_count(self.shape[1], self.groups, self.columns - self.tail),
                    MIN_TILES_PER_PART,
                    budget,
                ),
            )
            self._parts[budget] = parts
        return parts


@functools.lru_cache(maxsize=512)
def plan(shape: tuple, maps: int, groups: int, kernel: tuple, strides, dilations, pads, auto_pad: str) -> ConvPlan:
    """The :class:`ConvPlan` of an input ``shape`` ``(N, C, H, W)`` convolved to ``maps`` channels
    (attributes as tuples or ``None``), kept per shape and attributes."""
    return ConvPlan(shape, maps, groups, kernel, strides, dilations, pads, auto_pad)


class BoundLayer:
    """A :class:`ConvPlan` with one node's weight matrix ``(M, C/groups·kh·kw)``: what
    ``convolve_images`` takes that does not change from call to call, worked out once (a small
    layer's Python around the compiled call: 4.5 → 2 µs).  Called as :func:`run` is.

    A node passes the same bias array, clamp and SiLU objects on every call, and equal run
    settings are one object (``kernels._team.run_settings``), so every argument after the output
    is kept for the last such quadruple, and a call that repeats it is checked by four identity
    tests: a chain of small layers' Python went 5.3 → 4.3 µs a layer with the arguments kept,
    and ~0.7 µs less again with the run's settings read once and the node's call unrouted
    (``numerics.Convolution``).  The kept call then goes to the compiled function's entry point,
    not through numba's dispatcher, which typed its 28 arguments on every call (~0.5 µs:
    ``kernels._jit.direct_call``)."""

    __slots__ = ("layer", "w", "out_shape", "_planes", "_rows", "_no_residual", "_stores", "_empty", "_last")

    def __init__(self, layer: ConvPlan, w: np.ndarray) -> None:
        n, m, oh, ow = layer.shape
        self.layer, self.w, self.out_shape = layer, w, layer.shape
        geometry = layer.geometry
        self._planes = None if layer.in_place else (len(geometry.phases), layer.channels, geometry.length)
        self._rows = (n, m, oh * ow)
        self._no_residual = no_residuals(n)
        self._stores: dict[tuple, tuple] = {}  # (clamp, silu) -> float32 (low, high, alpha)
        self._empty = math.prod(layer.shape) == 0
        # (bias, clamp, silu, settings, the compiled call, its arguments after the output,
        # whether it runs on the team, whether it took a residual) of the last call that ran
        # compiled
        self._last: tuple | None = None

    def __call__(self, x, bias=None, residual=None, clamp=None, silu=None, settings=None, out=None) -> np.ndarray:
        """The layer of ``x``; ``settings``: the run's (``kernels._team.run_settings``), where the
        caller has read them already; ``out``: where to store it, used where it is a C-contiguous
        float32 array of the output's shape (a view of a Concat's output), else a new array."""
        if settings is None:
            settings = run_settings()
        y = self.again(x, bias, residual, clamp, silu, settings, out)
        if y is not None:
            return y
        if out is not None and not self._fits(out):
            out = None
        y = np.empty(self.out_shape, dtype=np.float32) if out is None else out
        if self._empty:
            return y
        if bias is None:
            b = _NO_BIAS
        elif bias.dtype == np.float32 and bias.ndim == 1 and bias.flags.c_contiguous:
            b = bias
        else:
            b = np.ascontiguousarray(bias, dtype=np.float32).reshape(self.layer.shape[1])
        kept = (bias, clamp, silu) if b is bias or bias is None else None  # (not a converted copy)
        if residual is None:
            self._convolve(x, y, self._arguments(b, self._no_residual, clamp, silu), settings, kept)
        elif residual.shape == y.shape and residual.dtype == np.float32:
            arguments = self._arguments(b, np.ascontiguousarray(residual).reshape(self._rows), clamp, silu)
            self._convolve(x, y, arguments, settings, kept, with_residual=True)
        else:  # added after the bias, then clamped, in a pass of its own
            self._convolve(x, y, self._arguments(b, self._no_residual, None, None), settings)
            y = finish(y, None, residual, clamp)
            if silu is not None:  # a rare layout: the separate pass
                y = silu_pass(y, silu, out=y)
        return y

    def again(self, x, bias, residual, clamp, silu, settings, out) -> np.ndarray | None:
        """The kept call (:meth:`__call__`'s, with the run's ``settings``) where the last compiled
        call had these ``bias``, ``clamp``, ``silu`` and ``settings`` objects and a residual
        exactly where this one has one, else ``None``: ``numerics.Convolution`` calls it first
        for the input shape it saw last, skipping the lookups in between (~0.5 µs a layer)."""
        last = self._last
        if last is None or last[0] is not bias or last[1] is not clamp or last[2] is not silu:
            return None
        if last[3] is not settings:
            return None
        arguments = last[5]
        if residual is not None:  # kept for a residual of the output's shape: this one's goes in
            if not (last[7] and residual.shape == self.out_shape and residual.dtype == np.float32):
                return None
            arguments = _with_residual(arguments, residual, self._rows)
        elif last[7]:
            return None
        # an array of its own (or the plan's view of a Concat's output, never a graph output): a
        # graph's output that is a view is copied on its way out (fresh_outputs)
        y = np.empty(self.out_shape, dtype=np.float32) if out is None or not self._fits(out) else out
        if last[6]:
            join_run()
        planes = _NO_PLANES if self._planes is None else scratch("planes", self._planes, np.float32)
        last[4](np.ascontiguousarray(x), self.w, planes, self.layer.offsets, y.reshape(self._rows), *arguments)
        return y

    def bind(self, x, bias, residual, clamp, silu, output, scratch, residual_index=None):
        """This layer as an ``onnxplug.kernels.Binding`` over ``output`` (``kernels._conv_bindings``),
        or ``None`` where its call would not run compiled on this thread or the team (the tiles
        off, Python threads, a bias or residual it would convert); ``residual_index``: the
        residual's position among the step's inputs."""
        settings = run_settings()
        if not settings.tiles or self._empty or (bias is not None and not is_float32_c(bias, 1)):
            return None
        if residual is not None and (
            residual_index is None or residual.shape != self.out_shape or not is_float32_c(residual, 4)
        ):
            return None
        z = self._no_residual if residual is None else residual.reshape(self._rows)
        gather_parts, tile_parts = self.layer.parts(settings.budget)
        on_team = gather_parts > 1 or tile_parts > 1
        if on_team and not settings.team:
            return None
        arguments = self._arguments(_NO_BIAS if bias is None else bias, z, clamp, silu)
        arguments = (*arguments, *self.layer.driver, gather_parts, tile_parts)
        planes = _NO_PLANES if self._planes is None else scratch(self._planes, np.float32)
        fixed = (self.w, planes, self.layer.offsets)
        compiled = direct_call(loops().convolve_images)
        return tile_binding(
            compiled, fixed, self._rows, arguments, _RESIDUAL_AT, output, residual, residual_index, on_team
        )

    def _fits(self, out: np.ndarray) -> bool:
        return out.shape == self.out_shape and out.dtype == np.float32 and out.flags.c_contiguous

    def _arguments(self, b: np.ndarray, z: np.ndarray, clamp, silu) -> tuple:
        """``convolve_images``' arguments between the output and the driver's, for this bias,
        residual and store."""
        layer = self.layer
        low, high, alpha = self._store(clamp, silu)
        arguments = (layer.columns, layer.groups, layer.group_stride, b, z, low, high, layer.keep, layer.at)
        return arguments + (layer.chunk, alpha, layer.masked, layer.tail)  # (z at _RESIDUAL_AT)

    def _convolve(
        self, x: np.ndarray, y: np.ndarray, arguments: tuple, settings, kept: tuple | None = None, with_residual=False
    ) -> None:
        """The compiled call (on the team, or one thread) or the Python threads' stages; where it
        ran compiled, the call is kept for ``kept`` ``(bias, clamp, silu)`` at these settings (and
        ``with_residual``: for calls with a residual, whose own goes in its place)."""
        layer = self.layer
        planes = _NO_PLANES if self._planes is None else scratch("planes", self._planes, np.float32)
        gather_parts, tile_parts = parts = layer.parts(settings.budget)
        head = (np.ascontiguousarray(x), self.w, planes, layer.offsets, y.reshape(self._rows))
        on_team = gather_parts > 1 or tile_parts > 1
        if on_team and not settings.team:
            on_python_threads(loops(), layer.geometry, layer.in_place, parts, *head, *arguments)
            return
        if on_team:
            join_run()
        compiled = loops().convolve_images
        arguments = (*arguments, *layer.driver, gather_parts, tile_parts)
        compiled(*head, *arguments)
        if kept is not None:
            # the kept call goes straight to the compiled entry point (the same arguments, and
            # x, y and the residual made C-contiguous float32 of these shapes: _jit.direct_call)
            self._last = (*kept, settings, direct_call(compiled), arguments, on_team, with_residual)

    def _store(self, clamp, silu) -> tuple:
        """The store's float32 clamp bounds and SiLU alpha (NaN: none), kept per node setting."""
        return store_arguments(self._stores, clamp, silu)


#: Where :meth:`BoundLayer._arguments` puts the residual (``z``) among the compiled call's arguments.
_RESIDUAL_AT = 4


def _with_residual(arguments: tuple, residual: np.ndarray, rows: tuple) -> tuple:
    """A kept call's arguments with ``residual`` (of the output's shape) as its ``z``."""
    z = np.ascontiguousarray(residual).reshape(rows)
    return (*arguments[:_RESIDUAL_AT], z, *arguments[_RESIDUAL_AT + 1 :])


def run(layer: ConvPlan, x: np.ndarray, w: np.ndarray, bias=None, residual=None, clamp=None, silu=None) -> np.ndarray:
    """The convolution of float32 ``x`` (of the shape ``layer`` was planned for, ``(N, C, H, W)``)
    with weights ``w`` ``(M, C/groups·kh·kw)`` (float32, C-contiguous, channel-major; the rows in
    ``layer.groups`` equal groups, group ``g`` reading input channels ``[g·C/groups,
    (g+1)·C/groups)``), plus ``bias`` ``(M,)``, plus ``residual`` (of the output's shape, or
    broadcastable), clamped to ``clamp``, then ``silu``'s SiLU (com.microsoft QuickGelu's alpha);
    a fresh ``(N, M, OH, OW)`` float32 array.  The caller has checked :func:`available`, the
    shapes and the attributes (``numerics.convolve``); a caller that convolves the same weights
    again keeps a :class:`BoundLayer` instead."""
    return BoundLayer(layer, w)(x, bias, residual, clamp, silu)
