"""Fixtures for the scikit-learn suites: convert with skl2onnx, compare with onnxruntime.

onnxruntime is the oracle and runs with ``intra_op_num_threads=1``: its tree ensembles sum the
trees of a block of rows in per-thread chunks when it has several threads, so the float32 sums,
and the labels of rows whose classes tie, change with its thread count (see
``test_sklearn_trees.py``); one thread is its sequential, tree-by-tree order.
"""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def skl_to_onnx():
    """``convert(estimator, X, options=None) -> bytes``: skl2onnx's model as it writes it
    (the default domain imported twice included: onnxplug accepts agreeing duplicates)."""
    skl2onnx = pytest.importorskip("skl2onnx", reason="the scikit-learn suites need skl2onnx")

    def convert(estimator, x, options=None, **kwargs):
        return skl2onnx.to_onnx(estimator, x, options=options, **kwargs).SerializeToString()

    return convert


def run_ort(model: bytes, feeds: dict, threads: int = 1) -> list:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_outputs_match(expected: list, got: list, atol: float = 1e-5, what: str = "") -> None:
    """Labels (integer, bool, string) equal everywhere, floats within ``atol``, same shapes."""
    assert len(expected) == len(got), what
    for index, (want, have) in enumerate(zip(expected, got)):
        label = f"{what} output {index}"
        if isinstance(want, list):  # ZipMap's list of {label: probability}
            assert isinstance(have, list) and len(have) == len(want), label
            for row, (a, b) in enumerate(zip(want, have)):
                assert a.keys() == b.keys(), f"{label} row {row}: labels {list(b)} != {list(a)}"
                assert max(abs(a[k] - b[k]) for k in a) <= atol, f"{label} row {row}: {b} != {a}"
            continue
        have = np.asarray(have)
        assert have.shape == want.shape, f"{label}: shape {have.shape} != {want.shape}"
        if want.dtype.kind in "fc":
            assert have.dtype == want.dtype, f"{label}: dtype {have.dtype} != {want.dtype}"
            np.testing.assert_allclose(have, want, rtol=0, atol=atol, err_msg=label)
        else:
            differ = np.nonzero(np.asarray(have != want).reshape(-1))[0]
            assert differ.size == 0, f"{label}: {differ.size} rows differ, first at {differ[:5]}"


@pytest.fixture
def ort_run():
    """``run(model_bytes, feeds, threads=1) -> outputs`` with onnxruntime."""
    return run_ort


@pytest.fixture
def matches_ort():
    """``check(model_bytes, feeds) -> (expected, got)``: onnxplug's outputs equal onnxruntime's."""
    import onnxplug

    def check(model: bytes, feeds: dict, atol: float = 1e-5, what: str = ""):
        expected = run_ort(model, feeds)
        got = onnxplug.InferenceSession(model).run(None, feeds)
        assert_outputs_match(expected, got, atol, what)
        return expected, got

    return check
