"""Nodes whose inputs are declared float32/float64 (or a wide integer type) with a known rank run
the bare numpy call (``kernels._typed``); every other node keeps the checking kernel, and both
compute the same values."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.kernels import NodeContext
from onnxplug_cpu.kernels import load_registry

UNARY_UFUNCS = {
    "Neg": np.negative,
    "Abs": np.abs,
    "Sign": np.sign,
    "Reciprocal": np.reciprocal,
    "Sqrt": np.sqrt,
    "Exp": np.exp,
    "Log": np.log,
    "Floor": np.floor,
    "Ceil": np.ceil,
    "Round": np.rint,
    "Sin": np.sin,
    "Atanh": np.arctanh,
}
INTEGER_TOO = {"Neg", "Abs", "Sign"}


def _built(op: str, elem_type: int, shape, version: int = 13):
    definition = load_registry().lookup("", op, version)
    assert definition is not None, op
    ctx = NodeContext(
        name="n",
        op_type=op,
        domain="",
        since_version=definition.key.since_version,
        opsets={"": version},
        num_inputs=1,
        num_outputs=1,
        input_types=[None if elem_type is None else (elem_type, shape)],
    )
    return definition.build(ctx, {})


@pytest.mark.parametrize("op", sorted(UNARY_UFUNCS))
def test_declared_float_runs_the_ufunc(op):
    version = 22 if op in ("Round", "Sin", "Atanh") else 13
    assert _built(op, TensorProto.FLOAT, (1, 16), version) is UNARY_UFUNCS[op]
    assert _built(op, TensorProto.DOUBLE, ("n", 3), version) is UNARY_UFUNCS[op]


@pytest.mark.parametrize("op", sorted(UNARY_UFUNCS))
def test_other_declarations_keep_the_checks(op):
    version = 22 if op in ("Round", "Sin", "Atanh") else 13
    ufunc = UNARY_UFUNCS[op]
    assert _built(op, TensorProto.FLOAT16, (4,), version) is not ufunc  # computed in float32
    assert _built(op, TensorProto.FLOAT, (), version) is not ufunc  # 0-d: ufuncs return scalars
    assert _built(op, TensorProto.FLOAT, None, version) is not ufunc  # rank unknown
    assert _built(op, None, None, version) is not ufunc  # type unknown
    integer = _built(op, TensorProto.INT32, (4,), version)
    assert (integer is ufunc) == (op in INTEGER_TOO)


def test_relu_and_sigmoid_skip_the_dtype_wrapper_for_declared_floats():
    relu_float = _built("Relu", TensorProto.FLOAT, (2, 3), 14)
    relu_half = _built("Relu", TensorProto.FLOAT16, (2, 3), 14)
    assert relu_float is not relu_half
    sigmoid_float = _built("Sigmoid", TensorProto.FLOAT, (2, 3))
    sigmoid_half = _built("Sigmoid", TensorProto.FLOAT16, (2, 3))
    assert sigmoid_float is not sigmoid_half
    x = np.array([[-2.0, -0.0, 3.5], [np.nan, -np.inf, np.inf]], np.float32)
    for relu in (relu_float, relu_half):
        np.testing.assert_array_equal(relu(x), np.maximum(x, np.float32(0)))
    with np.errstate(all="ignore"):
        expected = (1 / (1 + np.exp(-x.astype(np.float64)))).astype(np.float32)
    got = sigmoid_float(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def _session(op: str, elem_type: int, shape):
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", elem_type, shape)],
        [helper.make_tensor_value_info("y", elem_type, shape)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize(
    ("op", "dtype", "shape"),
    [
        ("Abs", np.float32, [2, 3]),
        ("Abs", np.int32, [2, 3]),
        ("Abs", np.float16, [2, 3]),
        ("Abs", np.float32, []),
        ("Neg", np.int64, [5]),
        ("Exp", np.float64, [2, 3]),
        ("Exp", np.float32, []),
        ("Sigmoid", np.float32, [2, 3]),
        ("Sigmoid", np.float16, [2, 3]),
        ("Relu", np.float32, [2, 3]),
        ("Relu", np.int8, [2, 3]),
    ],
)
def test_sessions_return_arrays_of_the_declared_type(op, dtype, shape):
    elem_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    x = (np.arange(int(np.prod(shape)), dtype=np.float64) - 2.5).reshape(shape).astype(dtype)
    (y,) = _session(op, elem_type, shape).run(None, {"x": x})
    assert isinstance(y, np.ndarray) and y.dtype == dtype and y.shape == tuple(shape)
    wide = x.astype(np.float64)
    expected = {
        "Abs": np.abs(wide),
        "Neg": -wide,
        "Exp": np.exp(wide),
        "Sigmoid": 1 / (1 + np.exp(-wide)),
        "Relu": np.maximum(wide, 0),
    }[op]
    np.testing.assert_allclose(y.astype(np.float64), expected, rtol=2e-3 if dtype == np.float16 else 1e-6)
