"""The one place the CPU provider decides whether its numba kernels are used.

numba is a dependency of the CPU plugin, but kernels must keep working without it (a broken
install, a platform without wheels) and ``ONNXPLUG_CPU_JIT=0`` turns every compiled loop off, so
each numba-backed kernel module asks :func:`compiler` for its decorator and falls back to numpy when it
gets ``None``. Every loop is compiled with ``cache=True`` (once per machine, kept in numba's cache
directory) and ``nogil=True`` (concurrent ``run()`` calls and row blocks run in parallel).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["compiler"]


def compiler(**options: Any) -> Callable[[Any], Any] | None:
    """numba's ``njit(cache=True, nogil=True, **options)``, or ``None`` without numba or with
    ``ONNXPLUG_CPU_JIT=0`` (read on each call: the modules cache what they build with it).
    ``options`` are further ``njit`` flags, e.g. ``fastmath={"contract"}`` for a loop whose
    accuracy was checked with fused multiply-adds."""
    if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
        return None
    try:
        import numba
    except ImportError:
        return None
    return numba.njit(cache=True, nogil=True, **options)
