"""Helpers for the com.microsoft op tests: build a one-node model, run it on onnxplug and on
onnxruntime (the oracle; tests skip without it)."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import onnxplug

MS = "com.microsoft"


def _value_info(name, array):
    elem = onnx.helper.np_dtype_to_tensor_dtype(array.dtype)
    return oh.make_tensor_value_info(name, elem, array.shape)


def one_node_model(op, inputs, outputs, *, domain=MS, opset=17, initializers=(), node_attrs=None, **attrs):
    """A model of one node (``node_attrs``: attributes whose names clash with these parameters).

    ``inputs``: list of (name, array) — name "" for an absent optional input; arrays whose
    name is in ``initializers`` become constant initializers."""
    """``outputs``: names, or (name, element type) pairs for outputs onnxruntime cannot infer."""
    names = [name for name, _ in inputs]
    attrs.update(node_attrs or {})
    typed = [o if isinstance(o, tuple) else (o, None) for o in outputs]
    node = oh.make_node(op, names, [o for o, _ in typed], domain=domain, **attrs)
    graph_inputs = [_value_info(n, a) for n, a in inputs if n and n not in initializers]
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in inputs if n in initializers]
    graph = oh.make_graph(
        [node],
        "test",
        graph_inputs,
        [
            oh.make_tensor_value_info(o, t, None) if t else oh.make_value_info(o, onnx.TypeProto())
            for o, t in typed
            if o
        ],
        initializer=inits,
    )
    opsets = [oh.make_opsetid("", opset), oh.make_opsetid(MS, 1)]
    return oh.make_model(graph, opset_imports=opsets, ir_version=9).SerializeToString()


@pytest.fixture
def ort():
    return pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle for com.microsoft ops")


def run_onnxplug(op, inputs, outputs, *, initializers=(), domain=MS, opset=17, **attrs):
    model = one_node_model(op, inputs, outputs, domain=domain, opset=opset, initializers=initializers, **attrs)
    feeds = {n: a for n, a in inputs if n and n not in initializers}
    return onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.fixture
def run_ours():
    """``run_ours(op, inputs, outputs, **attrs) -> onnxplug results`` (for ops onnxruntime's CPU lacks)."""
    return run_onnxplug


@pytest.fixture
def run_both(ort):
    """``run_both(op, inputs, outputs, **attrs) -> (onnxplug results, onnxruntime results)``."""

    def run(op, inputs, outputs, *, initializers=(), domain=MS, opset=17, **attrs):
        model = one_node_model(op, inputs, outputs, domain=domain, opset=opset, initializers=initializers, **attrs)
        feeds = {n: a for n, a in inputs if n and n not in initializers}
        ours = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
        theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
        return ours, theirs

    return run


def assert_close(ours, theirs, rtol=1e-4, atol=1e-5):
    assert len(ours) == len(theirs)
    for got, want in zip(ours, theirs):
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        assert got.shape == want.shape, (got.shape, want.shape)
        if np.issubdtype(want.dtype, np.integer) or want.dtype == bool:
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


@pytest.fixture
def close():
    return assert_close


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def assert_one_step(ours, theirs, fraction=0.05):
    """Quantized results equal up to one quantization step, in at most ``fraction`` of the
    elements (where onnxruntime's float arithmetic puts a value on the other side of a rounding
    boundary)."""
    assert len(ours) == len(theirs)
    for got, want in zip(ours, theirs):
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
        diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
        assert diff.max(initial=0) <= 1, f"max difference {diff.max()} steps"
        assert (diff > 0).mean() <= fraction if diff.size else True, f"{(diff > 0).mean():.1%} of elements differ"


@pytest.fixture
def one_step():
    return assert_one_step
