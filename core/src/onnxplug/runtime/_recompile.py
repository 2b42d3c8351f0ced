"""Compiled partitions that accept only the shapes they were built for.

A compiler that specialises on shapes (an engine built for fixed dimensions) says so through
:attr:`onnxplug.api.CompiledPartition.input_shapes`.  The core then checks each call's input
shapes and, for shapes the compilation does not accept, asks the provider to compile the
partition again for exactly those shapes, keeping a few compilations per partition so that
alternating batch sizes do not recompile every run.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..api import CompiledPartition, DataTransfer, Partition, Provider
from ..errors import EPFail, OnnxplugError

#: Compilations kept per partition (least recently used dropped first).
SPECIALIZATIONS_KEPT = 8

Shape = tuple[int, ...]


def accepts(declared: Sequence[Sequence[int | None]], shapes: Sequence[Shape]) -> bool:
    """Whether shapes fit a compilation's declared input shapes (``None`` dims match any size)."""
    for want, have in zip(declared, shapes):
        if len(want) != len(have):
            return False
        if any(w is not None and w != h for w, h in zip(want, have)):
            return False
    return True


class ShapeSpecializedPartition:
    """Calls the compilation that accepts the inputs' shapes, compiling one when none does.

    Thread-safe: concurrent ``run`` calls with new shapes compile once (under a lock) and
    share the result.
    """

    def __init__(
        self,
        provider: Provider,
        partition: Partition,
        first: CompiledPartition,
        describe: Callable[[], str],
    ):
        self._provider = provider
        self._partition = partition
        self._describe = describe
        self._transfer: DataTransfer | None = provider.transfer()
        self._compiled: collections.OrderedDict[tuple[Shape, ...] | None, CompiledPartition] = collections.OrderedDict(
            {None: first}
        )
        self._lock = threading.Lock()
        self.inputs = first.inputs
        self.outputs = first.outputs

    def _shape(self, value: Any) -> Shape:
        shape = getattr(value, "shape", None)
        if shape is None and self._transfer is not None:
            shape = self._transfer.shape_and_type(value)[0]
        return tuple(int(d) for d in shape)

    def _find(self, shapes: tuple[Shape, ...]) -> CompiledPartition | None:
        for key, compiled in self._compiled.items():
            declared = getattr(compiled, "input_shapes", None)
            if declared is None or accepts(declared, shapes):
                self._compiled.move_to_end(key)
                return compiled
        return None

    def _compile(self, shapes: tuple[Shape, ...]) -> CompiledPartition:
        shown = ", ".join(f"{name}: {list(shape)}" for name, shape in zip(self._partition.inputs, shapes))
        try:
            compiled = self._provider.compile(self._partition.with_input_shapes(shapes))
        except OnnxplugError:
            raise
        except Exception as error:
            raise EPFail(
                f"provider '{self._provider.name}' failed to compile {self._describe()} again for input shapes "
                f"({shown}): {type(error).__name__}: {error}"
            ) from error
        declared = getattr(compiled, "input_shapes", None)
        if declared is not None and not accepts(declared, shapes):
            raise EPFail(
                f"provider '{self._provider.name}' compiled {self._describe()} for input shapes "
                f"({shown}) but the result declares input_shapes {list(declared)}"
            )
        return compiled

    def __call__(self, *values: Any) -> Sequence[Any]:
        shapes = tuple(self._shape(value) for value in values)
        with self._lock:
            compiled = self._find(shapes)
            if compiled is None:
                compiled = self._compile(shapes)
                self._compiled[shapes] = compiled
                while len(self._compiled) > SPECIALIZATIONS_KEPT:
                    self._compiled.popitem(last=False)
        return compiled.fn(*values)
