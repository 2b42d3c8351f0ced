"""Keep freed feature maps in the C heap for the next run (with ``use_arena``, on by default).

Why: numpy allocates every intermediate with ``malloc``.  glibc serves blocks above its mmap
threshold (128 KiB, rising dynamically only as far as the largest block freed so far) with a
fresh ``mmap`` and gives them back with ``munmap`` on free; free memory at the top of the heap
above the trim threshold goes back to the system too.  Each run of a CNN then faults every page
of its large feature maps, im2col and Winograd buffers in again, zeroed by the kernel: at batch 8
light_resnet50 took ~4,400 minor faults and 0.04-0.18 s of system time per run (growing with the
batch, as the buffers do), at batch 1 none.  onnxruntime avoids this with its arena; here the same
is one ``mallopt`` call: blocks up to glibc's maximum threshold (32 MiB on 64-bit) come from the
heap, and the heap is not trimmed below 1 GiB of free space, so the next run reuses the pages.

On by default, as onnxruntime's ``use_arena``; ``ONNXPLUG_CPU_ARENA=0`` or the provider option
``use_arena=0`` leave malloc alone.  It was opt-in until transformers were measured: BERT-base,
GPT-2 small and ViT-B/16 each took 11,000-22,500 minor faults and 20-55 ms of system time per run
without it, none with it, and ran 10-20 % faster (alternating fresh processes, 3 each: BERT 166,
175, 176 against 151, 155, 185 ms; GPT-2 194, 185, 200 against 157, 171, 162; ViT 274, 298, 292
against 238, 237, 302).  CNNs at batch 1 fault no page either way and ran no slower (ResNet-50,
yolo); at batch 8 on light_resnet50 ``scripts/batch_gain.py`` showed no faster run either
(onnxplug/onnxruntime per image 1.79 / 1.61 / 1.96 off against 2.03 / 1.88 / 1.88 on: reused
4 KiB heap pages where numpy advises fresh large mappings onto transparent huge pages).  The
setting is made once, when the first CPU provider with ``use_arena`` on is created; it is
process-wide, peak memory does not change (558 against 556 MiB for ResNet-50 in
``scripts/bench.py --sections memory``), and the process keeps its peak once reached, as
onnxruntime's arena does.  It is a no-op away from glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import threading

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "freed_heap_kept", "keep_freed_heap"]

#: glibc's upper limit for ``M_MMAP_THRESHOLD`` on 64-bit (``4 * 1024 * 1024 * sizeof(long)``).
MMAP_THRESHOLD = 32 * 1024 * 1024
#: Free space kept at the top of the heap before glibc returns it.
TRIM_THRESHOLD = 1024 * 1024 * 1024
_M_TRIM_THRESHOLD = -1  # <malloc.h>
_M_MMAP_THRESHOLD = -3

_lock = threading.Lock()
_state: dict[str, bool] = {}


def keep_freed_heap() -> bool:
    """Set glibc's mmap and trim thresholds once per process; return whether they are set
    (``False``: not glibc, or ``ONNXPLUG_CPU_ARENA=0``)."""
    with _lock:
        if "done" not in _state:
            _state["done"] = _configure()
        return _state["done"]


def freed_heap_kept() -> bool:
    """Whether :func:`keep_freed_heap` has set the thresholds in this process (it does not set them)."""
    return _state.get("done", False)


def _configure() -> bool:
    if os.environ.get("ONNXPLUG_CPU_ARENA", "1") == "0":
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    # mallopt returns 1 on success; the mmap threshold first, so a refused trim setting cannot
    # leave big blocks in a heap that is then trimmed on every free.
    return mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1 and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
