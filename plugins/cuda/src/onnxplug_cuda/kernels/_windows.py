"""Window geometry shared by Conv and the pools: pads (explicit or auto_pad), output sizes
(ceil_mode), and the strided slices that visit every kernel position.

The standard has no ``as_strided``, so a windowed op is a loop over the kernel's positions: for
each offset one strided slice of the padded input holds that tap of every output window, and
the op folds those slices (``matmul`` and add for Conv, ``maximum`` for MaxPool, add for
AveragePool).  The loop has ``prod(kernel_shape)`` steps, each a whole-tensor operation.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

from onnxplug.errors import InvalidArgument


def geometry(
    op: str,
    spatial: Sequence[int],
    kernel: Sequence[int],
    *,
    auto_pad: str,
    pads: Sequence[int] | None,
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    ceil_mode: int = 0,
) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """``(begin_pads, end_pads, out_sizes, strides, dilations)`` for ``spatial`` input sizes.

    ``end_pads`` includes the extra room ceil_mode needs past the input and its explicit pads;
    the caller fills it like a pad (so windows there read only what the op ignores)."""
    rank = len(spatial)
    strides = list(strides or [1] * rank)
    dilations = list(dilations or [1] * rank)
    if len(kernel) != rank or len(strides) != rank or len(dilations) != rank:
        raise InvalidArgument(f"{op}: kernel_shape/strides/dilations must have {rank} entries")
    extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [math.ceil(n / s) for n, s in zip(spatial, strides)]
        total = [max(0, (o - 1) * s + e - n) for o, s, e, n in zip(out, strides, extent, spatial)]
        small = [t // 2 for t in total]
        begin = small if auto_pad == "SAME_UPPER" else [t - h for t, h in zip(total, small)]
        end = [t - b for t, b in zip(total, begin)]
        return begin, end, out, strides, dilations
    if auto_pad == "VALID":
        begin, end = [0] * rank, [0] * rank
    elif auto_pad in ("NOTSET", ""):
        pads = list(pads or [0] * (2 * rank))
        if len(pads) != 2 * rank:
            raise InvalidArgument(f"{op}: pads must have {2 * rank} entries, got {pads}")
        begin, end = pads[:rank], pads[rank:]
    else:
        raise InvalidArgument(f"{op}: unknown auto_pad {auto_pad!r}")
    out = []
    for n, b, e, x, s in zip(spatial, begin, end, extent, strides):
        room = n + b + e - x
        if room < 0:
            raise InvalidArgument(f"{op}: the window ({x}) is larger than the padded input ({n + b + e})")
        size = (math.ceil(room / s) if ceil_mode else room // s) + 1
        if ceil_mode and (size - 1) * s >= n + b:
            size -= 1  # the last window would start in the end padding: onnxruntime drops it
        out.append(size)
    end = [max(e, (o - 1) * s + x - n - b) for o, s, x, n, b, e in zip(out, strides, extent, spatial, begin, end)]
    return begin, end, out, strides, dilations


def pad_spatial(xp: Any, x: Any, begin: Sequence[int], end: Sequence[int], value: float) -> Any:
    """``x`` ([N, C, *spatial]) with ``value`` around its spatial dims."""
    if not any(begin) and not any(end):
        return x
    lead = tuple(x.shape[:2])
    spatial = tuple(x.shape[2:])
    shape = lead + tuple(n + b + e for n, b, e in zip(spatial, begin, end))
    padded = xp.full(shape, value, dtype=x.dtype)
    inner = (slice(None), slice(None)) + tuple(slice(b, b + n) for b, n in zip(begin, spatial))
    padded[inner] = x
    return padded


def taps(
    kernel: Sequence[int], out: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> Iterator[tuple[tuple[int, ...], tuple[slice, ...]]]:
    """For each kernel position, its index and the spatial slices of the padded input that hold
    that tap of every output window."""
    for position in itertools.product(*(range(k) for k in kernel)):
        yield (
            position,
            tuple(slice(p * d, p * d + s * (o - 1) + 1, s) for p, d, s, o in zip(position, dilations, strides, out)),
        )
