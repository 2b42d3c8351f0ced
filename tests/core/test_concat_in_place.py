"""Concat written in place (runtime._concat_in_place): producers that accept ``out=`` store
straight into a view of the Concat's output, the Concat copies only the inputs that did not
arrive there, and nested joins (DenseNet's) share one array.

Every model here is checked against onnx's reference evaluator, on the first (interpreted) and
later (straight-line) runs, so the rewrite can only change where values are stored, never them.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import onnxplug
from onnxplug.runtime import _concat_in_place
from onnxplug.runtime._concat_in_place import ConcatTarget

RNG = np.random.default_rng(7)


def _conv(name: str, source: str, cin: int, cout: int, k: int, inits: list, dilation: int = 1):
    w = (RNG.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    inits += [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]
    pad = dilation * (k // 2)
    return helper.make_node(
        "Conv",
        [source, f"{name}_w", f"{name}_b"],
        [name],
        name=name,
        kernel_shape=[k, k],
        pads=[pad] * 4,
        dilations=[dilation, dilation],
    )


def _model(nodes, inits, shape, outputs) -> bytes:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def _fire(batch: int = 1, *, symbolic: bool = False, conv_out: bool = False) -> bytes:
    """SqueezeNet's fire module: a squeeze convolution, two expand convolutions joined."""
    inits: list = []
    nodes = [
        _conv("squeeze", "x", 16, 8, 1, inits),
        helper.make_node("Relu", ["squeeze"], ["s"]),
        _conv("e1", "s", 8, 32, 1, inits),
        helper.make_node("Relu", ["e1"], ["r1"]),  # FusedConv, where ms_ops fuses it
        _conv("e3", "s", 8, 32, 3, inits),
        helper.make_node("Concat", ["r1", "e3"], ["y"], axis=1, name="join"),
    ]
    shape = ["n" if symbolic else batch, 16, 24, 24]
    return _model(nodes, inits, shape, ["y", "e3"] if conv_out else ["y"])


def _dense_block(layers: int = 3) -> bytes:
    """DenseNet's block: each layer joins the previous join with its new channels."""
    inits: list = []
    nodes, previous, channels = [], "x", 16
    for i in range(layers):
        nodes.append(_conv(f"c{i}", previous, channels, 8, 3, inits))
        nodes.append(helper.make_node("Concat", [previous, f"c{i}"], [f"j{i}"], axis=1, name=f"join{i}"))
        previous, channels = f"j{i}", channels + 8
    nodes.append(helper.make_node("Relu", [previous], ["y"]))
    return _model(nodes, inits, [1, 16, 32, 32], ["y"])


def _targets(session: onnxplug.InferenceSession) -> int:
    return sum(step.op_type == "ConcatTarget" for step in session._plan.steps)


def _check(model: bytes, x: np.ndarray, runs: int = 3) -> onnxplug.InferenceSession:
    session = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"])
    expected = ReferenceEvaluator(model).run(None, {"x": x})
    for _ in range(runs):
        got = session.run(None, {"x": x})
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    return session


def _writers(session: onnxplug.InferenceSession) -> list[str]:
    steps = session._plan.steps
    targets = {step.outputs[0] for step in steps if step.op_type == "ConcatTarget"}
    return sorted(s.op_type for s in steps if s.op_type != "Concat" and targets & set(s.inputs))


def test_a_fire_module_is_joined_in_place_and_computes_what_the_reference_does():
    session = _check(_fire(), RNG.standard_normal((1, 16, 24, 24)).astype(np.float32))
    assert _targets(session) == 1
    assert _writers(session) == ["Conv", "FusedConv"]


def test_nested_joins_share_one_array():
    session = _check(_dense_block(), RNG.standard_normal((1, 16, 32, 32)).astype(np.float32))
    assert _targets(session) == 3
    # the innermost joins take views of the outermost join's target
    allocations = [step for step in session._plan.steps if step.op_type == "ConcatTarget"]
    assert [len(step.inputs) for step in allocations] == [0, 1, 1]


def test_outputs_of_earlier_runs_are_not_overwritten():
    session = onnxplug.InferenceSession(_fire(), providers=["CPUExecutionProvider"])
    first_x = RNG.standard_normal((1, 16, 24, 24)).astype(np.float32)
    first = session.run(None, {"x": first_x})[0]
    kept = first.copy()
    for _ in range(3):
        session.run(None, {"x": RNG.standard_normal((1, 16, 24, 24)).astype(np.float32)})
    np.testing.assert_array_equal(first, kept)


def test_concurrent_runs_each_get_their_own_output():
    model = _fire()
    session = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"])
    reference = ReferenceEvaluator(model)
    feeds = [RNG.standard_normal((1, 16, 24, 24)).astype(np.float32) for _ in range(4)]
    expected = [reference.run(None, {"x": x})[0] for x in feeds]
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            for _ in range(20):
                np.testing.assert_allclose(session.run(None, {"x": feeds[i]})[0], expected[i], rtol=1e-4, atol=1e-4)
        except AssertionError as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors


@pytest.mark.parametrize(
    "model, shape",
    [
        (_fire(batch=2), (2, 16, 24, 24)),  # each input's channels are not one run of the output
        (_fire(symbolic=True), (1, 16, 24, 24)),  # no static shape to allocate
    ],
    ids=["batch-2", "symbolic-batch"],
)
def test_joins_that_cannot_be_in_place_are_left_as_they_are(model, shape):
    session = _check(model, RNG.standard_normal(shape).astype(np.float32))
    assert _targets(session) == 0


def test_a_graph_output_is_never_a_view_of_the_join():
    session = _check(_fire(conv_out=True), RNG.standard_normal((1, 16, 24, 24)).astype(np.float32))
    assert _targets(session) == 1  # e1 still writes in place; e3, a graph output, is copied
    y, e3 = session.run(None, {"x": np.ones((1, 16, 24, 24), np.float32)})
    before = e3.copy()
    y[...] = 0
    np.testing.assert_array_equal(e3, before)


def test_a_producer_that_returns_its_own_array_is_copied():
    # a dilated convolution takes the numpy path, which does not store into ``out``
    inits: list = []
    nodes = [
        _conv("a", "x", 8, 16, 3, inits, dilation=2),
        _conv("b", "x", 8, 16, 1, inits),
        helper.make_node("Concat", ["a", "b", "x"], ["y"], axis=1),
    ]
    x = RNG.standard_normal((1, 8, 32, 32)).astype(np.float32)
    session = _check(_model(nodes, inits, [1, 8, 32, 32], ["y"]), x)
    assert _targets(session) == 1


def test_small_joins_keep_their_copy():
    inits: list = []
    nodes = [_conv("a", "x", 4, 4, 1, inits), _conv("b", "x", 4, 4, 1, inits)]
    nodes.append(helper.make_node("Concat", ["a", "b"], ["y"], axis=1))
    session = _check(_model(nodes, inits, [1, 4, 8, 8], ["y"]), RNG.standard_normal((1, 4, 8, 8)).astype(np.float32))
    assert 2 * 4 * 8 * 8 * 4 < _concat_in_place.MIN_BYTES
    assert _targets(session) == 0


def _join(shapes):
    regions, start = [], 0
    for shape in shapes:
        regions.append((slice(None), slice(start, start + shape[1])))
        start += shape[1]
    calls = []

    def concat(*values):
        calls.append(len(values))
        return np.concatenate(values, axis=1)

    return _concat_in_place._joining(concat, regions, shapes), regions, calls


def test_the_join_copies_only_what_is_not_its_own_view():
    shapes = [(1, 2, 3), (1, 3, 3)]
    join, regions, calls = _join(shapes)
    array = np.zeros((1, 5, 3), np.float32)
    target = ConcatTarget(array, [array[regions[0]], None])
    target.views[0][...] = 7  # written in place by its producer
    other = np.full((1, 3, 3), 2, np.float32)
    result = join(target.views[0], other, target)
    assert result is array and not calls
    np.testing.assert_array_equal(result[:, :2], 7)
    np.testing.assert_array_equal(result[:, 2:], 2)
    # an alias of the right memory that is not the view object itself is copied, not trusted
    alias = array[:, :2].copy()
    alias[...] = 3
    assert join(alias, other, target) is array
    np.testing.assert_array_equal(array[:, :2], 3)


def test_the_join_falls_back_to_the_concat_on_another_shape():
    shapes = [(1, 2, 3), (1, 3, 3)]
    join, regions, calls = _join(shapes)
    array = np.zeros((1, 5, 3), np.float32)
    target = ConcatTarget(array, [array[regions[0]], array[regions[1]]])
    result = join(np.ones((1, 2, 3), np.float32), np.ones((1, 4, 3), np.float32), target)
    assert calls == [2] and result.shape == (1, 6, 3)
