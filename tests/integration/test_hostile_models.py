"""Hostile or malformed models and feeds: a clear onnxplug exception, never a crash, a hang,
an unbounded allocation or a Python recursion error."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

F, I64 = TensorProto.FLOAT, TensorProto.INT64
HUGE = np.array([1 << 20, 1 << 20, 1 << 10], np.int64)  # 2**50 elements


def _run(nodes, inputs, outputs, feeds, initializers=None, opset=17):
    model = make_model(nodes, inputs, outputs, initializers, opset=opset).SerializeToString()
    return onnxplug.InferenceSession(model).run(None, feeds)


@pytest.mark.parametrize("case", ["ConstantOfShape", "Expand", "Tile", "Range", "Pad", "Resize"])
def test_allocation_from_values_is_bounded(case):
    if case == "ConstantOfShape":
        args = ([helper.make_node("ConstantOfShape", ["s"], ["y"])], [("s", I64, [3])], {"s": HUGE})
    elif case == "Expand":
        args = (
            [helper.make_node("Expand", ["x", "s"], ["y"])],
            [("x", F, [1]), ("s", I64, [3])],
            {"x": np.ones(1, np.float32), "s": HUGE},
        )
    elif case == "Tile":
        args = (
            [helper.make_node("Tile", ["x", "r"], ["y"])],
            [("x", F, [1, 1, 1]), ("r", I64, [3])],
            {"x": np.ones((1, 1, 1), np.float32), "r": HUGE},
        )
    elif case == "Range":
        args = (
            [helper.make_node("Range", ["a", "b", "d"], ["y"])],
            [("a", F, []), ("b", F, []), ("d", F, [])],
            {"a": np.float32(0), "b": np.float32(1e30), "d": np.float32(1)},
        )
    elif case == "Pad":
        args = (
            [helper.make_node("Pad", ["x", "p"], ["y"])],
            [("x", F, [1]), ("p", I64, [2])],
            {"x": np.ones(1, np.float32), "p": np.array([1 << 50, 0], np.int64)},
        )
    else:
        args = (
            [helper.make_node("Resize", ["x", "", "scales"], ["y"])],
            [("x", F, [1, 1]), ("scales", F, [2])],
            {"x": np.ones((1, 1), np.float32), "scales": np.array([1e8, 1e8], np.float32)},
        )
    nodes, inputs, feeds = args
    feeds = {k: np.asarray(v) for k, v in feeds.items()}
    with pytest.raises(onnxplug.OnnxplugError, match=r"bytes|limit|too large|cannot"):
        _run(nodes, inputs, [("y", F if case != "ConstantOfShape" else F, None)], feeds)


def test_gather_index_out_of_range_is_invalid_argument():
    with pytest.raises(onnxplug.InvalidArgument, match=r"Gather.*index 5"):
        _run(
            [helper.make_node("Gather", ["x", "i"], ["y"])],
            [("x", F, [3]), ("i", I64, [1])],
            [("y", F, None)],
            {"x": np.ones(3, np.float32), "i": np.array([5], np.int64)},
        )


def test_integer_division_edge_cases_do_not_crash():
    int32 = TensorProto.INT32
    (y,) = _run(
        [helper.make_node("Div", ["a", "b"], ["y"])],
        [("a", int32, [1]), ("b", int32, [1])],
        [("y", int32, None)],
        {"a": np.array([-(2**31)], np.int32), "b": np.array([-1], np.int32)},
    )
    assert y.dtype == np.int32
    with pytest.raises(onnxplug.InvalidArgument, match="division by zero"):
        _run(
            [helper.make_node("Div", ["a", "b"], ["y"])],
            [("a", int32, [1]), ("b", int32, [1])],
            [("y", int32, None)],
            {"a": np.array([1], np.int32), "b": np.array([0], np.int32)},
        )


def test_long_chain_loads_without_recursion():
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(5000)]
    (y,) = _run(nodes, [("v0", F, [2])], [("v5000", F, [2])], {"v0": np.array([-1, 1], np.float32)})
    np.testing.assert_array_equal(y, [0, 1])


def test_deeply_nested_subgraphs():
    depth = 25  # deeper nesting is refused by protobuf itself (about 100 nested messages)

    def leaf(name):
        return helper.make_graph(
            [helper.make_node("Neg", ["x"], [name])], name, [], [helper.make_tensor_value_info(name, F, [1])]
        )

    inner = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["out0"])], "g0", [], [helper.make_tensor_value_info("out0", F, [1])]
    )
    for level in range(1, depth):
        node = helper.make_node("If", ["c"], [f"out{level}"], then_branch=inner, else_branch=leaf(f"neg{level}"))
        inner = helper.make_graph([node], f"g{level}", [], [helper.make_tensor_value_info(f"out{level}", F, [1])])
    top = helper.make_node("If", ["c"], ["y"], then_branch=inner, else_branch=leaf("neg_top"))
    (y,) = _run(
        [top],
        [("c", TensorProto.BOOL, []), ("x", F, [1])],
        [("y", F, [1])],
        {"c": np.array(True), "x": np.array([3.0], np.float32)},
    )
    np.testing.assert_array_equal(y, [3.0])


def test_terminate_stops_an_endless_loop_promptly():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Neg", ["v_in"], ["v_out"])],
        "endless",
        [
            helper.make_tensor_value_info("i", I64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_in", F, [1]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", F, [1]),
        ],
    )
    model = make_model(
        [helper.make_node("Loop", ["", "c", "v"], ["out"], body=body)],
        [("c", TensorProto.BOOL, []), ("v", F, [1])],
        [("out", F, [1])],
    ).SerializeToString()
    session = onnxplug.InferenceSession(model)
    options = onnxplug.RunOptions()
    threading.Timer(0.3, lambda: setattr(options, "terminate", True)).start()
    start = time.monotonic()
    with pytest.raises(onnxplug.Fail, match="terminate"):
        session.run(None, {"c": np.array(True), "v": np.ones(1, np.float32)}, options)
    assert time.monotonic() - start < 5
    options.terminate = False
    (out,) = session.run(None, {"c": np.array(False), "v": np.ones(1, np.float32)}, options)
    np.testing.assert_array_equal(out, [1.0])  # cond false: no iteration


def test_truncated_and_random_bytes_never_crash():
    rng = np.random.default_rng(0)
    valid = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2])]).SerializeToString()
    for cut in range(1, len(valid), max(1, len(valid) // 25)):
        try:
            onnxplug.InferenceSession(valid[:cut])
        except onnxplug.OnnxplugError:
            pass
    for _ in range(50):
        blob = bytearray(valid)
        for position in rng.integers(0, len(blob), size=3):
            blob[position] = int(rng.integers(0, 256))
        try:
            onnxplug.InferenceSession(bytes(blob))
        except onnxplug.OnnxplugError:
            pass
