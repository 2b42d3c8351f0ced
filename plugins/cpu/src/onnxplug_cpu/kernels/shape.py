"""Shape manipulation that moves no values: Reshape, Flatten, Identity, Shape, Size, Squeeze,
Unsqueeze, Transpose, Concat, Split, DepthToSpace, SpaceToDepth.

Shape-like inputs (Reshape's shape, Squeeze/Unsqueeze axes, Split sizes) are small host tensors
and are registered as ``host_inputs``.  The axis helpers here are shared by the other shape,
indexing and reduction modules so that every kernel reports a bad axis the same way.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._registry import kernel

_LATEST = (21, 23, 24, 25)


def normalize_axis(axis, rank: int, op: str, what: str = "axis") -> int:
    """``axis`` in ``[0, rank)``, counting negative values from the back."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise InvalidArgument(f"{op}: {what} {axis} is out of range [{-rank}, {rank - 1}] for rank {rank}")
    return axis + rank if axis < 0 else axis


def normalize_axes(axes, rank: int, op: str, what: str = "axes") -> tuple[int, ...]:
    """Distinct axes in ``[0, rank)``; a repeated axis is an error."""
    result = tuple(normalize_axis(a, rank, op, what) for a in axes)
    if len(set(result)) != len(result):
        raise InvalidArgument(f"{op}: {what} {[int(a) for a in axes]} repeat an axis")
    return result


def int_values(tensor) -> list[int]:
    """A small shape-like tensor as a list of Python ints (no float round trip)."""
    return [int(v) for v in np.asarray(tensor).reshape(-1).tolist()]


def _reshape(x, shape, allowzero):
    # Fail, as onnxruntime raises for a shape that does not fit (not InvalidArgument).
    requested = int_values(shape)
    target = list(requested)
    if not allowzero:
        # 0 copies the input's dimension; past the input's rank it is an error below.
        for i, d in enumerate(target):
            if d == 0:
                if i >= x.ndim:
                    raise Fail(
                        f"Reshape: 0 at position {i} of the requested shape {requested} has no "
                        f"input dimension to copy (input shape {list(x.shape)})"
                    )
                target[i] = x.shape[i]
    elif 0 in target and -1 in target:
        raise Fail(f"Reshape: with allowzero=1 the shape {requested} cannot hold both 0 and -1")
    if target.count(-1) > 1:
        raise Fail(f"Reshape: more than one -1 in the requested shape {requested}")
    if any(d < -1 for d in target):
        raise Fail(f"Reshape: negative dimension in the requested shape {requested}")
    try:
        return x.reshape(target)
    except ValueError:
        raise Fail(
            f"Reshape: the input tensor cannot be reshaped to the requested shape. "
            f"Input shape:{list(x.shape)}, requested shape:{requested}"
        ) from None


@kernel("Reshape", since=(1,))
def reshape_1(x, *, shape=None, consumed_inputs=None):
    return _reshape(x, shape or (), 0)


@kernel("Reshape", since=(5, 13), host_inputs=(1,), factory=True)
def reshape_5(ctx):
    return _reshape_kernel(ctx.constant(1), 0)


@kernel("Reshape", since=(14, 19) + _LATEST, host_inputs=(1,), factory=True)
def reshape_14(ctx, *, allowzero):
    return _reshape_kernel(ctx.constant(1), allowzero)


def _reshape_kernel(constant_shape, allowzero):
    """Reshape's call.  A constant shape (every exported model's) free of zeros is read once: a
    run then calls ``x.reshape`` alone (reading the shape tensor and checking it again was ~3 µs
    a call, ShuffleNet's channel shuffles 32 of them a run); a shape that does not fit falls to
    :func:`_reshape` for its error."""
    if constant_shape is None:
        return lambda x, shape: _reshape(x, shape, allowzero)
    target = tuple(int_values(constant_shape))
    if 0 in target or target.count(-1) > 1 or any(d < -1 for d in target):
        return lambda x, shape: _reshape(x, shape, allowzero)

    def run(x, shape):
        try:
            return x.reshape(target)
        except ValueError:
            return _reshape(x, shape, allowzero)  # raises, naming both shapes

    return run


@kernel("Flatten", since=(1, 9, 11, 13) + _LATEST)
def flatten(x, *, axis):
    if not -x.ndim <= axis <= x.ndim:
        raise InvalidArgument(f"Flatten: axis {axis} is out of range [{-x.ndim}, {x.ndim}]")
    axis = axis + x.ndim if axis < 0 else axis
    rows = math.prod(x.shape[:axis])
    columns = math.prod(x.shape[axis:])
    return x.reshape(rows, columns)


@kernel("Identity", since=(1, 13, 14, 16, 19) + _LATEST)
def identity(x):
    # Tensors, sequences (lists) and optionals (None) pass through unchanged; nothing mutates them.
    return x


@kernel("Shape", since=(1, 13))
def shape_1(x):
    return np.array(x.shape, dtype=np.int64)


@kernel("Shape", since=(15, 19) + _LATEST)
def shape_15(x, *, start, end=None):
    rank = x.ndim
    # start/end are clamped to [0, rank] after adding rank to negative values, per the spec.
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = rank if end is None else end
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return np.array(x.shape[start:end], dtype=np.int64)


@kernel("Size", since=(1, 13, 19) + _LATEST)
def size(x):
    return np.array(x.size, dtype=np.int64)


@kernel("Squeeze", since=(1, 11))
def squeeze_1(x, *, axes=None):
    return _squeeze(x, axes)


@kernel("Squeeze", since=(13,) + _LATEST, host_inputs=(1,))
def squeeze_13(x, axes=None):
    return _squeeze(x, None if axes is None else int_values(axes))


def _squeeze(x, axes):
    if axes is None:
        return x.reshape([d for d in x.shape if d != 1])
    axes = normalize_axes(axes, x.ndim, "Squeeze")
    for a in axes:
        if x.shape[a] != 1:
            raise Fail(f"Squeeze: dimension {a} of shape {list(x.shape)} is not 1")  # onnxruntime's class
    return x.reshape([d for i, d in enumerate(x.shape) if i not in axes])


@kernel("Unsqueeze", since=(1, 11))
def unsqueeze_1(x, *, axes):
    return _unsqueeze(x, axes)


@kernel("Unsqueeze", since=(13,) + _LATEST, host_inputs=(1,))
def unsqueeze_13(x, axes):
    return _unsqueeze(x, int_values(axes))


def _unsqueeze(x, axes):
    rank = x.ndim + len(axes)
    axes = normalize_axes(axes, rank, "Unsqueeze")
    dims = iter(x.shape)
    return x.reshape([1 if i in axes else next(dims) for i in range(rank)])


@kernel("Transpose", since=(1, 13) + _LATEST)
def transpose(x, *, perm=None):
    if perm is None:
        return np.transpose(x)
    if sorted(perm) != list(range(x.ndim)):
        raise InvalidArgument(f"Transpose: perm {list(perm)} is not a permutation of the {x.ndim} axes")
    return np.transpose(x, perm)


def _same_dtypes(op, arrays):
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) > 1:
        raise InvalidArgument(f"{op}: inputs have different types {sorted(str(d) for d in dtypes)}")


@kernel("Concat", since=(1,))
def concat_1(*inputs, axis=None):
    return _concat(inputs, 1 if axis is None else axis)


@kernel("Concat", since=(4, 11, 13))
def concat_4(*inputs, axis):
    return _concat(inputs, axis)


def _concat(inputs, axis):
    if not inputs:
        raise InvalidArgument("Concat: needs at least one input")
    _same_dtypes("Concat", inputs)
    rank = inputs[0].ndim
    axis = normalize_axis(axis, rank, "Concat")
    outside = inputs[0].shape[:axis] + inputs[0].shape[axis + 1 :]
    for i, a in enumerate(inputs):
        if a.ndim != rank or a.shape[:axis] + a.shape[axis + 1 :] != outside:
            raise Fail(  # onnxruntime's class for inputs that do not fit
                f"Concat: input {i} has shape {list(a.shape)}, which does not match "
                f"{list(inputs[0].shape)} outside axis {axis}"
            )
    # numpy's copy, also inside a team run: split over the team (a region per input) it measured
    # slower on every CNN here (YOLO's concatenations 116 against 76 µs a run, DenseNet's 991
    # against 873; docs/benchmarks.md, eighth session)
    return np.concatenate(inputs, axis=axis)


def _split(x, axis, sizes, num_outputs, *, uneven=False):
    axis = normalize_axis(axis, x.ndim, "Split")
    length = x.shape[axis]
    if sizes is None:
        if uneven:
            # num_outputs: equal chunks of ceil(length / n), the last one smaller.
            chunk = -(-length // num_outputs)
            sizes = [min(chunk, max(length - i * chunk, 0)) for i in range(num_outputs)]
        else:
            if length % num_outputs:
                raise InvalidArgument(
                    f"Split: dimension {axis} of length {length} cannot be split evenly into {num_outputs} outputs"
                )
            sizes = [length // num_outputs] * num_outputs
    sizes = [int(s) for s in sizes]
    if any(s < 0 for s in sizes) or sum(sizes) != length:
        raise InvalidArgument(f"Split: split sizes {sizes} do not add up to dimension {axis} of length {length}")
    if len(sizes) != num_outputs:
        raise InvalidArgument(f"Split: {len(sizes)} split sizes {sizes} for {num_outputs} outputs")
    bounds = np.cumsum([0] + sizes).tolist()
    index = [slice(None)] * x.ndim
    outputs = []
    for start, stop in zip(bounds[:-1], bounds[1:]):
        index[axis] = slice(start, stop)
        outputs.append(x[tuple(index)])
    return tuple(outputs)


@kernel("Split", since=(1,), factory=True, host_inputs=(1,))
def split_1(ctx, *, axis=None, split=None):
    count = ctx.num_outputs
    return lambda x, sizes=None: _split(x, axis or 0, int_values(sizes) if sizes is not None else split, count)


@kernel("Split", since=(2, 11), factory=True)
def split_2(ctx, *, axis, split=None):
    count = ctx.num_outputs
    return lambda x: _split(x, axis, split, count)


@kernel("Split", since=(13,), factory=True, host_inputs=(1,))
def split_13(ctx, *, axis):
    count = ctx.num_outputs
    return lambda x, sizes=None: _split(x, axis, None if sizes is None else int_values(sizes), count)


@kernel("Split", since=(18,), factory=True, host_inputs=(1,))
def split_18(ctx, *, axis, num_outputs=None):
    count = ctx.num_outputs
    if num_outputs is not None and num_outputs != count:
        raise InvalidArgument(f"{ctx.describe()}: num_outputs={num_outputs} but the node has {count} outputs")

    def run(x, sizes=None):
        if sizes is not None:
            if num_outputs is not None:
                raise InvalidArgument("Split: give either the 'split' input or num_outputs, not both")
            return _split(x, axis, int_values(sizes), count)
        return _split(x, axis, None, count, uneven=num_outputs is not None)

    return run


def _check_blocks(x, blocksize, op):
    if x.ndim != 4:
        raise InvalidArgument(f"{op}: input must be 4-D (N, C, H, W), got shape {list(x.shape)}")
    if blocksize <= 0:
        raise InvalidArgument(f"{op}: blocksize {blocksize} must be positive")


def _depth_to_space(x, blocksize, mode):
    _check_blocks(x, blocksize, "DepthToSpace")
    b, c, h, w = x.shape
    if c % (blocksize * blocksize):
        raise InvalidArgument(f"DepthToSpace: channels {c} are not divisible by blocksize^2 = {blocksize**2}")
    depth = c // (blocksize * blocksize)
    if mode == "DCR":
        tmp = x.reshape(b, blocksize, blocksize, depth, h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        tmp = x.reshape(b, depth, blocksize, blocksize, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise InvalidArgument(f"DepthToSpace: mode {mode!r} is not DCR or CRD")
    return tmp.reshape(b, depth, h * blocksize, w * blocksize)


@kernel("DepthToSpace", since=(1,))
def depth_to_space_1(x, *, blocksize):
    return _depth_to_space(x, blocksize, "DCR")


@kernel("DepthToSpace", since=(11, 13, 28))
def depth_to_space_11(x, *, blocksize, mode):
    return _depth_to_space(x, blocksize, mode)


def _space_to_depth(x, blocksize, mode):
    _check_blocks(x, blocksize, "SpaceToDepth")
    b, c, h, w = x.shape
    if h % blocksize or w % blocksize:
        raise InvalidArgument(f"SpaceToDepth: spatial shape {[h, w]} is not divisible by blocksize {blocksize}")
    tmp = x.reshape(b, c, h // blocksize, blocksize, w // blocksize, blocksize)
    if mode == "DCR":
        tmp = tmp.transpose(0, 3, 5, 1, 2, 4)
    elif mode == "CRD":
        tmp = tmp.transpose(0, 1, 3, 5, 2, 4)
    else:
        raise InvalidArgument(f"SpaceToDepth: mode {mode!r} is not DCR or CRD")
    return tmp.reshape(b, c * blocksize * blocksize, h // blocksize, w // blocksize)


@kernel("SpaceToDepth", since=(1, 13))
def space_to_depth_1(x, *, blocksize):
    return _space_to_depth(x, blocksize, "DCR")


@kernel("SpaceToDepth", since=(28,))
def space_to_depth_28(x, *, blocksize, mode):
    return _space_to_depth(x, blocksize, mode)
