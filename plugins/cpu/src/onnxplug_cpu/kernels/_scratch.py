"""Per-thread work buffers for the compiled convolutions and products.

Why: the planes and sums of an implicit-GEMM convolution are megabytes per layer, allocated anew
each call; glibc returns such blocks to the system, so every call paid page faults on fresh
memory.  One buffer per calling thread and slot (concurrent runs each have theirs) is enough: a
thread runs its nodes one after another, and the blocks of one product share the caller's
buffers.  The int8 and float32 paths share the slots, so a thread holds one planes buffer and one
sums buffer, as large as its largest layer needs.
"""

from __future__ import annotations

import math
import threading

import numpy as np

__all__ = ["scratch"]

_SCRATCH = threading.local()
#: Views kept per thread (one per slot and shape asked for).
_MAX_VIEWS = 256


def scratch(slot: str, shape: tuple, dtype) -> np.ndarray:
    """A work array of ``shape`` in this thread's buffer ``slot``, grown as needed and reused
    (its contents are whatever the last user left).  The views handed out are kept per thread
    until a buffer grows, so a layer asking for the same shape again gets its view back from
    one dict lookup (building it cost ~0.8 µs, a sixth of a small layer's Python)."""
    views = getattr(_SCRATCH, "views", None)
    if views is None:
        views = _SCRATCH.views = {}
    key = (slot, shape, dtype)
    view = views.get(key)
    if view is not None:
        return view
    need = math.prod(shape) * np.dtype(dtype).itemsize
    buffer = getattr(_SCRATCH, slot, None)
    if buffer is None or buffer.size < need:
        buffer = np.empty(max(need, 1), dtype=np.uint8)
        setattr(_SCRATCH, slot, buffer)
        views.clear()  # views of the old buffer would keep it alive
    if len(views) >= _MAX_VIEWS:  # a model of ever-new shapes keeps no more than this
        views.clear()
    view = views[key] = buffer[:need].view(dtype).reshape(shape)
    return view
