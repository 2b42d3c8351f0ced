"""The capability-table engine: what a provider whose runtime is absent would claim, and why not.

A table is data: one :class:`OpSupport` per op the vendor publishes as supported (opset range or
registered schema versions, element types, and checks on attributes, ranks, constness and shapes),
plus table-wide rules (the opset range, static shapes).  :meth:`CapabilityTable.decide` answers
for one node with ``None`` (claimed) or the reason it is declined, quoting the condition the
vendor states.  The same engine serves every table (TensorRT, DirectML, NNAPI, and CoreML next),
so a table file holds nothing but rows and its citation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ...graph import GraphView, NodeView

__all__ = [
    "AnyOf",
    "AttributeIn",
    "AttributeTest",
    "CapabilityTable",
    "Check",
    "ConstantInput",
    "ConstantValue",
    "InputAbsent",
    "InputRank",
    "InputTypes",
    "NoOutput",
    "OpSupport",
    "StaticInput",
    "TableContext",
    "table_claims",
    "types",
]

#: The vendors' short type names (onnx-tensorrt's ``FP32``...) as onnxruntime type strings.
_SHORT_TYPES = {
    "FP32": ("tensor(float)",),
    "FP16": ("tensor(float16)",),
    "BF16": ("tensor(bfloat16)",),
    "DOUBLE": ("tensor(double)",),
    "FP8": ("tensor(float8e4m3fn)", "tensor(float8e5m2)"),
    "FP4": ("tensor(float4e2m1)",),
    "INT4": ("tensor(int4)",),
    "UINT4": ("tensor(uint4)",),
    "INT8": ("tensor(int8)",),
    "UINT8": ("tensor(uint8)",),
    "INT16": ("tensor(int16)",),
    "UINT16": ("tensor(uint16)",),
    "INT32": ("tensor(int32)",),
    "UINT32": ("tensor(uint32)",),
    "INT64": ("tensor(int64)",),
    "UINT64": ("tensor(uint64)",),
    "BOOL": ("tensor(bool)",),
}


def types(*names: str) -> frozenset[str]:
    """Type strings from short names (``types("FP32", "FP16")``) or full ones (``tensor(float)``).

    :raises ValueError: an unknown short name (a typo in a table must not silently claim nothing).
    """
    found: set[str] = set()
    for name in names:
        if name.startswith("tensor("):
            found.add(name)
        elif name in _SHORT_TYPES:
            found.update(_SHORT_TYPES[name])
        else:
            raise ValueError(f"unknown type name {name!r}; known: {', '.join(_SHORT_TYPES)}")
    return frozenset(found)


def _short(type_string: str) -> str:
    return type_string[len("tensor(") : -1] if type_string.startswith("tensor(") else type_string


@dataclasses.dataclass(frozen=True)
class TableContext:
    """What checks may ask besides the node: the graph view (constness) and, where the planner
    knows it, a constant's value.

    :ivar graph: the view being planned.
    :ivar constant: ``name -> numpy array`` for initializers whose value the planner read, else ``None``.
    """

    graph: GraphView
    constant: Callable[[str], Any] = lambda name: None

    @property
    def opsets(self) -> Mapping[str, int]:
        """The opsets the nodes resolve with (domain → version), for the table's opset range."""
        return self.graph.opsets

    def is_constant(self, name: str) -> bool:
        """Whether a value is known when the session is built (an initializer that no graph input overrides)."""
        return name in self.graph.initializers and name not in self.graph.inputs


class Check:
    """One condition a vendor states for an op.  :meth:`reason` returns ``None`` when the node
    meets it, else the reason (the vendor's condition, with what the node has instead)."""

    def reason(self, node: NodeView, context: TableContext) -> str | None:
        raise NotImplementedError


def _input(node: NodeView, index: int) -> str:
    return node.inputs[index] if index < len(node.inputs) else ""


@dataclasses.dataclass(frozen=True)
class ConstantInput(Check):
    """Input ``index`` (when present) must be a constant: ``what`` names it (``"weights W"``)."""

    index: int
    what: str

    def reason(self, node, context):
        name = _input(node, self.index)
        if not name or context.is_constant(name):
            return None
        return f"{self.what} ('{name}') must be a constant initializer; here it is computed at run time"


@dataclasses.dataclass(frozen=True)
class ConstantValue(Check):
    """Input ``index`` (when present) must be a constant whose value passes ``test``; ``what``
    states the condition (``"x_zero_point must be zero"``).  A value the planner cannot read is
    declined: the plan never claims what it cannot check."""

    index: int
    test: Callable[[Any], bool]
    what: str

    def reason(self, node, context):
        name = _input(node, self.index)
        if not name:
            return None
        if not context.is_constant(name):
            return f"{self.what}: '{name}' is computed at run time"
        value = context.constant(name)
        if value is None:
            return f"{self.what}: the planner cannot read the value of '{name}'"
        return None if self.test(value) else f"{self.what}: '{name}' does not meet it"


@dataclasses.dataclass(frozen=True)
class InputRank(Check):
    """Input ``index`` must have one of ``ranks``; ``what`` is the vendor's wording (``"2-D convolutions only"``)."""

    index: int
    ranks: tuple[int, ...]
    what: str

    def reason(self, node, context):
        if self.index >= len(node.inputs) or not node.inputs[self.index]:
            return None
        shape = node.input_shapes[self.index]
        if shape is None:
            return f"{self.what}: the rank of input {self.index} ('{node.inputs[self.index]}') is unknown"
        if len(shape) in self.ranks:
            return None
        return f"{self.what}: input {self.index} ('{node.inputs[self.index]}') has rank {len(shape)}"


@dataclasses.dataclass(frozen=True)
class InputTypes(Check):
    """Input ``index`` (when present) must be of one of ``allowed`` types."""

    index: int
    allowed: frozenset[str]
    what: str

    def reason(self, node, context):
        if not _input(node, self.index):
            return None
        found = node.input_types[self.index]
        if found in self.allowed:
            return None
        return f"{self.what}: input {self.index} is {_short(found) if found else 'of unknown type'}"


@dataclasses.dataclass(frozen=True)
class AttributeIn(Check):
    """Attribute ``name`` (``default`` when absent) must be one of ``allowed``."""

    name: str
    allowed: tuple[Any, ...]
    default: Any
    what: str = ""

    def reason(self, node, context):
        value = node.attributes.get(self.name, self.default)
        if isinstance(value, (list, tuple)):
            value = tuple(value)
        if value in self.allowed:
            return None
        allowed = ", ".join(repr(v) for v in self.allowed)
        return f"{self.what or 'attribute ' + self.name + ' must be one of ' + allowed}: {self.name}={value!r}"


@dataclasses.dataclass(frozen=True)
class AttributeTest(Check):
    """Attribute ``name`` (``default`` when absent) must pass ``test``; ``what`` states the condition."""

    name: str
    test: Callable[[Any], bool]
    default: Any
    what: str

    def reason(self, node, context):
        value = node.attributes.get(self.name, self.default)
        return None if self.test(value) else f"{self.what}: {self.name}={value!r}"


@dataclasses.dataclass(frozen=True)
class InputAbsent(Check):
    """Optional input ``index`` must not be given (``what``: the vendor's wording)."""

    index: int
    what: str

    def reason(self, node, context):
        name = _input(node, self.index)
        return None if not name else f"{self.what}: input {self.index} ('{name}') is given"


@dataclasses.dataclass(frozen=True)
class StaticInput(Check):
    """Input ``index`` must have a fully known shape, or, with ``axis_attribute``, a known size
    along the axis that attribute names (``default_axis`` when absent)."""

    index: int
    what: str
    axis_attribute: str = ""
    default_axis: int = -1

    def reason(self, node, context):
        name = _input(node, self.index)
        if not name:
            return None
        shape = node.input_shapes[self.index]
        if shape is None:
            return f"{self.what}: the shape of '{name}' is unknown"
        if self.axis_attribute:
            axis = int(node.attributes.get(self.axis_attribute, self.default_axis))
            if -len(shape) <= axis < len(shape) and isinstance(shape[axis], int):
                return None
            return f"{self.what}: '{name}' has no static size along axis {axis}"
        dynamic = [d for d in shape if not isinstance(d, int)]
        return None if not dynamic else f"{self.what}: '{name}' has dynamic dimensions {dynamic}"


@dataclasses.dataclass(frozen=True)
class NoOutput(Check):
    """Output ``index`` must not be used (MaxPool's ``Indices`` in TensorRT)."""

    index: int
    what: str

    def reason(self, node, context):
        if self.index < len(node.outputs) and node.outputs[self.index]:
            return f"{self.what}: the node produces output {self.index} ('{node.outputs[self.index]}')"
        return None


@dataclasses.dataclass(frozen=True)
class AnyOf(Check):
    """Met when any of ``checks`` is met (``"indices constant if not int32"``); ``what`` is the
    condition as the vendor states it."""

    checks: tuple[Check, ...]
    what: str

    def reason(self, node, context):
        reasons = [check.reason(node, context) for check in self.checks]
        if any(r is None for r in reasons):
            return None
        return f"{self.what} ({'; '.join(r for r in reasons if r)})"


@dataclasses.dataclass(frozen=True)
class OpSupport:
    """One row of a vendor's table: an op the vendor supports, and on what conditions.

    :ivar op_type: the op; ``domain``: its domain (``""`` for ai.onnx).
    :ivar types: the element types accepted on the ``typed`` inputs: one set for every version,
        or, for providers that register kernels per schema version (DirectML), ``{since: set}``
        where each entry holds from its version on until the next (onnxruntime's ``N+``).  A node
        older than the first entry is declined.  ``None``: any type.
    :ivar since: the first schema version supported (with a mapping, its first key).
    :ivar checks: further conditions (constness, rank, attributes, outputs).
    """

    op_type: str
    domain: str = ""
    types: frozenset[str] | Mapping[int, frozenset[str]] | None = None
    typed: tuple[int, ...] = (0,)
    checks: tuple[Check, ...] = ()
    since: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.types, Mapping):
            if not self.types:
                raise ValueError(f"{self.op_type}: an empty version mapping")
            object.__setattr__(self, "since", min(self.types))

    @property
    def key(self) -> tuple[str, str]:
        return (self.domain, self.op_type)

    def types_for(self, since_version: int) -> frozenset[str] | None:
        """The types accepted at a schema version (``None``: any)."""
        if not isinstance(self.types, Mapping):
            return self.types
        start = max(v for v in self.types if v <= since_version)
        return self.types[start]


@dataclasses.dataclass(frozen=True)
class CapabilityTable:
    """A provider's published support, evaluated node by node.

    :ivar target: the short name (``"nnapi"``); ``provider``: onnxruntime's name of the provider.
    :ivar source: where the rows come from, with its version (shown in every plan).
    :ivar rows: the supported ops.
    :ivar opsets: domain → the ``(lowest, highest)`` opset import the vendor supports (``None``: no bound).
    :ivar static_shapes: every input and output of a claimed node must have a fully known shape.
    :ivar memory: onnxruntime's name of the memory the provider computes in (``"cuda"``, ``"dml"``),
        or ``None`` when it reads and writes host memory (NNAPI): the plan inserts copies at the
        borders of device-memory providers only.
    :ivar notes: caveats the table cannot express, printed with every plan.
    """

    target: str
    provider: str
    source: str
    rows: Sequence[OpSupport]
    opsets: Mapping[str, tuple[int | None, int | None]] = dataclasses.field(default_factory=dict)
    static_shapes: bool = False
    memory: str | None = None
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        index: dict[tuple[str, str], OpSupport] = {}
        for row in self.rows:
            if row.key in index:
                raise ValueError(f"table '{self.target}' lists {row.domain or 'ai.onnx'}::{row.op_type} twice")
            index[row.key] = row
        object.__setattr__(self, "_index", index)

    def row(self, op_type: str, domain: str = "") -> OpSupport | None:
        """The row for an op, or ``None`` when the vendor does not list it."""
        return self._index.get((domain, op_type))  # type: ignore[attr-defined]

    @property
    def ops(self) -> frozenset[tuple[str, str]]:
        """``(domain, op_type)`` of every row."""
        return frozenset(self._index)  # type: ignore[attr-defined]

    def decide(self, node: NodeView, context: TableContext) -> str | None:
        """``None`` when the provider would claim ``node``, else why it would not."""
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        row = self.row(node.op_type, domain)
        label = f"{domain or 'ai.onnx'}::{node.op_type}"
        if row is None:
            return f"{label} is not in the {self.target} table"
        if node.since_version is None:
            return f"{label} has no schema at the model's opset"
        bounds = self.opsets.get(domain)
        if bounds is not None:
            version = context.opsets.get(domain)
            low, high = bounds
            if version is not None and ((low is not None and version < low) or (high is not None and version > high)):
                span = f"{low or 1}..{high if high is not None else ''}"
                return f"opset {version} of {domain or 'ai.onnx'} is outside the supported range {span}"
        if node.since_version < row.since:
            return f"{node.op_type}-{node.since_version} is older than the first supported version ({row.since})"
        accepted_types = row.types_for(node.since_version)
        if accepted_types is not None:
            for index in row.typed:
                name = _input(node, index)
                if not name:
                    continue
                found = node.input_types[index]
                if found not in accepted_types:
                    accepted = ", ".join(sorted(_short(t) for t in accepted_types))
                    what = _short(found) if found else "of unknown type"
                    return f"input {index} ('{name}') is {what}; {node.op_type}-{node.since_version} takes {accepted}"
        for check in row.checks:
            why = check.reason(node, context)
            if why is not None:
                return why
        if self.static_shapes:
            why = _dynamic(node)
            if why is not None:
                return why
        if node.subgraphs:
            return f"{node.op_type} has subgraphs ({', '.join(node.subgraphs)}); a table cannot check their bodies"
        return None

    def evaluate(self, nodes: Iterable[NodeView], context: TableContext) -> tuple[list[str], dict[str, str]]:
        """``(claimed node names, {declined name: reason})`` for ``nodes``."""
        claimed: list[str] = []
        declined: dict[str, str] = {}
        for node in nodes:
            why = self.decide(node, context)
            if why is None:
                claimed.append(node.name)
            else:
                declined[node.name] = why
        return claimed, declined


def table_claims(table: CapabilityTable, graph: GraphView) -> list[Any]:
    """A provider's ``capability()`` answer from ``table``: FuseClaims over the connected, convex
    groups of the nodes the table accepts; the others are declined on ``graph`` with the reason.

    The planner's stand-in provider and the target plugins' real providers both answer with it,
    so a plan and a run on the target partition the same way.
    """
    from ...api import FuseClaim

    parsed: dict[str, Any] = {}

    def constant(name: str) -> Any:
        # The view's model embeds the constants its nodes read: parsed once, when a check asks.
        if not parsed:
            import onnx

            model = onnx.load_model_from_string(graph.model_bytes())
            parsed.update({t.name: t for t in model.graph.initializer})
            parsed.setdefault("", None)
        tensor = parsed.get(name)
        if tensor is None:
            return None
        import onnx.numpy_helper

        return onnx.numpy_helper.to_array(tensor)

    claimed, declined = table.evaluate(graph.nodes, TableContext(graph, constant))
    for name, reason in declined.items():
        graph.decline(name, reason)
    return [FuseClaim(group) for group in graph.fusion_groups(claimed)]


def _dynamic(node: NodeView) -> str | None:
    sides = (("input", node.inputs, node.input_shapes), ("output", node.outputs, node.output_shapes))
    for kind, names, shapes in sides:
        for name, shape in zip(names, shapes):
            if not name:
                continue
            if shape is None:
                return f"static shapes only: {kind} '{name}' has an unknown shape"
            dynamic = [d for d in shape if not isinstance(d, int)]
            if dynamic:
                return f"static shapes only: {kind} '{name}' has dynamic dimensions {dynamic}"
    return None
