"""Bound calls: a kernel's computation fixed to its arrays' shapes, for runs of many steps.

A kernel callable (what a factory returns) may offer ``bind(inputs, output, scratch)``.  The plan
calls it for a host step of one output once it has seen the shapes a run of such steps produces
(``onnxplug.runtime``'s segments: consecutive steps that offer ``bind``), with

- ``inputs``: the step's input values as they will be passed (arrays, ``None`` for a missing
  optional input): constants are the very objects every later call passes; the others are
  arrays of the shapes and element types every later call passes, C-contiguous.  Every input
  after the first is the same object on every later call (the plan binds no step fed anything
  else there), so a binding may keep what it derived from them;
- ``output``: a C-contiguous array of the output's shape and element type, which does not
  overlap any input;
- ``scratch``: a :class:`Scratch` for work memory.

It returns a :class:`Binding`, or ``None`` where it cannot bind this call (the plan then calls
the kernel as before and copies its result into the planned output).  Binding must not read the
inputs' contents (only shapes, types and, for constants, values it already knows), and must not
keep the arrays beyond what the binding's call needs.

Why: a small convolution's own Python (checks, lookups, allocating its output, reshaping views)
costs a few microseconds, a tenth of a MobileNet's or a SqueezeNet's run over its 50 layers,
and its output's fresh array costs cache misses the next layer pays again; a bound call does its
checks once, and the plan hands it buffers reused from one run to the next.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["Binding", "Scratch"]


class Binding:
    """What a kernel's ``bind`` returns.

    :ivar call: ``call(output, *inputs)`` computes the step into ``output``; called with arrays
        of the shapes, element types and layout given to ``bind`` (C-contiguous), constants being
        the same objects.  ``output`` and the inputs are usually the very arrays given to
        ``bind`` (a kernel may keep what it derived from them and check identity), but may be
        others of the same shapes: a value leaving the run of steps gets a fresh array each run.
    :ivar guard: ``None``, or a function of no arguments called once before every run of the
        bound steps; the binding holds only while it returns the object it returned when the
        binding was made (``token``, compared by identity).  A guard may also prepare the run
        (the CPU provider's pins BLAS to one thread before its thread team starts).
    """

    __slots__ = ("call", "guard", "token")

    def __init__(self, call: Callable[..., Any], guard: Callable[[], Any] | None = None) -> None:
        self.call = call
        self.guard = guard
        self.token = None if guard is None else guard()


class Scratch:
    """Work memory for bound calls that run one after another: every request is a view of one
    buffer, so a step may use what it asked for only during its own call (the next step's
    request overwrites it).  Owned by one set of bindings, used by one run at a time.

    A request larger than the buffer replaces it and sets :attr:`grew`: views handed out before
    then point to the old buffer, so the plan binds again over the new one.
    """

    __slots__ = ("_buffer", "grew")

    def __init__(self) -> None:
        self._buffer = np.empty(1, dtype=np.uint8)
        self.grew = False

    def __call__(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """A C-contiguous work array of ``shape`` and ``dtype`` (contents undefined)."""
        kind = np.dtype(dtype)
        need = math.prod(shape) * kind.itemsize
        if need > self._buffer.size:
            self._buffer = np.empty(need, dtype=np.uint8)
            self.grew = True
        return self._buffer[:need].view(kind).reshape(shape)
