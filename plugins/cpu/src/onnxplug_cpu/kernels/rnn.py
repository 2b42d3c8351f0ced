"""Recurrent layers: RNN, GRU and LSTM.

The input projection ``X·Wᵀ + Wb`` of every time step is one matmul up front; only the
recurrent part runs in the per-step loop, vectorised over the batch.  float32 LSTMs with the
default activations run that loop compiled (``kernels._lstm_jit``: a step's twenty numpy calls
on a few hundred values were most of its time).  Per-batch
``sequence_lens`` are applied with masks: a finished entry keeps its last state and emits zeros,
and a reverse pass starts at each entry's own last valid step.  float16/bfloat16 are computed in
float32 and cast back.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument
from onnxplug.kernels import check_terminate

from . import _f32_conv, _f32_products
from ._lstm_jit import compiled as _compiled_lstm
from ._lstm_jit import compiled_both as _compiled_both
from ._registry import kernel
from ._split_rows import run_in_row_blocks, thread_budget
from ._team import team_joined


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


# name -> (function(x, alpha, beta), default alpha or None if unused, default beta or None)
_ACTIVATIONS = {
    "relu": (lambda x, a, b: np.maximum(x, 0), None, None),
    "tanh": (lambda x, a, b: np.tanh(x), None, None),
    "sigmoid": (lambda x, a, b: _sigmoid(x), None, None),
    "affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "leakyrelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None),
    "thresholdedrelu": (lambda x, a, b: np.where(x > a, x, 0), 1.0, None),
    "scaledtanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "hardsigmoid": (lambda x, a, b: np.clip(a * x + b, 0, 1), 0.2, 0.5),
    "elu": (lambda x, a, b: np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0)) - 1)), 1.0, None),
    "softsign": (lambda x, a, b: x / (1 + np.abs(x)), None, None),
    "softplus": (lambda x, a, b: np.logaddexp(0, x), None, None),
}


def rnn_activations(names, alphas, betas, per_direction, directions, defaults, op):
    """One list of ``per_direction`` callables per direction.  ``activation_alpha``/``beta``
    are consumed in order by the activations that take them (as onnxruntime does)."""
    names = list(names) if names else list(defaults) * directions
    if len(names) < per_direction * directions:
        names = (names[:per_direction] or list(defaults)) * directions
    alphas, betas = list(alphas or ()), list(betas or ())
    funcs = []
    for name in names[: per_direction * directions]:
        entry = _ACTIVATIONS.get(name.lower())
        if entry is None:
            raise InvalidArgument(f"{op}: unknown activation {name!r}")
        fn, alpha, beta = entry
        if alpha is not None and alphas:
            alpha = alphas.pop(0)
        if beta is not None and betas:
            beta = betas.pop(0)
        funcs.append(lambda x, fn=fn, a=alpha, b=beta: fn(x, a, b))
    return [funcs[d * per_direction : (d + 1) * per_direction] for d in range(directions)]


class _Inputs:
    """The shared input handling: layout, direction count, biases, lengths, initial states."""

    def __init__(self, op, X, W, R, B, sequence_lens, initial, gates, hidden_size, direction, layout):
        self.out_dtype = X.dtype
        work = np.float32 if X.dtype.itemsize < 4 else X.dtype
        self.x = (np.swapaxes(X, 0, 1) if layout else X).astype(work, copy=False)
        self.layout = layout
        if direction == "foward":  # GRU-1's schema default is misspelt
            direction = "forward"
        self.directions = 2 if direction == "bidirectional" else 1
        if direction not in ("forward", "reverse", "bidirectional"):
            raise InvalidArgument(f"{op}: unknown direction {direction!r}")
        self.reverse = [direction == "reverse"] if self.directions == 1 else [False, True]
        steps, batch, _ = self.x.shape
        hidden = hidden_size if hidden_size is not None else R.shape[-1]
        if W.shape[0] != self.directions or W.shape[1] != gates * hidden or R.shape[1:] != (gates * hidden, hidden):
            raise InvalidArgument(
                f"{op}: W {list(W.shape)} / R {list(R.shape)} do not fit hidden_size {hidden} "
                f"and {self.directions} direction(s)"
            )
        self.hidden, self.steps, self.batch = hidden, steps, batch
        self.w = W.astype(work, copy=False)
        self.r = R.astype(work, copy=False)
        self.b = np.zeros((self.directions, 2 * gates * hidden), work) if B is None else B.astype(work, copy=False)
        self.lens = None
        if sequence_lens is not None:
            lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
            if lens.shape != (batch,) or np.any(lens < 0) or np.any(lens > steps):
                raise InvalidArgument(
                    f"{op}: sequence_lens {lens.tolist()} do not fit batch {batch} and sequence length {steps}"
                )
            if np.any(lens < steps):
                self.lens = lens
        self.initial = [self.state(s, work) for s in initial]

    def state(self, value, work):
        if value is None:
            return np.zeros((self.directions, self.batch, self.hidden), work)
        value = np.swapaxes(value, 0, 1) if self.layout else value
        return value.astype(work, copy=False)

    def projected(self, d, gates):
        """``X·Wᵀ + Wb`` for all steps of direction ``d``: ``[steps, batch, gates*hidden]``,
        as one 2-D product (a 3-D ``x`` would make numpy call one matrix-vector product per step).

        Inside a run on numba's team (a CRNN's LSTM after its convolutions, BLAS pinned to one
        thread) the product is ``W·Xᵀ`` on the convolution tiles, which read ``W`` as it is
        stored: OpenBLAS ran ocr_rec's 41×256 by 256×384 at 26 G multiply-adds/s on one thread
        (156 µs a direction; 91 on two), the tiles run at about 50 a thread."""
        steps, batch, width = self.x.shape
        x = self.x.reshape(steps * batch, width)
        w = self.w[d]
        if x.dtype == np.float32 and w.flags.c_contiguous and team_joined() and _f32_conv.available():
            flat = _f32_products.matrix_product(w, np.ascontiguousarray(x.T)).T
        else:
            flat = x @ w.T
        flat = flat + self.b[d, : gates * self.hidden]
        return flat.reshape(steps, batch, -1)

    def run(self, step, d, states):
        """Run ``step(x_t, states) -> states`` (hidden first) over time; returns Y and states."""
        y = np.zeros((self.steps, self.batch, self.hidden), states[0].dtype)
        order = range(self.steps - 1, -1, -1) if self.reverse[d] else range(self.steps)
        for t in order:
            check_terminate()
            new = step(t, states)
            if self.lens is not None:
                mask = (t < self.lens)[:, None]
                new = [np.where(mask, n, s) for n, s in zip(new, states)]
                y[t] = np.where(mask, new[0], 0)
            else:
                y[t] = new[0]
            states = new
        return y, states

    def outputs(self, ys, finals):
        """Y ``[steps, directions, batch, hidden]`` and the final states, in the node's layout."""
        y = np.stack(ys, axis=1)
        finals = [np.stack(f) for f in finals]
        if self.layout:
            y = y.transpose(2, 0, 1, 3)
            finals = [np.swapaxes(f, 0, 1) for f in finals]
        cast = [a.astype(self.out_dtype, copy=False) for a in (y, *finals)]
        return tuple(np.ascontiguousarray(a) for a in cast)


def _clipper(clip):
    if clip is None:
        return lambda x: x
    return lambda x: np.clip(x, -clip, clip)


@kernel("RNN", since=(1, 7, 14, 22))
def rnn(
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    *,
    activation_alpha=None,
    activation_beta=None,
    activations,
    clip=None,
    direction,
    hidden_size=None,
    **legacy,
):
    data = _Inputs("RNN", X, W, R, B, sequence_lens, [initial_h], 1, hidden_size, direction, legacy.get("layout", 0))
    funcs = rnn_activations(activations, activation_alpha, activation_beta, 1, data.directions, ("Tanh",), "RNN")
    clipped = _clipper(clip)
    ys, finals = [], [[]]
    for d in range(data.directions):
        xw = data.projected(d, 1)
        rt, rb = data.r[d].T, data.b[d, data.hidden :]
        f = funcs[d][0]

        def step(t, states, xw=xw, rt=rt, rb=rb, f=f):
            return [f(clipped(xw[t] + states[0] @ rt + rb))]

        y, (h,) = data.run(step, d, [data.initial[0][d]])
        ys.append(y)
        finals[0].append(h)
    return data.outputs(ys, finals)


@kernel("GRU", since=(1, 3, 7, 14, 22))
def gru(
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    *,
    activation_alpha=None,
    activation_beta=None,
    activations=None,
    clip=None,
    direction,
    hidden_size=None,
    **legacy,
):
    data = _Inputs("GRU", X, W, R, B, sequence_lens, [initial_h], 3, hidden_size, direction, legacy.get("layout", 0))
    funcs = rnn_activations(
        activations, activation_alpha, activation_beta, 2, data.directions, ("Sigmoid", "Tanh"), "GRU"
    )
    linear_before_reset = legacy.get("linear_before_reset", 0)
    clipped = _clipper(clip)
    size = data.hidden
    ys, finals = [], [[]]
    for d in range(data.directions):
        xw = data.projected(d, 3)
        r = data.r[d]
        r_zr, r_h = r[: 2 * size].T, r[2 * size :].T
        rb = data.b[d, 3 * size :]
        rb_zr, rb_h = rb[: 2 * size], rb[2 * size :]
        f, g = funcs[d]

        def step(t, states, xw=xw, r_zr=r_zr, r_h=r_h, rb_zr=rb_zr, rb_h=rb_h, f=f, g=g):
            h = states[0]
            x = xw[t]
            zr = f(clipped(x[:, : 2 * size] + h @ r_zr + rb_zr))
            z, reset = zr[:, :size], zr[:, size:]
            if linear_before_reset:
                candidate = g(clipped(x[:, 2 * size :] + reset * (h @ r_h + rb_h)))
            else:
                candidate = g(clipped(x[:, 2 * size :] + (reset * h) @ r_h + rb_h))
            return [(1 - z) * candidate + z * h]

        y, (h,) = data.run(step, d, [data.initial[0][d]])
        ys.append(y)
        finals[0].append(h)
    return data.outputs(ys, finals)


def _default_lstm(activations, directions) -> bool:
    """Whether an LSTM's activations are the default Sigmoid, Tanh, Tanh in every direction
    (named as :func:`rnn_activations` reads them)."""
    names = [str(a).lower() for a in activations] if activations else ["sigmoid", "tanh", "tanh"] * directions
    if len(names) < 3 * directions:
        names = (names[:3] or ["sigmoid", "tanh", "tanh"]) * directions
    return names[: 3 * directions] == ["sigmoid", "tanh", "tanh"] * directions


def transposed_recurrence(r: np.ndarray | None) -> np.ndarray | None:
    """``Rᵀ`` per direction, C-contiguous, as the compiled recurrence reads it: for a float32
    ``R`` ``(directions, 4H, H)``, else ``None``.  Made once per node when ``R`` is a constant
    (on every run it was a 45 µs copy, ocr_rec's 2×384×96)."""
    if not isinstance(r, np.ndarray) or r.dtype != np.float32 or r.ndim != 3:
        return None
    packed = np.ascontiguousarray(np.swapaxes(r, 1, 2))
    packed.flags.writeable = False
    return packed


def _compiled_directions(compiled, data, peep, clip, input_forget, rt=None):
    """Every direction of a float32 LSTM through the compiled recurrence (``kernels._lstm_jit``):
    ``(ys, finals)`` for :meth:`_Inputs.outputs`.  A bidirectional layer's two directions run at
    once on two threads (numba's team inside a run that started it, else Python threads: the
    loop releases the GIL), when the run has two.  ``rt``: :func:`transposed_recurrence` of
    ``data.r`` when the node made it at creation."""
    size, n = data.hidden, data.directions
    lens = data.lens if data.lens is not None else np.full(data.batch, data.steps, np.int64)
    bound = np.float32(np.inf if clip is None else clip)
    # Stacked per direction, so that both directions can be one compiled call.
    xw = np.stack([data.projected(d, 4) for d in range(n)])
    if rt is None:
        rt = transposed_recurrence(data.r)
    rb = np.ascontiguousarray(data.b[:, 4 * size :])
    peep = np.ascontiguousarray(peep)
    h, c = (np.array(state, np.float32, order="C") for state in data.initial)
    y = np.zeros((n, data.steps, data.batch, size), np.float32)
    flags = (bool(input_forget), bound)

    def one(d):
        compiled(xw[d], rt[d], rb[d], peep[d], h[d], c[d], lens, data.reverse[d], *flags, y[d])

    if n == 2 and thread_budget() >= 2:
        if team_joined():
            _compiled_both()(xw, rt, rb, peep, h, c, y, lens, False, *flags)
        else:
            run_in_row_blocks(lambda lo, hi: [one(d) for d in range(lo, hi)], 2, min_rows=1)
    else:
        for d in range(n):
            one(d)
    return list(y), [list(h), list(c)]


@kernel("LSTM", since=(1, 7, 14, 22), factory=True)
def lstm(ctx, **attributes):
    """The LSTM node: :func:`lstm_values` on every run, with ``Rᵀ`` made at creation when ``R``
    is a constant (a run whose ``R`` is another array makes its own)."""
    recurrence = ctx.constant(2)
    transposed = transposed_recurrence(recurrence)

    def run(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None):
        known = transposed if R is recurrence else None
        return lstm_values(X, W, R, B, sequence_lens, initial_h, initial_c, P, transposed_r=known, **attributes)

    return run


def lstm_values(
    X,
    W,
    R,
    B=None,
    sequence_lens=None,
    initial_h=None,
    initial_c=None,
    P=None,
    *,
    activation_alpha=None,
    activation_beta=None,
    activations=None,
    clip=None,
    direction,
    hidden_size=None,
    input_forget,
    transposed_r=None,
    **legacy,
):
    """An LSTM's outputs; ``transposed_r``: :func:`transposed_recurrence` of ``R``, if known."""
    data = _Inputs(
        "LSTM", X, W, R, B, sequence_lens, [initial_h, initial_c], 4, hidden_size, direction, legacy.get("layout", 0)
    )
    funcs = rnn_activations(
        activations, activation_alpha, activation_beta, 3, data.directions, ("Sigmoid", "Tanh", "Tanh"), "LSTM"
    )
    clipped = _clipper(clip)
    size = data.hidden
    work = data.x.dtype
    if P is None:
        peep = np.zeros((data.directions, 3 * size), work)
    else:
        peep = P.astype(work, copy=False)
        if peep.shape != (data.directions, 3 * size):
            raise InvalidArgument(f"LSTM: P has shape {list(P.shape)}, expected {[data.directions, 3 * size]}")
    ys, finals = [], [[], []]
    compiled = _compiled_lstm() if work == np.float32 and _default_lstm(activations, data.directions) else None
    if compiled is not None:
        return data.outputs(*_compiled_directions(compiled, data, peep, clip, input_forget, transposed_r))
    for d in range(data.directions):
        xw = data.projected(d, 4)
        rt, rb = data.r[d].T, data.b[d, 4 * size :]
        p_i, p_o, p_f = peep[d, :size], peep[d, size : 2 * size], peep[d, 2 * size :]
        f, g, h_act = funcs[d]

        def step(t, states, xw=xw, rt=rt, rb=rb, p_i=p_i, p_o=p_o, p_f=p_f, f=f, g=g, h_act=h_act):
            h, c = states
            gates = xw[t] + h @ rt + rb  # order i, o, f, c
            i = f(clipped(gates[:, :size] + p_i * c))
            if input_forget:
                forget = 1 - i
            else:
                forget = f(clipped(gates[:, 2 * size : 3 * size] + p_f * c))
            cell = forget * c + i * g(clipped(gates[:, 3 * size :]))
            o = f(clipped(gates[:, size : 2 * size] + p_o * cell))
            return [o * h_act(cell), cell]

        y, (h, c) = data.run(step, d, [data.initial[0][d], data.initial[1][d]])
        ys.append(y)
        finals[0].append(h)
        finals[1].append(c)
    return data.outputs(ys, finals)
