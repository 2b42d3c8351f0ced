"""The recurrent step's product (``kernels._recurrent_ir.add_products``) against numpy over every
entry count and the tails of its 64-column blocks, touching nothing past them, and the packed
layout it reads (``kernels._recurrent_jit.packed_columns``)."""

from __future__ import annotations

import functools

import numpy as np
import pytest


@functools.cache
def _product():
    numba = pytest.importorskip("numba")
    from onnxplug_cpu.kernels._recurrent_ir import add_products

    @numba.njit
    def call(sums, state, packed, count, width, entries, sums_stride, state_stride):
        add_products(
            sums.ctypes.data, state.ctypes.data, packed.ctypes.data, count, width, entries, sums_stride, state_stride
        )

    return call


@pytest.mark.numba
@pytest.mark.parametrize("entries", [1, 2, 3, 4])
@pytest.mark.parametrize("count,width", [(1, 1), (3, 16), (5, 63), (6, 64), (7, 65), (2, 130), (9, 200)])
def test_the_product_adds_each_entrys_rows_and_touches_nothing_else(entries, count, width):
    from onnxplug_cpu.kernels._recurrent_jit import packed_columns

    rng = np.random.default_rng(count * 1000 + width)
    w = rng.standard_normal((count, width)).astype(np.float32)
    # Positive states, so that a lane past ``width`` that a mutated product wrote back would add
    # +0 (the packed padding times a state) to the guard columns' -0.0 and flip their sign.
    state = np.abs(rng.standard_normal((6, count + 3))).astype(np.float32) + 0.1  # count + 3 floats apart
    sums = rng.standard_normal((6, width + 5)).astype(np.float32)
    sums[:, width:] = -0.0  # 5 guard columns after each row
    before = sums.copy()
    _product()(sums, state, packed_columns(w), count, width, entries, width + 5, count + 3)
    want = before.copy()
    want[:entries, :width] += state[:entries, :count].astype(np.float64) @ w.astype(np.float64)
    np.testing.assert_allclose(sums, want, rtol=1e-5, atol=1e-5)
    assert np.signbit(sums[:, width:]).all()  # the guard columns, untouched
    np.testing.assert_array_equal(sums[entries:], before[entries:])  # the entries past ``entries``


def test_packed_columns_lays_out_blocks_of_64():
    from onnxplug_cpu.kernels._recurrent_jit import BLOCK, packed_columns

    w = np.arange(3 * 70, dtype=np.float32).reshape(3, 70)
    packed = packed_columns(w)
    assert packed.shape == (2, 3, BLOCK) and packed.flags.c_contiguous
    np.testing.assert_array_equal(packed[0], w[:, :64])
    np.testing.assert_array_equal(packed[1, :, :6], w[:, 64:])
    assert not packed[1, :, 6:].any()  # zero padding
