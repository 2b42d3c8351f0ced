"""Kernel failures raise the class onnxruntime raises for the same fault.

Code ported from onnxruntime catches ``Fail`` for shapes that do not fit (Concat, MatMul,
broadcasting, Reshape) and ``InvalidArgument`` for bad indices or attributes (Gather, Slice,
Transpose); each case is run on both runtimes and the class names compared.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

ort = pytest.importorskip("onnxruntime", reason="comparing error classes needs onnxruntime as an oracle")

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _case(op, inputs, feeds, opset=17, **attrs):
    names = [name for name, _ in inputs]
    node = helper.make_node(op, names, ["y"], **attrs)
    model = make_model([node], [(n, t, None) for n, t in inputs], [("y", F, None)], opset=opset)
    return model.SerializeToString(), feeds


def _f(*shape):
    return np.ones(shape, np.float32)


CASES = {
    "Concat": _case("Concat", [("a", F), ("b", F)], {"a": _f(2, 3), "b": _f(2, 4)}, axis=0),
    "Add broadcast": _case("Add", [("a", F), ("b", F)], {"a": _f(2, 3), "b": _f(4)}),
    "MatMul": _case("MatMul", [("a", F), ("b", F)], {"a": _f(2, 3), "b": _f(4, 2)}),
    "Gemm": _case("Gemm", [("a", F), ("b", F)], {"a": _f(2, 3), "b": _f(4, 2)}),
    "Reshape": _case("Reshape", [("a", F), ("s", I64)], {"a": _f(2, 3), "s": np.array([4, 2])}),
    "Gather index": _case("Gather", [("a", F), ("i", I64)], {"a": _f(2, 3), "i": np.array([5])}),
    "GatherElements index": _case(
        "GatherElements", [("a", F), ("i", I64)], {"a": _f(2, 3), "i": np.array([[5, 0, 0]])}
    ),
    "Expand": _case("Expand", [("a", F), ("s", I64)], {"a": _f(2, 3), "s": np.array([4, 4])}),
    "Conv channels": _case("Conv", [("a", F), ("w", F)], {"a": _f(1, 3, 5, 5), "w": _f(2, 4, 3, 3)}),
    "Squeeze non-1": _case("Squeeze", [("a", F), ("ax", I64)], {"a": _f(2, 3), "ax": np.array([0])}),
    "Softmax axis": _case("Softmax", [("a", F)], {"a": _f(2, 3)}, axis=5),
    "Transpose perm": _case("Transpose", [("a", F)], {"a": _f(2, 3)}, perm=[0, 1, 2]),
}


def _error(runtime, model, feeds):
    options = runtime.SessionOptions()
    options.log_severity_level = 4
    session = runtime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as info:
        session.run(None, feeds)
    return info.value


@pytest.mark.parametrize("case", list(CASES))
def test_kernel_error_class_matches_onnxruntime(case):
    model, feeds = CASES[case]
    expected = type(_error(ort, model, feeds)).__name__
    ours = _error(onnxplug, model, feeds)
    assert type(ours).__name__ == expected, ours
    assert "Non-zero status code returned while running" in str(ours)
