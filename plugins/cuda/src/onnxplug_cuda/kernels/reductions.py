"""Reduce* (axes as an attribute, or as an input that stays on the host) and ArgMax/ArgMin.

A reduction over an empty axis gives the operation's identity (0 for sums, 1 for products,
-inf/+inf for max/min), as ONNX specifies; the standard's ``max`` would raise there.
"""

from __future__ import annotations

import math

from onnxplug.errors import InvalidArgument

from ._common import FLOATS, NUMBERS, host_ints, namespace, registry


def _sum(xp, x, axes, keepdims):
    return xp.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


def _log_sum_exp(xp, x, axes, keepdims):
    top = xp.max(x, axis=axes, keepdims=True)
    top = xp.where(xp.isfinite(top), top, xp.zeros_like(top))
    y = xp.log(xp.sum(xp.exp(x - top), axis=axes, keepdims=True)) + top
    return y if keepdims else xp.squeeze(y, axis=axes)


def _empty_identity(xp, x, name):
    if name in ("ReduceSum", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceMean"):
        return 0
    if name == "ReduceProd":
        return 1
    floating = xp.isdtype(x.dtype, "real floating")
    if name == "ReduceMax":
        return -math.inf if floating else xp.iinfo(x.dtype).min
    if name == "ReduceMin":
        return math.inf if floating else xp.iinfo(x.dtype).max
    return -math.inf  # ReduceLogSumExp: log(0)


_REDUCERS = {
    "ReduceSum": (_sum, NUMBERS),
    "ReduceMean": (lambda xp, x, a, k: xp.mean(x, axis=a, keepdims=k), FLOATS),
    "ReduceMax": (lambda xp, x, a, k: xp.max(x, axis=a, keepdims=k), NUMBERS),
    "ReduceMin": (lambda xp, x, a, k: xp.min(x, axis=a, keepdims=k), NUMBERS),
    "ReduceProd": (lambda xp, x, a, k: xp.prod(x, axis=a, keepdims=k, dtype=x.dtype), NUMBERS),
    "ReduceL1": (lambda xp, x, a, k: _sum(xp, xp.abs(x), a, k), NUMBERS),
    "ReduceL2": (lambda xp, x, a, k: xp.sqrt(xp.sum(x * x, axis=a, keepdims=k)), FLOATS),
    "ReduceSumSquare": (lambda xp, x, a, k: _sum(xp, x * x, a, k), NUMBERS),
    "ReduceLogSumExp": (_log_sum_exp, FLOATS),
}
#: (versions with an ``axes`` attribute, versions with an ``axes`` input)
_VERSIONS = {
    "ReduceSum": ((1, 11), (13,)),
    "ReduceMax": ((1, 11, 12, 13), (18, 20)),
    "ReduceMin": ((1, 11, 12, 13), (18, 20)),
    "ReduceLogSumExp": ((1, 11, 13), (18, 28)),
}


def _reduce(name, fn, x, axes, keepdims, noop):
    xp = namespace(x)
    if not axes:
        if noop:
            return x
        axes = list(range(x.ndim))
    normal = []
    for axis in axes:
        if not -x.ndim <= axis < max(x.ndim, 1):
            raise InvalidArgument(f"{name}: axis {axis} is out of range for rank {x.ndim}")
        normal.append(axis % x.ndim if x.ndim else 0)
    normal = tuple(sorted(set(normal))) if x.ndim else ()
    if any(x.shape[a] == 0 for a in normal):
        shape = tuple(1 if i in normal else n for i, n in enumerate(x.shape) if keepdims or i not in normal)
        return xp.full(shape, _empty_identity(xp, x, name), dtype=x.dtype)
    return fn(xp, x, normal, bool(keepdims))


def _register(name: str) -> None:
    fn, types = _REDUCERS[name]
    with_attribute, with_input = _VERSIONS.get(name, ((1, 11, 13), (18,)))

    def by_attribute(data, *, axes=None, keepdims):
        return _reduce(name, fn, data, list(axes or ()), keepdims, False)

    def by_input(data, axes=None, *, keepdims, noop_with_empty_axes):
        return _reduce(name, fn, data, host_ints(axes, f"{name}: axes"), keepdims, noop_with_empty_axes)

    for kernel, suffix in ((by_attribute, "attribute"), (by_input, "input")):
        kernel.__name__ = kernel.__qualname__ = f"{name.lower()}_axes_{suffix}"
    registry.kernel(name, since=with_attribute, types={"T": types})(by_attribute)
    registry.kernel(name, since=with_input, host_inputs=(1,), types={"T": types})(by_input)


for _name in _REDUCERS:
    _register(_name)


def _arg(name: str, pick) -> None:
    def kernel(data, *, axis, keepdims, select_last_index=0):
        xp = namespace(data)
        if not -data.ndim <= axis < data.ndim:
            raise InvalidArgument(f"{name}: axis {axis} is out of range for rank {data.ndim}")
        axis %= data.ndim
        if select_last_index:
            flipped = xp.flip(data, axis=axis)
            index = (data.shape[axis] - 1) - pick(xp, flipped, axis, keepdims)
        else:
            index = pick(xp, data, axis, keepdims)
        return xp.astype(index, xp.int64)

    kernel.__name__ = kernel.__qualname__ = name.lower()
    registry.kernel(name, since=(11,), types={"T": NUMBERS})(_without_last_index(kernel))
    registry.kernel(name, since=(12, 13), types={"T": NUMBERS})(kernel)


def _without_last_index(kernel):
    def legacy(data, *, axis, keepdims):
        return kernel(data, axis=axis, keepdims=keepdims)

    legacy.__name__ = legacy.__qualname__ = f"{kernel.__name__}_11"
    return legacy


_arg("ArgMax", lambda xp, x, axis, keepdims: xp.argmax(x, axis=axis, keepdims=bool(keepdims)))
_arg("ArgMin", lambda xp, x, axis, keepdims: xp.argmin(x, axis=axis, keepdims=bool(keepdims)))
