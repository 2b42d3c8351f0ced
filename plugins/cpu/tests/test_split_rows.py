"""Row blocks over the run's threads (kernels._split_rows), as the compiled tree walks use them."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import onnxplug
from onnxplug_cpu.kernels import _split_rows

threadpoolctl = pytest.importorskip("threadpoolctl", reason="the thread budget is read through threadpoolctl")


def test_the_budget_follows_the_blas_thread_count():
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        assert _split_rows.thread_budget() == 1
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        assert _split_rows.thread_budget() == 2


def test_blocks_cover_every_row_once_in_order_on_several_threads():
    seen: list[tuple[int, int, str]] = []
    lock = threading.Lock()

    def work(start, stop):
        with lock:
            seen.append((start, stop, threading.current_thread().name))
        return (start, stop)

    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        results = _split_rows.run_in_row_blocks(work, 1000, min_rows=64)
    assert results == [(0, 500), (500, 1000)]
    assert len({name for _, _, name in seen}) == 2  # the caller and one pool thread
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        assert _split_rows.run_in_row_blocks(work, 100, min_rows=64) == [(0, 100)]  # too few rows


def test_a_forest_gives_the_same_scores_split_or_not():
    pytest.importorskip("sklearn", reason="the forest is fitted with scikit-learn")
    pytest.importorskip("skl2onnx", reason="the forest is converted with skl2onnx")
    pytest.importorskip("numba", reason="the split walk is the compiled one")
    from skl2onnx import to_onnx
    from sklearn.datasets import make_regression
    from sklearn.ensemble import RandomForestRegressor

    x, y = make_regression(n_samples=600, n_features=8, random_state=0)
    x = x.astype(np.float32)
    model = RandomForestRegressor(n_estimators=20, max_depth=6, random_state=0).fit(x, y)
    data = to_onnx(model, x[:1], target_opset={"": 17, "ai.onnx.ml": 3}).SerializeToString()
    outputs = []
    for threads in (1, 2):
        options = onnxplug.SessionOptions()
        options.intra_op_num_threads = threads
        session = onnxplug.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        outputs.append(session.run(None, {"X": x})[0])
    np.testing.assert_array_equal(outputs[0], outputs[1])
