"""MatMul, Gemm and Conv: everything ends in the namespace's ``matmul`` (cuBLAS under CuPy)."""

from __future__ import annotations

from onnxplug.errors import Fail, InvalidArgument

from ._common import FLOATS, declines, namespace, registry, wide_float
from ._windows import geometry, pad_spatial, taps

_T = {"T": FLOATS}


@registry.kernel("MatMul", since=(1, 9, 13), types=_T)
def matmul(a, b):
    xp = namespace(a, b)
    if a.ndim == 1 and b.ndim == 1:
        return xp.sum(a * b)
    try:
        return xp.matmul(a, b)
    except ValueError as error:
        raise Fail(f"MatMul: shapes {a.shape} and {b.shape} do not match: {error}") from None


@registry.kernel("Gemm", since=(7, 9, 11, 13), types=_T)  # 7 and 9: C required, same maths
def gemm(a, b, c=None, *, alpha, beta, transA, transB):
    xp = namespace(a, b)
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


@registry.kernel("Conv", since=(1, 11, 22), types=_T)
def conv(x, w, b=None, *, auto_pad, dilations=None, group, kernel_shape=None, pads=None, strides=None):
    """N-d convolution as a sum over the kernel window of ``matmul``s of strided slices (an
    im2col buffer is the same products with a copy the standard cannot avoid); groups are
    separate sums over their channel blocks, concatenated.  float16 accumulates in float32 (a
    sum of many float16 products drifts past the node cases' tolerance)."""
    xp = namespace(x, w, b)
    dtype = x.dtype
    x, w = wide_float(xp, x), wide_float(xp, w)
    b = None if b is None else wide_float(xp, b)
    if x.ndim < 3 or w.ndim != x.ndim:
        raise InvalidArgument(f"Conv: input {x.shape} and weights {w.shape} must both be [N, C, *spatial]")
    channels, out_channels = x.shape[1], w.shape[0]
    if channels % group or out_channels % group or w.shape[1] * group != channels:
        raise InvalidArgument(f"Conv: {channels} input channels, weights {w.shape} and group {group} do not match")
    kernel = tuple(kernel_shape) if kernel_shape else tuple(w.shape[2:])
    begin, end, out, strides, dilations = geometry(
        "Conv", x.shape[2:], kernel, auto_pad=auto_pad, pads=pads, strides=strides, dilations=dilations
    )
    x = pad_spatial(xp, x, begin, end, 0.0)
    rank = x.ndim
    last = (0, *range(2, rank), 1)  # [N, C, *S] -> [N, *S, C]
    per_in, per_out = channels // group, out_channels // group
    blocks = []
    for g in range(group):
        xg = x[:, g * per_in : (g + 1) * per_in, ...] if group > 1 else x
        wg = w[g * per_out : (g + 1) * per_out, ...] if group > 1 else w
        y = xp.zeros((x.shape[0], *out, per_out), dtype=x.dtype)
        for position, spatial in taps(kernel, out, strides, dilations):
            window = xg[(slice(None), slice(None), *spatial)]
            tap = xp.permute_dims(wg[(slice(None), slice(None), *position)], (1, 0))  # [C/g, M/g]
            y = y + xp.matmul(xp.permute_dims(window, last), tap)
        blocks.append(y)
    y = blocks[0] if group == 1 else xp.concat(blocks, axis=-1)
    y = xp.permute_dims(y, (0, rank - 1, *range(1, rank - 1)))
    if b is not None:
        y = y + xp.reshape(b, (1, out_channels) + (1,) * (rank - 2))
    return y if y.dtype == dtype else xp.astype(y, dtype)


@declines("Conv")
def _conv_shapes(node):
    shape = node.input_shapes[0]
    if shape is None or len(shape) < 3:
        return "Conv needs a ranked [N, C, *spatial] input to run on the CUDA kernels"
    return None
