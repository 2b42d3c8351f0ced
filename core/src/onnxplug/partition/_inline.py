"""Function inlining: how a node nobody claims can still run.

Many ONNX ops are defined by a function body made of simpler ops (Gelu, Mish, HardSwish,
LayerNormalization, the *Loss ops, Range...), and a model may define its own functions
(``ModelProto.functions``).  When no provider claims such a node, the partitioner replaces it in
the onnx-ir graph by a copy of the body and offers the new nodes to the providers again, so a
provider only needs kernels for the primitive ops.

Three points the mechanics must get right:

* **Opsets.**  A body is written against its own opset imports, which may be older than the
  model's (Relu-14's body is written for opset 18; a model at opset 21 inlines it).  Every
  inlined node records the opsets it must be resolved with in ``node.meta[OPSETS_KEY]``; the
  partitioner groups nodes by it.
* **Names.**  Claims, assignments and plan slots refer to nodes and values by name, so every
  copied node and value gets a fresh name prefixed by the call node's (``Gelu_3/Mul_1``).
* **Recursion.**  Bodies may call function ops themselves.  Each inlined node remembers its call
  chain (``node.meta[CHAIN_KEY]``); a function met again in its own chain is an
  :class:`~onnxplug.InvalidGraph` error instead of an endless expansion.

The copying itself (attribute references, subgraphs, value substitution) is onnx-ir's cloner, the
one its own ``InlinePass`` uses for model-local functions.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

import onnx
import onnx_ir as ir
from onnx_ir import _cloner  # the cloner behind onnx_ir.passes.common.InlinePass

from ..errors import Fail, InvalidGraph
from ..kernels import attribute_defaults, find_schema, normalize_domain

__all__ = ["CHAIN_KEY", "OPSETS_KEY", "MAX_DEPTH", "FunctionInliner", "node_opsets"]

#: ``node.meta`` key: the opset imports an inlined node is resolved with.
OPSETS_KEY = "onnxplug.opsets"
#: ``node.meta`` key: the functions an inlined node was expanded from, outermost first.
CHAIN_KEY = "onnxplug.inlined_from"
#: Nesting deeper than this is treated as runaway recursion.
MAX_DEPTH = 64

FunctionKey = tuple[str, str, str]


def node_opsets(node: ir.Node, default: Mapping[str, int]) -> Mapping[str, int]:
    """The opsets ``node`` is resolved with: its function body's, or the graph's."""
    return node.meta.get(OPSETS_KEY) or default


def _describe(key: FunctionKey) -> str:
    domain, name, overload = key
    return f"{domain or 'ai.onnx'}::{name}" + (f":{overload}" if overload else "")


def _body_version(versions: list[int], opset: int) -> int | None:
    """The body to use: the newest one written for an opset at or below the model's (a body for
    a newer opset may use ops the model's opset does not have; onnx only answers exact ones)."""
    usable = [v for v in versions if v <= opset]
    return max(usable) if usable else None


@functools.lru_cache(maxsize=512)
def _schema_function_bytes(op_type: str, domain: str, since_version: int, opset: int) -> bytes:
    """A context-independent schema body for ``opset``, or empty bytes when none applies."""
    schema = find_schema(op_type, since_version, domain)
    if schema is None or not schema.has_function:
        return b""
    version = _body_version(list(schema.function_opset_versions), opset)
    return b"" if version is None else schema.get_function_with_opset_version(version) or b""


class FunctionInliner:
    """Expands unclaimed function ops of one graph in place.

    :param graph: the onnx-ir graph to edit.
    :param opsets: the graph's opset imports (``""`` for the default domain).
    :param functions: the model's local functions by ``(domain, name, overload)``.
    """

    def __init__(
        self, graph: ir.Graph, opsets: Mapping[str, int], functions: Mapping[FunctionKey, ir.Function] | None = None
    ) -> None:
        self._graph = graph
        self._opsets = dict(opsets)
        self._functions = {(normalize_domain(d), n, o): f for (d, n, o), f in (functions or {}).items()}
        self._node_names: set[str] | None = None
        self._value_names: set[str] | None = None
        #: How many nodes were replaced by their bodies.
        self.count = 0

    # -- finding a body --------------------------------------------------------------------

    def body(self, node: ir.Node) -> tuple[FunctionKey, ir.Function, Mapping[str, ir.Attr]] | None:
        """The function ``node`` can be replaced by, with the attributes its body reads
        (the node's own, plus defaults), or ``None``."""
        domain = normalize_domain(node.domain)
        key = (domain, node.op_type, node.overload or "")
        local = self._functions.get(key)
        if local is not None:
            attributes = dict(node.attributes)
            for name, attr in local.attributes.items():
                if name not in attributes and attr.value is not None:
                    attributes[name] = attr
            return key, local, attributes
        opsets = node_opsets(node, self._opsets)
        version = opsets.get(domain)
        schema = None if version is None else find_schema(node.op_type, version, domain)
        if schema is None or not (schema.has_function or schema.has_context_dependent_function):
            return None
        attributes = dict(node.attributes)
        for name, value in _schema_default_attrs(node.op_type, schema.since_version, domain).items():
            attributes.setdefault(name, value)
        data = _schema_function_bytes(node.op_type, domain, schema.since_version, version)
        if not data and schema.has_context_dependent_function:
            data = _context_dependent_bytes(schema, version, node, attributes)
        if not data:
            return None
        proto = onnx.FunctionProto()
        proto.ParseFromString(data)
        _drop_unproduced_outputs(proto)
        try:
            function = ir.serde.deserialize_function(proto)
        except Exception as error:
            raise Fail(
                f"the function body of {_describe(key)} for node '{node.name}' cannot be read: "
                f"{type(error).__name__}: {error}"
            ) from error
        return key, function, attributes

    # -- expanding -------------------------------------------------------------------------

    def expand(self, node: ir.Node) -> list[ir.Node] | None:
        """Replace ``node`` by its function body; the new nodes, or ``None`` without a body.

        :raises InvalidGraph: the function calls itself (directly or not), or the call does not
            fit the function's signature.
        """
        found = self.body(node)
        if found is None:
            return None
        key, function, attributes = found
        chain: tuple[FunctionKey, ...] = node.meta.get(CHAIN_KEY, ())
        path = " -> ".join(_describe(k) for k in (*chain, key))
        if key in chain:
            raise InvalidGraph(f"function {_describe(key)} calls itself ({path}); node '{node.name}' cannot be run")
        if len(chain) >= MAX_DEPTH:
            raise InvalidGraph(f"function calls nest deeper than {MAX_DEPTH} ({path}) at node '{node.name}'")
        extra_outputs = node.outputs[len(function.outputs) :]
        if len(node.inputs) > len(function.inputs) or any(_is_used(v) for v in extra_outputs):
            raise InvalidGraph(
                f"node '{node.name}' calls {_describe(key)} with {len(node.inputs)} inputs and "
                f"{len(node.outputs)} outputs; the function has {len(function.inputs)} and {len(function.outputs)}"
            )
        opsets = {**node_opsets(node, self._opsets), **function.opset_imports}
        opsets = {normalize_domain(d): v for d, v in opsets.items()}
        new_nodes = self._instantiate(node, function, attributes)
        count = min(len(node.outputs), len(function.outputs))
        outputs = [self._output_value(function, i, new_nodes, opsets) for i in range(count)]
        _infer_types(new_nodes, opsets)
        for new in new_nodes:
            new.meta[OPSETS_KEY] = opsets
            new.meta[CHAIN_KEY] = (*chain, key)
        self._splice(node, new_nodes, outputs)
        self.count += 1
        return new_nodes

    def _instantiate(self, node: ir.Node, function: ir.Function, attributes: Mapping[str, ir.Attr]) -> list[ir.Node]:
        value_map: dict[ir.Value, ir.Value | None] = {}
        for index, formal in enumerate(function.inputs):
            value_map[formal] = node.inputs[index] if index < len(node.inputs) else None
        prefix = node.name or node.op_type
        self._value_map = value_map
        self._prefix = prefix

        def rename(new: ir.Node) -> None:
            new.name = self._fresh(f"{prefix}/{new.name or new.op_type}", self._names("node"))
            for output in new.outputs:
                if output.name:
                    output.name = self._fresh(f"{prefix}/{output.name}", self._names("value"))

        cloner = _cloner.Cloner(
            attr_map=attributes, value_map=value_map, metadata_props={}, post_process=rename, resolve_ref_attrs=True
        )
        return [cloner.clone_node(inner) for inner in function]

    def _output_value(
        self, function: ir.Function, index: int, new_nodes: list[ir.Node], opsets: dict[str, int]
    ) -> ir.Value:
        """The copy of the function's ``index``-th output; an Identity when the body passes an
        input straight through (the caller's value must keep its own name)."""
        value = self._value_map.get(function.outputs[index])
        produced = {id(out) for n in new_nodes for out in n.outputs}
        if value is not None and id(value) in produced:
            return value
        if value is None:
            raise InvalidGraph(f"function output '{function.outputs[index].name}' is never computed")
        opsets.setdefault("", onnx.defs.onnx_opset_version())
        identity = ir.Node(
            "", "Identity", [value], num_outputs=1, name=self._fresh(f"{self._prefix}/Identity", self._names("node"))
        )
        identity.outputs[0].name = self._fresh(f"{identity.name}_out", self._names("value"))
        new_nodes.append(identity)
        return identity.outputs[0]

    def _splice(self, node: ir.Node, new_nodes: list[ir.Node], outputs: list[ir.Value]) -> None:
        for old, new in zip(node.outputs, outputs):
            if old.type is not None:  # the model's inference saw the whole graph: prefer it
                new.type = old.type
            if old.shape is not None:
                new.shape = old.shape
            if old.name:  # an unnamed output is unused; the copy keeps its fresh name
                new.name = old.name
            ir.convenience.replace_all_uses_with(old, new, replace_graph_outputs=True)
        graph = node.graph or self._graph
        graph.insert_after(node, new_nodes)
        graph.remove(node, safe=True)

    # -- names -----------------------------------------------------------------------------

    def _names(self, kind: str) -> set[str]:
        if self._node_names is None:
            self._node_names, self._value_names = set(), set()
            self._value_names.update(v.name for v in self._graph.inputs if v.name)
            self._value_names.update(self._graph.initializers)
            for inner in ir.traversal.RecursiveGraphIterator(self._graph):
                self._node_names.add(inner.name or "")
                self._value_names.update(v.name for v in inner.outputs if v.name)
        return self._node_names if kind == "node" else self._value_names  # type: ignore[return-value]

    @staticmethod
    def _fresh(base: str, taken: set[str]) -> str:
        name, suffix = base, 1
        while name in taken:
            suffix += 1
            name = f"{base}_{suffix}"
        taken.add(name)
        return name


def _infer_types(nodes: list[ir.Node], opsets: Mapping[str, int]) -> None:
    """Give the values an inlined body computes their types, node by node with onnx's schema
    inference: bodies of nested function ops built from context (CastLike, the *Loss ops) need
    their inputs' types, and kernel factories read them too.  Best effort: a node onnx cannot
    infer leaves its outputs untyped."""
    opset_ids = [onnx.helper.make_opsetid(domain, version) for domain, version in opsets.items()]
    for node in nodes:
        domain = normalize_domain(node.domain)
        version = opsets.get(domain)
        schema = None if version is None else find_schema(node.op_type, version, domain)
        if schema is None or not schema.has_type_and_shape_inference_function:
            continue
        if any(v is not None and (v.type is None or not v.name) for v in node.inputs):
            continue
        types = {v.name: ir.serde.serialize_value(v).type for v in node.inputs if v is not None}
        try:
            inferred = onnx.shape_inference.infer_node_outputs(
                schema, ir.serde.serialize_node(node), types, opset_imports=opset_ids
            )
        except Exception:  # noqa: BLE001 - inference is best effort
            continue
        for value in node.outputs:
            type_proto = inferred.get(value.name or "")
            if type_proto is None or value.type is not None:
                continue
            value.type = ir.serde.deserialize_type_proto_for_type(type_proto)
            value.shape = ir.serde.deserialize_type_proto_for_shape(type_proto)


def _is_used(value: ir.Value) -> bool:
    return bool(value.uses()) or value.is_graph_output()


def _drop_unproduced_outputs(proto: onnx.FunctionProto) -> None:
    """Drop trailing outputs the body never computes.  onnx builds some context-dependent
    bodies (SoftmaxCrossEntropyLoss) for the outputs the node asks for, yet lists them all."""
    produced = set(proto.input) | {name for inner in proto.node for name in inner.output if name}
    outputs = list(proto.output)
    while outputs and outputs[-1] not in produced:
        outputs.pop()
    if len(outputs) != len(proto.output):
        del proto.output[:]
        proto.output.extend(outputs)


@functools.lru_cache(maxsize=1024)
def _schema_default_attrs(op_type: str, since_version: int, domain: str) -> dict[str, ir.Attr]:
    """Schema defaults as onnx-ir attributes: a body reading ``ref_attr_name`` of an attribute
    the node leaves out must see the op's default, not the inner op's."""
    schema = find_schema(op_type, since_version, domain)
    defaults = {}
    for name in attribute_defaults(op_type, since_version, domain):
        proto = schema.attributes[name].default_value
        attr = onnx.AttributeProto()
        attr.CopyFrom(proto)
        attr.name = name
        defaults[name] = ir.serde.deserialize_attribute(attr)
    return defaults


def _context_dependent_bytes(
    schema: onnx.defs.OpSchema, opset: int, node: ir.Node, attributes: Mapping[str, ir.Attr]
) -> bytes:
    """A body onnx builds for this very node (it may depend on attributes and input types).

    Returns empty bytes when onnx cannot build one, e.g. an input type is unknown.
    """
    proto = ir.serde.serialize_node(node)
    present = {attr.name for attr in proto.attribute}
    for name, attr in attributes.items():
        if name not in present and not attr.is_ref():
            proto.attribute.append(ir.serde.serialize_attribute(attr))
    version = _body_version(list(schema.context_dependent_function_opset_versions), opset)
    if version is None:
        return b""
    types = []
    for value in node.inputs:
        if value is None or value.type is None:
            types.append(onnx.TypeProto().SerializeToString())
        else:
            types.append(ir.serde.serialize_value(value).type.SerializeToString())
    try:
        build = schema.get_context_dependent_function_with_opset_version
        return build(version, proto.SerializeToString(), types) or b""
    except Exception:  # noqa: BLE001 - onnx refuses (unknown types, unsupported attributes)
        return b""
