"""The CUDA provider's kernels, written against the array API standard.

Each kernel asks its inputs for their namespace (``array_api_compat.array_namespace``), so the
same function runs on CuPy arrays (cuBLAS behind ``matmul``), array-api-strict arrays (the tests'
stand-in for device memory) and numpy arrays.  Only what the standard defines is used: no
``as_strided``, no in-place ``out=``; convolutions are a sum of ``matmul``s over the kernel window.

Claimed types are float32, float64 and float16; everything else (and every op not here) stays
with the CPU provider, with copies placed by the core.  Shape tensors (Reshape's shape, Conv's
nothing) are ``host_inputs``: they arrive as numpy arrays, so reading them never syncs a device.
"""

from __future__ import annotations

import math

import numpy as np
from array_api_compat import array_namespace

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import KernelRegistry

registry = KernelRegistry("cuda")

FLOATS = ("tensor(float)", "tensor(double)", "tensor(float16)")
_T = {"T": FLOATS}


def _unary(op: str, since: tuple[int, ...], fn) -> None:
    def kernel(x):
        return fn(array_namespace(x), x)

    kernel.__name__ = kernel.__qualname__ = op.lower()
    registry.kernel(op, since=since, types=_T)(kernel)


_unary("Relu", (6, 13, 14), lambda xp, x: xp.maximum(x, xp.zeros_like(x)))
_unary("Sigmoid", (6, 13), lambda xp, x: 1 / (1 + xp.exp(-x)))
_unary("Tanh", (6, 13), lambda xp, x: xp.tanh(x))
_unary("Exp", (6, 13), lambda xp, x: xp.exp(x))
_unary("Log", (6, 13), lambda xp, x: xp.log(x))
_unary("Abs", (6, 13), lambda xp, x: xp.abs(x))
_unary("Neg", (6, 13), lambda xp, x: -x)
_unary("Sqrt", (6, 13), lambda xp, x: xp.sqrt(x))
_unary("Reciprocal", (6, 13), lambda xp, x: 1 / x)


def _binary(op: str, fn) -> None:
    def kernel(a, b):
        if a.dtype != b.dtype:
            raise InvalidArgument(f"{op}: input types differ ({a.dtype} and {b.dtype})")
        return fn(a, b)

    kernel.__name__ = kernel.__qualname__ = op.lower()
    registry.kernel(op, since=(7, 13, 14), types=_T)(kernel)


_binary("Add", lambda a, b: a + b)
_binary("Sub", lambda a, b: a - b)
_binary("Mul", lambda a, b: a * b)
_binary("Div", lambda a, b: a / b)


@registry.kernel("MatMul", since=(9, 13), types=_T)
def matmul(a, b):
    xp = array_namespace(a, b)
    if a.ndim == 1 and b.ndim == 1:
        return xp.sum(a * b)
    try:
        return xp.matmul(a, b)
    except ValueError as error:
        raise Fail(f"MatMul: shapes {a.shape} and {b.shape} do not match: {error}") from None


@registry.kernel("Gemm", since=(11, 13), types=_T)
def gemm(a, b, c=None, *, alpha, beta, transA, transB):
    xp = array_namespace(a, b)
    if a.ndim != 2 or b.ndim != 2:
        raise InvalidArgument(f"Gemm: A and B must be 2-D, got shapes {a.shape} and {b.shape}")
    a = xp.permute_dims(a, (1, 0)) if transA else a
    b = xp.permute_dims(b, (1, 0)) if transB else b
    y = xp.matmul(a, b)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        y = y + (c * beta if beta != 1.0 else c)
    return y


@registry.kernel("Softmax", since=(13,), types=_T)
def softmax(x, *, axis):
    xp = array_namespace(x)
    shifted = x - xp.max(x, axis=axis, keepdims=True)
    e = xp.exp(shifted)
    return e / xp.sum(e, axis=axis, keepdims=True)


@registry.kernel("LayerNormalization", since=(17,), types={"T": FLOATS, "U": ("tensor(float)",)})
def layer_norm(x, scale, bias=None, *, axis, epsilon, stash_type):
    if stash_type != 1:
        raise InvalidArgument(f"LayerNormalization: stash_type {stash_type} is not supported (only 1, float)")
    xp = array_namespace(x)
    start = axis if axis >= 0 else axis + x.ndim
    axes = tuple(range(start, x.ndim))
    half = getattr(xp, "float16", None)  # not in the array API standard
    wide = xp.astype(x, xp.float32) if half is not None and x.dtype == half else x
    mean = xp.mean(wide, axis=axes, keepdims=True)
    centred = wide - mean
    variance = xp.mean(centred * centred, axis=axes, keepdims=True)
    inv = 1 / xp.sqrt(variance + epsilon)
    y = xp.astype(centred * inv, x.dtype) * scale
    if bias is not None:
        y = y + bias
    return y, xp.astype(mean, xp.float32), xp.astype(inv, xp.float32)


@registry.kernel("Transpose", since=(13, 21, 23, 24, 25), types=_T)
def transpose(x, *, perm=None):
    xp = array_namespace(x)
    order = tuple(reversed(range(x.ndim))) if perm is None else tuple(int(p) for p in perm)
    if sorted(order) != list(range(x.ndim)):
        raise InvalidArgument(f"Transpose: perm {order} is not a permutation of {x.ndim} axes")
    return xp.permute_dims(x, order)


@registry.kernel("Reshape", since=(14, 19, 21, 23, 24, 25), host_inputs=(1,), types=_T)
def reshape(x, shape, *, allowzero):
    xp = array_namespace(x)
    target = [int(d) for d in np.asarray(shape).reshape(-1)]
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


@registry.kernel("Conv", since=(11, 22), types=_T)
def conv(x, w, b=None, *, auto_pad, dilations=None, group, kernel_shape=None, pads=None, strides=None):
    """2-D convolution as a sum over the kernel window of ``matmul``s of strided slices (no
    im2col buffer, which the standard cannot express without copies).  Other ranks, auto_pad and
    groups other than 1 are declined at run time with a clear error."""
    xp = array_namespace(x, w)
    if x.ndim != 4 or group != 1 or auto_pad not in ("NOTSET", ""):
        raise InvalidArgument(f"Conv: onnxplug-cuda runs 2-D, group-1, explicit-pad convolutions, got {x.shape}")
    n, channels, height, width = x.shape
    out_channels, _, kh, kw = w.shape
    sh, sw = strides or (1, 1)
    dh, dw = dilations or (1, 1)
    top, left, bottom, right = pads or (0, 0, 0, 0)
    if top or left or bottom or right:
        padded = xp.zeros((n, channels, height + top + bottom, width + left + right), dtype=x.dtype)
        padded[:, :, top : top + height, left : left + width] = x
        x = padded
    out_h = (x.shape[2] - dh * (kh - 1) - 1) // sh + 1
    out_w = (x.shape[3] - dw * (kw - 1) - 1) // sw + 1
    y = xp.zeros((n, out_h, out_w, out_channels), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            window = x[:, :, i * dh : i * dh + sh * (out_h - 1) + 1 : sh, j * dw : j * dw + sw * (out_w - 1) + 1 : sw]
            taps = xp.permute_dims(w[:, :, i, j], (1, 0))  # [C, M]
            y = y + xp.matmul(xp.permute_dims(window, (0, 2, 3, 1)), taps)
    y = xp.permute_dims(y, (0, 3, 1, 2))
    if b is not None:
        y = y + xp.reshape(b, (1, out_channels, 1, 1))
    return y
