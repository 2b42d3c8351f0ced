"""Shape manipulation: Reshape, Flatten, Identity, Constant."""

from __future__ import annotations

import numpy as np

from onnxplug.errors import InvalidArgument

from ._registry import kernel


def _reshape(x, shape, allowzero):
    target = [int(d) for d in shape]
    if not allowzero:
        target = [x.shape[i] if d == 0 and i < x.ndim else d for i, d in enumerate(target)]
    if target.count(-1) > 1:
        raise InvalidArgument(f"Reshape: more than one -1 in the requested shape {list(shape)}")
    try:
        return x.reshape(target)
    except ValueError:
        raise InvalidArgument(
            f"Reshape: the input tensor cannot be reshaped to the requested shape. "
            f"Input shape:{list(x.shape)}, requested shape:{list(shape)}"
        ) from None


@kernel("Reshape", since=(5, 13), host_inputs=(1,))
def reshape_5(x, shape):
    return _reshape(x, shape, 0)


@kernel("Reshape", since=(14, 19, 21, 23, 24, 25), host_inputs=(1,))
def reshape_14(x, shape, *, allowzero):
    return _reshape(x, shape, allowzero)


@kernel("Flatten", since=(1, 9, 11, 13, 21, 23, 24, 25))
def flatten(x, *, axis):
    axis = axis + x.ndim if axis < 0 else axis
    if not 0 <= axis <= x.ndim:
        raise InvalidArgument(f"Flatten: axis {axis} is out of range for rank {x.ndim}")
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    columns = int(np.prod(x.shape[axis:], dtype=np.int64))
    return x.reshape(rows, columns)


@kernel("Identity", since=(1, 13, 14, 16, 19, 21, 23, 24, 25))
def identity(x):
    return x


@kernel("Constant", since=(13, 19, 21, 23, 24, 25), factory=True)
def constant(ctx, *, value=None, value_float=None, value_floats=None, value_int=None, value_ints=None,
             value_string=None, value_strings=None, sparse_value=None):
    if value is not None:
        result = value
    elif value_float is not None:
        result = np.array(value_float, dtype=np.float32)
    elif value_floats is not None:
        result = np.array(value_floats, dtype=np.float32)
    elif value_int is not None:
        result = np.array(value_int, dtype=np.int64)
    elif value_ints is not None:
        result = np.array(value_ints, dtype=np.int64)
    elif value_string is not None:
        result = np.array(value_string, dtype=object)
    elif value_strings is not None:
        result = np.array(list(value_strings), dtype=object)
    else:
        raise InvalidArgument(f"{ctx.describe()}: Constant needs exactly one value attribute")
    return lambda: result
