"""Shape and data-movement ops without host syncs.

Every shape-like input (Reshape's shape, Slice's starts/ends/axes/steps, Split's split, Pad's
pads, Tile's repeats, Expand's shape, Squeeze/Unsqueeze's axes) is a ``host_input``: the core
hands it over as a numpy array, so reading it never waits on the device.  Data stays on the
device; Gather's indices too (the standard's ``take``).

Shape and Size are not claimed: their outputs are host data that the next shape op reads on the
host anyway, and the CPU provider answers them from the value's shape without touching it.
ConstantOfShape is not claimed either: it has no device input to take a namespace from (a
kernel does not know its provider's backend), so it runs on the CPU and the core copies its
output to the device where a claimed node reads it.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import InvalidArgument

from ._common import ALL, declines, host_ints, namespace, registry

_T = {"T": ALL}
_LATEST = (13, 21, 23, 24, 25)


def _axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise InvalidArgument(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank


@registry.kernel("Transpose", since=(1, *_LATEST), types=_T)
def transpose(x, *, perm=None):
    xp = namespace(x)
    order = tuple(reversed(range(x.ndim))) if perm is None else tuple(int(p) for p in perm)
    if sorted(order) != list(range(x.ndim)):
        raise InvalidArgument(f"Transpose: perm {order} is not a permutation of {x.ndim} axes")
    return xp.permute_dims(x, order)


@registry.kernel("Reshape", since=(14, 19, 21, 23, 24, 25), host_inputs=(1,), types=_T)
def reshape(x, shape, *, allowzero):
    xp = namespace(x)
    target = host_ints(shape, "Reshape: shape")
    if not allowzero:
        target = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(target)]
    if target.count(-1) > 1:
        raise InvalidArgument(f"Reshape: more than one -1 in {target}")
    known = math.prod(d for d in target if d != -1)
    size = math.prod(x.shape)
    if -1 in target:
        if known == 0 or size % known:
            raise InvalidArgument(f"Reshape: cannot reshape {tuple(x.shape)} to {target}")
        target[target.index(-1)] = size // known
    if math.prod(target) != size:
        raise InvalidArgument(f"Reshape: cannot reshape {tuple(x.shape)} to {target}")
    return xp.reshape(x, tuple(target))


@registry.kernel("Reshape", since=(5, 13), host_inputs=(1,), types=_T)
def reshape_5(x, shape):
    return reshape(x, shape, allowzero=0)


@registry.kernel("Flatten", since=(1, 9, 11, *_LATEST), types=_T)
def flatten(x, *, axis):
    xp = namespace(x)
    start = axis + x.ndim if axis < 0 else axis
    if not 0 <= start <= x.ndim:
        raise InvalidArgument(f"Flatten: axis {axis} is out of range for rank {x.ndim}")
    return xp.reshape(x, (math.prod(x.shape[:start]), math.prod(x.shape[start:])))


def _squeeze(x, axes):
    xp = namespace(x)
    if not axes:
        axes = [i for i, n in enumerate(x.shape) if n == 1]
    axes = sorted({_axis("Squeeze", a, x.ndim) for a in axes})
    if any(x.shape[a] != 1 for a in axes):
        raise InvalidArgument(f"Squeeze: axes {axes} of shape {tuple(x.shape)} are not all 1")
    return xp.reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in axes))


def _unsqueeze(x, axes):
    xp = namespace(x)
    rank = x.ndim + len(axes)
    placed = sorted({_axis("Unsqueeze", a, rank) for a in axes})
    if len(placed) != len(axes):
        raise InvalidArgument(f"Unsqueeze: repeated axes in {axes}")
    dims = iter(x.shape)
    return xp.reshape(x, tuple(1 if i in placed else next(dims) for i in range(rank)))


@registry.kernel("Squeeze", since=(1, 11), types=_T)
def squeeze_11(data, *, axes=None):
    return _squeeze(data, list(axes or ()))


@registry.kernel("Squeeze", since=_LATEST, host_inputs=(1,), types=_T)
def squeeze(data, axes=None):
    return _squeeze(data, host_ints(axes, "Squeeze: axes"))


@registry.kernel("Unsqueeze", since=(1, 11), types=_T)
def unsqueeze_11(data, *, axes):
    return _unsqueeze(data, list(axes))


@registry.kernel("Unsqueeze", since=_LATEST, host_inputs=(1,), types=_T)
def unsqueeze(data, axes):
    return _unsqueeze(data, host_ints(axes, "Unsqueeze: axes"))


@registry.kernel("Concat", since=(4, 11, 13), types=_T)
def concat(*inputs, axis):
    xp = namespace(*inputs)
    if len({a.dtype for a in inputs}) > 1:
        raise InvalidArgument(f"Concat: input types differ ({sorted({str(a.dtype) for a in inputs})})")
    return xp.concat(list(inputs), axis=_axis("Concat", axis, inputs[0].ndim))


def _split(x, axis, sizes, count):
    axis = _axis("Split", axis, x.ndim)
    length = x.shape[axis]
    if not sizes:
        chunk = math.ceil(length / count) if count else length
        sizes = [min(chunk, max(0, length - i * chunk)) for i in range(count)]
    if sum(sizes) != length or any(s < 0 for s in sizes):
        raise InvalidArgument(f"Split: sizes {sizes} do not add up to the axis length {length}")
    outputs, start = [], 0
    for size in sizes:
        where = [slice(None)] * x.ndim
        where[axis] = slice(start, start + size)
        outputs.append(x[tuple(where)])
        start += size
    return tuple(outputs)


@registry.kernel("Split", since=(11,), factory=True, types=_T)
def split_11(ctx, *, axis, split=None):
    count, sizes = ctx.num_outputs, list(split or ())
    return lambda x: _split(x, axis, sizes, count)


@registry.kernel("Split", since=(13,), factory=True, host_inputs=(1,), types=_T)
def split_13(ctx, *, axis):
    count = ctx.num_outputs
    return lambda x, split=None: _split(x, axis, host_ints(split, "Split: split"), count)


@registry.kernel("Split", since=(18,), factory=True, host_inputs=(1,), types=_T)
def split_18(ctx, *, axis, num_outputs=None):
    count = ctx.num_outputs if num_outputs is None else int(num_outputs)
    return lambda x, split=None: _split(x, axis, host_ints(split, "Split: split"), count)


def _clamped_slice(start: int, end: int, step: int, size: int) -> slice:
    """ONNX's clamping, which differs from Python's for negative steps (end -1 means "before
    index 0", not "the last element")."""
    start = start + size if start < 0 else start
    end = end + size if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), size), min(max(end, 0), size)
        return slice(start, end, step)
    start, end = min(max(start, 0), size - 1), min(max(end, -1), size - 1)
    return slice(start, None if end < 0 else end, step)


@registry.kernel("Slice", since=(10, 11, 13), host_inputs=(1, 2, 3, 4), types=_T)
def slice_(data, starts, ends, axes=None, steps=None):
    start_list, end_list = host_ints(starts, "Slice: starts"), host_ints(ends, "Slice: ends")
    axis_list = host_ints(axes, "Slice: axes") if axes is not None else list(range(len(start_list)))
    step_list = host_ints(steps, "Slice: steps") if steps is not None else [1] * len(start_list)
    if not len(start_list) == len(end_list) == len(axis_list) == len(step_list):
        raise InvalidArgument("Slice: starts, ends, axes and steps must have the same length")
    where = [slice(None)] * data.ndim
    for start, end, axis, step in zip(start_list, end_list, axis_list, step_list):
        if step == 0:
            raise InvalidArgument("Slice: a step is 0")
        axis = _axis("Slice", axis, data.ndim)
        where[axis] = _clamped_slice(start, end, step, data.shape[axis])
    return data[tuple(where)]


@registry.kernel("Expand", since=(8, 13), host_inputs=(1,), types=_T)
def expand(x, shape):
    xp = namespace(x)
    target = tuple(host_ints(shape, "Expand: shape"))
    try:
        out = xp.broadcast_shapes(tuple(x.shape), target)
    except ValueError:
        raise InvalidArgument(f"Expand: shape {target} does not broadcast with {tuple(x.shape)}") from None
    return xp.broadcast_to(x, out)


@registry.kernel("Tile", since=(6, 13), host_inputs=(1,), types=_T)
def tile(x, repeats):
    counts = host_ints(repeats, "Tile: repeats")
    if len(counts) != x.ndim or any(c < 0 for c in counts):
        raise InvalidArgument(f"Tile: repeats {counts} must be {x.ndim} non-negative counts")
    return namespace(x).tile(x, tuple(counts))


@registry.kernel("Gather", since=(1, 11, 13), types={"T": ALL, "Tind": ("tensor(int32)", "tensor(int64)")})
def gather(data, indices, *, axis):
    """Negative indices are wrapped on the device; range checking would need a host sync."""
    xp = namespace(data, indices)
    axis = _axis("Gather", axis, data.ndim)
    flat = xp.reshape(indices, (-1,))
    flat = xp.where(flat < 0, flat + data.shape[axis], flat)
    taken = xp.take(data, flat, axis=axis)
    return xp.reshape(taken, (*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :]))


@registry.kernel("GatherElements", since=(11, 13), types={"T": ALL, "Tind": ("tensor(int32)", "tensor(int64)")})
def gather_elements(data, indices, *, axis):
    """The standard's ``take_along_axis``; ONNX lets the index tensor be smaller than the data on
    the other axes, so the data is first cut to the index tensor's extent there."""
    xp = namespace(data, indices)
    if data.ndim != indices.ndim:
        raise InvalidArgument(f"GatherElements: data {data.shape} and indices {indices.shape} differ in rank")
    axis = _axis("GatherElements", axis, data.ndim)
    if any(i > d for k, (i, d) in enumerate(zip(indices.shape, data.shape)) if k != axis):
        raise InvalidArgument(f"GatherElements: indices {indices.shape} exceed data {data.shape} off axis {axis}")
    region = tuple(slice(None) if k == axis else slice(0, n) for k, n in enumerate(indices.shape))
    wrapped = xp.where(indices < 0, indices + data.shape[axis], indices)
    return xp.take_along_axis(data[region], wrapped, axis=axis)


def _pad_axis(xp, x, axis, before, after, mode, value):
    if before < 0 or after < 0:  # negative pads crop
        where = [slice(None)] * x.ndim
        where[axis] = slice(-before if before < 0 else 0, x.shape[axis] + after if after < 0 else None)
        x = x[tuple(where)]
        before, after = max(before, 0), max(after, 0)
    if not before and not after:
        return x
    size = x.shape[axis]

    def part(start, stop):
        where = [slice(None)] * x.ndim
        where[axis] = slice(start, stop)
        return x[tuple(where)]

    if mode == "constant":
        shape = list(x.shape)
        lead, tail = list(shape), list(shape)
        lead[axis], tail[axis] = before, after
        pieces = [xp.full(tuple(lead), value, dtype=x.dtype), x, xp.full(tuple(tail), value, dtype=x.dtype)]
    elif mode == "edge":
        if size == 0:
            raise InvalidArgument("Pad: edge mode cannot pad an empty axis")
        pieces = [part(0, 1)] * before + [x] + [part(size - 1, size)] * after
    else:  # reflect
        if before >= size or after >= size:
            raise InvalidArgument(f"Pad: reflect pads ({before}, {after}) must be smaller than the axis ({size})")
        pieces = [xp.flip(part(1, before + 1), axis=axis), x, xp.flip(part(size - 1 - after, size - 1), axis=axis)]
    return xp.concat(pieces, axis=axis)


@registry.kernel("Pad", since=(11, 13, 18, 19, 21, 23, 24, 25), host_inputs=(1, 2, 3), types=_T)
def pad(data, pads, constant_value=None, axes=None, *, mode):
    xp = namespace(data)
    amounts = host_ints(pads, "Pad: pads")
    axis_list = host_ints(axes, "Pad: axes") if axes is not None else list(range(data.ndim))
    if len(amounts) != 2 * len(axis_list):
        raise InvalidArgument(f"Pad: {len(amounts)} pads for {len(axis_list)} axes (expected twice as many)")
    if mode not in ("constant", "reflect", "edge"):
        raise InvalidArgument(f"Pad: mode {mode!r} is not supported by onnxplug-cuda")
    value = 0
    if constant_value is not None and mode == "constant":
        scalar = np.asarray(constant_value).reshape(-1)
        value = scalar[0].item() if scalar.size else 0
    y = data
    count = len(axis_list)
    for i, axis in enumerate(axis_list):
        y = _pad_axis(xp, y, _axis("Pad", axis, data.ndim), amounts[i], amounts[count + i], mode, value)
    return y


@declines("Pad")
def _pad_modes(node):
    mode = node.attributes.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        return f"Pad mode {mode!r} is left to the CPU provider"
    return None
