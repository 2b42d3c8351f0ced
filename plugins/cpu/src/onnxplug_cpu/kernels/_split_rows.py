"""Rows of a compiled, GIL-free kernel's work spread over the run's threads.

The run's thread count is the session's (``RunState.threads``: ``intra_op_num_threads``, or the
BLAS libraries' own count where that is 0), which ``onnxplug.runtime`` also holds the BLAS
libraries at while it runs.
Kernels compiled with numba's ``nogil=True`` (the tree-ensemble walks) release the GIL, so plain
Python threads run them in parallel: this module splits a batch's rows into that many blocks and
runs all but the first on a shared pool while the calling thread computes the first.

numba's own ``parallel=True`` is used instead where its threading layer is thread-safe
(``kernels._team``); these Python threads are the fallback, and the int8 kernels' path.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import threading
from collections.abc import Callable
from typing import Any

from onnxplug.kernels import current_run

__all__ = ["blas_controllers", "one_blas_thread", "run_in_row_blocks", "thread_budget"]

_POOL_LOCK = threading.Lock()
_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_SIZE = 0


@functools.cache
def blas_controllers() -> tuple[Any, ...]:
    try:
        import threadpoolctl
    except ImportError:
        return ()
    return tuple(threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers)


def thread_budget() -> int:
    """The threads this run may use: the session's count for the run in progress
    (``RunState.threads``), else the BLAS libraries' current count (at least 1)."""
    run = current_run()
    if run is not None and run.threads:
        return run.threads
    controllers = blas_controllers()
    return max([1, *(c.get_num_threads() or 1 for c in controllers)]) if controllers else 1


@contextlib.contextmanager
def one_blas_thread():
    """BLAS on the calling thread alone for the duration (the count is restored after).

    Why: after a threaded call, OpenBLAS's workers keep polling for their next task for about
    2**28 cycles (a tenth of a second) before they sleep, holding a core each.  A product too
    small to gain from a second thread (a classifier's final 1×2048 × 2048×1000) therefore slowed
    the int8 convolutions and row blocks that followed it — the next run's first layers included:
    measured on quantized ResNet-50 (a hand-made A/B in one process), 65 → 52 ms per run with its
    final Gemm on one thread.
    The count is process-wide: a concurrent run's BLAS calls see one thread meanwhile."""
    changed = [(c, n) for c in blas_controllers() if (n := c.get_num_threads() or 1) > 1]
    for c, _ in changed:
        c.set_num_threads(1)
    try:
        yield
    finally:
        for c, n in changed:
            c.set_num_threads(n)


def _forget_pool() -> None:
    """A forked child has none of its parent's threads: submitting to the parent's pool would
    wait forever, so the child starts its own."""
    global _POOL, _POOL_SIZE, _POOL_LOCK
    _POOL, _POOL_SIZE, _POOL_LOCK = None, 0, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < workers:
            _POOL = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="onnxplug-cpu")
            _POOL_SIZE = workers
        return _POOL


def run_in_row_blocks(work: Callable[[int, int], Any], rows: int, *, min_rows: int) -> list[Any]:
    """``work(start, stop)`` over ``[0, rows)`` in up to :func:`thread_budget` blocks of at least
    ``min_rows`` rows; returns the blocks' results in order. Blocks must write disjoint rows."""
    if rows < 2 * min_rows:  # one block: skip reading the budget (a small batch's run is microseconds)
        return [work(0, rows)]
    blocks = max(1, min(thread_budget(), rows // max(1, min_rows)))
    if blocks == 1:
        return [work(0, rows)]
    bounds = [rows * i // blocks for i in range(blocks + 1)]
    pool = _pool(blocks - 1)
    futures = [pool.submit(work, bounds[i], bounds[i + 1]) for i in range(1, blocks)]
    first = work(bounds[0], bounds[1])
    return [first, *(future.result() for future in futures)]
