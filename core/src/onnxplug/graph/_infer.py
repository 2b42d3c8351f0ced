"""onnx shape inference that no model can turn into a crash of the process.

Some of onnx's per-op inference functions read the type of their first input without checking
that it is known; when it is not (the value comes from an op onnx cannot infer, or is declared
with an empty type) the C++ code dereferences a null pointer and the whole Python process dies
with SIGSEGV -- no exception reaches ``try``.  onnx tracks the general fault as
https://github.com/onnx/onnx/issues/2647 ("ONNX InferenceContext implementation triggers segfault
failures"); https://github.com/onnx/onnx/issues/7298 is the same fault in OneHotEncoder.

scikit-learn trees exported with ``decision_path`` hit it: skl2onnx feeds a TreeEnsembleRegressor
output (which onnx leaves untyped) into a LabelEncoder.  The ops below were found by running
onnx 1.23's inference, in a forked child, on every schema with untyped inputs.

Such a node is "parked" while its input is untyped: its domain is swapped for one no schema
lives in, so inference passes over it; once a round of inference has typed its input it takes
part again.  A parked node simply keeps its outputs untyped, which is all inference could have
said about a node whose input type is unknown.  Inside model-local functions (inferred once per
call, with the caller's types) such nodes stay parked.
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx

__all__ = ["WEIGHT_BYTES", "infer_types", "weightless_copy"]

#: (domain, op_type) whose onnx inference reads input 0's type unchecked (any version).
UNGUARDED_INPUT_TYPE = frozenset(
    {
        ("ai.onnx.ml", "LabelEncoder"),
        ("ai.onnx.ml", "DictVectorizer"),
        ("ai.onnx.ml", "TreeEnsemble"),
        ("ai.onnx.ml", "OneHotEncoder"),  # onnx/onnx#7298 (fixed in newer onnx; onnx>=1.17 is allowed)
        ("", "EyeLike"),
        ("", "RegexFullMatch"),
    }
)
#: The domain a parked node carries during inference; imported so onnx skips rather than refuses it.
PARKED_DOMAIN = "onnxplug.parked_for_inference"


def _infer(model: onnx.ModelProto) -> onnx.ModelProto:
    return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)


def _subgraphs(nodes) -> Iterator[onnx.GraphProto]:
    for node in nodes:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    yield from _graphs(sub)


def _graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """The graph and every subgraph in it, in a fixed order."""
    yield graph
    yield from _subgraphs(graph.node)


def _nodes(model: onnx.ModelProto) -> Iterator[tuple[onnx.NodeProto, bool]]:
    """Every node, in a fixed order, and whether it sits in a model-local function (whose
    input types only the call site knows: onnx infers the body once per call)."""
    for graph in _graphs(model.graph):
        for node in graph.node:
            yield node, False
    for function in model.functions:
        for node in function.node:
            yield node, True
        for graph in _subgraphs(function.node):
            for node in graph.node:
                yield node, True


def _typed_names(model: onnx.ModelProto) -> set[str]:
    """Values whose type onnx's inference will see (a ValueInfo with an empty type counts as
    unknown: onnx passes it on as a null type)."""
    names: set[str] = set()
    for graph in _graphs(model.graph):
        names.update(t.name for t in graph.initializer)
        names.update(t.values.name for t in graph.sparse_initializer)
        for info in list(graph.input) + list(graph.value_info):
            if info.type.WhichOneof("value") is not None:
                names.add(info.name)
    return names


def _is_unguarded(node: onnx.NodeProto) -> bool:
    domain = "" if node.domain == "ai.onnx" else node.domain
    return (domain, node.op_type) in UNGUARDED_INPUT_TYPE


#: Initializers at least this large travel to onnx's inference without their data: inference
#: needs their type and dims only (data propagation reads small integer shape tensors), and a
#: model's weights would otherwise be serialized, parsed and copied back (BERT-base's 420 MB
#: raised the loader's peak by about 1.3 GB).
WEIGHT_BYTES = 1 << 16


def infer_types(model: onnx.ModelProto) -> onnx.ModelProto:
    """``onnx.shape_inference.infer_shapes`` (best effort, non-strict) with the nodes that would
    crash it parked, run on the model without its large weights' data; the types found (value
    infos, output types, in subgraphs too) are written into ``model``, which is returned with
    every node as given.

    :raises Exception: whatever onnx raises (the caller treats inference as best effort);
        ``model`` is then unchanged.
    """
    inferred = _infer_parked(weightless_copy(model))
    _copy_types(inferred.graph, model.graph)
    for source, target in zip(inferred.functions, model.functions):
        if hasattr(target, "value_info"):
            del target.value_info[:]
            target.value_info.extend(source.value_info)
    return model


def weightless_copy(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose top-level initializers of :data:`WEIGHT_BYTES` or more keep
    their name, type and dims but not their data: what shape inference and the session's
    input and output descriptions read, without a second copy of the weights."""
    if not any(len(t.raw_data) >= WEIGHT_BYTES for t in model.graph.initializer):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        return copy
    copy = onnx.ModelProto()
    _copy_fields(model, copy, skip="graph")
    _copy_fields(model.graph, copy.graph, skip="initializer")
    for tensor in model.graph.initializer:
        if len(tensor.raw_data) >= WEIGHT_BYTES:
            copy.graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
        else:
            copy.graph.initializer.add().CopyFrom(tensor)
    return copy


def _copy_fields(source, target, *, skip: str) -> None:
    """Every set field of message ``source`` but ``skip``, into the empty ``target``."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def _copy_types(source: onnx.GraphProto, target: onnx.GraphProto) -> None:
    """The types inference found in ``source`` (the same graph, inferred), into ``target``."""
    del target.value_info[:]
    target.value_info.extend(source.value_info)
    for inferred, declared in zip(source.output, target.output):
        declared.type.CopyFrom(inferred.type)
    for inferred_node, node in zip(source.node, target.node):
        for inferred_attr, attr in zip(inferred_node.attribute, node.attribute):
            if attr.type == onnx.AttributeProto.GRAPH:
                _copy_types(inferred_attr.g, attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for inferred_graph, graph in zip(inferred_attr.graphs, attr.graphs):
                    _copy_types(inferred_graph, graph)


def _infer_parked(model: onnx.ModelProto) -> onnx.ModelProto:
    """Inference with the nodes that would crash it parked (``model`` may be edited)."""
    first_inputs, in_function = {}, set()
    for i, (node, local) in enumerate(_nodes(model)):
        if _is_unguarded(node):
            first_inputs[i] = node.input[0] if node.input else ""
            if local:
                in_function.add(i)
    if not first_inputs:
        return _infer(model)
    if any(op.domain == PARKED_DOMAIN for op in model.opset_import):
        raise ValueError(f"the model imports onnxplug's reserved domain {PARKED_DOMAIN!r}")
    typed = _typed_names(model)
    # Function bodies stay parked: their value names are not the graph's.
    parked = {i for i, name in first_inputs.items() if name not in typed or i in in_function}
    while True:
        trial = onnx.ModelProto()
        trial.CopyFrom(model)
        domains = {}
        for i, (node, _) in enumerate(_nodes(trial)):
            if i in parked:
                domains[i], node.domain = node.domain, PARKED_DOMAIN
        if parked:
            trial.opset_import.add(domain=PARKED_DOMAIN, version=1)
            for function in trial.functions:
                function.opset_import.add(domain=PARKED_DOMAIN, version=1)
        inferred = _infer(trial)
        now_typed = _typed_names(inferred)
        ready = {i for i in parked - in_function if first_inputs[i] in now_typed}
        if not ready:
            break
        parked -= ready
    for i, (node, _) in enumerate(_nodes(inferred)):
        if i in domains:
            node.domain = domains[i]
    for imports in [inferred.opset_import] + [f.opset_import for f in inferred.functions]:
        kept = [op for op in imports if op.domain != PARKED_DOMAIN]
        del imports[:]
        imports.extend(kept)
    return inferred
