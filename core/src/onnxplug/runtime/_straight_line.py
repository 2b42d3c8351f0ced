"""The runner of plain sequential runs: a plan's steps written out as straight-line Python, with
runs of bindable steps replayed as segments (``_segments``)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

from ..errors import RunTerminated
from ._loop import attribute_error, run_unprofiled, store_outputs
from ._segments import Arena, Segment, segments_enabled, split_segments
from ._steps import Step

__all__ = ["StraightLine"]


class StraightLine:
    """A plan's steps compiled to straight-line Python functions, from the second run on.

    Each step becomes one line, ``values[o] = c17(values[i], values[j])``, followed by the stores
    that free its inputs' last uses, so a run does no per-step attribute lookups, length tests or
    loops over the free lists (on a chain of 1000 element-wise nodes the interpreted loop cost
    about as much as the numpy calls).  A segment (consecutive steps whose kernels bind) is one
    line, ``s3(values, arena)``, with the thread's :class:`~._segments.Arena`.  The generated
    source holds only integers and names of the form ``cN`` and ``sN``: the callables and steps
    are bound through the function's namespace, never written into the text, so nothing from a
    model reaches the compiler.  Items are split into functions of :data:`CHUNK` so compile time
    stays linear for very large graphs.  An error is attributed to its step by the line it was
    raised from (each line belongs to one step; a segment names its own step), through
    :func:`attribute_error` as in the interpreted loop; with run options the ``terminate`` flag
    is tested before every line.

    Compiling costs tens of microseconds per step, more than an interpreted run of small nodes,
    so the first run of each kind (with and without run options) is interpreted and only a plan
    that runs again is compiled: a session that runs once never pays for it.
    """

    #: Items (steps or segments) per generated function.
    CHUNK = 256

    __slots__ = ("_items", "_pieces", "_plain", "_checked", "_local")

    def __init__(self, steps: Sequence[Step], keep: Iterable[int] = (), constants: Iterable[int] = ()) -> None:
        """:param keep: slots that must hold their value after the run (the plan's outputs).
        :param constants: slots holding the same object every run (see ``split_segments``)."""
        steps = tuple(steps)
        self._items: tuple[Step | Segment, ...] = (
            tuple(split_segments(steps, keep, constants)) if segments_enabled() else steps
        )
        # the interpreted run: runs of plain steps (for run_unprofiled) and segments
        pieces: list[Any] = []
        for item in self._items:
            if isinstance(item, Segment):
                pieces.append(item)
            elif pieces and isinstance(pieces[-1], list):
                pieces[-1].append(item)
            else:
                pieces.append([item])
        self._pieces = tuple(piece if isinstance(piece, Segment) else tuple(piece) for piece in pieces)
        # None: not run yet; (): run once, interpreted; else the compiled functions.
        self._plain: tuple[Any, ...] | None = None
        self._checked: tuple[Any, ...] | None = None
        # this thread's Arena for the segments (None: the plan has none)
        self._local = threading.local() if any(isinstance(p, Segment) for p in self._pieces) else None

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The segments among the items (for tests and reports)."""
        return tuple(item for item in self._items if isinstance(item, Segment))

    def __call__(self, values: list[Any], options: Any) -> None:
        """Run every step on ``values``; ``options``: the run's RunOptions or ``None``."""
        arena = None
        if self._local is not None:  # the plan has segments: this thread's arena
            arena = getattr(self._local, "arena", None)
            if arena is None:
                arena = self._local.arena = Arena()
        chunks = self._plain if options is None else self._checked
        if not chunks:
            if chunks is None:
                if options is None:
                    self._plain = ()
                else:
                    self._checked = ()
                self._interpret(values, options, arena)
                return
            chunks = self._build(checked=options is not None)
        for chunk in chunks:
            chunk(values, options, arena)

    def _interpret(self, values: list[Any], options: Any, arena: Arena | None) -> None:
        for piece in self._pieces:
            if isinstance(piece, Segment):
                if options is not None and options.terminate:
                    raise RunTerminated()
                piece.run(values, arena)
            else:
                run_unprofiled(piece, values, options)

    def _build(self, *, checked: bool) -> tuple[Any, ...]:
        chunks = tuple(
            _compile_chunk(self._items[start : start + self.CHUNK], checked)
            for start in range(0, len(self._items), self.CHUNK)
        )
        if checked:
            self._checked = chunks
        else:
            self._plain = chunks
        return chunks


def _compile_chunk(items: Sequence[Step | Segment], checked: bool) -> Any:
    lines = ["def chunk(values, options, arena):", "    try:"]
    step_of_line: dict[int, Step] = {}
    namespace: dict[str, Any] = {
        "items": tuple(items),
        "step_of_line": step_of_line,
        "attribute_error": attribute_error,
        "store_outputs": store_outputs,
        "RunTerminated": RunTerminated,
    }
    for index, item in enumerate(items):
        first = len(lines)
        if checked:
            lines.append("        if options.terminate: raise RunTerminated()")
        if isinstance(item, Segment):
            namespace[f"s{index}"] = item.run
            lines.append(f"        s{index}(values, arena)")
            owner = item.steps[0]  # (a segment's errors already name their step)
        else:
            namespace[f"c{index}"] = item.call
            arguments = ", ".join(f"values[{int(slot)}]" for slot in item.inputs)
            if item.single:
                lines.append(f"        values[{int(item.outputs[0])}] = c{index}({arguments})")
            else:
                lines.append(f"        store_outputs(items[{index}], c{index}({arguments}), values)")
            lines.extend(f"        values[{int(slot)}] = None" for slot in item.free)
            owner = item
        for line in range(first + 1, len(lines) + 1):  # line numbers count from 1
            step_of_line[line] = owner
    if not items:
        lines.append("        pass")
    lines += [
        "    except Exception as error:",
        "        raise attribute_error(error, step_of_line[error.__traceback__.tb_lineno]) from error",
    ]
    exec(compile("\n".join(lines), "<onnxplug plan>", "exec"), namespace)
    return namespace["chunk"]
