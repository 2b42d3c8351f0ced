"""The largest float32 of a contiguous run, 16 lanes at a time: a numba intrinsic written in LLVM
IR (as ``kernels._f32_tile_ir``), because numba's LLVM vectorises no float max reduction, not
even with every fast-math flag (``top = v if v > top else top``, ``max``, ``np.maximum``: all a
scalar chain).  Softmax's row max was the costliest of its three passes (BERT-base's 1536 rows
of 128 a layer: 46 µs of 126 on one thread; here 14).

NaN lanes are passed over (``v > top`` is false for them), so a row holding a NaN gets the
largest of its other values; softmax's row is NaN all the same (the NaN's ``exp`` makes the sum
NaN).  An empty run or one of NaN alone gives ``-inf``.  Portable IR: on a CPU without AVX-512
LLVM splits the 16 lanes into what the CPU has.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._simd_ir import ALL, F32, LANES, Intrinsics, i64, lanes_below

__all__ = ["run_max"]


@intrinsic
def run_max(typingctx, address, count):
    """``max(x[0:count])`` of the float32 values from byte address ``address`` (``row.ctypes.data``
    of a C-contiguous row): full vectors, then the last partial one through a masked load whose
    masked-off lanes read ``-inf``, then the 16 lanes reduced."""
    if not isinstance(address, types.Integer) or not isinstance(count, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        address, count = args
        simd = Intrinsics(builder)
        base = builder.inttoptr(address, F32.as_pointer())
        lowest = ir.Constant(LANES, [float("-inf")] * 16)
        full = builder.sdiv(count, i64(16))
        top = cgutils.alloca_once_value(builder, lowest)
        with cgutils.for_range(builder, full) as loop:
            value = simd.masked_load(builder, base, builder.mul(loop.index, i64(16)), ALL)
            held = builder.load(top)
            builder.store(builder.select(builder.fcmp_ordered(">", value, held), value, held), top)
        start = builder.mul(full, i64(16))
        value = simd.masked_load(builder, base, start, lanes_below(builder, builder.sub(count, start)), lowest)
        held = builder.load(top)
        held = builder.select(builder.fcmp_ordered(">", value, held), value, held)
        reduce = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(F32, [LANES]), "llvm.vector.reduce.fmax.v16f32"
        )
        return builder.call(reduce, [held])

    return types.float32(types.intp, types.intp), codegen
