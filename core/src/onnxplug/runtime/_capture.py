"""The session's side of whole-run capture (``enable_cuda_graph``): see :mod:`onnxplug.capture`.

A :class:`SessionCapture` exists when one of the session's providers offers a recorder.  It
decides which ``run_with_iobinding`` calls are recorded (every bound input and output a value of
that provider's memory), keys recordings by the binding (addresses, shapes, types), and walks
each binding through warm-up → record → replay.
"""

from __future__ import annotations

import collections
import threading
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..capture import KEPT, RunCapture
from ..errors import InvalidArgument
from .ortvalue import OrtValue

__all__ = ["SessionCapture"]

_WARMED = "warmed up"  # the binding ran once; the next run records it
_REFUSED = "refused"  # recording it failed once: it runs without capture from now on


class SessionCapture:
    """Recordings of one session's runs on its capturing provider."""

    def __init__(self, provider: Any, recorder: RunCapture, memory: Any) -> None:
        self.provider = provider
        self.recorder = recorder
        self.memory = memory
        self._entries: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._warned_uncaptured = False

    @classmethod
    def for_session(cls, providers: Sequence[Any], order: Sequence[tuple[Any, str, Any]]) -> SessionCapture | None:
        """The session's capture, ``None`` when no provider offers one.  Refuses (at creation,
        as onnxruntime does) a session whose nodes are not all on the capturing provider."""
        offered = [(p, r) for p in providers if (r := p.run_capture()) is not None]
        if not offered:
            return None
        if len(offered) > 1:
            names = ", ".join(p.ort_name for p, _ in offered)
            raise InvalidArgument(f"whole-run capture was asked of several providers ({names}); ask one")
        provider, recorder = offered[0]
        memory = provider.transfer()
        if memory is None:
            raise InvalidArgument(f"{provider.ort_name}: whole-run capture needs a provider with device memory")
        elsewhere = [
            f"'{node.name}' ({node.op_type}) on {name}" for node, name, _ in order if name != provider.ort_name
        ]
        if elsewhere:
            shown = ", ".join(elsewhere[:8]) + (f" and {len(elsewhere) - 8} more" if len(elsewhere) > 8 else "")
            raise InvalidArgument(
                f"{provider.ort_name}: enable_cuda_graph needs every node of the graph on this provider "
                f"(a recorded run cannot call another provider's kernels); {len(elsewhere)} are not: {shown}"
            )
        return cls(provider, recorder, memory)

    def binding_key(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any], run_options: Any) -> tuple | None:
        """What identifies a recording of this binding, or ``None`` when it cannot be recorded
        (a value on the host, an output without a preallocated buffer, ``gpu_graph_id`` -1)."""
        if run_options is not None and run_options.get_run_config_entry("gpu_graph_id") == "-1":
            return None  # onnxruntime's way of asking for one run without the graph
        key = []
        for kind, bound in (("input", inputs), ("output", outputs)):
            for name, value in bound.items():
                if not isinstance(value, OrtValue) or value._onnxplug_memory() is not self.memory:
                    self._warn_uncaptured(kind, name)
                    return None
                array = value._onnxplug_value()
                key.append((kind, name, self._address(array), *self.memory.shape_and_type(array)))
        return tuple(key)

    def run(self, key: tuple, once: Callable[[bool], list[OrtValue]], bound: list[OrtValue]) -> list[OrtValue]:
        """Run a binding: ``once(recording)`` runs the plan and fills the bound outputs
        (``recording`` says not to synchronize); ``bound`` are the outputs a replay fills."""
        with self._lock:  # one recording at a time: the recorder follows a single stream
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            if callable(entry):
                entry()
                return bound
            if entry is None:
                self._remember(key, _WARMED)
                return once(False)
            if entry == _REFUSED:
                return once(False)
            return self._record(key, once)

    def _record(self, key: tuple, once: Callable[[bool], list[OrtValue]]) -> list[OrtValue]:
        self.recorder.begin()
        try:
            results = once(True)
            replay = self.recorder.end()
        except Exception as error:  # noqa: BLE001 - the run is repeated without capture
            self.recorder.abort()
            self._entries[key] = _REFUSED
            warnings.warn(
                f"{self.provider.ort_name}: recording the run failed, so this binding runs without capture "
                f"from now on ({type(error).__name__}: {error})",
                RuntimeWarning,
                stacklevel=5,
            )
            return once(False)
        except BaseException:
            self.recorder.abort()
            raise
        replay()  # what was recorded has not necessarily run: the replay produces the results
        self._entries[key] = replay
        return results

    def _remember(self, key: tuple, entry: Any) -> None:
        self._entries[key] = entry
        while len(self._entries) > KEPT:
            self._entries.popitem(last=False)  # a dropped replay releases its memory

    def _address(self, array: Any) -> int:
        try:
            return int(self.memory.data_ptr(array))
        except NotImplementedError:  # a memory without addresses: the array object is the buffer
            return id(array)

    def _warn_uncaptured(self, kind: str, name: str) -> None:
        if self._warned_uncaptured:
            return
        self._warned_uncaptured = True
        warnings.warn(
            f"{self.provider.ort_name}: enable_cuda_graph records only runs whose inputs and outputs are all bound "
            f"to OrtValues in its memory ('{self.memory.device_name}'); {kind} '{name}' is not, so this binding "
            "runs without capture",
            RuntimeWarning,
            stacklevel=5,
        )
