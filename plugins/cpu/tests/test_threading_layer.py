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
import numba, os
print(os.environ.get("GOMP_SPINCOUNT"))
print(numba.threading_layer())
"""


def _run(before: str = "", **env: str) -> tuple[str, str]:
    """The layer the team ran on, and ``GOMP_SPINCOUNT`` as the process's environment held it
    after the session ran (``"None"``: unset)."""
    environment = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    environment.update(env)
    done = subprocess.run(
        [sys.executable, "-c", _CODE.format(before=before)], env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    spin, layer = done.stdout.strip().splitlines()[-2:]
    return layer, spin


def _layer(before: str = "", **env: str) -> str:
    return _run(before, **env)[0]


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


@pytest.mark.numba
def test_libgomp_alone_gets_the_spin_count_and_the_applications_own_is_kept():
    """``kernels._jit`` sets ``GOMP_SPINCOUNT`` only while libgomp loads (its threads then spin
    ~20 ms before sleeping, so a run after an idle pause does not wait milliseconds for them):
    the process's environment does not keep it, and an application's own value stays."""
    assert _run() == ("omp", "None")
    assert _run(GOMP_SPINCOUNT="5000") == ("omp", "5000")
    assert _run(OMP_WAIT_POLICY="PASSIVE") == ("omp", "None")
