"""String feeds in every form onnxruntime accepts: kernels always see ``str`` elements.

ML.NET-exported pipelines are fed ``np.void`` arrays; bytes arrays and object arrays of
bytes or other objects are common too.  onnxruntime (the oracle) decodes bytes as UTF-8 and
applies ``str()`` to objects; the results must be the same.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.errors import InvalidArgument

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle for string feeds")


def _identity_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.STRING, None)],
        [helper.make_tensor_value_info("y", TensorProto.STRING, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _label_encoder_model() -> bytes:
    node = helper.make_node(
        "LabelEncoder",
        ["x"],
        ["y"],
        domain="ai.onnx.ml",
        keys_strings=["a", "bc", "é", "b'a'"],
        values_int64s=[1, 2, 3, 4],
        default_int64=-1,
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.STRING, [None])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [None])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 2)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


FEEDS = {
    "void": lambda: np.array([b"a"], dtype=np.void),
    "void-same-width": lambda: np.array([b"ab", b"bc"], dtype=np.void),
    "void-with-nul": lambda: np.array([b"a\x00", b"bc"], dtype="V2"),
    "void-2d": lambda: np.array([[b"ab", b"bc"], [b"cd", b"de"]], dtype="V2"),
    "bytes-short": lambda: np.array([b"a", b"bc", b""], dtype="S3"),
    "bytes-utf8": lambda: np.array(["é".encode(), b"x"], dtype="S3"),
    "object-bytes": lambda: np.array([b"a", b"bc"], dtype=object),
    "object-mixed": lambda: np.array(["a", b"bc", 3], dtype=object),
    "list-of-bytes": lambda: [b"a", b"bc"],
    "unicode": lambda: np.array(["a", "bc"]),
}


@pytest.mark.parametrize("name", sorted(FEEDS))
def test_string_feeds_like_onnxruntime(name):
    model = _identity_model()
    feed = FEEDS[name]()
    expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0]
    got = onnxplug.InferenceSession(model).run(None, {"x": feed})[0]
    assert got.dtype == object and got.shape == expected.shape
    assert got.tolist() == expected.tolist()
    assert all(type(item) is str for item in got.reshape(-1))


def test_string_feeds_reach_kernels_as_str():
    model = _label_encoder_model()
    for feed in (
        np.array([b"bc", b"zz"], dtype=np.void),
        np.array([b"a", "é".encode(), b"zz"], dtype="S3"),  # onnxruntime reads past full-width items
        np.array([b"a", "bc", b"zz"], dtype=object),
    ):
        expected = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": feed})[0]
        got = onnxplug.InferenceSession(model).run(None, {"x": feed})[0]
        np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["S1", np.void])
def test_bytes_that_are_not_utf8_are_refused(dtype):
    session = onnxplug.InferenceSession(_identity_model())
    with pytest.raises(InvalidArgument, match="input 'x'.*UTF-8"):
        session.run(None, {"x": np.array([b"\xff"], dtype=dtype)})


def test_void_feed_for_a_float_input_is_a_type_error():
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with pytest.raises(InvalidArgument, match="input 'x'"):
        onnxplug.InferenceSession(model).run(None, {"x": np.array([b"ab"], dtype=np.void)})
