"""Optimizer steps of the ``ai.onnx.preview.training`` domain: Adagrad, Adam and Momentum.

Each op updates several tensors at once: after the learning rate ``R`` and the step count ``T``
its inputs are the tensors, then their gradients, then each state (``[X..., G..., H...]``), and
the outputs are the new tensors followed by the new states, in the same grouping.

``Gradient`` is deliberately not registered: it needs automatic differentiation of the graph,
which a kernel cannot provide.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import InvalidArgument

from ._registry import kernel

DOMAIN = "ai.onnx.preview.training"


def _groups(op, inputs, count):
    """Split the variadic inputs into ``count`` equally long groups."""
    if not inputs or len(inputs) % count:
        raise InvalidArgument(
            f"{op} needs its variadic inputs in {count} groups of equal length, got {len(inputs)} inputs"
        )
    n = len(inputs) // count
    return [inputs[i * n : (i + 1) * n] for i in range(count)]


def _scalar(value, what):
    array = np.asarray(value)
    if array.size != 1:
        raise InvalidArgument(f"{what} must be a scalar, got shape {array.shape}")
    return array.reshape(()).item()


@kernel("Adagrad", since=(1,), domain=DOMAIN)
def adagrad(r, t, *inputs, decay_factor, epsilon, norm_coefficient):
    xs, gs, hs = _groups("Adagrad", inputs, 3)
    rate = _scalar(r, "R") / (1 + _scalar(t, "T") * decay_factor)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        grad = norm_coefficient * x + g
        h_new = h + grad * grad
        new_x.append((x - rate * grad / (np.sqrt(h_new) + epsilon)).astype(x.dtype))
        new_h.append(h_new.astype(h.dtype))
    return tuple(new_x + new_h)


@kernel("Adam", since=(1,), domain=DOMAIN)
def adam(r, t, *inputs, alpha, beta, epsilon, norm_coefficient, norm_coefficient_post):
    xs, gs, vs, hs = _groups("Adam", inputs, 4)
    rate = _scalar(r, "R")
    step = _scalar(t, "T")
    if step > 0:
        rate = rate * math.sqrt(1 - beta**step) / (1 - alpha**step)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        grad = norm_coefficient * x + g
        v_new = alpha * v + (1 - alpha) * grad
        h_new = beta * h + (1 - beta) * grad * grad
        x_new = x - rate * v_new / (np.sqrt(h_new) + epsilon)
        new_x.append(((1 - norm_coefficient_post) * x_new).astype(x.dtype))
        new_v.append(v_new.astype(v.dtype))
        new_h.append(h_new.astype(h.dtype))
    return tuple(new_x + new_v + new_h)


@kernel("Momentum", since=(1,), domain=DOMAIN)
def momentum(r, t, *inputs, alpha, beta, mode, norm_coefficient):
    if mode not in ("standard", "nesterov"):
        raise InvalidArgument(f"Momentum mode must be 'standard' or 'nesterov', got {mode!r}")
    xs, gs, vs = _groups("Momentum", inputs, 3)
    rate = _scalar(r, "R")
    beta_adjusted = beta if _scalar(t, "T") > 0 else 1.0
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        grad = norm_coefficient * x + g
        v_new = alpha * v + beta_adjusted * grad
        step = v_new if mode == "standard" else grad + alpha * v_new
        new_x.append((x - rate * step).astype(x.dtype))
        new_v.append(v_new.astype(v.dtype))
    return tuple(new_x + new_v)
