"""DynamicQuantizeLSTM: an LSTM whose W and R are 8-bit quantized (quantize_dynamic's LSTM).

As onnxruntime's kernel, every matmul quantizes its float operand to uint8 on the fly (the
DynamicQuantizeLinear rule, over the whole operand): the input projection once for all time
steps, the recurrent one once per step over the whole batch (onnxruntime splits the batch
into one chunk per thread, so this matches it run with one intra-op thread).  Integer products
are exact (float64), rescaled by a_scale * weight scale (per tensor or per gate column).  W is
laid out [directions, input, 4*hidden] and R [directions, hidden, 4*hidden] (transposed against
ONNX LSTM), gates i, o, f, c.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import check_terminate
from onnxplug_cpu.numerics import rnn_activations

from ._registry import kernel
from .quantized import quantize_dynamic_uint8


def _activations(names, alphas, betas, directions, op):
    """LSTM's three activations per direction, parsed as the CPU provider's LSTM parses them; a
    list of another length is refused (onnxruntime's DynamicQuantizeLSTM does not repeat it)."""
    if names and len(names) != 3 * directions:
        raise InvalidArgument(f"{op}: activations must name 3 functions per direction, got {list(names)}")
    return rnn_activations(names, alphas, betas, 3, directions, ("Sigmoid", "Tanh", "Tanh"), op)


def _weight_params(scale, zero, directions, columns, name, op):
    """(scale, zero point) of one direction's weight, shaped to broadcast over its columns."""
    if scale.shape not in ((directions,), (directions, columns)) or zero.shape != scale.shape:
        raise Fail(
            f"{op}: {name}_scale {scale.shape} and {name}_zero_point {zero.shape} must both be "
            f"({directions},) or ({directions}, {columns})"
        )
    return [
        (scale[d].astype(np.float32).reshape(-1), zero[d].astype(np.float64).reshape(-1)) for d in range(directions)
    ]


def _quantized_matmul(a, weight, scale, zero):
    """a (rows, K) float times the quantized (K, N) weight, as onnxruntime's dynamic quantized GEMM."""
    q, a_scale, a_zero = quantize_dynamic_uint8(a)
    acc = (q - a_zero) @ (weight.astype(np.float64) - zero)
    return acc.astype(np.float32) * (np.float32(a_scale) * scale)


@kernel("DynamicQuantizeLSTM", since=(1,))
def dynamic_quantize_lstm(
    x,
    w,
    r,
    b=None,
    sequence_lens=None,
    initial_h=None,
    initial_c=None,
    p=None,
    w_scale=None,
    w_zero_point=None,
    r_scale=None,
    r_zero_point=None,
    *,
    activation_alpha=None,
    activation_beta=None,
    activations=None,
    clip=None,
    direction,
    hidden_size=None,
    input_forget,
):
    op = "DynamicQuantizeLSTM"
    if direction not in ("forward", "reverse", "bidirectional"):
        raise InvalidArgument(f"{op}: unknown direction {direction!r}")
    directions = 2 if direction == "bidirectional" else 1
    if x.ndim != 3:
        raise Fail(f"{op}: X must be [seq_length, batch_size, input_size], got {x.shape}")
    steps, batch, inputs = x.shape
    size = hidden_size if hidden_size is not None else r.shape[1]
    if w.shape != (directions, inputs, 4 * size) or r.shape != (directions, size, 4 * size):
        raise Fail(
            f"{op}: W {w.shape} / R {r.shape} must be ({directions}, {inputs}, {4 * size}) and "
            f"({directions}, {size}, {4 * size})"
        )
    w_params = _weight_params(w_scale, w_zero_point, directions, 4 * size, "W", op)
    r_params = _weight_params(r_scale, r_zero_point, directions, 4 * size, "R", op)
    bias = np.zeros((directions, 8 * size), np.float32) if b is None else b.astype(np.float32)
    peep = np.zeros((directions, 3 * size), np.float32) if p is None else p.astype(np.float32)
    if bias.shape != (directions, 8 * size) or peep.shape != (directions, 3 * size):
        raise Fail(
            f"{op}: B {bias.shape} / P {peep.shape} must be ({directions}, {8 * size}) / ({directions}, {3 * size})"
        )
    lens = None
    if sequence_lens is not None:
        lens = sequence_lens.astype(np.int64).reshape(-1)
        if lens.shape != (batch,) or (lens < 0).any() or (lens > steps).any():
            raise InvalidArgument(f"{op}: sequence_lens {lens.tolist()} do not fit batch {batch} and {steps} steps")
    states = []
    for value, name in ((initial_h, "initial_h"), (initial_c, "initial_c")):
        if value is not None and value.shape != (directions, batch, size):
            raise Fail(f"{op}: {name} must be ({directions}, {batch}, {size}), got {value.shape}")
        states.append(np.zeros((directions, batch, size), np.float32) if value is None else value.astype(np.float32))
    funcs = _activations(activations, activation_alpha, activation_beta, directions, op)
    clipped = (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))
    y = np.zeros((steps, directions, batch, size), np.float32)
    finals_h, finals_c = [], []
    every = np.full(batch, steps, np.int64) if lens is None else lens
    # A reverse pass starts at each row's last valid step (ONNX LSTM): it is run as a forward pass
    # over every sequence reversed within its own length, and its outputs are put back in place.
    order = np.arange(steps)[:, None]
    reversed_index = np.where(order < every[None, :], every[None, :] - 1 - order, order)  # (steps, batch)
    rows = np.arange(batch)[None, :]
    for d in range(directions):
        f, g, h_act = funcs[d]
        reverse = direction == "reverse" or d == 1
        seq = x[reversed_index, rows] if reverse else x
        projected = _quantized_matmul(seq.reshape(steps * batch, inputs).astype(np.float32), w[d], *w_params[d])
        projected = projected.reshape(steps, batch, 4 * size) + bias[d, : 4 * size] + bias[d, 4 * size :]
        p_i, p_o, p_f = peep[d, :size], peep[d, size : 2 * size], peep[d, 2 * size :]
        h, c = states[0][d], states[1][d]
        out = np.zeros((steps, batch, size), np.float32)
        for t in range(steps):
            check_terminate()
            gates = projected[t] + _quantized_matmul(h, r[d], *r_params[d])
            i = f(clipped(gates[:, :size] + p_i * c))
            forget = 1 - i if input_forget else f(clipped(gates[:, 2 * size : 3 * size] + p_f * c))
            cell = forget * c + i * g(clipped(gates[:, 3 * size :]))
            o = f(clipped(gates[:, size : 2 * size] + p_o * cell))
            hidden = o * h_act(cell)
            live = (t < every)[:, None]
            h, c = np.where(live, hidden, h), np.where(live, cell, c)
            out[t] = np.where(live, hidden, 0)
        y[:, d] = out[reversed_index, rows] if reverse else out
        finals_h.append(h)
        finals_c.append(c)
    return y, np.stack(finals_h), np.stack(finals_c)
