"""LLVM IR pieces shared by the AVX-512 kernels written as numba intrinsics
(``kernels._f32_tile_ir``, ``kernels._depthwise_ir``, ``kernels._f32_conv_tail``,
``kernels._pool_ir``): the vector types, a splat, a lane-count mask, and the masked loads and
stores (a masked-off lane touches no memory, which is what lets those kernels read a map's edges
without a padded copy); and :func:`flat_masks`, the lane masks of the kernels that run a plane as
one flat run of cells."""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba.core import cgutils

F32, I32, I64, I16 = ir.FloatType(), ir.IntType(32), ir.IntType(64), ir.IntType(16)
LANES = ir.VectorType(F32, 16)
INDICES = ir.VectorType(I32, 16)
MASK = ir.VectorType(ir.IntType(1), 16)
ALL = ir.Constant(MASK, [1] * 16)
NONE = ir.Constant(MASK, None)


def i64(value: int):
    return ir.Constant(I64, value)


def splat(builder, value, vector_type=LANES):
    """``value`` in every lane of ``vector_type``."""
    vector = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(vector, ir.Constant(vector_type, ir.Undefined), ir.Constant(INDICES, None))


def lanes_below(builder, count):
    """The mask of lanes ``i < count`` (``count`` an i64, any value: none when negative)."""
    count = builder.trunc(builder.select(builder.icmp_signed(">", count, i64(16)), i64(16), count), I32)
    return builder.icmp_signed("<", ir.Constant(INDICES, list(range(16))), splat(builder, count, INDICES))


class Intrinsics:
    """The LLVM intrinsics a kernel calls (fused multiply-add, masked load and store of 16
    float32 lanes), declared in the builder's module."""

    def __init__(self, builder):
        module = builder.module
        self.pointer = LANES.as_pointer()
        self.fma = cgutils.get_or_insert_function(module, ir.FunctionType(LANES, [LANES] * 3), "llvm.fma.v16f32")
        self.load = cgutils.get_or_insert_function(
            module, ir.FunctionType(LANES, [self.pointer, I32, MASK, LANES]), "llvm.masked.load.v16f32.p0"
        )
        self.store = cgutils.get_or_insert_function(
            module, ir.FunctionType(ir.VoidType(), [LANES, self.pointer, I32, MASK]), "llvm.masked.store.v16f32.p0"
        )

    def masked_load(self, builder, base, offset, mask, passthrough=None):
        """16 lanes from ``base + offset`` (float pointer, i64 offset); masked-off lanes read
        ``passthrough`` (zeros by default)."""
        address = builder.bitcast(builder.gep(base, [offset]), self.pointer)
        fill = ir.Constant(LANES, None) if passthrough is None else passthrough
        return builder.call(self.load, [address, ir.Constant(I32, 4), mask, fill])

    def masked_store(self, builder, value, base, offset, mask):
        address = builder.bitcast(builder.gep(base, [offset]), self.pointer)
        builder.call(self.store, [value, address, ir.Constant(I32, 4), mask])


def prefetch(builder, address) -> None:
    """A prefetch of the cache line at ``address`` (a pointer): for reading, into every cache
    level, of data.  A prefetch never faults, so it may point past an array's end."""
    byte = ir.IntType(8).as_pointer()
    signature = ir.FunctionType(ir.VoidType(), [byte, I32, I32, I32])
    touch = cgutils.get_or_insert_function(builder.module, signature, "llvm.prefetch.p0")
    flags = [ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)]  # read, all levels, data
    builder.call(touch, [builder.bitcast(address, byte), *flags])


def flat_masks(height: int, width: int) -> np.ndarray:
    """The lane masks of a ``height × width`` plane run as one flat run of cells
    (``kernels._depthwise_ir.plane_s1``, ``kernels._pool_ir.flat_plane``): five uint16 per
    16-cell vector (bit ``i`` for cell ``16·j + i``): inside the plane, with a row above it, with
    a row below, with a column left of it, with a column right of it.  Read-only."""
    cells = height * width
    n = np.arange(-(-cells // 16) * 16)
    column = n % width
    inside = n < cells
    rows = [inside, inside & (n >= width), inside & (n + width < cells), column >= 1, column <= width - 2]
    bits = np.stack([np.packbits(r.reshape(-1, 16), axis=1, bitorder="little").view("<u2")[:, 0] for r in rows], 1)
    masks = np.ascontiguousarray(bits.reshape(-1))
    masks.flags.writeable = False
    return masks
