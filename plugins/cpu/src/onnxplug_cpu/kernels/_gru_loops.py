"""The compiled GRU recurrence of :mod:`._recurrent_jit` (imported only when :func:`._jit.compiler`
gives a decorator: this module needs numba), written as :mod:`._lstm_loops` is: a step's
recurrent product (:func:`._recurrent_ir.add_products`), then the gates and the new state in one
vectorised loop over the hidden units, with the branch-free ``exp``/``tanh`` of :mod:`._vexp`."""

from __future__ import annotations

import numba
import numpy as np

from ._jit import compiler
from ._lstm_loops import clip_value, sigmoid_value
from ._recurrent_ir import ENTRIES, add_products
from ._vexp import tanh_value

# Fused multiply-adds in the recurrent product; no zero-division check in the sigmoids' division.
_jit = compiler(error_model="numpy", fastmath={"contract"})
_ONE = np.float32(1.0)


@_jit
def direction(
    xw, rt_zr, rt_h, rb, h, lens, reverse, linear_before_reset, clip, y, which
):  # pragma: no cover - compiled
    """One direction over every step: see :func:`._recurrent_jit.loops` for the arguments."""
    steps, batch, width = xw.shape
    size = width // 3
    sums = np.empty((batch, width), np.float32)  # h·Rᵀ + Rb for each entry's z, r and h gates
    reset_state = np.empty((batch, size), np.float32)
    for s in range(steps):
        t = steps - 1 - s if reverse else s
        x = xw[t]
        for b in range(batch):
            for j in range(width):
                sums[b, j] = rb[j]
        # Every entry's products, finished ones too (their state is kept below): the rows of Rᵀ
        # are read once for up to ENTRIES entries.  The candidate's product reads h itself
        # (linear before reset) or r ⊙ h, which needs the reset gate first.
        for first in range(0, batch, ENTRIES):
            entries = min(ENTRIES, batch - first)
            state = h[first].ctypes.data
            add_products(sums[first].ctypes.data, state, rt_zr.ctypes.data, size, 2 * size, entries, width, size)
            if not linear_before_reset:
                for b in range(first, first + entries):
                    for j in range(size):
                        reset = sigmoid_value(clip_value(x[b, size + j] + sums[b, size + j], clip))
                        reset_state[b, j] = reset * h[b, j]
                state = reset_state[first].ctypes.data
            candidate = sums[first, 2 * size :].ctypes.data
            add_products(candidate, state, rt_h.ctypes.data, size, size, entries, width, size)
        for b in range(batch):
            if t >= lens[b]:
                continue  # finished: the state is kept, Y stays 0
            hidden, inputs, row, out = h[b], x[b], sums[b], y[t, which, b]
            for j in range(size):
                update = sigmoid_value(clip_value(inputs[j] + row[j], clip))
                if linear_before_reset:
                    reset = sigmoid_value(clip_value(inputs[size + j] + row[size + j], clip))
                    candidate_value = tanh_value(clip_value(inputs[2 * size + j] + reset * row[2 * size + j], clip))
                else:
                    candidate_value = tanh_value(clip_value(inputs[2 * size + j] + row[2 * size + j], clip))
                value = (_ONE - update) * candidate_value + update * hidden[j]
                hidden[j] = value
                out[j] = value


@compiler(parallel=True)
def both_directions(xw, rt_zr, rt_h, rb, h, y, lens, linear_before_reset, clip):  # pragma: no cover - compiled
    """:func:`direction` for the forward (0) and reverse (1) directions at once on numba's team;
    every argument but the last three stacked on a first axis of 2."""
    for d in numba.prange(2):
        direction(xw[d], rt_zr[d], rt_h[d], rb[d], h[d], lens, d == 1, linear_before_reset, clip, y, d)
