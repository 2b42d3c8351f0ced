"""The AVX-512 VNNI tile of ``kernels._vnni``: LLVM IR for ``vpdpbusd`` through a numba intrinsic.

Imported only by :func:`kernels._vnni.compiled`, after it has checked that numba is usable and
the CPU has VNNI: importing this module imports numba.  Module-level definitions (not a closure)
so that numba's on-disk cache recognises ``drive`` from one process to the next.

For each column tile ``nt`` in ``[nt0, nt1)`` (64 int32 columns: four 16-lane vectors) and each
row tile (``ROWS`` weight rows), 24 accumulators start at zero; for each tap ``t`` and channel
group ``c`` the four 64-byte column vectors are loaded from ``planes + offsets[t] + c * stride +
256 * nt`` and each row's four weight bytes (one int32 word) are broadcast and multiplied into
its four accumulators (``llvm.x86.avx512.vpdpbusd.512``: per lane, four u8 × s8 products added
to the int32 accumulator, exactly); the accumulators are then stored to the output rows.
Accumulators are allocas that LLVM promotes to registers.
"""

from __future__ import annotations

import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._vnni import COLUMNS, ROWS

_VECTORS = COLUMNS // 16
_I32, _I64 = ir.IntType(32), ir.IntType(64)
_LANES = ir.VectorType(_I32, 16)


def _const(value: int):
    return ir.Constant(_I64, value)


def _splat(builder, word):
    vector = builder.insert_element(ir.Constant(_LANES, ir.Undefined), word, ir.Constant(_I32, 0))
    return builder.shuffle_vector(vector, ir.Constant(_LANES, ir.Undefined), ir.Constant(_LANES, None))


@intrinsic
def _tiles(typingctx, planes, weights, out, offsets, taps, c4, plane_stride, m_tiles, nt0, nt1, ldc):
    signature = types.void(*([types.intp] * 11))

    def codegen(context, builder, sig, args):
        planes, weights, out, offsets, taps, c4, plane_stride, m_tiles, nt0, nt1, ldc = args
        dot = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_LANES, [_LANES, _LANES, _LANES]), "llvm.x86.avx512.vpdpbusd.512"
        )
        plane_base = builder.inttoptr(planes, ir.IntType(8).as_pointer())
        weight_words = builder.inttoptr(weights, _I32.as_pointer())
        out_words = builder.inttoptr(out, _I32.as_pointer())
        offset_list = builder.inttoptr(offsets, _I64.as_pointer())
        depth = builder.mul(taps, c4)  # int32 words per weight row
        zero = ir.Constant(_LANES, None)
        accumulators = [[cgutils.alloca_once_value(builder, zero) for _ in range(_VECTORS)] for _ in range(ROWS)]
        with cgutils.for_range_slice(builder, nt0, nt1, _const(1), inc=True) as (nt, _):
            column_bytes = builder.mul(nt, _const(COLUMNS * 4))
            with cgutils.for_range(builder, m_tiles) as m_loop:
                first_row = builder.mul(m_loop.index, _const(ROWS))
                for row in accumulators:
                    for acc in row:
                        builder.store(zero, acc)
                with cgutils.for_range(builder, taps) as t_loop:
                    tap_start = builder.add(builder.load(builder.gep(offset_list, [t_loop.index])), column_bytes)
                    weight_tap = builder.mul(t_loop.index, c4)
                    with cgutils.for_range(builder, c4) as c_loop:
                        at = builder.add(tap_start, builder.mul(c_loop.index, plane_stride))
                        columns = []
                        for v in range(_VECTORS):
                            address = builder.gep(plane_base, [builder.add(at, _const(64 * v))])
                            columns.append(builder.load(builder.bitcast(address, _LANES.as_pointer()), align=1))
                        word = builder.add(weight_tap, c_loop.index)
                        for r in range(ROWS):
                            index = builder.add(builder.mul(builder.add(first_row, _const(r)), depth), word)
                            splat = _splat(builder, builder.load(builder.gep(weight_words, [index]), align=4))
                            for v in range(_VECTORS):
                                acc = accumulators[r][v]
                                builder.store(builder.call(dot, [builder.load(acc), columns[v], splat]), acc)
                for r in range(ROWS):
                    row_start = builder.add(
                        builder.mul(builder.add(first_row, _const(r)), ldc), builder.mul(nt, _const(COLUMNS))
                    )
                    for v in range(_VECTORS):
                        target = builder.gep(out_words, [builder.add(row_start, _const(16 * v))])
                        builder.store(
                            builder.load(accumulators[r][v]), builder.bitcast(target, _LANES.as_pointer()), align=4
                        )
        return context.get_dummy_value()

    return signature, codegen


@numba.njit(cache=True, nogil=True)
def drive(planes, weights, out, offsets, c4, plane_stride, nt0, nt1):  # pragma: no cover - compiled
    _tiles(
        planes.ctypes.data,
        weights.ctypes.data,
        out.ctypes.data,
        offsets.ctypes.data,
        offsets.shape[0],
        c4,
        plane_stride,
        weights.shape[0] // ROWS,
        nt0,
        nt1,
        out.shape[1],
    )
