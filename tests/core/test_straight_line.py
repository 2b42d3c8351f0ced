"""The straight-line runner (runtime._straight_line.StraightLine) that plain sequential runs go through.

A long chain crosses the runner's function boundaries (``StraightLine.CHUNK`` steps each). A plan's
first run is interpreted and later ones compiled, so every check runs twice; the checks are the
loop's contract: results equal the profiled (interpreted) loop's, an error names
the failing node wherever it sits, ``RunOptions.terminate`` stops the run, multi-output nodes
store every output, and values are freed after their last reader.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.runtime._straight_line import StraightLine

COUNT = 2 * StraightLine.CHUNK + 37


def _chain(count: int, *, bad_at: int | None = None) -> bytes:
    nodes, previous = [], "x"
    for i in range(count):
        output = "y" if i == count - 1 else f"t{i}"
        op = ("Add", "Mul", "Sub", "Max")[i % 4]
        second = "wrong" if i == bad_at else "x"
        nodes.append(helper.make_node(op, [previous, second], [output], name=f"n{i}"))
        previous = output
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])]
    if bad_at is not None:
        inputs.append(helper.make_tensor_value_info("wrong", TensorProto.FLOAT, ["n"]))
    graph = helper.make_graph(nodes, "chain", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _expected(x: np.ndarray, count: int) -> np.ndarray:
    value = x
    for i in range(count):
        value = (np.add, np.multiply, np.subtract, np.maximum)[i % 4](value, x)
    return value


def test_a_chain_longer_than_several_chunks_computes_what_the_ops_say():
    x = np.array([[0.5, -0.75, 0.9, 0.25]], np.float32)
    session = onnxplug.InferenceSession(_chain(COUNT))
    for _ in range(2):
        (y,) = session.run(None, {"x": x})
        np.testing.assert_allclose(y, _expected(x, COUNT), rtol=1e-5)


def test_results_equal_the_profiled_loop():
    x = np.array([[0.1, 0.2, -0.3, 0.4]], np.float32)
    session = onnxplug.InferenceSession(_chain(COUNT))
    session.run(None, {"x": x})
    plain = session.run(None, {"x": x})[0]
    options = onnxplug.SessionOptions()
    options.enable_profiling = True
    profiled_session = onnxplug.InferenceSession(_chain(COUNT), options)
    profiled = profiled_session.run(None, {"x": x})[0]
    profiled_session.end_profiling()
    np.testing.assert_array_equal(plain, profiled)


def test_an_error_in_a_later_chunk_names_its_node():
    bad = StraightLine.CHUNK + 5
    session = onnxplug.InferenceSession(_chain(COUNT, bad_at=bad))
    feeds = {"x": np.ones((1, 4), np.float32), "wrong": np.ones(3, np.float32)}
    for _ in range(2):
        with pytest.raises(onnxplug.Fail, match=f"Name:'n{bad}'"):
            session.run(None, feeds)


def test_terminate_stops_the_run():
    session = onnxplug.InferenceSession(_chain(COUNT))
    run_options = onnxplug.RunOptions()
    for _ in range(2):
        run_options.terminate = True
        with pytest.raises(onnxplug.Fail, match="terminate"):
            session.run(None, {"x": np.ones((1, 4), np.float32)}, run_options)
        run_options.terminate = False
        assert session.run(None, {"x": np.ones((1, 4), np.float32)}, run_options)[0].shape == (1, 4)


def test_multi_output_nodes_store_every_output():
    nodes = [
        helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2),
        helper.make_node("Sub", ["a", "b"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "split",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    session = onnxplug.InferenceSession(model.SerializeToString())
    for _ in range(2):
        (y,) = session.run(None, {"x": np.array([[5, 7, 1, 2]], np.float32)})
        np.testing.assert_array_equal(y, [[4, 5]])


def test_values_are_freed_after_their_last_reader():
    # The generated code stores None into every slot at its last use, as the interpreted loop
    # does: after a run only the outputs' slots still hold arrays.
    session = onnxplug.InferenceSession(_chain(8))
    plan = session._plan
    runner = StraightLine(plan.steps)
    for _ in range(2):
        values = plan.template.copy()
        values[plan.input_slots[0]] = np.ones((1, 4), np.float32)
        runner(values, None)
        held = [
            slot for slot, value in enumerate(values) if isinstance(value, np.ndarray) and slot not in plan.input_slots
        ]
        assert held == list(plan.output_slots)


def test_the_second_run_is_compiled_and_the_first_is_not():
    session = onnxplug.InferenceSession(_chain(8))
    runner = StraightLine(session._plan.steps)
    values = session._plan.template.copy()
    values[session._plan.input_slots[0]] = np.ones((1, 4), np.float32)
    runner(values.copy(), None)
    assert runner._plain == ()  # interpreted, nothing compiled
    runner(values.copy(), None)
    assert runner._plain and all(chunk.__code__.co_filename == "<onnxplug plan>" for chunk in runner._plain)
