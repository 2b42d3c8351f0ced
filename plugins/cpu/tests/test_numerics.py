"""``onnxplug_cpu.numerics``, the helpers op libraries share with the CPU kernels: the
convolution against a direct sum over every output cell, and erf against ``math.erf``."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from onnxplug.errors import InvalidArgument
from onnxplug_cpu.numerics import convolve, erf, pack_conv_weights


def _direct_conv(x, w, b, group, strides, dilations, begin, end):
    """ONNX Conv written out: each output cell is a sum over its window (2-D only)."""
    n, c, height, width = x.shape
    m, per_group, kh, kw = w.shape
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (begin[0], end[0]), (begin[1], end[1])])
    out_h = (padded.shape[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    out_w = (padded.shape[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    y = np.zeros((n, m, out_h, out_w))
    for batch, out, i, j in itertools.product(range(n), range(m), range(out_h), range(out_w)):
        g = out // (m // group)
        for ci, a, bb in itertools.product(range(per_group), range(kh), range(kw)):
            value = padded[
                batch, g * per_group + ci, i * strides[0] + a * dilations[0], j * strides[1] + bb * dilations[1]
            ]
            y[batch, out, i, j] += value * w[out, ci, a, bb]
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


@pytest.mark.parametrize(
    "group, strides, dilations, pads",
    [(1, (1, 1), (1, 1), (0, 0, 0, 0)), (2, (2, 1), (1, 2), (1, 0, 2, 1)), (3, (1, 2), (2, 1), (0, 1, 1, 0))],
)
def test_convolve_is_the_direct_sum(group, strides, dilations, pads):
    rng = np.random.default_rng(group)
    x = rng.standard_normal((2, 3 * group, 7, 6))
    w = rng.standard_normal((2 * group, 3, 3, 2))
    b = rng.standard_normal(2 * group)
    got = convolve(x, w, b, group=group, strides=strides, dilations=dilations, pads=pads)
    want = _direct_conv(x, w, b, group, strides, dilations, pads[:2], pads[2:])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    packed = pack_conv_weights(w, group)
    again = convolve(x, w, b, group=group, strides=strides, dilations=dilations, pads=pads, packed=packed)
    np.testing.assert_array_equal(again, got)


def test_convolve_same_upper_pointwise_and_float16():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float16)
    w = rng.standard_normal((2, 4, 1, 1)).astype(np.float16)
    got = convolve(x, w, auto_pad="SAME_UPPER")
    assert got.dtype == np.float16 and got.shape == (1, 2, 5, 5)
    want = _direct_conv(x.astype(np.float32), w.astype(np.float32), None, 1, (1, 1), (1, 1), (0, 0), (0, 0))
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-3, atol=2e-3)


def test_bad_group_names_the_op():
    with pytest.raises(InvalidArgument, match=r"FusedConv: 3 output channels cannot be split into group=2"):
        pack_conv_weights(np.zeros((3, 1, 1, 1)), 2, "FusedConv")


def test_erf_matches_math_erf():
    x = np.concatenate([np.linspace(-7, 7, 301), [0.0, 1e-300, -1e-8]])
    want = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(erf(x), want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(erf(x.astype(np.float32)), want, rtol=2e-6, atol=1e-7)
