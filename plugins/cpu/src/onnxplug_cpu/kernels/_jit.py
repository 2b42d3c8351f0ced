"""The one place the CPU provider decides whether its numba kernels are used.

numba is a dependency of the CPU plugin, but kernels must keep working without it (a broken
install, a platform without wheels) and ``ONNXPLUG_CPU_JIT=0`` turns every compiled loop off, so
each numba-backed kernel module asks :func:`compiler` for its decorator and falls back to numpy when it
gets ``None``. Every loop is compiled with ``cache=True`` (once per machine, kept in numba's cache
directory) and ``nogil=True`` (concurrent ``run()`` calls and row blocks run in parallel).

Importing numba costs memory: numba, llvmlite and the first cached kernels add 90-135 MiB of peak
RSS (ResNet-50 304 → 396 MiB when its stem MaxPool loaded it; the ``yolo``, ``unet``, ``ocr_det``
and ``ocr_rec`` benchmark models 133-148 → 251-284 MiB, measured as the peak of a process that
creates the session and runs it three times).  Kernels whose
compiled loop is a large gain on the layers that use them (depthwise convolutions, SiLU, LSTM,
upsampling) load it; kernels that most models run and whose gain is smaller (pooling, the
shifted convolution's adds, the convolution epilogue) use their loops only when
:func:`numba_loaded` says another kernel or the application has already paid for it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["compiler", "numba_loaded"]


def numba_loaded() -> bool:
    """Whether numba is imported in this process and not disabled (``ONNXPLUG_CPU_JIT=0``): a
    dict lookup, cheap enough to ask on every call."""
    return "numba" in sys.modules and os.environ.get("ONNXPLUG_CPU_JIT", "1") != "0"


def compiler(**options: Any) -> Callable[[Any], Any] | None:
    """numba's ``njit(cache=True, nogil=True, **options)``, or ``None`` without numba or with
    ``ONNXPLUG_CPU_JIT=0`` (read on each call: the modules cache what they build with it).
    ``error_model="numpy"`` drops the zero-division check numba puts in every division, which
    otherwise keeps a loop with a division from being vectorised; ``fastmath={"contract"}``
    lets a loop whose accuracy was checked with fused multiply-adds use them."""
    if os.environ.get("ONNXPLUG_CPU_JIT", "1") == "0":
        return None
    try:
        import numba
    except ImportError:
        return None
    return numba.njit(cache=True, nogil=True, **options)
