"""The LSTM and GRU recurrences compiled with numba (float32, the default activations).

Why: after the input projection (one product for every step, ``rnn._Inputs.projected``), each time
step is a ``(batch, H) @ (H, gates·H)`` product and about twenty numpy calls on ``(batch, H)``
arrays, each a microsecond or two of dispatch on a few hundred values.  On the ``ocr_rec``
benchmark model (a CRNN: bidirectional LSTM, hidden 96, 41 steps, batch 1) those calls were a
third of the run (3 ms of 8.5); a GRU encoder (``scripts/bench_families/sequence.py``, two layers
of 192 over 60 steps) took 1.0 ms a layer in them against onnxruntime's 0.27.  Here a step is one
loop: the recurrent product on ``Rᵀ`` packed by blocks of 64 columns (``_recurrent_ir``: 64 sums
held in registers down the rows), then the gates and the new state in one vectorised loop over
the hidden units, with the branch-free ``exp`` and ``tanh`` of ``kernels._vexp``
(``math.exp``/``math.tanh`` are scalar libm calls: five per hidden unit and step made them most
of the layer, 0.77 against onnxruntime's 0.27 ms on ``ocr_rec``).

Same definitions as the numpy loops of :mod:`onnxplug_cpu.kernels.rnn`: LSTM gate order i, o, f, c
with peepholes and ``input_forget`` (the forget gate ``1 - i``); GRU gate order z, r, h with
either ``linear_before_reset``; ``clip`` applied to every activation's input; with
``sequence_lens`` a finished batch entry keeps its state and emits zeros (a reverse pass starts at
each entry's own last step).  Only the default activations are compiled (Sigmoid, Tanh, Tanh and
Sigmoid, Tanh); the sums are in a different order than numpy's (and with fused multiply-adds)
and the activations are within a few ulp of numpy's, so results agree to float32 rounding, not
to the bit.
"""

from __future__ import annotations

import functools
import importlib
from types import ModuleType

import numpy as np

from ._jit import compiler

__all__ = ["BLOCK", "loops", "packed_columns"]

#: Columns of a block of :func:`packed_columns` (four vectors of 16 float32 lanes).
BLOCK = 64

_CELLS = ("lstm", "gru")


@functools.cache
def loops(cell: str) -> ModuleType | None:
    """The compiled loops of ``cell`` (``"lstm"`` or ``"gru"``), or ``None`` (no numba, or
    ``ONNXPLUG_CPU_JIT=0``): a module with

    - ``direction(...)``: one direction over every step.  LSTM: ``(xw, rt, rb, peep, h, c, lens,
      reverse, input_forget, clip, y, which)``; GRU: ``(xw, rt_zr, rt_h, rb, h, lens, reverse,
      linear_before_reset, clip, y, which)``.  ``xw`` ``(steps, batch, gates·H)``: the projected inputs
      with ``Wb``; ``rt``: ``Rᵀ`` as :func:`packed_columns` lays it out (the GRU: two arguments,
      ``rt_zr`` the z and r gates' columns and ``rt_h`` the h gate's); ``rb`` ``(gates·H,)``; ``peep``
      ``(3H,)`` (i, o, f); ``h``, ``c`` ``(batch, H)``: the initial states, updated in place to the
      final ones; ``lens`` ``(batch,)`` int64 (``steps`` for every entry when there are no
      ``sequence_lens``); ``clip`` ``inf`` for none; ``y`` ``(steps, directions, batch, H)``
      zeros (the node's ``Y``), whose ``which`` column the direction fills with its hidden
      states.
    - ``both_directions(...)``: the two directions of a bidirectional layer at once on numba's
      threading layer (direction 1 reversed), each argument before ``y`` stacked on a first axis
      of 2 (``y`` as above: the directions fill its columns 0 and 1).  LSTM: ``(xw, rt, rb, peep,
      h, c, y, lens, input_forget, clip)``; GRU: ``(xw, rt_zr, rt_h, rb, h, y, lens, linear_before_reset, clip)``."""
    if cell not in _CELLS:
        raise ValueError(f"no compiled recurrence for {cell!r}; known: {', '.join(_CELLS)}")
    if compiler() is None:
        return None
    return importlib.import_module(f"._{cell}_loops", __package__)


def packed_columns(w: np.ndarray) -> np.ndarray:
    """``w`` ``(count, width)`` laid out for ``_recurrent_ir.add_products``, float32: blocks of
    :data:`BLOCK` columns, each block's ``count`` rows one after another (the last block
    zero-padded), a C-contiguous ``(blocks, count, BLOCK)`` array.  Why: the product runs down one
    block's rows before the next block's; read from a row-major ``w`` those rows sat a whole row
    apart, and this machine's prefetch followed them badly (a hidden size of 128: slower than the
    axpy the product replaced)."""
    count, width = w.shape
    blocks = -(-width // BLOCK)
    padded = np.zeros((count, blocks * BLOCK), np.float32)
    padded[:, :width] = w
    return np.ascontiguousarray(padded.reshape(count, blocks, BLOCK).transpose(1, 0, 2))
