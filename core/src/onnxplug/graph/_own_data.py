"""The loaded model's weights moved out of the parsed protobuf into numpy arrays the IR owns.

onnx-ir's deserialized tensors read their data from the ``TensorProto`` they wrap, and reading
``raw_data`` copies it into a new ``bytes`` object: the plan's arrays are such copies while the
parsed protobuf (one arena for the whole model) keeps the original, so a model with embedded
weights was held twice for the session's lifetime (BERT-base: ~440 MB twice).  Moving every
embedded tensor into an ``ir.Tensor`` over its array drops the last reference to the protobuf,
which is then freed, and the plan later gets the same arrays without a copy.

Tensors that are not plain embedded data (external data, which onnx-ir maps lazily; strings)
keep their form; a model with embedded string tensors keeps its protobuf alive, as before.

The other end of a weight's life is ``release_tensors``: an IR graph is a web of cycles (graph,
nodes and values refer to each other), so a dropped model's arrays would wait for Python's
cycle collector; a session about to be discarded lets go of them at once instead.
"""

from __future__ import annotations

import onnx_ir as ir

from ._scopes import graphs_of

__all__ = ["own_tensor_data", "release_tensors"]


def own_tensor_data(model: ir.Model) -> int:
    """Replace protobuf-backed tensors in every graph and function of ``model`` (initializers and
    tensor attributes) with array-backed ones; returns how many were replaced."""
    replaced = 0
    for graph in _graphs(model):
        for value in getattr(graph, "initializers", {}).values():  # functions have none
            owned = _owned(value.const_value)
            if owned is not None:
                value.const_value = owned
                replaced += 1
        for node in graph:
            replaced += _own_attributes(node)
    return replaced


def release_tensors(model: ir.Model) -> None:
    """Detach every initializer's tensor, in every graph of ``model``, from its value.

    For a model nobody will read again (the session's own copies, when it is closed or
    collected): its arrays are then freed as soon as nothing else holds them, rather than when
    the garbage collector next breaks the graph's reference cycles.
    """
    for graph in _graphs(model):
        for value in getattr(graph, "initializers", {}).values():
            value.const_value = None


def _graphs(model: ir.Model):
    yield from graphs_of(model.graph)[1:]
    yield model.graph
    for function in model.functions.values():
        yield from graphs_of(function)[1:]
        yield function


def _own_attributes(node: ir.Node) -> int:
    replaced = 0
    for name, attribute in list(node.attributes.items()):
        if attribute.type is ir.AttributeType.TENSOR:
            owned = _owned(attribute.value)
            if owned is not None:
                node.attributes[name] = ir.AttrTensor(name, owned, doc_string=attribute.doc_string)
                replaced += 1
        elif attribute.type is ir.AttributeType.TENSORS:
            tensors = [_owned(t) for t in attribute.value]
            if any(t is not None for t in tensors):
                kept = [o if o is not None else t for o, t in zip(tensors, attribute.value)]
                node.attributes[name] = ir.AttrTensors(name, kept, doc_string=attribute.doc_string)
                replaced += sum(t is not None for t in tensors)
    return replaced


def _owned(tensor) -> ir.Tensor | None:
    """An array-backed copy of a protobuf-backed tensor, or ``None`` to keep it as it is."""
    if not isinstance(tensor, ir.serde.TensorProtoTensor) or tensor.dtype == ir.DataType.STRING:
        return None
    return ir.Tensor(
        tensor.numpy(),
        dtype=tensor.dtype,
        name=tensor.name,
        doc_string=tensor.doc_string,
        metadata_props=dict(tensor.metadata_props) or None,
    )
