"""Process-wide thread-pool sizes (``onnxplug.set_global_thread_pool_sizes``).

onnxruntime lets a process create one pair of global thread pools, before its sessions, and a
session opts into them with ``SessionOptions.use_per_session_threads = False``.  onnxplug has
no pools of its own to share: its threads are numpy's BLAS threads (``intra_op_num_threads``)
and the ``ORT_PARALLEL`` executor's workers (``inter_op_num_threads``).  So the global sizes are
the values those two options take in every session that opts in, which is what a caller of
the global-pool API asks for.  A session opts in by ``use_per_session_threads = False`` or by the
config entry ``session.use_global_thread_pool`` (or ``use_global_thread_pool``) set to ``"1"``.
"""

from __future__ import annotations

import threading

from ..errors import Fail, InvalidArgument
from .options import SessionOptions

__all__ = ["set_global_thread_pool_sizes", "apply_global_threads", "CONFIG_KEYS"]

CONFIG_KEYS = ("session.use_global_thread_pool", "use_global_thread_pool")

_LOCK = threading.Lock()
_SIZES: tuple[int, int] | None = None


def set_global_thread_pool_sizes(intra_op_num_threads: int, inter_op_num_threads: int) -> None:
    """Set, once per process, the thread counts of sessions that use the global pools.

    :raises Fail: called a second time (onnxruntime: the pools exist and cannot be replaced).
    :raises InvalidArgument: a negative count.
    """
    global _SIZES
    sizes = (int(intra_op_num_threads), int(inter_op_num_threads))
    if min(sizes) < 0:
        raise InvalidArgument(f"set_global_thread_pool_sizes: thread counts must be >= 0, got {sizes}")
    with _LOCK:
        if _SIZES is not None:
            raise Fail("Global thread pools have already been created, cannot replace them")
        _SIZES = sizes


def _opts_in(options: SessionOptions) -> bool:
    entries = options._entries()
    return not options.use_per_session_threads or any(entries.get(key) == "1" for key in CONFIG_KEYS)


def apply_global_threads(options: SessionOptions) -> None:
    """Give ``options`` the global sizes when the session uses the global pools (and they were
    set); a session keeping its own threads is left alone."""
    sizes = _SIZES
    if sizes is None or not _opts_in(options):
        return
    options.intra_op_num_threads, options.inter_op_num_threads = sizes
