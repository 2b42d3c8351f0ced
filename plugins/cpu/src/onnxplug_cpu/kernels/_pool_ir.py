"""MaxPool and AveragePool planes as AVX-512 LLVM IR, through numba intrinsics (imported by
``kernels._pool_rows`` only, which ``kernels._pool_compiled`` imports after checking that numba
is usable and the CPU has AVX-512F).

Why: the numba loops of ``kernels._pool_jit`` make several passes per output row through a
scratch row (a copy of the first input row, a combination with each other row, a split into
even and odd cells, the windows), and LLVM left most of them scalar or vectorised them with
costly remainders: 0.59 ns an output for a 3×3 stride-2 MaxPool on 64 planes of 112×112 (one
thread), where onnxruntime's whole node took 24 µs at two threads (0.12 ns an output).  Here
each 16 outputs of a row are one straight run of vector code: the window's input rows are
loaded 16 columns at a time (masked loads where a chunk reaches past the map: a lane outside
it, or a row outside it, reads the padding's value and touches no memory, so there is no padded
copy; a chunk wholly inside loads without masks), combined row by row, and the window's columns
are then picked out of the combined columns with lane shuffles (stride 2: the even and the odd
columns of 32, as the depthwise planes do, ``kernels._depthwise_ir``; stride 1: the columns one
and two lanes on).  The last combined vector of a chunk is the first of the next, carried in a
register.  0.34-0.42 ns an output on the same layer.

:func:`flat_plane` runs a 3×3 stride-1 window padded by one all round (the output the input's
size) over a plane as one flat run of cells, as ``kernels._depthwise_ir.plane_s1`` does: every
lane is used on narrow maps (13×13, 7×7), where a row of 13 left 3 of 16 lanes idle and paid
each row's setup.

:func:`plane` builds one intrinsic per window (``rows × columns``, column stride 1 or 2, maximum
or sum); the row stride and the padding before each axis are arguments.

Numerics: a window's rows are combined top to bottom, then its columns left to right, as
``kernels._pool_jit`` and the numpy path do; a cell outside the map is the padding's value
(``-inf`` for the maximum, ``0`` for sums, as the numpy path pads).  A maximum is NaN where any
cell of its window is, as with ``np.maximum``, and otherwise the window's largest value, though
of ``0.0`` and ``-0.0`` it may give either (:func:`_combine`).  With window counts (AveragePool),
each sum is divided by its window's count in the same pass, as ``kernels._pool3_loops`` does.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ._simd_ir import ALL, F32, I16, I32, INDICES, LANES, MASK, NONE, Intrinsics, i64, lanes_below, splat

__all__ = ["flat_plane", "plane"]

_LANE_NUMBERS = ir.Constant(INDICES, list(range(16)))
_EVEN = ir.Constant(INDICES, [2 * i for i in range(16)])
_ODD = ir.Constant(INDICES, [2 * i + 1 for i in range(16)])
_ONE_ON = ir.Constant(INDICES, [i + 1 for i in range(16)])  # lanes 1 … 16 of (a, b)
_TWO_ON = ir.Constant(INDICES, [i + 2 for i in range(16)])  # lanes 2 … 17 of (a, b)


_BITS = ir.VectorType(ir.IntType(32), 16)


def _combine(builder, acc, value, maximum: bool):
    """``acc + value``, or their maximum with NaN winning: ``vmaxps`` gives its second operand
    where either is NaN, so the maximum taken both ways round holds the NaN in one of the two,
    and their bits OR-ed together are that NaN (a NaN's exponent bits all set, its quiet bit
    too) or, NaN-free, the maximum itself (the two agree, bar the sign of a zero: ``-0.0`` for
    ``±0.0``).  Three vector operations; the compare-and-blend form (two compares into mask
    registers, their OR and a blend) ran the 3×3 stride-2 MaxPool at half the speed."""
    if not maximum:
        return builder.fadd(acc, value)
    vmax = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(LANES, [LANES, LANES, I32]), "llvm.x86.avx512.max.ps.512"
    )
    current = ir.Constant(I32, 4)  # the current rounding mode: no embedded rounding
    one_way = builder.bitcast(builder.call(vmax, [value, acc, current]), _BITS)
    other_way = builder.bitcast(builder.call(vmax, [acc, value, current]), _BITS)
    return builder.bitcast(builder.or_(one_way, other_way), LANES)


def _inside(builder, start, width):
    """The lanes of 16 columns from ``start`` (i64, may be negative) that lie in ``[0, width)``."""
    columns = builder.add(_LANE_NUMBERS, splat(builder, builder.trunc(start, I32), INDICES))
    below = splat(builder, builder.trunc(width, I32), INDICES)
    after_start = builder.icmp_signed(">=", columns, ir.Constant(INDICES, None))
    return builder.and_(after_start, builder.icmp_signed("<", columns, below))


def _store(builder, calls, total, target, at, lanes, divisors, divide) -> None:
    """``total``'s ``lanes`` stored at ``target + at``, each divided first by its window count
    at ``divisors + at`` where ``divide`` (AveragePool's division in the same pass)."""
    with builder.if_else(divide) as (then, otherwise):
        with then:
            count = calls.masked_load(builder, divisors, at, lanes, ir.Constant(LANES, [1.0] * 16))
            calls.masked_store(builder, builder.fdiv(total, count), target, at, lanes)
        with otherwise:
            calls.masked_store(builder, total, target, at, lanes)


def _codegen(rows: int, columns: int, stride: int, maximum: bool):
    fill_value = float("-inf") if maximum else 0.0
    # Columns a chunk reads past its first: 48 at stride 2 (32, and the next chunk's first 16),
    # 32 at stride 1.
    span = 16 * (stride + 1)

    def codegen(context, builder, sig, args):
        x, y, counts, height, width, out_height, out_width, row_stride, top, left = args
        calls = Intrinsics(builder)
        source = builder.inttoptr(x, F32.as_pointer())
        target = builder.inttoptr(y, F32.as_pointer())
        divisors = builder.inttoptr(counts, F32.as_pointer())
        divide = builder.icmp_signed("!=", counts, i64(0))
        fill = ir.Constant(LANES, [fill_value] * 16)
        chunks = builder.sdiv(builder.add(out_width, i64(15)), i64(16))
        carried = cgutils.alloca_once_value(builder, fill)
        first_column = builder.neg(left)
        with cgutils.for_range(builder, out_height) as rows_loop:
            oy = rows_loop.index
            first_row = builder.sub(builder.mul(oy, row_stride), top)
            window_rows = []
            all_valid = ir.Constant(ir.IntType(1), 1)
            for dy in range(rows):
                iy = builder.add(first_row, i64(dy))
                valid = builder.and_(builder.icmp_signed(">=", iy, i64(0)), builder.icmp_signed("<", iy, height))
                all_valid = builder.and_(all_valid, valid)
                window_rows.append((builder.mul(builder.select(valid, iy, i64(0)), width), valid))

            def combined(column, masked: bool):
                """The window's rows combined over the 16 columns from ``column``: masked, each
                lane outside the map (or of a row outside it) reading the padding's value."""
                lanes = _inside(builder, column, width) if masked else None
                acc = None
                for start, valid in window_rows:
                    offset = builder.add(start, column)
                    if masked:
                        mask = builder.and_(lanes, builder.select(valid, ALL, NONE))
                        value = calls.masked_load(builder, source, offset, mask, fill)
                    else:
                        value = builder.load(builder.bitcast(builder.gep(source, [offset]), calls.pointer), align=4)
                    acc = value if acc is None else _combine(builder, acc, value, maximum)
                return acc

            def taps(base, masked: bool):
                """The window's columns of the chunk whose windows start at column ``base``:
                at stride 2 the even and the odd of the 32 columns from there (and the even
                ones one on, whose last is the next 16's first), at stride 1 the 16 from there
                and the 16 one and two on.  The last vector read is carried to the next chunk."""
                a = builder.load(carried)
                b = combined(builder.add(base, i64(16)), masked)
                if stride == 2:
                    c = combined(builder.add(base, i64(32)), masked)
                    builder.store(c, carried)
                    even = builder.shuffle_vector(a, b, _EVEN)
                    return [even, builder.shuffle_vector(a, b, _ODD), builder.shuffle_vector(even, c, _ONE_ON)]
                builder.store(b, carried)
                return [a, builder.shuffle_vector(a, b, _ONE_ON), builder.shuffle_vector(a, b, _TWO_ON)]

            def store(ox0, values):
                total = values[0]
                for value in values[1:columns]:
                    total = _combine(builder, total, value, maximum)
                at = builder.add(builder.mul(oy, out_width), ox0)
                stored = lanes_below(builder, builder.sub(out_width, ox0))
                _store(builder, calls, total, target, at, stored, divisors, divide)

            builder.store(combined(first_column, True), carried)
            with cgutils.for_range(builder, chunks) as chunk_loop:
                ox0 = builder.mul(chunk_loop.index, i64(16))
                base = builder.add(builder.mul(ox0, i64(stride)), first_column)
                # A chunk whose rows and columns all lie in the map loads without masks (most of
                # a wide map's): masks built per vector cost as much as the arithmetic.
                inside = builder.and_(
                    all_valid,
                    builder.and_(
                        builder.icmp_signed(">=", base, i64(0)),
                        builder.icmp_signed("<=", builder.add(base, i64(span)), width),
                    ),
                )
                with builder.if_else(inside) as (then, otherwise):
                    with then:
                        store(ox0, taps(base, False))
                    with otherwise:
                        store(ox0, taps(base, True))
        return context.get_dummy_value()

    return codegen


_LEFT_ONE = ir.Constant(INDICES, [15 + i for i in range(16)])  # lanes 15 … 30 of (a, b)


def _flat_codegen(maximum: bool):
    fill_value = float("-inf") if maximum else 0.0

    def codegen(context, builder, sig, args):
        x, y, counts, masks, cells, width = args
        calls = Intrinsics(builder)
        source = builder.inttoptr(x, F32.as_pointer())
        target = builder.inttoptr(y, F32.as_pointer())
        divisors = builder.inttoptr(counts, F32.as_pointer())
        divide = builder.icmp_signed("!=", counts, i64(0))
        table = builder.inttoptr(masks, I16.as_pointer())
        fill = ir.Constant(LANES, [fill_value] * 16)
        vectors = builder.sdiv(builder.add(cells, i64(15)), i64(16))

        def mask(j, which):
            """Vector ``j``'s mask ``which`` (:func:`kernels._simd_ir.flat_masks`' order)."""
            entry = builder.gep(table, [builder.add(builder.mul(j, i64(5)), i64(which))])
            return builder.bitcast(builder.load(entry), MASK)

        def column(j):
            """The rows above, at and below vector ``j``'s 16 cells combined (``fill`` past the
            plane: the vector after the last)."""
            n0 = builder.mul(j, i64(16))
            beyond = builder.icmp_signed(">=", j, vectors)
            at = builder.select(beyond, i64(0), j)  # (a mask to read; all lanes off past the plane)
            inside, above, below = (builder.select(beyond, NONE, mask(at, which)) for which in range(3))
            up = calls.masked_load(builder, source, builder.sub(n0, width), above, fill)
            middle = calls.masked_load(builder, source, n0, inside, fill)
            down = calls.masked_load(builder, source, builder.add(n0, width), below, fill)
            return _combine(builder, _combine(builder, up, middle, maximum), down, maximum)

        previous = cgutils.alloca_once_value(builder, fill)  # the columns of the vector before
        current = cgutils.alloca_once_value(builder, column(i64(0)))
        with cgutils.for_range(builder, vectors) as loop:
            j = loop.index
            n0 = builder.mul(j, i64(16))
            before, here = builder.load(previous), builder.load(current)
            after = column(builder.add(j, i64(1)))
            # The cell left of each (the last of the vector before, for the first lane), right of
            # each (the first of the vector after, for the last): the padding's value at a row's
            # first or last column.
            left = builder.select(mask(j, 3), builder.shuffle_vector(before, here, _LEFT_ONE), fill)
            right = builder.select(mask(j, 4), builder.shuffle_vector(here, after, _ONE_ON), fill)
            total = _combine(builder, _combine(builder, left, here, maximum), right, maximum)
            _store(builder, calls, total, target, n0, mask(j, 0), divisors, divide)
            builder.store(here, previous)
            builder.store(after, current)
        return context.get_dummy_value()

    return codegen


def flat_plane(maximum: bool):
    """An intrinsic ``pool(x, y, counts, masks, cells, width)`` (pointers and sizes as integers)
    that pools each cell of the float32 plane of ``cells`` cells, ``width`` a row, at ``x`` over
    its 3×3 window (one cell of padding all round) into the plane at ``y`` (as many cells): the
    plane as one flat run, 16 cells at a time, as ``kernels._depthwise_ir.plane_s1``; the rows
    combined first, the columns then taken from the neighbouring vectors' lanes.  ``masks``: the
    plane's :func:`kernels._simd_ir.flat_masks`; ``counts`` (unless 0): each cell's window
    count, the sums divided by it."""

    def typer(typingctx, x, y, counts, masks, cells, width):
        return types.void(*([types.intp] * 6)), _flat_codegen(maximum)

    typer.__name__ = f"pool_{'max' if maximum else 'sum'}_3x3_flat"
    return intrinsic(typer)


def plane(rows: int, columns: int, stride: int, maximum: bool):
    """An intrinsic ``pool(x, y, counts, height, width, out_height, out_width, row_stride, top,
    left)`` (pointers and sizes as integers) that pools the ``height × width`` float32 plane at
    ``x`` into the ``out_height × out_width`` plane at ``y``: each output's window is ``rows ×
    columns`` cells (``columns`` at most 3), its first ``row_stride · oy - top``, ``stride · ox -
    left``; the maximum (``maximum``) or the sum of its cells, the sum divided by the float32
    ``out_height × out_width`` window counts at ``counts`` unless that is 0.  Nothing outside the
    planes is read or written."""
    if not (1 <= columns <= 3 and stride in (1, 2) and rows >= 1):
        raise ValueError(f"no pool plane for {rows}×{columns} windows at column stride {stride}")

    def typer(typingctx, x, y, counts, height, width, out_height, out_width, row_stride, top, left):
        return types.void(*([types.intp] * 10)), _codegen(rows, columns, stride, maximum)

    typer.__name__ = f"pool_{'max' if maximum else 'sum'}_{rows}x{columns}_s{stride}"
    return intrinsic(typer)
