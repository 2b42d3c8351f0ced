"""Node attributes and input and output counts checked against the op's schema, as onnxruntime
does when it loads a model.

onnxruntime refuses, with ``InvalidGraph``, a node whose attribute has the wrong type, lacks a
required attribute, or (in the standard domains) carries an attribute its schema does not know
or more or fewer inputs or outputs than the schema allows (a Gemm of opset 9, whose ``C`` is
required, given two inputs).  A kernel would otherwise meet the fault at its first run, or
worse, read a float as an int.

Only ops with a schema are checked: the ``onnx.defs`` ones, plus the custom-domain schemas op
libraries registered (``onnxplug_op_schemas``).  Unknown ops are the partitioner's to report, and
calls of model-local functions have no schema.
"""

from __future__ import annotations

from typing import NamedTuple

import onnx
import onnx.defs

from ..errors import InvalidGraph

__all__ = ["SchemaChecker"]

# Domains whose onnx schemas are complete, so an attribute they do not list is an error.  Custom
# schemas registered by op libraries may describe a subset of what exporters write.
_STRICT_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"})
# Any domain version a schema can have; used for domains a model uses but does not import.
_NEWEST = 1 << 30


def _type_name(value: int) -> str:
    return onnx.AttributeProto.AttributeType.Name(value)


class _Facts(NamedTuple):
    """What the check reads of a schema, copied once: onnx's ``OpSchema.attributes`` builds a
    new dict of new objects at each read (~3 µs a node)."""

    since_version: int
    attributes: dict[str, tuple[int, bool]]  # name → (AttributeProto type, required)
    inputs: tuple[int, int]
    outputs: tuple[int, int]


#: (domain, op type, model's version) → facts, for the standard domains, whose schemas onnx
#: fixes at import; custom-domain schemas may be registered later, so each checker asks anew.
_STANDARD_FACTS: dict[tuple[str, str, int], _Facts | None] = {}


def _facts(domain: str, op_type: str, version: int) -> _Facts | None:
    try:
        schema = onnx.defs.get_schema(op_type, version, domain)
    except onnx.defs.SchemaError:
        return None
    attributes = {name: (int(spec.type), bool(spec.required)) for name, spec in schema.attributes.items()}
    return _Facts(
        schema.since_version,
        attributes,
        (schema.min_input, schema.max_input),
        (schema.min_output, schema.max_output),
    )


class SchemaChecker:
    """Checks nodes of one model; schemas are looked up once per (domain, op).

    :param opsets: the model's opset imports (``""`` for the default domain).
    :param functions: ``(domain, name)`` of the model-local functions.
    """

    def __init__(self, opsets: dict[str, int], functions: set[tuple[str, str]]) -> None:
        self._opsets = opsets
        self._functions = functions
        self._schemas: dict[tuple[str, str], _Facts | None] = {}

    def _schema(self, domain: str, op_type: str) -> _Facts | None:
        key = (domain, op_type)
        if key not in self._schemas:
            version = self._opsets.get(domain, _NEWEST)
            if domain in _STRICT_DOMAINS:
                standard = (domain, op_type, version)
                if standard not in _STANDARD_FACTS:
                    _STANDARD_FACTS[standard] = _facts(domain, op_type, version)
                self._schemas[key] = _STANDARD_FACTS[standard]
            else:
                self._schemas[key] = _facts(domain, op_type, version)
        return self._schemas[key]

    def check(self, node: onnx.NodeProto) -> None:
        """:raises InvalidGraph: a mistyped, missing required or (standard domains) unknown
        attribute, naming the node, the attribute and the expected type."""
        domain = "" if node.domain == "ai.onnx" else node.domain
        if (domain, node.op_type) in self._functions:
            return
        schema = self._schema(domain, node.op_type)
        if schema is None:
            return
        declared = schema.attributes
        present = set()
        for attr in node.attribute:
            present.add(attr.name)
            spec = declared.get(attr.name)
            if spec is None:
                if domain in _STRICT_DOMAINS:
                    raise InvalidGraph(
                        f"This is an invalid model. {_where(node, domain)}: Unrecognized attribute: {attr.name} "
                        f"for operator {node.op_type} (it takes {sorted(declared) or 'no attributes'})"
                    )
                continue
            expected = spec[0]
            # Old exporters leave the type UNDEFINED; a reference names a function's attribute.
            if attr.type == onnx.AttributeProto.UNDEFINED or attr.ref_attr_name:
                continue
            if attr.type != expected:
                raise InvalidGraph(
                    f"This is an invalid model. {_where(node, domain)}: Mismatched attribute type in "
                    f"'{attr.name}'. Expected: '{_type_name(expected)}', actual: '{_type_name(attr.type)}'"
                )
        if len(present) < len(declared):
            missing = sorted(name for name, (_, required) in declared.items() if required and name not in present)
            if missing:
                raise InvalidGraph(
                    f"This is an invalid model. {_where(node, domain)}: Required attribute '{missing[0]}' is missing."
                )
        if domain in _STRICT_DOMAINS:
            _check_count(node, domain, "input", len(node.input), schema.inputs, schema.since_version)
            _check_count(node, domain, "output", len(node.output), schema.outputs, schema.since_version)


def _where(node: onnx.NodeProto, domain: str) -> str:
    return f"node '{node.name or node.op_type}' ({domain + '::' if domain else ''}{node.op_type})"


def _check_count(node: onnx.NodeProto, domain: str, kind: str, count: int, bounds: tuple[int, int], since: int) -> None:
    """:raises InvalidGraph: ``count`` (a node's inputs or outputs, empty names included, as
    onnxruntime counts them) outside the schema's ``bounds`` (least, most)."""
    least, most = bounds
    if not least <= count <= most:
        where = _where(node, domain)
        allowed = f"at least {least}" if most >= 1 << 30 else (f"{least}" if least == most else f"{least} to {most}")
        raise InvalidGraph(
            f"This is an invalid model. {where} has {count} {kind}s; the operator's schema "
            f"(opset {since}) takes {allowed}"
        )
