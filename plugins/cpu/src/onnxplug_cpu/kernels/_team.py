"""Whether the compiled kernels may split their work over numba's own threading layer.

Why: a kernel split over Python threads (``kernels._split_rows``) pays two GIL hand-offs and a
pool round trip per call, 18-50 µs on this project's 2-core machines, more than a small layer
takes; numba's ``parallel=True`` loops run their parts on native threads that never touch the
GIL, about 2.4 µs per parallel region (measured with an empty ``prange`` loop, OpenMP layer).

Only two of numba's layers are safe for a runtime library: ``omp`` and ``tbb`` may be entered by
several threads at once (concurrent ``run()`` calls); ``workqueue`` aborts the process when that
happens.  So unless the application chose a layer itself (``NUMBA_THREADING_LAYER``), numba is
asked for OpenMP, the layer the kernels were measured on (``kernels._jit``, before the first
compiled loop starts one), else for any thread-safe one, and if there is none (no libgomp, no
TBB) the kernels keep their serial forms split over Python threads.  GNU OpenMP is not
fork-safe: numba aborts a forked child that enters a parallel region its parent had used, so
after ``fork`` this module answers ``False`` in the child.  ``ONNXPLUG_CPU_TEAM=0`` turns the layer off too.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from onnxplug.kernels import current_run

from ._jit import switched_on
from ._split_rows import blas_controllers, run_in_row_blocks, thread_budget

__all__ = [
    "join_run",
    "parallel_ready",
    "run_parts",
    "run_settings",
    "RunSettings",
    "team_joined",
    "team_parts",
    "team_runs_convolutions",
    "tiles_enabled",
]

_SAFE_LAYERS = ("omp", "tbb")
_LOCK = threading.Lock()
_STATE = {"ready": None}


def _forked() -> None:
    if _STATE["ready"]:  # the parent started the layer: the child must not enter it
        _STATE["ready"] = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _start() -> bool:
    import numba

    config = numba.config
    chosen = os.environ.get("NUMBA_THREADING_LAYER")
    previous = config.THREADING_LAYER
    if not chosen and previous == "default":  # (``kernels._jit`` asks for OpenMP first)
        config.THREADING_LAYER = "threadsafe"
    try:
        numba.get_num_threads()  # starts the layer (once per process)
        layer = numba.threading_layer()
    except (ValueError, RuntimeError, ImportError):
        config.THREADING_LAYER = previous  # the application's own parallel code keeps its choice
        return False
    return layer in _SAFE_LAYERS


def tiles_enabled() -> bool:
    """Whether the float32 convolution tiles are switched on (by default; ``ONNXPLUG_CPU_CONV_TILE=0``
    or ``ONNXPLUG_CPU_JIT=0`` turns them off; ``kernels._f32_conv`` also needs numba and AVX-512F)."""
    return switched_on("ONNXPLUG_CPU_CONV_TILE") and switched_on("ONNXPLUG_CPU_JIT")


def team_runs_convolutions() -> bool:
    """Whether the kernels around the convolutions (pools, depthwise layers) should join numba's
    team: the tiles are on and the team is safe.  Off, they keep their Python threads or the
    calling thread, so that no team runs beside OpenBLAS's polling worker.  (Read from the run's
    :func:`run_settings`.)"""
    settings = run_settings()
    return settings.tiles and settings.team


def parallel_ready() -> bool:
    """Whether ``*_parallel`` kernels may run: numba's threading layer is started and thread-safe,
    this process is not a fork of one that used it, and ``ONNXPLUG_CPU_TEAM`` is not ``0``."""
    ready = _STATE["ready"]
    if ready is None:
        with _LOCK:
            if _STATE["ready"] is None:
                _STATE["ready"] = _start()
            ready = _STATE["ready"]
    return ready and switched_on("ONNXPLUG_CPU_TEAM")


class RunSettings(NamedTuple):
    """What the compiled layers ask before each call, answered once a run (:func:`run_settings`)."""

    #: :func:`tiles_enabled`
    tiles: bool
    #: :func:`parallel_ready`
    team: bool
    #: ``kernels._split_rows.thread_budget``
    budget: int


_SETTINGS_NOTE = "onnxplug_cpu.settings"
_INTERNED: dict[RunSettings, RunSettings] = {}


def run_settings() -> RunSettings:
    """The run in progress's :class:`RunSettings`, worked out on its first call and kept in its
    notes (outside a run, worked out on every call).

    Why: a small convolution asked three switches, the team's state and the thread budget on
    every call, ~1 µs of its Python (a MobileNet's or an OCR model's layers take 5-10 µs each);
    now it is one note's lookup.  Equal settings are the same object, so a layer that kept its
    arguments for them (``BoundLayer``) checks them with one identity test."""
    run = current_run()
    if run is not None:
        settings = run.notes.get(_SETTINGS_NOTE)
        if settings is not None:
            return settings
    settings = RunSettings(tiles_enabled(), parallel_ready(), thread_budget())
    if len(_INTERNED) > 64:  # (budgets are thread counts: a handful of values)
        _INTERNED.clear()
    settings = _INTERNED.setdefault(settings, settings)
    if run is not None:
        run.notes[_SETTINGS_NOTE] = settings
    return settings


_RUN_NOTE = "onnxplug_cpu.team"


def join_run() -> None:
    """Called before the team's first region of a run: BLAS goes to one thread for the rest of
    the run, so that no OpenBLAS worker polls beside the team (a threaded product leaves it
    polling for ~0.1 s, and every team region meanwhile waits for its second thread).  The
    session restores the BLAS count when the run ends; outside a session's run (no
    ``RunState.threads``) nothing is changed."""
    run = current_run()
    if run is None or not run.threads or run.notes.get(_RUN_NOTE):
        return
    run.notes[_RUN_NOTE] = True
    for controller in blas_controllers():
        if (controller.get_num_threads() or 1) > 1:
            controller.set_num_threads(1)


def team_joined() -> bool:
    """Whether the run in progress has already started the team (its BLAS is pinned): element-wise
    kernels between its convolutions may then split over the team too, while a run that has not
    (a transformer's, whose products need BLAS's threads) is left as it is."""
    run = current_run()
    return run is not None and bool(run.notes.get(_RUN_NOTE)) and parallel_ready()


#: Values per part from which a row pass (Gelu, softmax) splits over the team.
PART_ELEMENTS = 1 << 15


def team_parts(size: int, rows: int) -> int:
    """How many blocks of its ``rows`` a pass over ``size`` values takes: inside a run that
    started the team (:func:`team_joined`), one per :data:`PART_ELEMENTS` values up to the run's
    threads and the rows; else 1 (the calling thread)."""
    if size < 2 * PART_ELEMENTS or not team_joined():
        return 1
    return max(1, min(thread_budget(), rows, size // PART_ELEMENTS))


def run_parts(serial: Callable[..., Any], parallel: Callable[..., Any], count: int, parts: int, *args: Any) -> None:
    """``serial(*args, lo, hi)`` over ``[0, count)`` in ``parts`` ranges: one call when ``parts``
    is 1, else ``parallel(*args, parts)`` (the same ranges under ``prange``) on numba's layer, or
    the serial form on Python threads (``kernels._split_rows``) where that layer is not safe."""
    if parts <= 1:
        serial(*args, 0, count)
    elif parallel_ready():
        join_run()
        parallel(*args, parts)
    else:
        run_in_row_blocks(lambda lo, hi: serial(*args, lo, hi), count, min_rows=max(1, count // parts))
