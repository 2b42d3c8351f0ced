"""A recurrent step's product ``sums += state @ rows`` for up to four batch entries, as a numba
intrinsic in LLVM IR (as ``kernels._row_max_ir``), holding 64 columns of each entry's sums in four
vector registers while it runs down the rows.

Why: written in numba, the product was an axpy per row (``sums[j] += state[k] * rows[k, j]``),
which loads and stores every sum once per row, about 30 G multiply-adds a second on this machine
(a GRU layer of 192 over 60 steps: 290 µs of its 295; an LSTM of 64 at batch 8: 216 of 249).
numba's LLVM does not keep a block of sums in registers across the row loop by itself (a 32-wide
local block ran 8× slower, scalar).  Here each row's four vectors are loaded once for every
entry and multiplied into sums held in registers, stored when the rows end: four entries run at
about 130 G multiply-adds a second (that LSTM's product 216 → 51 µs).  One entry alone does four
multiply-adds a row, and runs as fast as ``Rᵀ`` comes from L2 (:data:`PREFETCH_ROWS`).

The rows come packed by blocks of 64 columns (:func:`._recurrent_jit.packed_columns`, made once
per node when ``R`` is a constant); the sums past the last full block are loaded and stored under
masks (a masked-off lane touches no memory).  Portable IR: on a CPU without AVX-512 LLVM splits
the 16 lanes into what the CPU has.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._recurrent_jit import BLOCK
from ._simd_ir import ALL, F32, LANES, Intrinsics, i64, lanes_below, prefetch, splat

__all__ = ["add_products"]

#: Vectors of 16 columns held in registers at once: a block of the packed layout.
_VECTORS = BLOCK // 16
#: Batch entries whose sums one pass down a block's rows adds to: 4 × 4 vectors of sums, 4 of
#: rows and a broadcast factor per entry fit AVX-512's 32 registers.
ENTRIES = 4


#: How far ahead (in rows of a block) one entry's product prefetches.  Why: one entry reads each
#: row once and does four multiply-adds with it, so it runs at the speed ``Rᵀ`` comes from L2 (it
#: does not fit L1 from a hidden size of about 48); the hardware's prefetch alone gave 33 G
#: multiply-adds a second, 8 rows ahead 45-47 (hidden 96-192).  Two or more entries do enough
#: arithmetic a row that the prefetch only cost (89 → 87 G at two entries).  A prefetch past the
#: array's end is harmless: prefetches never fault.
PREFETCH_ROWS = 8


class _Rows(NamedTuple):
    """Where :func:`add_products`' operands are (IR values): the first entry's sums and state, the
    packed rows and their count, the strides (in floats) between entries."""

    sums: Any
    state: Any
    packed: Any
    count: Any
    sums_stride: Any
    state_stride: Any


def _block(builder, simd, at, rows, column, masks, entries):
    """For each of ``entries`` batch entries ``e``: ``sums_e[column : column + 64] += state_e @
    rows`` (``at.count`` rows of 64 floats one after another), the sums under ``masks`` (one lane
    mask per vector of 16 columns).  Every row's four vectors are loaded once for all entries.

    One entry alone adds even and odd rows into separate registers, summed at the end: eight
    multiply-add chains in flight instead of four, 5-9 % faster with the prefetch (hidden
    96-192; within the noise without it)."""
    chains = 2 if entries == 1 else 1
    sums_rows = [builder.gep(at.sums, [builder.mul(at.sums_stride, i64(e))]) for e in range(entries)]
    state_rows = [builder.gep(at.state, [builder.mul(at.state_stride, i64(e))]) for e in range(entries)]
    offsets = [builder.add(column, i64(16 * v)) for v in range(_VECTORS)]
    held = [
        [
            [
                cgutils.alloca_once_value(
                    builder,
                    simd.masked_load(builder, sums_rows[e], offset, mask) if chain == 0 else ir.Constant(LANES, None),
                )
                for offset, mask in zip(offsets, masks)
            ]
            for e in range(entries)
        ]
        for chain in range(chains)
    ]

    def add_row(index, chain):
        start = builder.mul(index, i64(BLOCK))
        if entries == 1:  # the cache lines PREFETCH_ROWS rows on
            for v in range(_VECTORS):
                prefetch(builder, builder.gep(rows, [builder.add(start, i64(PREFETCH_ROWS * BLOCK + 16 * v))]))
        vectors = [simd.masked_load(builder, rows, builder.add(start, i64(16 * v)), ALL) for v in range(_VECTORS)]
        for e in range(entries):
            factor = splat(builder, builder.load(builder.gep(state_rows[e], [index])))
            for vector, slot in zip(vectors, held[chain][e]):
                builder.store(builder.call(simd.fma, [vector, factor, builder.load(slot)]), slot)

    with cgutils.for_range(builder, builder.sdiv(at.count, i64(chains))) as loop:
        first = builder.mul(loop.index, i64(chains))
        for chain in range(chains):
            add_row(builder.add(first, i64(chain)), chain)
    if chains == 2:
        with builder.if_then(builder.icmp_signed("==", builder.srem(at.count, i64(2)), i64(1))):
            add_row(builder.sub(at.count, i64(1)), 0)
    for e in range(entries):
        for v, (offset, mask) in enumerate(zip(offsets, masks)):
            total = builder.load(held[0][e][v])
            if chains == 2:
                total = builder.fadd(total, builder.load(held[1][e][v]))
            simd.masked_store(builder, total, sums_rows[e], offset, mask)


def _blocks(builder, simd, at, width, entries):
    """:func:`_block` over every block of ``width`` columns: the full ones, then the last under
    lane masks."""
    block_size = builder.mul(at.count, i64(BLOCK))
    full = builder.sdiv(width, i64(BLOCK))
    with cgutils.for_range(builder, full) as blocks:
        rows = builder.gep(at.packed, [builder.mul(blocks.index, block_size)])
        _block(builder, simd, at, rows, builder.mul(blocks.index, i64(BLOCK)), [ALL] * _VECTORS, entries)
    done = builder.mul(full, i64(BLOCK))
    left = builder.sub(width, done)
    with builder.if_then(builder.icmp_signed(">", left, i64(0))):
        masks = [lanes_below(builder, builder.sub(left, i64(16 * v))) for v in range(_VECTORS)]
        rows = builder.gep(at.packed, [builder.mul(full, block_size)])
        _block(builder, simd, at, rows, done, masks, entries)


@intrinsic
def add_products(typingctx, sums, state, packed, count, width, entries, sums_stride, state_stride):
    """For each batch entry ``e < entries`` (1 to :data:`ENTRIES`): ``sums_e[j] += Σ_{k < count}
    state_e[k] · w[k, j]`` for ``j < width``, ``w`` given as :func:`._recurrent_jit.packed_columns`
    lays it out.  Byte addresses of float32 memory (``a.ctypes.data`` of C-contiguous arrays):
    ``sums`` (offset to the first column wanted) and ``state`` of the first entry, the next
    entries ``sums_stride`` and ``state_stride`` floats on; ``packed``.  Entries beyond
    :data:`ENTRIES` are not read."""
    arguments = (sums, state, packed, count, width, entries, sums_stride, state_stride)
    if not all(isinstance(a, types.Integer) for a in arguments):
        return None

    def codegen(context, builder, signature, args):
        sums, state, packed, count, width, entries, sums_stride, state_stride = args
        simd = Intrinsics(builder)
        pointer = F32.as_pointer()
        sums, state, packed = (builder.inttoptr(a, pointer) for a in (sums, state, packed))
        at = _Rows(sums, state, packed, count, sums_stride, state_stride)
        # One specialised loop per entry count: the registers each holds are fixed at compile time.
        after = builder.append_basic_block("products.done")
        switch = builder.switch(entries, after)
        for held in range(1, ENTRIES + 1):
            case = builder.append_basic_block(f"products.entries{held}")
            switch.add_case(i64(held), case)
            builder.position_at_end(case)
            _blocks(builder, simd, at, width, held)
            builder.branch(after)
        builder.position_at_end(after)
        return context.get_dummy_value()

    signature = types.void(*[types.intp] * 8)
    return signature, codegen
