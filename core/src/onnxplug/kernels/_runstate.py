"""The state of the run in progress, visible to kernels that loop (Loop, Scan, RNNs).

The executor sets it for the duration of ``run()`` in a context variable, so it is per thread
(and per task) and one session can run from many threads at once.
"""

from __future__ import annotations

import contextvars
from typing import Any

from ..errors import RunTerminated

__all__ = ["RunState", "current_run", "check_terminate"]


class RunState:
    """Per-call state: the caller's RunOptions (for ``terminate``), the run's intra-op thread count
    and a dict where providers keep per-run notes.

    :ivar threads: the threads this run may use (``intra_op_num_threads``, the BLAS libraries'
        own count where that is 0, or 1 where the thread governor chose one for this run);
        ``None`` when the session does not manage the BLAS count (then it does not restore it
        either).  Kernels that split work themselves read it here rather than from BLAS.
    :ivar notes: per-run scratch for providers, keyed by their package name (say, that a
        provider's own thread team is in use, so its BLAS calls stay on one thread until the
        run ends).  A run whose notes are not empty has its BLAS count restored at the end.
    """

    __slots__ = ("run_options", "threads", "notes")

    def __init__(self, run_options: Any = None, threads: int | None = None) -> None:
        self.run_options = run_options
        self.threads = threads
        self.notes: dict[str, Any] = {}

    def terminated(self) -> bool:
        options = self.run_options
        return options is not None and bool(getattr(options, "terminate", False))


_CURRENT: contextvars.ContextVar[RunState | None] = contextvars.ContextVar("onnxplug_run", default=None)


def current_run() -> RunState | None:
    """The run in progress on this thread, or ``None`` outside ``run()``."""
    return _CURRENT.get()


def check_terminate() -> None:
    """Raise :class:`~onnxplug.errors.RunTerminated` (a ``Fail``) if the caller set
    ``RunOptions.terminate``.

    Kernels that iterate (Loop, Scan, recurrent ops) call it between iterations.
    """
    state = _CURRENT.get()
    if state is not None and state.terminated():
        raise RunTerminated()


def enter_run(state: RunState) -> contextvars.Token:
    return _CURRENT.set(state)


def leave_run(token: contextvars.Token) -> None:
    _CURRENT.reset(token)


# -- the process-wide seed of onnxruntime's set_seed ---------------------------------------------

_SEED_LOCK = __import__("threading").Lock()
_GLOBAL_SEED: list[int | None] = [None]
_SEED_DRAWS = [0]


def set_global_seed(seed: int) -> None:
    """Seed random ops that have no ``seed`` attribute (``onnxplug.set_seed``)."""
    with _SEED_LOCK:
        _GLOBAL_SEED[0] = int(seed)
        _SEED_DRAWS[0] = 0


def unseeded_rng() -> Any:
    """The generator a random op without a ``seed`` attribute draws from.

    Fresh OS entropy, unless :func:`set_global_seed` was called: then a reproducible sequence of
    generators (the n-th unseeded draw after ``set_seed(s)`` is always the same).
    """
    import numpy as np

    with _SEED_LOCK:
        seed = _GLOBAL_SEED[0]
        if seed is None:
            return np.random.default_rng()
        _SEED_DRAWS[0] += 1
        return np.random.default_rng([seed, _SEED_DRAWS[0]])
