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


def scratch(slot: str, shape: tuple, dtype) -> np.ndarray:
    """A work array of ``shape`` in this thread's buffer ``slot``, grown as needed and reused
    (its contents are whatever the last user left)."""
    need = math.prod(shape) * np.dtype(dtype).itemsize
    buffer = getattr(_SCRATCH, slot, None)
    if buffer is None or buffer.size < need:
        buffer = np.empty(max(need, 1), dtype=np.uint8)
        setattr(_SCRATCH, slot, buffer)
    return buffer[:need].view(dtype).reshape(shape)
