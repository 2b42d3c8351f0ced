"""MatMul, Gemm, Conv (1-D and 2-D, grouped), pooling and inference BatchNormalization.

Geometry (output sizes, pads from ``auto_pad``, ``ceil_mode``) is computed here on the host
and handed to the C kernels as an int32 array; the arithmetic runs in wasm.
"""

from __future__ import annotations

import math

import numpy as np

from onnxplug.errors import InvalidArgument

from ._common import (
    K_BATCHNORM,
    K_CONV2D,
    K_MATMUL,
    K_MATMUL_NT,
    K_POOL2D,
    broadcast_strides,
    contiguous_strides,
    copy,
    memory_of,
    registry,
)
from .kernels_elementwise import ADD, AFFINE, binary, unary
from .memory import PARAMS_ARG, WasmTensor


def matmul_tensors(a: WasmTensor, b: WasmTensor, op: str = "MatMul") -> WasmTensor:
    memory = memory_of(op, a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise InvalidArgument(f"{op}: inputs must have at least one dimension, got {list(a.shape)}, {list(b.shape)}")
    a2 = a.reshape((1, a.shape[0])) if a.ndim == 1 else a
    b2 = b.reshape((b.shape[0], 1)) if b.ndim == 1 else b
    m, k = a2.shape[-2:]
    k2, n = b2.shape[-2:]
    if k != k2:
        raise InvalidArgument(f"{op}: shapes {list(a.shape)} and {list(b.shape)} do not match (K {k} vs {k2})")
    try:
        batch = tuple(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]))
    except ValueError:
        raise InvalidArgument(
            f"{op}: batch dimensions of {list(a.shape)} and {list(b.shape)} do not broadcast"
        ) from None
    count = math.prod(batch)
    a_stride = _batch_stride(memory, a2, batch, op)
    b_stride = _batch_stride(memory, b2, batch, op)
    a2, a_stride = a_stride
    b2, b_stride = b_stride
    out = memory.tensor((*batch, m, n), np.float32, f"{op}'s output")
    if out.size:
        memory.call(K_MATMUL, count, m, n, k, a2.offset, a_stride, b2.offset, b_stride, out.offset)
    shape = list(out.shape)
    if b.ndim == 1:
        del shape[-1]
    if a.ndim == 1:
        del shape[-2 if b.ndim != 1 else -1]
    return out.reshape(shape)


def _batch_stride(memory, x: WasmTensor, batch: tuple[int, ...], op: str) -> tuple[WasmTensor, int]:
    """``x`` and the element stride between its matrices over ``batch``: its own when it has
    the whole batch, 0 when it has one matrix, else a broadcast copy."""
    matrix = x.shape[-2] * x.shape[-1]
    own = x.shape[:-2]
    if math.prod(own) == 1:
        return x, 0
    if tuple(own) == batch:
        return x, matrix
    shape = (*batch, *x.shape[-2:])
    full = memory.tensor(shape, np.float32, f"{op}'s broadcast operand")
    copy(memory, x, broadcast_strides(x.shape, shape), full, shape)
    return full, matrix


@registry.kernel("MatMul", since=(1, 9, 13))
def matmul(a, b):
    return matmul_tensors(a, b)


def _transposed(memory, x: WasmTensor) -> WasmTensor:
    out = memory.tensor((x.shape[1], x.shape[0]), np.float32, "Gemm's transposed operand")
    copy(memory, x, contiguous_strides(x.shape)[::-1], out, out.shape)
    return out


#: Up to this many rows of A, Gemm with transB=1 takes dot products over B's rows; above it,
#: transposing B once and running the blocked GEMM is faster.
NT_ROWS = 16


def _matmul_nt(memory, a: WasmTensor, b: WasmTensor) -> WasmTensor:
    (m, k), (n, k2) = a.shape, b.shape
    if k != k2:
        raise InvalidArgument(f"Gemm: A of shape {list(a.shape)} and B^T of {list(b.shape)} do not match")
    out = memory.tensor((m, n), np.float32, "Gemm's output")
    if out.size:
        memory.call(K_MATMUL_NT, m, n, k, a.offset, b.offset, out.offset)
    return out


def _gemm(a, b, c, alpha, beta, trans_a, trans_b):
    memory = memory_of("Gemm", a, b, c)
    if a.ndim != 2 or b.ndim != 2:
        raise InvalidArgument(f"Gemm: A and B must be 2-D, got shapes {list(a.shape)} and {list(b.shape)}")
    a = _transposed(memory, a) if trans_a else a
    if trans_b and a.shape[0] <= NT_ROWS:
        y = _matmul_nt(memory, a, b)
    else:
        b = _transposed(memory, b) if trans_b else b
        y = matmul_tensors(a, b, "Gemm")
    if alpha != 1.0:
        y = unary("Gemm", AFFINE, y, alpha, 0.0)
    if c is not None and beta != 0.0:
        product = y.shape
        if beta != 1.0:
            c = unary("Gemm", AFFINE, c, beta, 0.0)
        y = binary("Gemm", ADD, y, c)
        if y.shape != product:
            raise InvalidArgument(f"Gemm: C of shape {list(c.shape)} does not broadcast to the product")
    return y


@registry.kernel("Gemm", since=(11, 13))
def gemm(a, b, c=None, *, alpha, beta, transA, transB):
    return _gemm(a, b, c, alpha, beta, transA, transB)


@registry.kernel("Gemm", since=(7, 9))
def gemm_7(a, b, c, *, alpha, beta, transA, transB):
    return _gemm(a, b, c, alpha, beta, transA, transB)


# -- windows -----------------------------------------------------------------------------------------


def window_geometry(spatial, kernel, strides, dilations, pads, auto_pad, ceil_mode, op):
    """Output sizes and (begin, end) pads per spatial axis, as ONNX defines them."""
    rank = len(spatial)
    kernel = [int(k) for k in kernel]
    if len(kernel) != rank:
        raise InvalidArgument(f"{op}: kernel_shape {kernel} does not match {rank} spatial axes")
    strides = [int(s) for s in strides] if strides else [1] * rank
    dilations = [int(d) for d in dilations] if dilations else [1] * rank
    pads = [int(p) for p in pads] if pads else [0] * (2 * rank)
    outs, begins, ends = [], [], []
    for i in range(rank):
        size, k, s, d = int(spatial[i]), kernel[i], strides[i], dilations[i]
        extent = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            out = -(-size // s)
            total = max((out - 1) * s + extent - size, 0)
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            end = total - begin
        elif auto_pad == "VALID":
            begin = end = 0
            span = size - extent
            out = (-(-span // s) if ceil_mode else span // s) + 1
        elif auto_pad in ("NOTSET", ""):
            begin, end = pads[i], pads[i + rank]
            span = size + begin + end - extent
            out = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (out - 1) * s >= size + begin:  # the last window would start in the end pad
                out -= 1
        else:
            raise InvalidArgument(f"{op}: unknown auto_pad {auto_pad!r}")
        if out <= 0:
            raise InvalidArgument(f"{op}: the window {extent} does not fit the input size {size} (with pads)")
        outs.append(out)
        begins.append(begin)
        ends.append(end)
    return outs, begins, ends, strides, dilations


def _as_2d(x: WasmTensor, op: str) -> WasmTensor:
    if x.ndim == 3:
        return x.reshape((x.shape[0], x.shape[1], 1, x.shape[2]))
    if x.ndim != 4:
        raise InvalidArgument(f"{op}: the wasm kernels take 1-D and 2-D windows (rank 3 or 4), got {list(x.shape)}")
    return x


def _pad2(values, default):
    """1-D geometry read as 2-D with a unit first axis."""
    return [default, *values] if len(values) == 1 else list(values)


@registry.kernel("Conv", since=(1, 11, 22))
def conv(x, w, b=None, *, auto_pad, dilations=None, group, kernel_shape=None, pads=None, strides=None):
    memory = memory_of("Conv", x, w, b)
    if w.ndim != x.ndim:
        raise InvalidArgument(f"Conv: W of shape {list(w.shape)} does not match X of shape {list(x.shape)}")
    kernel = list(kernel_shape) if kernel_shape else list(w.shape[2:])
    if [int(k) for k in kernel] != list(w.shape[2:]):
        raise InvalidArgument(f"Conv: kernel_shape {list(kernel)} does not match W of shape {list(w.shape)}")
    outs, begins, ends, steps, dils = window_geometry(
        x.shape[2:], kernel, strides, dilations, pads, auto_pad, 0, "Conv"
    )
    n, c = x.shape[:2]
    m = w.shape[0]
    if group <= 0 or c % group or m % group or w.shape[1] * group != c:
        raise InvalidArgument(f"Conv: X has {c} channels, W {list(w.shape)} and group {group} do not agree")
    if b is not None and b.shape != (m,):
        raise InvalidArgument(f"Conv: B must have shape [{m}], got {list(b.shape)}")
    x4, w4 = _as_2d(x, "Conv"), _as_2d(w, "Conv")
    kh, kw = _pad2(kernel, 1)
    oh, ow = _pad2(outs, 1)
    sh, sw = _pad2(steps, 1)
    dh, dw = _pad2(dils, 1)
    top, left = _pad2(begins, 0)
    h, wd = x4.shape[2:]
    out = memory.tensor((n, m, *outs), np.float32, "Conv's output")
    direct = kh == kw == sh == sw == 1 and top == left == 0 and (oh, ow) == (h, wd)
    col = None if direct else memory.tensor((c // group * kh * kw, oh * ow), np.float32, "Conv's im2col buffer")
    if out.size:
        params = [n, c, h, wd, m, kh, kw, oh, ow, sh, sw, dh, dw, top, left, group]
        memory.call(
            K_CONV2D,
            PARAMS_ARG,
            x4.offset,
            w4.offset,
            b.offset if b is not None else 0,
            col.offset if col is not None else 0,
            out.offset,
            params=params,
        )
    return out


def _pool(x, kind, op, kernel, strides, dilations, pads, auto_pad, ceil_mode, include_pad=0):
    memory = memory_of(op, x)
    outs, begins, ends, steps, dils = window_geometry(
        x.shape[2:], kernel, strides, dilations, pads, auto_pad, ceil_mode, op
    )
    x4 = _as_2d(x, op)
    out = memory.tensor((*x.shape[:2], *outs), np.float32, f"{op}'s output")
    if out.size:
        kh, kw = _pad2(list(kernel), 1)
        oh, ow = _pad2(outs, 1)
        params = [
            x4.shape[0] * x4.shape[1],
            x4.shape[2],
            x4.shape[3],
            oh,
            ow,
            kh,
            kw,
            *_pad2(steps, 1),
            *_pad2(dils, 1),
            *_pad2(begins, 0),
            int(include_pad),
            *_pad2(ends, 0),
        ]
        memory.call(K_POOL2D, kind, PARAMS_ARG, x4.offset, out.offset, params=params)
    return out


MAX_POOL, AVERAGE_POOL = 0, 1


@registry.kernel("MaxPool", since=(8, 10, 11, 12, 22))
def max_pool(x, *, kernel_shape=None, auto_pad, pads=None, strides=None, **attrs):
    if attrs.get("storage_order", 0):
        raise InvalidArgument("MaxPool: storage_order only changes Indices, which the wasm kernel does not make")
    # MaxPool's schema has a second output (Indices, declined by capability): a tuple of one.
    return (
        _pool(
            x,
            MAX_POOL,
            "MaxPool",
            kernel_shape,
            strides,
            attrs.get("dilations"),
            pads,
            auto_pad,
            attrs.get("ceil_mode", 0),
        ),
    )


@registry.kernel("AveragePool", since=(7, 10, 11, 19, 22))
def average_pool(x, *, kernel_shape=None, auto_pad, pads=None, strides=None, **attrs):
    return _pool(
        x,
        AVERAGE_POOL,
        "AveragePool",
        kernel_shape,
        strides,
        attrs.get("dilations"),
        pads,
        auto_pad,
        attrs.get("ceil_mode", 0),
        attrs.get("count_include_pad", 0),
    )


def _global(x, kind, op):
    if x.ndim < 3:
        raise InvalidArgument(f"{op}: input must be at least 3-D (N, C, ...), got {list(x.shape)}")
    flat = x.reshape((x.shape[0], x.shape[1], 1, math.prod(x.shape[2:])))
    out = _pool(flat, kind, op, [1, flat.shape[3]], None, None, None, "NOTSET", 0)
    return out.reshape((*x.shape[:2], *([1] * (x.ndim - 2))))


@registry.kernel("GlobalAveragePool", since=(1, 22))
def global_average_pool(x):
    return _global(x, AVERAGE_POOL, "GlobalAveragePool")


@registry.kernel("GlobalMaxPool", since=(1, 22))
def global_max_pool(x):
    return _global(x, MAX_POOL, "GlobalMaxPool")


def _batchnorm(x, scale, b, mean, var, epsilon):
    memory = memory_of("BatchNormalization", x, scale, b, mean, var)
    if x.ndim < 2:
        raise InvalidArgument(f"BatchNormalization: X must be at least 2-D, got {list(x.shape)}")
    c = x.shape[1]
    for name, value in (("scale", scale), ("B", b), ("mean", mean), ("var", var)):
        if value.shape != (c,):
            raise InvalidArgument(f"BatchNormalization: {name} must have shape [{c}], got {list(value.shape)}")
    out = memory.tensor(x.shape, np.float32, "BatchNormalization's output")
    if out.size:
        memory.call(
            K_BATCHNORM,
            x.shape[0],
            c,
            math.prod(x.shape[2:]),
            x.offset,
            scale.offset,
            b.offset,
            mean.offset,
            var.offset,
            float(epsilon),
            out.offset,
        )
    return (out,)  # the schema's training outputs are declined by capability


@registry.kernel("BatchNormalization", since=(7,))
def batchnorm_7(x, scale, b, mean, var, *, epsilon, momentum, spatial):
    if not spatial:
        raise InvalidArgument("BatchNormalization: spatial=0 is not supported by the wasm kernel")
    return _batchnorm(x, scale, b, mean, var, epsilon)


@registry.kernel("BatchNormalization", since=(9,))
def batchnorm_9(x, scale, b, mean, var, *, epsilon, momentum):
    return _batchnorm(x, scale, b, mean, var, epsilon)


@registry.kernel("BatchNormalization", since=(14, 15))
def batchnorm_14(x, scale, b, mean, var, *, epsilon, momentum, training_mode):
    if training_mode:
        raise InvalidArgument("BatchNormalization: the wasm provider runs inference only (training_mode=1)")
    return _batchnorm(x, scale, b, mean, var, epsilon)
