"""One LSTM direction's recurrence compiled with numba (float32, the default activations).

Why: after the input projection (one matmul for every step, ``rnn._Inputs.projected``), each time
step is a ``(batch, H) @ (H, 4H)`` product and about twenty numpy calls on ``(batch, H)`` arrays,
each a microsecond or two of dispatch on a few hundred values.  On the ``ocr_rec`` benchmark model
(a CRNN: bidirectional LSTM, hidden 96, 41 steps, batch 1) those calls were a third of the run
(3 ms of 8.5).  Here a step is one loop: the recurrent product accumulated row by row of ``Rᵀ``
(a vectorised axpy per hidden unit), then the gates, the cell and the hidden state in one
vectorised loop over the hidden units, with the branch-free ``exp`` and ``tanh`` of
``kernels._vexp`` (``math.exp``/``math.tanh`` are scalar libm calls: five per hidden unit and
step made them most of the layer, 0.77 against onnxruntime's 0.27 ms on ``ocr_rec``).

Same definitions as the numpy loop in :func:`onnxplug_cpu.kernels.rnn.lstm_values`: gate order i, o,
f, c; peepholes; ``clip`` applied to every activation's input; ``input_forget`` couples the
forget gate to ``1 - i``; with ``sequence_lens`` a finished batch entry keeps its state and emits
zeros (a reverse pass starts at each entry's own last step).  Only the default activations
(Sigmoid, Tanh, Tanh) are compiled; the sums are in a different order than numpy's (``x·Wᵀ + Wb``
then ``+ Rb`` then each ``h_k·R_k``, with fused multiply-adds) and the activations are within a
few ulp of numpy's, so results agree to float32 rounding, not to the bit.
"""

from __future__ import annotations

import functools
from typing import Any

from ._jit import compiler

__all__ = ["compiled", "compiled_both"]


@functools.cache
def compiled() -> Any | None:
    """``direction(xw, rt, rb, peep, h, c, lens, reverse, input_forget, clip, y)`` or ``None``
    (no numba, or ``ONNXPLUG_CPU_JIT=0``).

    ``xw`` ``(steps, batch, 4H)``: the projected inputs with ``Wb``; ``rt`` ``(H, 4H)``
    contiguous: ``Rᵀ``; ``rb`` ``(4H,)``; ``peep`` ``(3H,)`` (i, o, f); ``h``, ``c``
    ``(batch, H)``: the initial states, updated in place to the final ones; ``lens`` ``(batch,)``
    int64 (``steps`` for every entry when there are no ``sequence_lens``); ``clip`` ``inf`` for
    none; ``y`` ``(steps, batch, H)`` zeros, filled with the hidden states."""
    if compiler() is None:
        return None
    from ._lstm_loops import direction

    return direction


@functools.cache
def compiled_both() -> Any | None:
    """``both(xw, rt, rb, peep, h, c, y, lens, reverse, input_forget, clip)``: the two directions of
    a bidirectional layer, each argument but the last four stacked on a first axis of 2, run at
    once on numba's threading layer (direction 1 reversed; ``reverse`` is unused); or ``None``."""
    if compiler() is None:
        return None
    from ._lstm_loops import both_directions

    return both_directions
