"""Recurrent layers: RNN, GRU and LSTM.

The input projection ``X·Wᵀ + Wb`` of every time step is one matmul up front; only the
recurrent part runs in the per-step loop, vectorised over the batch.  float32 LSTMs and GRUs with
the default activations run that loop compiled (``kernels._recurrent_jit``: a step's twenty numpy
calls on a few hundred values were most of its time), on numba's team where it is safe.  Per-batch
``sequence_lens`` are applied with masks: a finished entry keeps its last state and emits zeros,
and a reverse pass starts at each entry's own last valid step.  float16/bfloat16 are computed in
float32 and cast back.
"""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument
from onnxplug.kernels import check_terminate

from . import _f32_conv, _f32_products
from ._recurrent_jit import loops as _compiled
from ._recurrent_jit import packed_columns
from ._registry import kernel
from ._split_rows import run_in_row_blocks
from ._team import join_run, run_settings, team_joined


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
        if X.ndim != 3:
            raise InvalidArgument(f"{op}: X has shape {list(X.shape)}, expected 3 dimensions")
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
        steps, batch, width = self.x.shape
        hidden = hidden_size if hidden_size is not None else R.shape[-1]
        if W.shape != (self.directions, gates * hidden, width) or R.shape != (self.directions, gates * hidden, hidden):
            raise InvalidArgument(
                f"{op}: W {list(W.shape)} / R {list(R.shape)} do not fit hidden_size {hidden}, "
                f"{self.directions} direction(s) and input size {width}: expected W "
                f"{[self.directions, gates * hidden, width]} and R {[self.directions, gates * hidden, hidden]}"
            )
        if B is not None and B.shape != (self.directions, 2 * gates * hidden):
            raise InvalidArgument(
                f"{op}: B has shape {list(B.shape)}, expected {[self.directions, 2 * gates * hidden]}"
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
        self.initial = [self.state(op, name, s, work) for name, s in zip(("initial_h", "initial_c"), initial)]

    def state(self, op, name, value, work):
        """An initial state as ``(directions, batch, hidden)`` (zeros where not given)."""
        expected = (self.directions, self.batch, self.hidden)
        if value is None:
            return np.zeros(expected, work)
        given = value.shape
        value = np.swapaxes(value, 0, 1) if self.layout else value
        if value.shape != expected:
            wanted = [expected[1], expected[0], expected[2]] if self.layout else list(expected)
            raise InvalidArgument(f"{op}: {name} has shape {list(given)}, expected {wanted}")
        return value.astype(work, copy=False)

    def projected(self, d, gates, wt=None, out=None):
        """``X·Wᵀ + Wb`` for all steps of direction ``d``: ``[steps, batch, gates*hidden]``,
        C-contiguous (into ``out`` where given: float32, C-contiguous, that shape), as one 2-D
        product (a 3-D ``x`` would make numpy call one matrix-vector product per step).  ``wt``:
        ``W[d]ᵀ`` C-contiguous, when the node made it at creation (:func:`transposed_inputs`).

        Inside a run on numba's team (BLAS pinned to one thread) the product is ``X·Wᵀ`` on the
        convolution tiles: OpenBLAS ran ocr_rec's 41×256 by 256×384 at 26 G multiply-adds/s on
        one thread (156 µs a direction; 91 on two), the tiles at about 50 a thread.  They take
        ``Wᵀ`` as their second operand, so that the result comes out in the layout the compiled
        loops read; ``(W·Xᵀ)ᵀ`` made it a transposed view, whose copy cost more than the product
        (an LSTM of 64 over 8 × 48 steps: 81 µs against 14)."""
        steps, batch, width = self.x.shape
        columns = gates * self.hidden  # (explicit: -1 is undefined for an empty sequence or batch)
        x = self.x.reshape(steps * batch, width)
        flat = None if out is None else out.reshape(steps * batch, columns)
        if x.dtype == np.float32 and team_joined() and _f32_conv.available():
            wt = np.ascontiguousarray(self.w[d].T) if wt is None else wt
            flat = _f32_products.matrix_product(np.ascontiguousarray(x), wt, flat)
        else:
            flat = np.matmul(x, self.w[d].T, out=flat)
        flat += self.b[d, :columns]
        return flat.reshape(steps, batch, columns)

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
        """Y and the final states in the node's layout, from ``ys`` (one ``[steps, batch, hidden]``
        array per direction, or Y ``[steps, directions, batch, hidden]`` itself)."""
        y = ys if isinstance(ys, np.ndarray) else np.stack(ys, axis=1)
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


@kernel("GRU", since=(1, 3, 7, 14, 22), factory=True)
def gru(ctx, **attributes):
    """The GRU node: :func:`gru_values` on every run, with ``Wᵀ`` and ``Rᵀ`` laid out at creation
    where ``W`` and ``R`` are constants (as :func:`lstm` does)."""
    weights, recurrence = ctx.constant(1), ctx.constant(2)
    laid_out = (transposed_inputs(weights), packed_recurrence(recurrence, GRU_GROUPS))

    def run(X, W, R, B=None, sequence_lens=None, initial_h=None):
        known = (laid_out[0] if W is weights else None, laid_out[1] if R is recurrence else None)
        return gru_values(X, W, R, B, sequence_lens, initial_h, laid_out=known, **attributes)

    return run


def gru_values(
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
    laid_out=(None, None),
    **legacy,
):
    """A GRU's outputs; ``laid_out``: :func:`transposed_inputs` of ``W`` and
    :func:`packed_recurrence` of ``R``, where known."""
    data = _Inputs("GRU", X, W, R, B, sequence_lens, [initial_h], 3, hidden_size, direction, legacy.get("layout", 0))
    linear_before_reset = legacy.get("linear_before_reset", 0)
    if data.x.dtype == np.float32 and _default_activations(activations, data.directions, ("sigmoid", "tanh")):
        cell = _compiled("gru")
        if cell is not None:
            flags = (bool(linear_before_reset), _clip_bound(clip))
            return data.outputs(*_compiled_directions(cell, data, GRU_GROUPS, laid_out, (), data.initial, flags))
    funcs = rnn_activations(
        activations, activation_alpha, activation_beta, 2, data.directions, ("Sigmoid", "Tanh"), "GRU"
    )
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


def _default_activations(activations, directions, defaults) -> bool:
    """Whether a recurrent node's activations are its ``defaults`` (lower-case names) in every
    direction (named as :func:`rnn_activations` reads them): only those are compiled."""
    count = len(defaults)
    names = [str(a).lower() for a in activations] if activations else list(defaults) * directions
    if len(names) < count * directions:
        names = (names[:count] or list(defaults)) * directions
    return names[: count * directions] == list(defaults) * directions


def _clip_bound(clip) -> np.float32:
    """The compiled loops' ``clip``: ``inf`` for none."""
    return np.float32(np.inf if clip is None else clip)


#: The gate groups of ``Rᵀ`` the compiled loops read as separate products, in units of the hidden
#: size: an LSTM's four gates at once; a GRU's z and r gates, then its h gate (whose product reads
#: ``r ⊙ h`` when the reset is not linear).
LSTM_GROUPS, GRU_GROUPS = (4,), (2, 1)


def transposed_inputs(w: np.ndarray | None) -> np.ndarray | None:
    """``Wᵀ`` per direction, C-contiguous, as the tiles' input projection reads it
    (:meth:`_Inputs.projected`): for a float32 ``W`` ``(directions, gates·H, input)``, else
    ``None``.  Made once per node when ``W`` is a constant."""
    if not isinstance(w, np.ndarray) or w.dtype != np.float32 or w.ndim != 3:
        return None
    transposed = np.ascontiguousarray(np.swapaxes(w, 1, 2))
    transposed.flags.writeable = False
    return transposed


def packed_recurrence(r: np.ndarray | None, groups: tuple[int, ...]) -> tuple[np.ndarray, ...] | None:
    """``Rᵀ`` as the compiled recurrence reads it (``_recurrent_jit.packed_columns``), one array
    per gate group of ``groups`` (:data:`LSTM_GROUPS`, :data:`GRU_GROUPS`), each stacked over the
    directions: for a float32 ``R`` ``(directions, gates·H, H)``, else ``None``.  Made once per
    node when ``R`` is a constant (on every run it was a 45 µs copy, ocr_rec's 2×384×96)."""
    if not isinstance(r, np.ndarray) or r.dtype != np.float32 or r.ndim != 3:
        return None
    hidden = r.shape[2]
    packed, first = [], 0
    for count in groups:
        rows = slice(first * hidden, (first + count) * hidden)
        group = np.stack([packed_columns(r[d, rows].T) for d in range(r.shape[0])])
        group.flags.writeable = False
        packed.append(group)
        first += count
    return tuple(packed)


def _on_team() -> bool:
    """Whether a compiled recurrence runs on numba's team: its input projection on the
    convolution tiles (``_Inputs.projected``), a bidirectional layer's two directions as one
    parallel call.  Whenever the team is safe and the run has two threads, joining the run if
    nothing before it had (BLAS goes to one thread, ``kernels._team.join_run``).

    Why not only inside a run that had started the team (a CRNN's LSTM after its convolutions):
    a model that begins with its recurrent layers split their directions over Python threads
    while the team's worker still spun from the previous run's products, and OpenBLAS's worker
    polled after the projection; three busy threads on two cores, ``lstm-tagger``'s two directions
    (183 µs of work each) took 458 µs.  On the team they take one region."""
    settings = run_settings()
    if not (settings.team and settings.budget >= 2):
        return False
    join_run()
    return team_joined()  # (outside a session's run nothing is joined)


def _compiled_directions(cell, data, groups, known, inputs, states, flags):
    """Every direction of a float32 recurrent layer through ``cell``'s compiled loops
    (``kernels._recurrent_jit``): ``(Y, finals)`` for :meth:`_Inputs.outputs`.

    ``groups``: :data:`LSTM_GROUPS` or :data:`GRU_GROUPS`; ``known``: ``(wt, rt)``, the node's
    :func:`transposed_inputs` of ``W`` and :func:`packed_recurrence` of ``R`` where it made them
    at creation (``None`` each where not); ``inputs``: the per-direction arrays the loops read
    after ``Rb`` (the LSTM's peepholes); ``states``: the initial states, ``(directions, batch,
    H)`` each, copied and run to the final ones; ``flags``: the loops' arguments after
    ``reverse``.  A bidirectional layer's two directions run at once on two threads: on numba's
    team (:func:`_on_team`), else on Python threads (the loop releases the GIL)."""
    size, n = data.hidden, data.directions
    team = _on_team()  # before the projection, which then runs on the tiles
    lens = data.lens if data.lens is not None else np.full(data.batch, data.steps, np.int64)
    # Stacked per direction, so that both directions can be one compiled call; each direction's
    # projection made in its place, and the loops' hidden states written into the node's Y.
    gates = sum(groups)
    wt, rt = known
    xw = np.empty((n, data.steps, data.batch, gates * size), np.float32)
    for d in range(n):
        data.projected(d, gates, None if wt is None else wt[d], out=xw[d])
    if rt is None:
        rt = packed_recurrence(data.r, groups)
    rb = np.ascontiguousarray(data.b[:, gates * size :])
    inputs = [np.ascontiguousarray(a) for a in inputs]
    states = [np.array(state, np.float32, order="C") for state in states]
    y = np.zeros((data.steps, n, data.batch, size), np.float32)

    def one(d):
        per_direction = [a[d] for a in (*inputs, *states)]
        cell.direction(xw[d], *[group[d] for group in rt], rb[d], *per_direction, lens, data.reverse[d], *flags, y, d)

    if n == 2 and team:
        cell.both_directions(xw, *rt, rb, *inputs, *states, y, lens, *flags)
    elif n == 2 and run_settings().budget >= 2:
        run_in_row_blocks(lambda lo, hi: [one(d) for d in range(lo, hi)], 2, min_rows=1)
    else:
        for d in range(n):
            one(d)
    return y, [list(state) for state in states]


@kernel("LSTM", since=(1, 7, 14, 22), factory=True)
def lstm(ctx, **attributes):
    """The LSTM node: :func:`lstm_values` on every run, with ``Wᵀ`` and ``Rᵀ`` laid out at
    creation where ``W`` and ``R`` are constants (a run given other arrays lays out its own)."""
    weights, recurrence = ctx.constant(1), ctx.constant(2)
    laid_out = (transposed_inputs(weights), packed_recurrence(recurrence, LSTM_GROUPS))

    def run(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None):
        known = (laid_out[0] if W is weights else None, laid_out[1] if R is recurrence else None)
        return lstm_values(X, W, R, B, sequence_lens, initial_h, initial_c, P, laid_out=known, **attributes)

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
    laid_out=(None, None),
    **legacy,
):
    """An LSTM's outputs; ``laid_out``: :func:`transposed_inputs` of ``W`` and
    :func:`packed_recurrence` of ``R``, where known."""
    data = _Inputs(
        "LSTM", X, W, R, B, sequence_lens, [initial_h, initial_c], 4, hidden_size, direction, legacy.get("layout", 0)
    )
    size = data.hidden
    work = data.x.dtype
    if P is None:
        peep = np.zeros((data.directions, 3 * size), work)
    else:
        peep = P.astype(work, copy=False)
        if peep.shape != (data.directions, 3 * size):
            raise InvalidArgument(f"LSTM: P has shape {list(P.shape)}, expected {[data.directions, 3 * size]}")
    if work == np.float32 and _default_activations(activations, data.directions, ("sigmoid", "tanh", "tanh")):
        cell = _compiled("lstm")
        if cell is not None:
            flags = (bool(input_forget), _clip_bound(clip))
            return data.outputs(*_compiled_directions(cell, data, LSTM_GROUPS, laid_out, (peep,), data.initial, flags))
    funcs = rnn_activations(
        activations, activation_alpha, activation_beta, 3, data.directions, ("Sigmoid", "Tanh", "Tanh"), "LSTM"
    )
    clipped = _clipper(clip)
    ys, finals = [], [[], []]
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
