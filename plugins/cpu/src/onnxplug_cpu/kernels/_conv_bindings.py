"""Bound calls of the compiled convolution layers, for the plan's segments
(``onnxplug.kernels.Binding``): the compiled function's arguments worked out once, so that a
call is the entry point's and one identity test per array.

A layer's output, input and residual are usually the very arrays it was bound over (the
segment's buffers), whose reshaped views are kept; another array of the same shape (a fresh
output leaving the segment, a new feed) is reshaped on the call.  The guard is the run's
settings (``kernels._team.run_settings``: tiles on, the team's state, the thread budget), which
chose the layer's thread parts; a layer on the team also pins BLAS to one thread first
(``join_run``), as its plain call does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onnxplug.kernels import Binding

from ._team import RunSettings, join_run, run_settings

__all__ = ["depthwise_binding", "is_float32_c", "no_residuals", "store_arguments", "team_settings", "tile_binding"]


def is_float32_c(array: np.ndarray, ndim: int) -> bool:
    """Whether ``array`` is a C-contiguous float32 array of ``ndim`` dimensions (what a bound
    layer may pass to a compiled entry point as it is)."""
    return array.dtype == np.float32 and array.ndim == ndim and array.flags.c_contiguous


_NO_SILU = np.float32(np.nan)
_NO_RESIDUALS = np.zeros((64, 0, 0), dtype=np.float32)  # (N, 0, 0) views for batches up to 64


def no_residuals(images: int) -> np.ndarray:
    """The empty ``(N, 0, 0)`` residual a layer passes its compiled call for none."""
    return _NO_RESIDUALS[:images] if len(_NO_RESIDUALS) >= images else np.zeros((images, 0, 0), np.float32)


def store_arguments(stores: dict, clamp, silu) -> tuple:
    """A layer's store arguments for a node's ``clamp`` ``(low, high)`` (or ``None``) and SiLU
    ``alpha`` (or ``None``): float32 ``(low, high, alpha)``, NaN for no SiLU; kept in ``stores``
    (the layer's own dict) per setting, so that a node's calls make them once."""
    key = (None if clamp is None else tuple(clamp), silu)
    store = stores.get(key)
    if store is None:
        low, high = clamp if clamp is not None else (-np.inf, np.inf)
        alpha = _NO_SILU if silu is None else np.float32(silu)
        store = stores[key] = (np.float32(low), np.float32(high), alpha)
    return store


def team_settings() -> RunSettings:
    """The run's settings, BLAS pinned for the team first (the guard of layers on the team)."""
    join_run()
    return run_settings()


def tile_binding(
    compiled: Callable[..., Any],
    fixed: tuple,
    rows: tuple[int, ...],
    arguments: tuple,
    residual_at: int,
    output: np.ndarray,
    residual: np.ndarray | None,
    residual_index: int | None,
    on_team: bool,
) -> Binding:
    """``compiled(x, *fixed, y_rows, *arguments)`` with the output as ``(N, M, cells)`` rows and,
    where ``residual`` is given (input ``residual_index`` of the step), its rows in
    ``arguments[residual_at]``."""
    output_rows = output.reshape(rows)
    guard = team_settings if on_team else run_settings
    if residual is None:

        def call(out, x, *_):
            compiled(x, *fixed, output_rows if out is output else out.reshape(rows), *arguments)

        return Binding(call, guard)
    before, after = arguments[:residual_at], arguments[residual_at + 1 :]
    residual_rows = residual.reshape(rows)
    position = residual_index - 1  # among the inputs after x

    def call_with_residual(out, x, *rest):
        z = rest[position]
        y = output_rows if out is output else out.reshape(rows)
        compiled(x, *fixed, y, *before, residual_rows if z is residual else z.reshape(rows), *after)

    return Binding(call_with_residual, guard)


def depthwise_binding(
    kernel: Callable[..., Any],
    planes: tuple[int, ...],
    arguments: tuple,
    cells: tuple[int, ...],
    x: np.ndarray,
    output: np.ndarray,
    parts: int | None,
) -> Binding:
    """``kernel(x_planes, *arguments, y_cells[, parts])``: a depthwise layer's planes, on the team
    where ``parts`` is given."""
    bound_x = x
    x_planes, output_cells = x.reshape(planes), output.reshape(cells)
    team = () if parts is None else (parts,)

    def call(out, x, *_):
        kernel(
            x_planes if x is bound_x else x.reshape(planes),
            *arguments,
            output_cells if out is output else out.reshape(cells),
            *team,
        )

    return Binding(call, run_settings if parts is None else team_settings)
