"""Constant folding and shape simplification.

A node whose inputs are all constants is computed once, by an evaluator the session hands in
(the host providers' own kernels, so a folded value is exactly what the node would compute at run
time), and its outputs become initializers: every provider then sees the folded graph in
``capability()``, kernels prepack from ``NodeContext.constant()``, and compiled partitions receive
the values as initializers.  ``Shape`` and ``Size`` of values whose shapes are fully static are
constants too, so the shape arithmetic exporters write (Shape → Gather → Unsqueeze → Concat →
Reshape) folds away.

Not folded: random ops and Dropout (their result differs between runs), nodes with subgraphs,
nodes reading an initializer that is also a graph input (a feed may replace it), results that are
not numeric tensors, results over :data:`FOLD_LIMIT_BYTES` (a constant kept in memory for the
session's life), and empty results (vendor compilers mishandle empty constants — OpenVINO turns
a folded ``[2, 4, 0]`` zero-pad into a scalar — and computing them costs nothing).  A node the evaluator cannot compute
stays, so the run reports the failure with the node named.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np
import onnx_ir as ir

from ..graph import all_nodes, graphs_of, static_shape, subgraphs

__all__ = [
    "Evaluator",
    "FOLD_LIMIT_BYTES",
    "NOT_FOLDABLE",
    "fold_constants",
    "lift_constant_nodes",
    "materialize_fills",
    "simplify_shapes",
]

#: ``evaluator(node, opsets, inputs)`` → the node's output arrays, or ``None`` when it cannot.
Evaluator = Callable[[ir.Node, Mapping[str, int], Sequence["np.ndarray | None"]], "Sequence[np.ndarray] | None"]

#: Ops whose result differs between runs: never folded.
NOT_FOLDABLE = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial", "Dropout"}
)
#: Folded results larger than this stay computed per run.  Large enough for a classifier's
#: weights made by ConstantOfShape (VGG-19's first fully connected layer: 411 MB), which
#: onnxruntime folds too: computed per run, that fill cost VGG-19 26 ms of its 130 a run, most of
#: it the kernel zeroing the fresh pages (20 ms of system time); under 64 MiB it did.
FOLD_LIMIT_BYTES = 1 << 30


def _constant_array(value: ir.Value | None, fed: set[int]) -> np.ndarray | None:
    if value is None or id(value) in fed or value.const_value is None or not value.is_initializer():
        return None
    try:
        array = value.const_value.numpy()
    except Exception:  # noqa: BLE001 - a payload numpy cannot hold is simply not folded
        return None
    return array if array.dtype.kind in "biufc?" else None


def _owned(array: np.ndarray, inputs: Sequence[np.ndarray | None]) -> np.ndarray:
    """``array`` when it owns its memory and is none of the node's inputs, else a copy: a folded
    constant must not be a view keeping a larger buffer alive, nor the same array as another
    constant.  Kernels return fresh arrays for most nodes, and copying those cost a third of
    folding ResNet-50's weights (25 M values from ConstantOfShape)."""
    if array.base is None and not any(array is x for x in inputs):
        return array
    return np.array(array, copy=True)


def _replace_with_constants(node: ir.Node, arrays: Sequence[np.ndarray]) -> None:
    """Swap ``node``'s outputs for initializers holding ``arrays`` (names kept) and drop it."""
    graph = node.graph
    assert graph is not None
    for old, array in zip(node.outputs, arrays):
        name = old.name
        old.name = None  # frees the name for the initializer that takes its place
        new = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(ir.DataType.from_numpy(array.dtype)))
        # ir.Tensor, not ir.tensor(): the convenience's protocol checks cost ~15 µs a constant
        new.const_value = ir.Tensor(array, name=name)
        graph.register_initializer(new)
        ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
    graph.remove(node, safe=True)


def fold_constants(
    model: ir.Model,
    opsets: Mapping[str, int],
    evaluate: Evaluator,
    node_opsets: Callable,
    keep: frozenset[str] = frozenset(),
) -> int:
    """Fold every node of ``model`` (subgraphs included) whose inputs are constants; returns how
    many nodes were folded.  ``node_opsets(node, opsets)`` gives the opsets a node resolves with;
    standard-domain nodes of the op types in ``keep`` are left (rules consume them later)."""
    folded = 0
    fed = {id(v) for v in model.graph.inputs}
    for graph in graphs_of(model.graph):
        for node in list(graph):
            if node.op_type in NOT_FOLDABLE or not node.inputs or node.domain not in ("", "ai.onnx", "com.microsoft"):
                continue
            if node.op_type in keep and node.domain in ("", "ai.onnx"):
                continue
            if not all(v is None or (v.const_value is not None and id(v) not in fed) for v in node.inputs):
                continue  # (most nodes leave here: asked first, it saves a session's walk half its cost)
            if subgraphs(node):
                continue
            if any(not v.name for v in node.outputs):
                continue
            inputs = [None if v is None else _constant_array(v, fed) for v in node.inputs]
            if any(array is None and value is not None for array, value in zip(inputs, node.inputs)):
                continue
            fill = _broadcast_fill(node, inputs)
            try:
                result = [fill] if fill is not None else evaluate(node, node_opsets(node, opsets), inputs)
            except Exception:  # noqa: BLE001 - left to fail at run time, with the node named
                result = None
            if result is None or len(result) != len(node.outputs):
                continue
            if not all(isinstance(a, np.ndarray) and a.dtype.kind in "biufc?" for a in result):
                continue
            if sum(a.nbytes for a in result) > FOLD_LIMIT_BYTES or any(a.size == 0 for a in result):
                continue
            _replace_with_constants(node, result if fill is not None else [_owned(a, inputs) for a in result])
            folded += 1
    return folded


def _broadcast_fill(node: ir.Node, inputs: Sequence[np.ndarray | None]) -> np.ndarray | None:
    """A ``ConstantOfShape``'s result as its one value broadcast to the shape (a read-only view
    holding one element), or ``None`` for any other node and for a node that is not plainly
    valid (the evaluator then computes it, or leaves it to fail at run time).

    Why: the onnx wheel's light models make every weight with ConstantOfShape, and filling
    ResNet-50's 25 M weights was a third of its session creation, only for the Conv +
    BatchNormalization fold to scale them into fresh arrays.  Rules read the view like any
    array; :func:`materialize_fills` writes out whatever is left when optimization ends."""
    if node.op_type != "ConstantOfShape" or node.domain not in ("", "ai.onnx") or len(inputs) != 1:
        return None
    dims = inputs[0]
    if dims is None or dims.ndim != 1 or dims.dtype != np.int64 or bool((dims < 0).any()):
        return None
    attribute = node.attributes.get("value")
    if attribute is None:
        value = np.zeros((), np.float32)
    elif attribute.type == ir.AttributeType.TENSOR:
        value = np.asarray(attribute.value.numpy())  # .value: as_tensor()'s protocol check costs more
        if value.size != 1:
            return None
    else:
        return None
    try:
        return np.broadcast_to(value.reshape(()), tuple(int(d) for d in dims))
    except ValueError:  # more elements than numpy can index: not folded
        return None


def materialize_fills(model: ir.Model) -> int:
    """Write out every initializer still held as a broadcast fill (:func:`_broadcast_fill`) as
    an array of its own, so later stages, kernels and vendor compilers see ordinary contiguous
    constants; returns how many were written."""
    written = 0
    for graph in graphs_of(model.graph):
        for value in graph.initializers.values():
            tensor = value.const_value
            array = tensor.raw if isinstance(tensor, ir.Tensor) else None
            if isinstance(array, np.ndarray) and array.size > 1 and 0 in array.strides:
                value.const_value = ir.Tensor(np.ascontiguousarray(array), name=value.name)
                written += 1
    return written


def lift_constant_nodes(model: ir.Model) -> int:
    """``Constant`` nodes become initializers (providers and folding see one kind of constant)."""
    from onnx_ir.passes.common import LiftConstantsToInitializersPass

    before = sum(1 for n in all_nodes(model.graph) if n.op_type == "Constant" and n.domain in ("", "ai.onnx"))
    if not before:
        return 0  # (the pass's own walk costs more than this count)
    LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0)(model)
    after = sum(1 for n in all_nodes(model.graph) if n.op_type == "Constant" and n.domain in ("", "ai.onnx"))
    return before - after


def simplify_shapes(model: ir.Model) -> int:
    """``Shape``/``Size`` of values with fully static shapes replaced by constants; returns the
    number of nodes replaced."""
    replaced = 0
    for graph in graphs_of(model.graph):
        for node in list(graph):
            if node.domain not in ("", "ai.onnx") or node.op_type not in ("Shape", "Size") or not node.inputs:
                continue
            shape = static_shape(node.inputs[0])
            if shape is None or not node.outputs[0].name:
                continue
            if node.op_type == "Size":
                array = np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
            else:
                rank = len(shape)
                start = _clamp(node.attributes.get_int("start", 0), rank)
                end = _clamp(node.attributes.get_int("end", rank), rank)
                array = np.array(shape[start:end], dtype=np.int64)
            _replace_with_constants(node, [array])
            replaced += 1
    return replaced


def _clamp(index: int, rank: int) -> int:
    if index < 0:
        index += rank
    return min(max(index, 0), rank)
