"""Linear-model pipelines run as one step: ``[Scaler →] LinearClassifier [→ Normalizer(L1)]`` and
``Scaler → LinearRegressor``.

Why: skl2onnx writes ``make_pipeline(StandardScaler(), LogisticRegression())`` as these three
ai.onnx.ml nodes, and at batch 1 (how such models are served) each node costs more in numpy calls
and in the run loop than its arithmetic.  Fused, the Scaler's affine map is folded into the
weights and the Normalizer divides the float64 probabilities before they are rounded, so one
``dot`` and a few float operations make the whole row (:mod:`._linear_model`).  onnxruntime runs
the three nodes one by one, in float32.

Chains are claimed only among the nodes the CPU provider runs, with every intermediate value read
by the next node only (and not a graph output), and only where the Scaler's attributes fit the
model's width (one value, or one per feature): anything else runs node by node, where the kernels
report what does not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from onnxplug.api import CompiledPartition, Partition
from onnxplug.graph import GraphView
from onnxplug.kernels import attribute_value

from ._linear_model import (
    LinearClassifierModel,
    LinearRegressorModel,
    LinearScores,
    classifier_weights,
    regressor_weights,
)
from ._post_transforms import class_labels
from ._readers import value_readers

__all__ = ["compile_linear_chain", "is_linear_chain", "linear_chains"]

ML = "ai.onnx.ml"
_MODELS = {"LinearClassifier", "LinearRegressor"}


def _width(op_type: str, attributes: dict[str, Any]) -> int | None:
    """The number of features the linear model reads, from its attributes; ``None`` when they
    do not split (the kernel then refuses the model with the reason)."""
    coefficients = attributes.get("coefficients") or ()
    if op_type == "LinearRegressor":
        targets = int(attributes.get("targets", 1))
    else:
        intercepts = attributes.get("intercepts") or ()
        labels = attributes.get("classlabels_strings") or attributes.get("classlabels_ints") or ()
        targets = len(intercepts) or max(len(labels), 1)
    if targets <= 0 or not coefficients or len(coefficients) % targets:
        return None
    return len(coefficients) // targets


def _scaler_fits(attributes: dict[str, Any], width: int) -> bool:
    return all(len(attributes.get(name) or ()) in (0, 1, width) for name in ("offset", "scale"))


def linear_chains(graph: GraphView, claimed: set[str]) -> list[tuple[str, ...]]:
    """Node names to fuse, each chain of two or three nodes in execution order."""
    producer = {value: node for node in graph.nodes for value in node.outputs if value}
    readers = value_readers(graph)
    outputs = set(graph.outputs)

    def ours(node, op_type: str) -> bool:
        return node is not None and node.name in claimed and node.domain == ML and node.op_type == op_type

    def only_reader(value: str):
        found = readers.get(value, [])
        return found[0] if len(found) == 1 and value not in outputs else None

    chains = []
    for node in graph.nodes:
        if node.op_type not in _MODELS or not ours(node, node.op_type) or not node.inputs:
            continue
        attributes = node.attributes
        width = _width(node.op_type, attributes)
        if width is None:
            continue
        chain = [node.name]
        scaler = producer.get(node.inputs[0])
        if ours(scaler, "Scaler") and only_reader(node.inputs[0]) is node and _scaler_fits(scaler.attributes, width):
            chain.insert(0, scaler.name)
        if node.op_type == "LinearClassifier" and len(node.outputs) > 1 and node.outputs[1]:
            normalizer = only_reader(node.outputs[1])
            if ours(normalizer, "Normalizer") and normalizer.attributes.get("norm") == "L1":
                chain.append(normalizer.name)
        if len(chain) > 1:
            chains.append(tuple(chain))
    return chains


def is_linear_chain(partition: Partition) -> bool:
    """Whether ``partition`` is one of :func:`linear_chains`' chains (not a QDQ chain)."""
    return any(node.domain == ML and node.op_type in _MODELS for node in partition.model.graph.node)


def compile_linear_chain(partition: Partition) -> CompiledPartition:
    """A partition of one chain as one call over its single input, the features."""
    nodes = {node.op_type: node for node in partition.model.graph.node}
    attributes = {op_type: {a.name: attribute_value(a) for a in node.attribute} for op_type, node in nodes.items()}
    scaler = attributes.get("Scaler", {})
    fold = {"offset": scaler.get("offset") or None, "scale": scaler.get("scale") or None}
    produced: dict[str, int] = {}  # value name -> position in the model's results
    if "LinearClassifier" in nodes:
        node, own = nodes["LinearClassifier"], attributes["LinearClassifier"]
        labels = class_labels(own.get("classlabels_ints"), own.get("classlabels_strings"))
        weights, bias = classifier_weights(own.get("coefficients"), own.get("intercepts"), labels)
        model: Callable[[Any], Any] = LinearClassifierModel(
            LinearScores(weights, bias, "LinearClassifier", **fold),
            labels,
            own.get("post_transform", "NONE"),
            normalize="Normalizer" in nodes,
        )
        produced[node.output[0]] = 0
        if "Normalizer" in nodes:
            produced[nodes["Normalizer"].output[0]] = 1
        elif len(node.output) > 1:
            produced[node.output[1]] = 1
    else:
        node, own = nodes["LinearRegressor"], attributes["LinearRegressor"]
        weights, bias = regressor_weights(own.get("coefficients"), own.get("intercepts"), own.get("targets", 1))
        regressor = LinearRegressorModel(
            LinearScores(weights, bias, "LinearRegressor", **fold), own.get("post_transform", "NONE")
        )
        model = _one_result(regressor)
        produced[node.output[0]] = 0
    positions = _positions(partition.outputs, produced)
    if positions == sorted(produced.values()):  # the model's results as they are (the usual case)
        return CompiledPartition(partition.inputs, partition.outputs, model)

    def run(x):
        results = model(x)
        return [results[index] for index in positions]

    return CompiledPartition(partition.inputs, partition.outputs, run)


def _one_result(model: Callable[[Any], Any]) -> Callable[[Any], tuple]:
    return lambda x: (model(x),)


def _positions(outputs: Sequence[str], produced: dict[str, int]) -> list[int]:
    missing = [name for name in outputs if name not in produced]
    if missing:
        raise ValueError(f"the linear chain does not produce {missing}")
    return [produced[name] for name in outputs]
