"""One LSTM direction's recurrence compiled with numba (float32, the default activations).

Why: after the input projection (one matmul for every step, ``rnn._Inputs.projected``), each time
step is a ``(batch, H) @ (H, 4H)`` product and about twenty numpy calls on ``(batch, H)`` arrays,
each a microsecond or two of dispatch on a few hundred values.  On the ``ocr_rec`` benchmark model
(a CRNN: bidirectional LSTM, hidden 96, 41 steps, batch 1) those calls were a third of the run
(3 ms of 8.5).  Here a step is one loop: the recurrent product accumulated row by row of ``Rᵀ``
(a vectorised axpy per hidden unit), then the gates, the cell and the hidden state cell by cell,
so a step costs about a microsecond.

Same definitions as the numpy loop in :func:`onnxplug_cpu.kernels.rnn.lstm`: gate order i, o,
f, c; peepholes; ``clip`` applied to every activation's input; ``input_forget`` couples the
forget gate to ``1 - i``; with ``sequence_lens`` a finished batch entry keeps its state and emits
zeros (a reverse pass starts at each entry's own last step).  Only the default activations
(Sigmoid, Tanh, Tanh) are compiled; the sums are in a different order than numpy's (``x·Wᵀ + Wb``
then ``+ Rb`` then each ``h_k·R_k``), so results agree to float32 rounding, not to the bit.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ._jit import compiler

__all__ = ["compiled"]


@functools.cache
def compiled() -> Any | None:
    """``direction(xw, rt, rb, peep, h, c, lens, reverse, input_forget, clip, y)`` or ``None``
    (no numba, or ``ONNXPLUG_CPU_JIT=0``).

    ``xw`` ``(steps, batch, 4H)``: the projected inputs with ``Wb``; ``rt`` ``(H, 4H)``
    contiguous: ``Rᵀ``; ``rb`` ``(4H,)``; ``peep`` ``(3H,)`` (i, o, f); ``h``, ``c``
    ``(batch, H)``: the initial states, updated in place to the final ones; ``lens`` ``(batch,)``
    int64 (``steps`` for every entry when there are no ``sequence_lens``); ``clip`` ``inf`` for
    none; ``y`` ``(steps, batch, H)`` zeros, filled with the hidden states."""
    jit = compiler(error_model="numpy")
    if jit is None:
        return None

    # Everything inline in one function: numba's on-disk cache cannot key a function that calls
    # other jitted closures, which would then be recompiled in every process.
    @jit
    def direction(xw, rt, rb, peep, h, c, lens, reverse, input_forget, clip, y):  # pragma: no cover - compiled
        steps, batch, width = xw.shape
        size = width // 4
        one = np.float32(1.0)
        gates = np.empty(width, np.float32)
        for s in range(steps):
            t = steps - 1 - s if reverse else s
            for b in range(batch):
                if t >= lens[b]:
                    continue  # finished: the state is kept, Y stays 0
                for j in range(width):
                    gates[j] = xw[t, b, j] + rb[j]
                for k in range(size):
                    hk = h[b, k]
                    row = rt[k]
                    for j in range(width):
                        gates[j] += hk * row[j]
                # clip before each activation (NaN passes: comparisons, not min/max); sigmoid as
                # 1 / (1 + exp(-v)), whose exp overflowing gives an exact 0
                for j in range(size):
                    old = c[b, j]
                    v = gates[j] + peep[j] * old
                    v = -clip if v < -clip else (clip if v > clip else v)
                    i = one / (one + math.exp(-v))
                    if input_forget:
                        f = one - i
                    else:
                        v = gates[2 * size + j] + peep[2 * size + j] * old
                        v = -clip if v < -clip else (clip if v > clip else v)
                        f = one / (one + math.exp(-v))
                    v = gates[3 * size + j]
                    cell = f * old + i * math.tanh(-clip if v < -clip else (clip if v > clip else v))
                    v = gates[size + j] + peep[size + j] * cell
                    v = -clip if v < -clip else (clip if v > clip else v)
                    o = one / (one + math.exp(-v))
                    hidden = o * math.tanh(cell)
                    c[b, j] = cell
                    h[b, j] = hidden
                    y[t, b, j] = hidden

    return direction
