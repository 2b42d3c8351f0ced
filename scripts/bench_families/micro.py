"""Overhead models: what a runtime costs around its kernels.

- ``elementwise-1000``: a chain of 1000 Add/Mul/Sub/Max nodes on a ``[1, 16]`` float tensor (each
  node reads the previous result and the input), so a run is almost all per-node overhead;
  ``scripts/bench.py`` reports it per node.
- ``six-nodes``: Relu, Add, Mul, Sigmoid, Sub, Abs on ``[1, 16]``: a whole small model's ``run()``.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from . import BenchModel

#: Node counts of the models, for per-node figures.
NODES = {"elementwise-1000": 1000, "six-nodes": 6}


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


MODELS = [BenchModel("elementwise-1000", elementwise_chain), BenchModel("six-nodes", six_nodes)]
