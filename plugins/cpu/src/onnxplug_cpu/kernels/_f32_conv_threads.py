"""A float32 convolution's stages on Python threads, where numba's threading layer is not safe
(``kernels._team``): the fallback of ``kernels._f32_conv.BoundLayer``, kept apart from the
layer's planning and its compiled call."""

from __future__ import annotations

import functools

from ._split_rows import run_in_row_blocks

__all__ = ["on_python_threads"]


def on_python_threads(compiled, geometry, in_place, parts, x, w, planes, offsets, y, columns, *rest):
    """``kernels._f32_conv``'s stages for each image where numba's threading layer is not safe
    (``kernels._team``): the driver's serial loops, split over Python threads (the tail's dot
    products on the calling thread, the same sums as on the team)."""
    groups, group_stride, b, z, low, high, keep, at, chunk, alpha, masked, tail = rest
    top, left = geometry.pads
    count = compiled.tile_count(w.shape[0], groups, columns - tail)
    for image in range(x.shape[0]):
        if in_place:
            source = x[image].reshape(-1)
        else:
            phases = (geometry.phases, geometry.hq, geometry.wq)
            gather = functools.partial(compiled.gather, x[image], planes, *geometry.stride, top, left, *phases)
            run_in_row_blocks(gather, x.shape[1], min_rows=max(1, x.shape[1] // parts[0]))
            source = planes.reshape(-1)
        fused = (b, z[image], low, high, keep, at, chunk, alpha, masked, tail)
        product = functools.partial(compiled.tiles, w, source, offsets, y[image], columns, groups, group_stride, *fused)
        run_in_row_blocks(product, count, min_rows=max(1, count // parts[1]))
        if tail:
            main = columns - tail
            inputs = compiled.tail_inputs(
                source, offsets, keep, at, masked, columns, main, groups, group_stride, w.shape[1]
            )
            row_tiles = compiled.tile_count(w.shape[0], groups, 1)
            compiled.tail_rows(w, inputs, y[image], main, groups, b, z[image], low, high, alpha, 0, row_tiles)
