"""``enable_cuda_graph``: CUDA stream capture of a whole run, replayed as one CUDA graph.

The core decides when to record and replay (:mod:`onnxplug.capture`); this module is the CuPy
part, kept thin: recording makes a private non-blocking stream current (stream capture cannot
use the legacy default stream) and routes allocations to a private memory pool, so the
intermediate buffers the graph's kernels read and write stay reserved for it after the
recording — a pool shared with the rest of the process would hand them out again.  Not
exercised in CI (no GPU there); ``scripts/gpu_check.py`` runs it on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from onnxplug.capture import RunCapture

__all__ = ["CupyRunCapture"]


class CupyRunCapture(RunCapture):
    """Records the CUDA provider's kernels of one run into a ``cupy.cuda.Graph``."""

    def __init__(self, device_id: int) -> None:
        self.device_id = device_id
        self._contexts: ExitStack | None = None
        self._stream: Any = None
        self._pool: Any = None

    def begin(self) -> None:
        import cupy

        contexts = ExitStack()
        contexts.enter_context(cupy.cuda.Device(self.device_id))
        caller = cupy.cuda.get_current_stream()
        self._stream = cupy.cuda.Stream(non_blocking=True)
        # The bound inputs were written on the caller's stream: the recording starts after that.
        self._stream.wait_event(caller.record())
        self._pool = cupy.cuda.MemoryPool()
        contexts.enter_context(self._stream)
        contexts.enter_context(cupy.cuda.using_allocator(self._pool.malloc))
        self._contexts = contexts
        self._stream.begin_capture()

    def end(self) -> Callable[[], None]:
        stream, pool = self._stream, self._pool
        try:
            graph = stream.end_capture()
        finally:
            self._leave()
        return _Replay(self.device_id, graph, stream, pool)

    def abort(self) -> None:
        stream = self._stream
        try:
            if stream is not None and stream.is_capturing():
                stream.end_capture()  # discarded
        except Exception:  # noqa: BLE001 - a capture invalidated by the failure ends with an error
            pass
        finally:
            self._leave()

    def _leave(self) -> None:
        contexts, self._contexts = self._contexts, None
        self._stream = self._pool = None
        if contexts is not None:
            contexts.close()


class _Replay:
    """One recorded run.  It holds the graph, its stream and the pool of the graph's buffers:
    they live exactly as long as the replay."""

    def __init__(self, device_id: int, graph: Any, stream: Any, pool: Any) -> None:
        self.device_id, self.graph, self.stream, self.pool = device_id, graph, stream, pool

    def __call__(self) -> None:
        import cupy

        with cupy.cuda.Device(self.device_id):
            # the caller's stream wrote the inputs (update_inplace): the graph runs after that
            self.stream.wait_event(cupy.cuda.get_current_stream().record())
            self.graph.launch(stream=self.stream)
            self.stream.synchronize()
