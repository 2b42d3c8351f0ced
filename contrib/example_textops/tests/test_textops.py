"""The example text-op library, through onnxplug's public API only."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import onnxplug

DOMAIN = "ai.onnxplug.text"


def _model(op, **attrs):
    node = oh.make_node(op, ["x"], ["y"], domain=DOMAIN, **attrs)
    graph = oh.make_graph(
        [node],
        "text",
        [oh.make_tensor_value_info("x", onnx.TensorProto.STRING, ["n", 2])],
        [oh.make_value_info("y", onnx.TypeProto())],
    )
    opsets = [oh.make_opsetid("", 21), oh.make_opsetid(DOMAIN, 1)]
    return oh.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


TEXT = np.array([["Hello World", "  many   SPACES\there "], ["", "ÉCOLE Straße"], ["a\u3000b\nc", "x"]], dtype=object)


def _run(model, x, options=None, environment=None):
    session = onnxplug.InferenceSession(model, options, providers=["CPUExecutionProvider"], environment=environment)
    return session, session.run(None, {"x": x})[0]


def test_string_lower():
    session, y = _run(_model("StringLower"), TEXT)
    assert y.dtype == object and y.shape == TEXT.shape
    assert y.tolist() == [[s.lower() for s in row] for row in TEXT.tolist()]
    assert session.get_outputs()[0].type == "tensor(string)"


@pytest.mark.parametrize("pattern,rewrite", [("l", "L"), ("  ", "_"), ("o", "")])
def test_string_replace(pattern, rewrite):
    _, y = _run(_model("StringReplace", pattern=pattern, rewrite=rewrite), TEXT)
    assert y.tolist() == [[s.replace(pattern, rewrite) for s in row] for row in TEXT.tolist()]


def test_string_replace_default_rewrite_deletes():
    _, y = _run(_model("StringReplace", pattern="e"), TEXT)
    assert y.tolist() == [[s.replace("e", "") for s in row] for row in TEXT.tolist()]


def test_string_replace_rejects_an_empty_pattern():
    with pytest.raises(onnxplug.InvalidArgument, match="pattern"):
        _run(_model("StringReplace", pattern=""), TEXT)


def test_word_count():
    session, y = _run(_model("WordCount"), TEXT)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, [[len(s.split()) for s in row] for row in TEXT.tolist()])
    assert session.get_outputs()[0].type == "tensor(int64)"


def test_word_count_of_an_empty_batch():
    _, y = _run(_model("WordCount"), np.empty((0, 2), dtype=object))
    assert y.shape == (0, 2) and y.dtype == np.int64


@pytest.mark.parametrize(
    "library", ["onnxplug_example_textops.plugin", "onnxplug-contrib-example-textops", "example_textops"]
)
def test_register_custom_ops_library_loads_a_blocked_library(library):
    # A session of an environment that does not load the library fails on the unknown op...
    environment = onnxplug.Environment(block=["example_textops"])
    with pytest.raises(Exception, match="WordCount|ai.onnxplug.text"):
        _run(_model("WordCount"), TEXT, environment=environment)
    # ...and runs once SessionOptions names the library (module, distribution or entry point).
    options = onnxplug.SessionOptions()
    options.register_custom_ops_library(library)
    _, y = _run(_model("WordCount"), TEXT, options=options, environment=environment)
    np.testing.assert_array_equal(y, [[2, 3], [0, 2], [3, 1]])
