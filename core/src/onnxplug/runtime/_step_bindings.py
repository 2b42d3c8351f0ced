"""How a segment (``_segments``) binds each of its steps: a kernel's own ``bind``, a numpy ufunc
with ``out=``, a Concat's join as the copies it still needs, and a kernel that declined as a plain
call whose result is copied into place."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import Fail
from ..kernels import Binding, Scratch

__all__ = ["bind_kernel", "into_place", "is_ufunc", "join_binding"]


def is_ufunc(call: Any) -> bool:
    """Whether ``call`` is a numpy ufunc of one output (bound as itself with ``out=``)."""
    return type(call) is np.ufunc and call.nout == 1


def join_binding(regions: Sequence[tuple], copies: Sequence[int]) -> Binding | None:
    """A Concat's bound call over its array: the inputs numbered in ``copies`` (those not written
    in place) copied into their ``regions``; ``None`` where there are none."""
    if not copies:
        return None
    places = tuple((number, regions[number]) for number in copies)

    def join(output: np.ndarray, *inputs: np.ndarray) -> None:
        for number, region in places:
            output[region] = inputs[number]

    return Binding(join)


def bind_kernel(kernel: Any, inputs: tuple, output: np.ndarray, scratch: Scratch) -> Binding | None:
    """``kernel``'s binding for these arrays, ``None`` where it declines (or fails to bind)."""
    if is_ufunc(kernel):
        return Binding(functools.partial(_ufunc_into, kernel))
    try:
        binding = kernel.bind(inputs, output, scratch)
    except Exception:  # noqa: BLE001 - a kernel that fails to bind runs plain
        return None
    return binding if isinstance(binding, Binding) else None


def into_place(kernel: Any, single: bool) -> Binding:
    """The bound call of a step whose kernel declined to bind: the kernel called as the plan's
    loop calls it, its result copied into the step's planned array (never kept: a result may be
    a view of an input, whose buffer the segment reuses).  A kernel that returns another shape
    than it did for the same input shapes is an error of its own."""

    def call(output: np.ndarray, *inputs: Any) -> None:
        result = kernel(*inputs)
        if not single:  # its other outputs are not used (bindable)
            result = result[0]
        if result is output:
            return
        if type(result) is not np.ndarray or result.shape != output.shape or result.dtype != output.dtype:
            made = getattr(result, "shape", type(result).__name__), getattr(result, "dtype", "")
            raise Fail(
                f"the kernel returned {made[0]} {made[1]} where, for the same input shapes, it "
                f"returned {output.shape} {output.dtype} before"
            )
        np.copyto(output, result)

    return Binding(call)


def _ufunc_into(ufunc: np.ufunc, output: np.ndarray, *inputs: np.ndarray) -> None:
    """A ufunc kernel's bound call: the recorded output's shape and type are what ``ufunc``
    returned for these inputs, so ``out=`` selects the same loop and gives the same bits."""
    ufunc(*inputs, out=output)
