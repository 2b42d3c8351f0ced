"""Overhead models: what a runtime costs around its kernels.

- ``elementwise-1000``: a chain of 1000 Add/Mul/Sub/Max nodes on a ``[1, 16]`` float tensor (each
  node reads the previous result and the input), so a run is almost all per-node overhead;
  ``scripts/bench.py`` reports it per node.
- ``six-nodes``: Relu, Add, Mul, Sigmoid, Sub, Abs on ``[1, 16]``: a whole small model's ``run()``.
- ``small-convs``: 20 pointwise Conv + Relu layers of 64 channels on a 13×13 map (SqueezeNet's
  last stage, MobileNet's and ShuffleNet's small layers): what a runtime costs around a
  convolution whose arithmetic is a few microseconds; ``scripts/bench.py`` reports it per layer.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from . import BenchModel

#: Node counts of the models, for per-node figures.
NODES = {"elementwise-1000": 1000, "six-nodes": 6, "small-convs": 20}


def _model(nodes) -> bytes:
    graph = helper.make_graph(
        nodes,
        "micro",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)}


def elementwise_chain(count: int = 1000) -> tuple[bytes, dict[str, np.ndarray]]:
    ops = ("Add", "Mul", "Sub", "Max")
    nodes, previous = [], "x"
    for i in range(count):
        output = "y" if i == count - 1 else f"t{i}"
        nodes.append(helper.make_node(ops[i % len(ops)], [previous, "x"], [output], name=f"n{i}"))
        previous = output
    return _model(nodes), _feeds()


def six_nodes() -> tuple[bytes, dict[str, np.ndarray]]:
    chain = [("Relu", ["x"], "a"), ("Add", ["a", "x"], "b"), ("Mul", ["b", "b"], "c")]
    chain += [("Sigmoid", ["c"], "d"), ("Sub", ["d", "a"], "e"), ("Abs", ["e"], "y")]
    return _model([helper.make_node(op, inputs, [out], name=out) for op, inputs, out in chain]), _feeds()


def small_convs(layers: int = 20, channels: int = 64, size: int = 13) -> tuple[bytes, dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    nodes, weights, previous = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((channels, channels, 1, 1)) / np.sqrt(channels)).astype(np.float32)
        weights += [
            numpy_helper.from_array(w, f"w{i}"),
            numpy_helper.from_array(np.zeros(channels, np.float32), f"b{i}"),
        ]
        output = "y" if i == layers - 1 else f"r{i}"
        nodes += [helper.make_node("Conv", [previous, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}")]
        nodes += [helper.make_node("Relu", [f"c{i}"], [output], name=f"relu{i}")]
        previous = output
    shape = [1, channels, size, size]
    graph = helper.make_graph(
        nodes,
        "small_convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


MODELS = [
    BenchModel("elementwise-1000", elementwise_chain),
    BenchModel("six-nodes", six_nodes),
    BenchModel("small-convs", small_convs),
]
