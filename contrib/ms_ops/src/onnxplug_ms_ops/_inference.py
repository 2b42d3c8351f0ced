"""Type and shape inference functions for the schemas in :mod:`.schemas`.

onnx calls each with an ``InferenceContext``.  They always set output element types and set
shapes only where the input shapes determine them; a dimension that is not known stays
unknown (``None``).  Errors are swallowed by the caller (inference is advisory).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx
from onnx import TensorProto

Dim = int | str | None
Infer = Callable[[Any], None]


def _type(ctx: Any, index: int) -> onnx.TypeProto | None:
    if index >= ctx.get_num_inputs() or not ctx.has_input(index):
        return None
    proto = ctx.get_input_type(index)
    if proto is None or proto.WhichOneof("value") != "tensor_type":
        return None
    return proto


def elem(ctx: Any, index: int) -> int:
    proto = _type(ctx, index)
    return proto.tensor_type.elem_type if proto is not None else TensorProto.UNDEFINED


def shape(ctx: Any, index: int) -> list[Dim] | None:
    proto = _type(ctx, index)
    if proto is None or not proto.tensor_type.HasField("shape"):
        return None
    dims: list[Dim] = []
    for dim in proto.tensor_type.shape.dim:
        kind = dim.WhichOneof("value")
        dims.append(dim.dim_value if kind == "dim_value" else dim.dim_param if kind == "dim_param" else None)
    return dims


def attr(ctx: Any, name: str, default: Any = None) -> Any:
    proto = ctx.get_attribute(name)
    return default if proto is None else onnx.helper.get_attribute_value(proto)


def put(ctx: Any, index: int, elem_type: int, dims: list[Dim] | None = None) -> None:
    """Set output ``index`` (when the node has it) to ``elem_type`` with ``dims``."""
    if index >= ctx.get_num_outputs() or not ctx.has_output(index) or not elem_type:
        return
    ctx.set_output_type(index, onnx.helper.make_tensor_type_proto(elem_type, dims))


def _mul(a: Dim, b: Dim) -> Dim:
    return a * b if isinstance(a, int) and isinstance(b, int) else None


def _div(a: Dim, b: Dim) -> Dim:
    return a // b if isinstance(a, int) and isinstance(b, int) and b else None


def same_as(index: int) -> Infer:
    def infer(ctx: Any) -> None:
        put(ctx, 0, elem(ctx, index), shape(ctx, index))

    return infer


def same_elem(index: int) -> Infer:
    def infer(ctx: Any) -> None:
        put(ctx, 0, elem(ctx, index))

    return infer


def broadcast(a: int, b: int) -> Infer:
    def infer(ctx: Any) -> None:
        sa, sb = shape(ctx, a), shape(ctx, b)
        dims = None
        if sa is not None and sb is not None:
            rank = max(len(sa), len(sb))
            sa, sb = [1] * (rank - len(sa)) + sa, [1] * (rank - len(sb)) + sb
            dims = [y if x == 1 else x if y == 1 or x == y else None for x, y in zip(sa, sb)]
        put(ctx, 0, elem(ctx, a), dims)

    return infer


def gemm(ctx: Any) -> None:
    sa, sb = shape(ctx, 0), shape(ctx, 1)
    dims = None
    if sa is not None and sb is not None and len(sa) == 2 and len(sb) == 2:
        dims = [sa[1] if attr(ctx, "transA", 0) else sa[0], sb[0] if attr(ctx, "transB", 0) else sb[1]]
    put(ctx, 0, elem(ctx, 0), dims)


def fused_matmul(ctx: Any) -> None:
    sa, sb = shape(ctx, 0), shape(ctx, 1)
    dims = None
    if (
        sa is not None
        and sb is not None
        and len(sa) >= 2
        and len(sb) >= 2
        and not (attr(ctx, "transBatchA", 0) or attr(ctx, "transBatchB", 0))
    ):
        rows = sa[-1] if attr(ctx, "transA", 0) else sa[-2]
        cols = sb[-2] if attr(ctx, "transB", 0) else sb[-1]
        batch_a, batch_b = sa[:-2], sb[:-2]
        rank = max(len(batch_a), len(batch_b))
        batch_a, batch_b = [1] * (rank - len(batch_a)) + batch_a, [1] * (rank - len(batch_b)) + batch_b
        batch = [y if x == 1 else x if y == 1 or x == y else None for x, y in zip(batch_a, batch_b)]
        dims = batch + [rows, cols]
    put(ctx, 0, elem(ctx, 0), dims)


def matmul_to(float_input: int) -> Infer:
    def infer(ctx: Any) -> None:
        sa, sb = shape(ctx, 0), shape(ctx, 1)
        dims = sa[:-1] + [sb[-1]] if sa and sb is not None and len(sb) == 2 else None
        put(ctx, 0, elem(ctx, float_input), dims)

    return infer


def conv(ctx: Any) -> None:
    sx, sw = shape(ctx, 0), shape(ctx, 1)
    dims = None
    if sx is not None and sw is not None and len(sx) >= 3:
        dims = [sx[0], sw[0]] + [None] * (len(sx) - 2)
        kernel = attr(ctx, "kernel_shape") or sw[2:]
        strides = attr(ctx, "strides") or [1] * (len(sx) - 2)
        dilations = attr(ctx, "dilations") or [1] * (len(sx) - 2)
        pads = attr(ctx, "pads") or [0] * (2 * (len(sx) - 2))
        if attr(ctx, "auto_pad", b"NOTSET") in (b"NOTSET", "NOTSET"):
            for i, size in enumerate(sx[2:]):
                if isinstance(size, int) and isinstance(kernel[i], int):
                    span = dilations[i] * (kernel[i] - 1) + 1
                    dims[2 + i] = (size + pads[i] + pads[i + len(sx) - 2] - span) // strides[i] + 1
    put(ctx, 0, elem(ctx, 0), dims)


def skip_norm(ctx: Any) -> None:
    dims = shape(ctx, 0)
    put(ctx, 0, elem(ctx, 0), dims)
    stats = None if dims is None else dims[:-1] + [1]
    put(ctx, 1, TensorProto.FLOAT, stats)
    put(ctx, 2, TensorProto.FLOAT, stats)
    put(ctx, 3, elem(ctx, 0), dims)


def layer_norm(first_stat: int) -> Infer:
    """``first_stat``: the index of the first statistics output (Mean or inv_std_var)."""

    def infer(ctx: Any) -> None:
        dims = shape(ctx, 0)
        put(ctx, 0, elem(ctx, 1), dims)
        stats = None
        if dims is not None:
            axis = attr(ctx, "axis", -1)
            axis = axis + len(dims) if axis < 0 else axis
            stats = dims[:axis] + [1] * (len(dims) - axis)
        stash = TensorProto.DOUBLE if attr(ctx, "stash_type", 1) == TensorProto.DOUBLE else TensorProto.FLOAT
        for index in range(first_stat, 3):
            put(ctx, index, stash, stats)

    return infer


def embed_norm(ctx: Any) -> None:
    ids, word = shape(ctx, 0), shape(ctx, 2)
    dims = None if ids is None or word is None else ids + [word[-1]]
    put(ctx, 0, elem(ctx, 2), dims)
    put(ctx, 1, TensorProto.INT32, None if ids is None else ids[:1])
    put(ctx, 2, elem(ctx, 2), dims)


def attention(ctx: Any) -> None:
    sx, sw = shape(ctx, 0), shape(ctx, 1)
    dims = None
    if sx is not None and sw is not None and len(sx) == 3:
        sizes = attr(ctx, "qkv_hidden_sizes")
        dims = sx[:2] + [sizes[2] if sizes else _div(sw[1], 3)]
    put(ctx, 0, elem(ctx, 0), dims)
    put(ctx, 1, elem(ctx, 0))


def mha(ctx: Any) -> None:
    sq, sv = shape(ctx, 0), shape(ctx, 2)
    dims = None
    if sq is not None and len(sq) == 3:
        v_hidden = sv[2] if sv is not None and len(sv) == 3 else sq[2]
        if sv is not None and len(sv) == 4:
            v_hidden = _mul(sv[1], sv[3])
        dims = sq[:2] + [v_hidden]
    elif sq is not None and len(sq) == 5:
        dims = sq[:2] + [_mul(sq[2], sq[4])]
    put(ctx, 0, elem(ctx, 0), dims)
    put(ctx, 1, elem(ctx, 0))
    put(ctx, 2, elem(ctx, 0))
    put(ctx, 3, elem(ctx, 0))


def gqa(ctx: Any) -> None:
    sq = shape(ctx, 0)
    dims = None
    if sq is not None and len(sq) == 3:
        heads, kv_heads = attr(ctx, "num_heads"), attr(ctx, "kv_num_heads")
        hidden = sq[2]
        if not ctx.has_input(1) and isinstance(hidden, int):
            hidden = hidden * heads // (heads + 2 * kv_heads)
        dims = sq[:2] + [hidden]
    put(ctx, 0, elem(ctx, 0), dims)
    cache = elem(ctx, 3) or elem(ctx, 0)
    put(ctx, 1, cache)
    put(ctx, 2, cache)
    put(ctx, 3, elem(ctx, 0))


def matmul_nbits(ctx: Any) -> None:
    sa = shape(ctx, 0)
    put(ctx, 0, elem(ctx, 0), None if sa is None else sa[:-1] + [attr(ctx, "N")])


def global_pool(ctx: Any) -> None:
    dims = shape(ctx, 0)
    if dims is not None:
        if attr(ctx, "channels_last", 0):
            dims = [dims[0]] + [1] * (len(dims) - 2) + [dims[-1]]
        else:
            dims = dims[:2] + [1] * (len(dims) - 2)
    put(ctx, 0, elem(ctx, 0), dims)


def qlinear_concat(ctx: Any) -> None:
    axis = attr(ctx, "axis", 0)
    parts = [shape(ctx, i) for i in range(2, ctx.get_num_inputs(), 3)]
    dims = None
    if parts and all(p is not None for p in parts) and len({len(p) for p in parts}) == 1:
        rank = len(parts[0])
        axis = axis + rank if axis < 0 else axis
        dims = list(parts[0])
        sizes = [p[axis] for p in parts]
        dims[axis] = sum(sizes) if all(isinstance(s, int) for s in sizes) else None
    put(ctx, 0, elem(ctx, 1), dims)


# -- quantization ops (._quant_ops) and skl2onnx's ops (._ml_ops) ---------------------------------


def _broadcast_dims(*shapes: list[Dim] | None) -> list[Dim] | None:
    if any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    padded = [[1] * (rank - len(s)) + list(s) for s in shapes]
    dims: list[Dim] = []
    for column in zip(*padded):
        known = {d for d in column if d != 1}
        dims.append(known.pop() if len(known) == 1 else 1 if not known else None)
    return dims


def where(cond: int, x: int, y: int) -> Infer:
    def infer(ctx: Any) -> None:
        put(ctx, 0, elem(ctx, x), _broadcast_dims(shape(ctx, cond), shape(ctx, x), shape(ctx, y)))

    return infer


def qgemm(ctx: Any) -> None:
    sa, sb = shape(ctx, 0), shape(ctx, 3)
    dims = None
    if sa is not None and sb is not None and len(sa) == 2 and len(sb) == 2:
        dims = [sa[1] if attr(ctx, "transA", 0) else sa[0], sb[0] if attr(ctx, "transB", 0) else sb[1]]
    quantized = ctx.get_num_inputs() > 8 and ctx.has_input(8)
    put(ctx, 0, elem(ctx, 8) if quantized else TensorProto.FLOAT, dims)


def reduce(ctx: Any) -> None:
    dims = shape(ctx, 0)
    if dims is not None:
        axes = {a + len(dims) if a < 0 else a for a in attr(ctx, "axes", ())}
        keep = attr(ctx, "keepdims", 1)
        dims = [1 if i in axes else d for i, d in enumerate(dims) if keep or i not in axes]
    put(ctx, 0, elem(ctx, 0), dims)


def quantized_like(zero_point: int) -> Infer:
    """QuantizeLinear: input 0's shape, the zero point's type (uint8 without one)."""

    def infer(ctx: Any) -> None:
        put(ctx, 0, elem(ctx, zero_point) or TensorProto.UINT8, shape(ctx, 0))

    return infer


def elem_from(shape_of: int, type_of: int) -> Infer:
    def infer(ctx: Any) -> None:
        put(ctx, 0, elem(ctx, type_of), shape(ctx, shape_of))

    return infer


def lstm(ctx: Any) -> None:
    sx = shape(ctx, 0)
    directions = 2 if attr(ctx, "direction", b"forward") in (b"bidirectional", "bidirectional") else 1
    hidden = attr(ctx, "hidden_size")
    if hidden is None:
        sr = shape(ctx, 2)
        hidden = sr[1] if sr is not None and len(sr) == 3 else None
    seq, batch = (sx[0], sx[1]) if sx is not None and len(sx) == 3 else (None, None)
    put(ctx, 0, TensorProto.FLOAT, [seq, directions, batch, hidden])
    put(ctx, 1, TensorProto.FLOAT, [directions, batch, hidden])
    put(ctx, 2, TensorProto.FLOAT, [directions, batch, hidden])


def qattention(ctx: Any) -> None:
    sx, sw = shape(ctx, 0), shape(ctx, 1)
    dims = sx[:2] + [_div(sw[1], 3)] if sx is not None and sw is not None and len(sx) == 3 else None
    put(ctx, 0, elem(ctx, 3), dims)
    put(ctx, 1, elem(ctx, 3))


def qembed_norm(ctx: Any) -> None:
    ids, word = shape(ctx, 0), shape(ctx, 2)
    put(ctx, 0, TensorProto.FLOAT, None if ids is None or word is None else ids + [word[-1]])
    put(ctx, 1, TensorProto.INT32, None if ids is None else ids[:1])


def tokenizer(ctx: Any) -> None:
    dims = shape(ctx, 0)
    put(ctx, 0, TensorProto.STRING, None if dims is None else dims + [None])


def cdist(ctx: Any) -> None:
    sa, sb = shape(ctx, 0), shape(ctx, 1)
    dims = [sa[0], sb[0]] if sa is not None and sb is not None and len(sa) == 2 and len(sb) == 2 else None
    put(ctx, 0, elem(ctx, 0), dims)


def murmur(ctx: Any) -> None:
    put(ctx, 0, TensorProto.UINT32 if attr(ctx, "positive", 1) else TensorProto.INT32, shape(ctx, 0))


def gather_block(ctx: Any) -> None:
    data, indices = shape(ctx, 0), shape(ctx, 1)
    dims = None
    if data is not None and indices is not None:
        axis = attr(ctx, "gather_axis", 0)
        axis = axis + len(data) if axis < 0 else axis
        dims = data[:axis] + indices + data[axis + 1 :]
    put(ctx, 0, elem(ctx, 2), dims)


def bnb4(ctx: Any) -> None:
    sa = shape(ctx, 0)
    last = attr(ctx, "N") if attr(ctx, "transB", 1) else attr(ctx, "K")
    put(ctx, 0, elem(ctx, 0), None if sa is None else sa[:-1] + [last])
