"""``onnx.backend.test.BackendTest(onnxplug.backend, __name__)`` runs onnx's own cases."""

from __future__ import annotations

import io
import unittest

import numpy as np
import onnx.backend.test
from onnx import TensorProto, helper

import onnxplug.backend
from onnxplug.testing import make_model

CASES = r"^test_(relu|add_bcast|gemm_default_no_bias|softmax_axis_0|if_seq|loop11)_cpu$"


def test_onnx_backend_test_runs_on_onnxplug():
    # A handful of onnx's node cases through the protocol (the conformance suite runs them all,
    # without BackendTest); run with unittest so the thousands of excluded cases stay quiet.
    backend_test = onnx.backend.test.BackendTest(onnxplug.backend, __name__)
    backend_test.include(CASES)
    suite = unittest.TestSuite()
    for case_class in backend_test.test_cases.values():
        suite.addTests(unittest.defaultTestLoader.loadTestsFromTestCase(case_class))
    result = unittest.TextTestRunner(stream=io.StringIO()).run(suite)
    assert not result.failures and not result.errors, (result.failures + result.errors)[:1]
    assert result.testsRun - len(result.skipped) == 6


def test_protocol_functions():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])]
    )
    assert onnxplug.backend.supports_device("CPU") and not onnxplug.backend.supports_device("CUDA")
    assert onnxplug.backend.is_compatible(model)
    (y,) = onnxplug.backend.run_model(model, [np.array([-1.0, 1.0], np.float32)])
    np.testing.assert_array_equal(y, [0.0, 1.0])
    rep = onnxplug.backend.prepare(model)
    np.testing.assert_array_equal(rep.run({"x": np.array([2.0, -2.0], np.float32)})[0], [2.0, 0.0])
