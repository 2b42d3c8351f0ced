"""Which compiled loop a float32 2-D MaxPool or AveragePool takes, and its call.

Two tiers, both where numba is loaded (``kernels._jit.numba_loaded``: a session with a float32
convolution loads it; a pool alone keeps the numpy path of ``kernels.pool``):

- :class:`PoolPlan` (:func:`plan`): the AVX-512 planes of ``kernels._pool_ir`` for the windows
  ``kernels._pool_rows`` lists (3×3 and 2×2 at stride 2, 3×3 at stride 1, 2×1), padded or not,
  AveragePool's division in the same pass.  Worked out once per input shape and kept by the node
  (``kernels.pool``): each later call is an allocation and one compiled call.  Against the loops
  below (both with their Python around them, outside a run; two threads): 64 planes of 112×112
  at 3×3 stride 2 padded 72 → 48 µs, 192 of 56×56 79 → 40, 480 of 28×28 at 3×3 stride 1 88 →
  38, 512 of 13×13 30 → 14, 256 of 56×56 2×2 AveragePool (with its division) 62 → 43.
- :func:`compiled_reduce`: numba loops for any window up to 16 columns (``kernels._pool_jit``,
  with ``kernels._pool_s2_loops`` and ``kernels._pool3_loops`` for the common windows), on CPUs
  without AVX-512F and for the windows above's list leaves out.

Inputs of at least :data:`PLANE_BLOCK_ELEMENTS` values per thread split into blocks of planes
over the run's threads: numba's team where the convolutions use it (``kernels._team``), else
Python threads (``kernels._split_rows``; the loops release the GIL).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from onnxplug.kernels import Binding

from ._conv_bindings import team_settings
from ._jit import avx512_module, direct_call, numba_loaded
from ._pool_jit import compiled as _compiled_pool
from ._pool_jit import compiled_parallel as _compiled_pool_parallel
from ._split_rows import run_in_row_blocks, thread_budget
from ._team import join_run, run_settings, team_runs_convolutions

__all__ = ["PLANE_BLOCK_ELEMENTS", "PoolPlan", "compiled_reduce", "plan"]

#: Smaller inputs keep the numpy path: the first compiled call loads numba (once per process).
COMPILED_MIN_ELEMENTS = 4096
#: Input elements per thread below which a compiled pool keeps to the calling thread.
PLANE_BLOCK_ELEMENTS = 1 << 15
#: Maps of at most this many cells (64×64) pool a 3×3 stride-1 window all planes at once
#: (:func:`_pool_3x3`): faster than the row loops on every map measured up to 56×56 (AveragePool
#: on the team, 64 planes of 56×56: 100 against 76 µs; 192 of 28×28: 98 against 57).
_POOL3_MAX_CELLS = 4096
_NO_COUNTS = np.zeros(0, dtype=np.float32)
_NO_COUNTS.flags.writeable = False
_NO_MASKS = np.zeros(0, dtype=np.uint16)
_NO_MASKS.flags.writeable = False


@functools.cache
def _planes():
    """``kernels._pool_rows`` (imported on first use: it compiles or loads its loops), or ``None``
    without numba, with ``ONNXPLUG_CPU_JIT=0`` or on a CPU without AVX-512F."""
    return avx512_module("_pool_rows")


def _parts(planes: int, plane: int, budget: int) -> int:
    """Blocks of planes for ``planes`` planes of ``plane`` cells at ``budget`` threads: one per
    :data:`PLANE_BLOCK_ELEMENTS` values, at most one a thread."""
    min_rows = max(1, PLANE_BLOCK_ELEMENTS // max(1, plane))
    return min(budget, planes // min_rows) if planes >= 2 * min_rows else 1


class PoolPlan:
    """A pool node's call for one input shape (``(N, C, H, W)`` float32) on
    ``kernels._pool_ir``'s planes: the output's shape, the loop's window number and geometry,
    and AveragePool's window counts; the thread split is worked out again when the run's
    settings change (``kernels._team.run_settings``).  Concurrent runs may share a plan: what a
    call binds is kept as one tuple, replaced whole."""

    __slots__ = ("shape", "_source", "_planes", "_arguments", "_bound")

    def __init__(self, in_shape, out, window: int, row_stride: int, begin, counts, masks) -> None:
        self.shape = (*in_shape[:2], *out)
        self._source = (in_shape[0] * in_shape[1], *in_shape[2:])
        self._planes = (self._source[0], *out)
        self._arguments = (counts, masks, window, row_stride, begin[0], begin[1])
        self._bound: tuple = (None, None, False)  # (settings, call(source, planes), on the team)

    def _bind(self, settings) -> tuple:
        loops = _planes()
        parts = _parts(self._source[0], self._source[1] * self._source[2], settings.budget)
        team = parts > 1 and settings.tiles and settings.team
        if parts <= 1 or team:
            entry = direct_call(loops.pool_planes_parallel if team else loops.pool_planes)
            arguments = (*self._arguments, parts) if team else self._arguments

            def call(source, planes):
                entry(source, planes, *arguments)

        else:
            serial, arguments, rows = loops.pool_planes, self._arguments, self._source[0]

            def call(source, planes):
                def block(start, stop):
                    serial(source[start:stop], planes[start:stop], *arguments)

                run_in_row_blocks(block, rows, min_rows=max(1, rows // parts))

        self._bound = bound = (settings, call, team)
        return bound

    def bind(self, x: np.ndarray, output: np.ndarray) -> Binding:
        """This plan as an ``onnxplug.kernels.Binding`` over ``output`` for the plan's segments
        (``kernels._conv_bindings``' form: the views of the arrays it was bound over kept)."""
        settings = run_settings()
        bound = self._bound if self._bound[0] is settings else self._bind(settings)
        call, source_shape, planes_shape = bound[1], self._source, self._planes
        bound_x, source, planes = x, x.reshape(source_shape), output.reshape(planes_shape)

        def pool(out, x):
            call(
                source if x is bound_x else x.reshape(source_shape),
                planes if out is output else out.reshape(planes_shape),
            )

        return Binding(pool, team_settings if bound[2] else run_settings)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The pool of ``x`` (of the shape this plan was made for, float32)."""
        settings = run_settings()
        bound = self._bound
        if bound[0] is not settings:
            bound = self._bind(settings)
        if bound[2]:
            join_run()
        y = np.empty(self.shape, np.float32)
        # C-contiguous: the loops' entry points take their arrays as such, unchecked.
        bound[1](np.ascontiguousarray(x).reshape(self._source), y.reshape(self._planes))
        return y


def plan(in_shape, out, begin, kernel_shape, strides, dilations, maximum: bool, counts=None) -> PoolPlan | None:
    """A :class:`PoolPlan` for a float32 ``in_shape`` input, or ``None`` where the planes do not
    serve it (numba not loaded, no AVX-512F, another rank, dilations, a window not in
    ``kernels._pool_rows.WINDOWS``).  ``counts``: AveragePool's window counts (``out``-shaped)."""
    if len(in_shape) != 4 or 0 in in_shape or 0 in out or not numba_loaded():
        return None
    if dilations and any(d != 1 for d in dilations):
        return None
    loops = _planes()
    if loops is None:
        return None
    kh, kw = int(kernel_shape[0]), int(kernel_shape[1])
    sh, sw = (int(s) for s in strides) if strides else (1, 1)
    begin = tuple(int(b) for b in begin)
    masks = _NO_MASKS
    if (kh, kw, sh, sw) == (3, 3, 1, 1) and begin == (1, 1) and tuple(out) == tuple(in_shape[2:]):
        from ._simd_ir import flat_masks  # (imports llvmlite: loaded with numba here)

        window = loops.FLAT_WINDOWS[maximum]
        masks = flat_masks(*out)
    else:
        window = loops.WINDOWS.get((kh, kw, sw if kw > 1 else 1, maximum))
        if window is None or (kw == 1 and sw != 1):
            return None
    divisors = _NO_COUNTS
    if counts is not None:
        divisors = np.ascontiguousarray(np.broadcast_to(counts, out), np.float32).reshape(-1)
        divisors.flags.writeable = False
    return PoolPlan(tuple(in_shape), tuple(out), window, sh, begin, divisors, masks)


def compiled_reduce(x, out, begin, kernel_shape, strides, dilations, maximum, counts=None):
    """Each window's maximum or sum over a float32 ``(N, C, H, W)`` ``x`` in one compiled pass
    (``kernels._pool_jit``), or ``None`` when it does not apply.  With ``counts`` (AveragePool's
    window counts, ``out``-shaped) the sums may come back divided by them already: the second
    value says whether they were."""
    if x.dtype != np.float32 or x.ndim != 4 or x.size < COMPILED_MIN_ELEMENTS or 0 in out or not numba_loaded():
        return None, False  # numba only where loaded (a float32 convolution loads it; a pool alone does not)
    if dilations and any(d != 1 for d in dilations):
        return None, False
    strides = tuple(strides) if strides else (1, 1)
    if kernel_shape[1] > 16 or strides[1] > 16:
        return None, False
    pool = _compiled_pool(int(kernel_shape[1]), int(strides[1]), maximum)  # None: numba is off
    if pool is None:
        return None, False
    y = np.empty(x.shape[:2] + tuple(out), np.float32)
    source = np.ascontiguousarray(x).reshape(-1, *x.shape[2:])
    planes = y.reshape(-1, *out)
    if _small_3x3(x.shape[2:], out, begin, kernel_shape, strides):
        divisors = _NO_COUNTS if counts is None else np.ascontiguousarray(counts, np.float32).reshape(-1)
        _pool_3x3(source, planes, maximum, divisors)
        return y, counts is not None
    if _inside_stride_2(x.shape[2:], out, begin, kernel_shape, strides):
        from . import _pool_s2_loops  # one pass per output row (SqueezeNet's, VGG's, a UNet's pools)

        loops = _pool_s2_loops.inside_loops(int(kernel_shape[0]), maximum)
        if loops is not None:
            _over_planes(*loops, source, planes)
            return y, False
    parallel = _compiled_pool_parallel(int(kernel_shape[1]), int(strides[1]), maximum)
    geometry = (int(kernel_shape[0]), int(strides[0]), int(begin[0]), int(begin[1]))
    _over_planes(pool, parallel, source, planes, *geometry)
    return y, False


def _over_planes(serial, parallel, source, planes, *args) -> None:
    """``serial(source, planes, *args)`` of ``(P, H, W)`` planes in blocks on the run's threads:
    ``parallel(source, planes, *args, parts)`` on numba's team where the convolutions use it,
    else blocks on Python threads (the compiled loops release the GIL); inputs of under
    ``PLANE_BLOCK_ELEMENTS`` per thread on the calling thread."""
    plane = source.shape[1] * source.shape[2]  # > 0: x.size >= COMPILED_MIN_ELEMENTS
    parts = _parts(source.shape[0], plane, thread_budget())
    if parts > 1 and parallel is not None and team_runs_convolutions():
        join_run()
        parallel(source, planes, *args, parts)
        return

    def block(start, stop):
        serial(source[start:stop], planes[start:stop], *args)

    run_in_row_blocks(block, source.shape[0], min_rows=max(1, PLANE_BLOCK_ELEMENTS // plane))


def _small_3x3(shape, out, begin, kernel_shape, strides) -> bool:
    """A 3×3 stride-1 window with one cell of padding all round on a map of at most
    ``_POOL3_MAX_CELLS`` cells (Inception's branch pools): :func:`_pool_3x3`'s case."""
    return (
        tuple(kernel_shape) == (3, 3)
        and tuple(strides) == (1, 1)
        and tuple(begin) == (1, 1)
        and tuple(out) == tuple(shape)
        and math.prod(shape) <= _POOL3_MAX_CELLS
    )


def _inside_stride_2(shape, out, begin, kernel_shape, strides) -> bool:
    """Square windows at stride 2, every one inside the map: ``kernels._pool_s2_loops``'s case."""
    k = kernel_shape[0]
    inside = tuple(out) == ((shape[0] - k) // 2 + 1, (shape[1] - k) // 2 + 1) and not any(begin)
    return inside and tuple(kernel_shape) == (k, k) and tuple(strides) == (2, 2)


def _pool_3x3(source, planes, maximum: bool, counts: np.ndarray) -> None:
    """All the planes of a map in one flat run (``kernels._pool3_loops``), AveragePool's division
    in the same pass: short rows cost the row-by-row loops more in setup than in arithmetic (on
    the team, with the division: 576 channels of 14×14 113 → 51 µs, 1024 of 7×7 145 → 50).  The
    planes split over the run's threads as the row loops'."""
    from . import _pool3_loops

    fill = np.float32(-np.inf) if maximum else np.float32(0.0)
    _over_planes(_pool3_loops.pool_3x3, _pool3_loops.pool_3x3_parallel, source, planes, maximum, fill, counts)
