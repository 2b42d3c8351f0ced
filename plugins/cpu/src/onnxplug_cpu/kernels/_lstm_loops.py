"""The compiled recurrence of :mod:`._lstm_jit` (imported only when :func:`._jit.compiler` gives a
decorator: this module needs numba).  Module-level, as :mod:`._sigmoid_loops`, so that the loop
and the ``exp``/``tanh`` of :mod:`._vexp` it inlines stay in numba's on-disk cache."""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler
from ._vexp import exp_value, tanh_value

# Fused multiply-adds in the recurrent product; no zero-division check in the sigmoids' division,
# which would keep the gate loop scalar.
_jit = compiler(error_model="numpy", fastmath={"contract"})
_ONE = np.float32(1.0)


@_jit
def _clip(v, bound):  # pragma: no cover - compiled
    """``v`` clipped to ``[-bound, bound]`` (NaN passes: comparisons, not min/max)."""
    v = -bound if v < -bound else v
    return bound if v > bound else v


@_jit
def _sigmoid(v):  # pragma: no cover - compiled
    """``1 / (1 + exp(-v))``: an overflowing exp gives an exact 0."""
    return _ONE / (_ONE + exp_value(-v))


@_jit
def direction(xw, rt, rb, peep, h, c, lens, reverse, input_forget, clip, y):  # pragma: no cover - compiled
    """One direction over every step: see :func:`._lstm_jit.compiled` for the arguments."""
    steps, batch, width = xw.shape
    size = width // 4
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
            cells, hidden, out = c[b], h[b], y[t, b]
            g_i, g_o, g_f, g_c = gates[:size], gates[size : 2 * size], gates[2 * size : 3 * size], gates[3 * size :]
            p_i, p_o, p_f = peep[:size], peep[size : 2 * size], peep[2 * size :]
            for j in range(size):
                old = cells[j]
                i = _sigmoid(_clip(g_i[j] + p_i[j] * old, clip))
                f = _ONE - i if input_forget else _sigmoid(_clip(g_f[j] + p_f[j] * old, clip))
                cell = f * old + i * tanh_value(_clip(g_c[j], clip))
                o = _sigmoid(_clip(g_o[j] + p_o[j] * cell, clip))
                value = o * tanh_value(cell)
                cells[j] = cell
                hidden[j] = value
                out[j] = value


@compiler(parallel=True)
def both_directions(xw, rt, rb, peep, h, c, y, lens, reverse, input_forget, clip):  # pragma: no cover - compiled
    """:func:`direction` for the forward (0) and reverse (1) directions at once on numba's team;
    every argument but the last four stacked on a first axis of 2."""
    for d in numba.prange(2):
        direction(xw[d], rt[d], rb[d], peep[d], h[d], c[d], lens, d == 1, input_forget, clip, y[d])
