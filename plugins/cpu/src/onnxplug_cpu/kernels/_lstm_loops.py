"""The compiled LSTM recurrence of :mod:`._recurrent_jit` (imported only when :func:`._jit.compiler` gives a
decorator: this module needs numba).  Module-level, as :mod:`._sigmoid_loops`, so that the loop
and the ``exp``/``tanh`` of :mod:`._vexp` it inlines stay in numba's on-disk cache."""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler
from ._recurrent_ir import ENTRIES, add_products
from ._vexp import exp_value, tanh_value

# Fused multiply-adds in the recurrent product; no zero-division check in the sigmoids' division,
# which would keep the gate loop scalar.
_jit = compiler(error_model="numpy", fastmath={"contract"})
_ONE = np.float32(1.0)


@_jit
def clip_value(v, bound):  # pragma: no cover - compiled
    """``v`` clipped to ``[-bound, bound]`` (NaN passes: comparisons, not min/max)."""
    v = -bound if v < -bound else v
    return bound if v > bound else v


@_jit
def sigmoid_value(v):  # pragma: no cover - compiled
    """``1 / (1 + exp(-v))``: an overflowing exp gives an exact 0."""
    return _ONE / (_ONE + exp_value(-v))


@_jit
def direction(xw, rt, rb, peep, h, c, lens, reverse, input_forget, clip, y, which):  # pragma: no cover - compiled
    """One direction over every step: see :func:`._recurrent_jit.loops` for the arguments."""
    steps, batch, width = xw.shape
    size = width // 4
    gates = np.empty((batch, width), np.float32)
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        for b in range(batch):
            for j in range(width):
                gates[b, j] = xw[t, b, j] + rb[j]
        # Every entry's product, finished ones too (their state is kept below): the rows of Rᵀ
        # are read once for up to ENTRIES entries.
        for first in range(0, batch, ENTRIES):
            entries = min(ENTRIES, batch - first)
            add_products(
                gates[first].ctypes.data, h[first].ctypes.data, rt.ctypes.data, size, width, entries, width, size
            )
        for b in range(batch):
            if t >= lens[b]:
                continue  # finished: the state is kept, Y stays 0
            cells, hidden, out, row = c[b], h[b], y[t, which, b], gates[b]
            g_i, g_o, g_f, g_c = row[:size], row[size : 2 * size], row[2 * size : 3 * size], row[3 * size :]
            p_i, p_o, p_f = peep[:size], peep[size : 2 * size], peep[2 * size :]
            for j in range(size):
                old = cells[j]
                i = sigmoid_value(clip_value(g_i[j] + p_i[j] * old, clip))
                f = _ONE - i if input_forget else sigmoid_value(clip_value(g_f[j] + p_f[j] * old, clip))
                cell = f * old + i * tanh_value(clip_value(g_c[j], clip))
                o = sigmoid_value(clip_value(g_o[j] + p_o[j] * cell, clip))
                value = o * tanh_value(cell)
                cells[j] = cell
                hidden[j] = value
                out[j] = value


@compiler(parallel=True)
def both_directions(xw, rt, rb, peep, h, c, y, lens, input_forget, clip):  # pragma: no cover - compiled
    """:func:`direction` for the forward (0) and reverse (1) directions at once on numba's team;
    every argument but the last three stacked on a first axis of 2."""
    for d in numba.prange(2):
        direction(xw[d], rt[d], rb[d], peep[d], h[d], c[d], lens, d == 1, input_forget, clip, y, d)
