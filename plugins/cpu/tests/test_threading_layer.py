"""Which of numba's threading layers the compiled kernels' team runs on (``kernels._jit``,
``kernels._team``): OpenMP, even where TBB is loadable because a library brought it into the
process (``import openvino`` does: numba's own order tries TBB first, and the OCR recognizer's
2-thread runs took their one-thread time there), and the application's own choice where it made
one.  Each case runs in a fresh process: numba starts a layer once per process."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

_CODE = """
import sys
{before}
import numpy as np
from onnx import TensorProto, helper, numpy_helper
import onnxplug
from onnxplug.testing import make_model
w = numpy_helper.from_array(np.ones((32, 16, 3, 3), np.float32), "w")
node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
model = make_model([node], [("x", TensorProto.FLOAT, [1, 16, 32, 32])], [("y", TensorProto.FLOAT, None)])
model.graph.initializer.append(w)
options = onnxplug.SessionOptions()
options.intra_op_num_threads = 2
session = onnxplug.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
y = session.run(None, {{"x": np.ones((1, 16, 32, 32), np.float32)}})[0]
assert float(y[0, 0, 5, 5]) == 144.0
import numba
print(numba.threading_layer())
"""


def _layer(before: str = "", **env: str) -> str:
    environment = dict(os.environ, **env)
    done = subprocess.run(
        [sys.executable, "-c", _CODE.format(before=before)], env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.numba
def test_the_team_runs_on_openmp():
    assert _layer() == "omp"


@pytest.mark.numba
@pytest.mark.skipif(importlib.util.find_spec("openvino") is None, reason="needs openvino, which brings TBB in")
def test_openmp_is_kept_where_a_library_brought_tbb_in():
    assert _layer("import openvino") == "omp"


@pytest.mark.numba
def test_the_applications_choice_of_layer_is_kept():
    assert _layer(NUMBA_THREADING_LAYER="workqueue") == "workqueue"
