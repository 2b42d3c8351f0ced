"""Per-channel affine maps and Relu over float32 feature maps, compiled and split over the team.

Why: DenseNet normalises the concatenated features before every convolution (BatchNormalization
then Relu, which no convolution can absorb: they come before it), so each of its 58 dense
layers made numpy passes over maps of up to 1024 channels, on one thread, between team
regions: BatchNormalization took 7.6 ms and Relu 4.4 ms of a 60 ms run (onnxruntime: 2.2 ms for
both).  Here each is one compiled pass, split over the run's threads on numba's team inside a
run that started it (``kernels._team.team_joined``), else on the calling thread; only where
numba is loaded already (a CNN's convolutions load it), and from 16K elements.

The same bits as the numpy passes they replace: ``x · a`` rounded, then ``+ c`` rounded (no fused
multiply-add: numba does not contract without ``fastmath``); Relu is ``np.maximum(x, 0)``'s
``x if x >= 0 or x is NaN else 0`` (so -0.0 and NaN pass through as numpy's do).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from onnxplug.kernels import Binding

from ._conv_bindings import team_settings
from ._jit import compiler, numba_loaded
from ._split_rows import thread_budget
from ._team import run_settings, team_joined

__all__ = ["affine_binding", "affine_channels", "relu"]

_NO_LOW, _NO_HIGH = np.float32(-np.inf), np.float32(np.inf)
#: Elements below which the numpy passes are kept (a compiled call costs a few µs).
MIN_ELEMENTS = 1 << 14
#: Elements per thread from which a pass is split over the team.
PART_ELEMENTS = 1 << 15


def _loops() -> Any | None:
    """The compiled loops where numba is already loaded (a float32 convolution loads it, see
    ``kernels._jit``): a model of Relus and normalisations alone does not pay numba's import."""
    if not numba_loaded():
        return None
    return _imported()


@functools.cache
def _imported() -> Any | None:
    if compiler() is None:
        return None
    from . import _channel_loops

    return _channel_loops


def _loops_for(x: np.ndarray) -> Any | None:
    """The compiled loops where they take ``x``: C-contiguous float32 ``(N, C, ...)`` of at least
    :data:`MIN_ELEMENTS` values (smaller maps keep the numpy passes, same bits)."""
    if x.dtype != np.float32 or x.ndim < 2 or x.size < MIN_ELEMENTS or not x.flags.c_contiguous:
        return None
    return _loops()


def _parts(size: int, budget: int | None = None, team: bool | None = None) -> int:
    """Ranges of rows a pass over ``size`` values splits into: one unless it is large and the
    team is in use (by default: this run's budget, and whether the run joined the team)."""
    if size < 2 * PART_ELEMENTS or not (team_joined() if team is None else team):
        return 1
    return max(1, min(thread_budget() if budget is None else budget, size // PART_ELEMENTS))


def affine_channels(x: np.ndarray, a: np.ndarray, c: np.ndarray, low=_NO_LOW, high=_NO_HIGH) -> np.ndarray | None:
    """``x · a[ch] + c[ch]`` for a C-contiguous float32 ``x`` ``(N, C, ...)`` and float32 ``a``,
    ``c`` ``(C,)``, clamped to float32 ``[low, high]`` (NaN kept; unbounded by default), as a fresh
    array; ``None`` where the compiled pass does not apply."""
    loops = _loops_for(x)
    if loops is None:
        return None
    rows = x.shape[0] * x.shape[1]
    a = np.ascontiguousarray(a, dtype=np.float32).reshape(-1)
    c = np.ascontiguousarray(c, dtype=np.float32).reshape(-1)
    if a.shape[0] != x.shape[1] or c.shape[0] != x.shape[1]:
        return None
    y = np.empty_like(x)
    loops.affine_rows(x.reshape(rows, -1), a, c, low, high, y.reshape(rows, -1), _parts(x.size))
    return y


def affine_binding(x: np.ndarray, a: np.ndarray, c: np.ndarray, low, high, output: np.ndarray) -> Binding | None:
    """:func:`affine_channels` of ``x`` into ``output`` as an ``onnxplug.kernels.Binding`` (the
    plan's segments), or ``None`` where the compiled pass does not apply.  Bound where a
    convolution's segment runs it, so it splits over the team from the first size that
    :func:`affine_channels` would split in such a run, and its guard joins the run to the team as
    a layer's does (``kernels._conv_bindings.team_settings``)."""
    loops = _loops_for(x)
    if loops is None:
        return None
    if a.shape != (x.shape[1],) or c.shape != (x.shape[1],) or c.dtype != np.float32 or not c.flags.c_contiguous:
        return None
    settings = run_settings()
    parts = _parts(x.size, settings.budget, settings.team)
    rows = (x.shape[0] * x.shape[1], -1)
    affine, bound_x, x_rows, output_rows = loops.affine_rows, x, x.reshape(rows), output.reshape(rows)
    low, high = np.float32(low), np.float32(high)

    def call(out: np.ndarray, x: np.ndarray, *_: Any) -> None:
        affine(
            x_rows if x is bound_x else x.reshape(rows),
            a,
            c,
            low,
            high,
            output_rows if out is output else out.reshape(rows),
            parts,
        )

    return Binding(call, team_settings if parts > 1 else run_settings)


def relu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
    """``np.maximum(x, 0)`` of a C-contiguous float32 ``x`` as a fresh array (or into ``out``, a
    C-contiguous float32 array of ``x``'s shape), or ``None``."""
    loops = _loops()
    if loops is None or x.dtype != np.float32 or x.size < MIN_ELEMENTS or not x.flags.c_contiguous:
        return None
    y = np.empty_like(x) if out is None else out
    loops.relu_flat(x.reshape(-1), y.reshape(-1), _parts(x.size))
    return y
