"""Execution plans: a graph turned into steps over integer value slots.

Building a plan does everything that does not depend on the feeds: node order, slot numbers,
partitioning, kernel construction (attribute parsing, weight prepacking, subgraph compilation)
and the last use of every value, so that ``run`` is a loop of calls and list stores.

Slot 0 always holds ``None`` (a missing optional input reads it) and slot 1 is where unused
outputs are dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from ..errors import Fail, OnnxplugError
from ..kernels import NodeContext
from ..kernels._runstate import current_run
from ..kernels._schema import find_schema
from ..partition import PartitionResult, ProviderSlot, node_opsets, partition_graph

__all__ = ["GraphPlan", "Step", "SubgraphRunner", "build_plan", "tensor_value"]

_NONE_SLOT = 0
_DROP_SLOT = 1


class Step:
    """One node to call: a callable, where its inputs come from and its outputs go."""

    __slots__ = ("call", "inputs", "outputs", "free", "single", "name", "op_type", "provider", "node_index")

    def __init__(self, call: Callable[..., Any], inputs: tuple[int, ...], outputs: tuple[int, ...],
                 single: bool, name: str, op_type: str, provider: str, node_index: int) -> None:
        self.call = call
        self.inputs = inputs
        self.outputs = outputs
        self.free: tuple[int, ...] = ()
        self.single = single
        self.name = name
        self.op_type = op_type
        self.provider = provider
        self.node_index = node_index


def tensor_value(tensor: ir.TensorProtocol) -> np.ndarray:
    """A read-only numpy array for an initializer or attribute tensor (strings as ``str``)."""
    array = tensor.numpy()
    if array.dtype.kind in "SO":
        array = np.vectorize(
            lambda s: s.decode("utf-8") if isinstance(s, bytes) else s, otypes=[object]
        )(array) if array.size else array.astype(object)
    if array.flags.writeable:
        array.flags.writeable = False
    return array


def execution_order(graph: ir.Graph) -> list[ir.Node]:
    """The graph's nodes in an order where producers come before consumers (Kahn's algorithm,
    stable with respect to the file's order).  Cycles were rejected at load time."""
    nodes = list(graph)
    position = {id(n): i for i, n in enumerate(nodes)}
    waiting = [0] * len(nodes)
    consumers: list[list[int]] = [[] for _ in nodes]
    for index, node in enumerate(nodes):
        seen: set[int] = set()
        for value in _node_reads(node):
            producer = value.producer()
            if producer is None or id(producer) not in position:
                continue
            source = position[id(producer)]
            if source not in seen:
                seen.add(source)
                waiting[index] += 1
                consumers[source].append(index)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    ready.reverse()
    order: list[ir.Node] = []
    while ready:
        index = ready.pop()
        order.append(nodes[index])
        released = []
        for consumer in consumers[index]:
            waiting[consumer] -= 1
            if waiting[consumer] == 0:
                released.append(consumer)
        ready.extend(sorted(released, reverse=True))
    if len(order) != len(nodes):
        raise Fail(f"graph '{graph.name}' has a cycle")
    return order


def _subgraphs(node: ir.Node) -> list[tuple[str, ir.Graph]]:
    found = []
    for name, attr in node.attributes.items():
        if attr.type is ir.AttributeType.GRAPH:
            found.append((name, attr.value))
        elif attr.type is ir.AttributeType.GRAPHS:
            found.extend((name, g) for g in attr.value)
    return found


def outer_references(node: ir.Node) -> list[ir.Value]:
    """Values from enclosing scopes that ``node``'s subgraphs (at any depth) read."""
    defined: set[int] = set()
    used: list[ir.Value] = []
    pending = [g for _, g in _subgraphs(node)]
    while pending:
        graph = pending.pop()
        defined.update(id(v) for v in graph.inputs)
        defined.update(id(v) for v in graph.initializers.values())
        for inner in graph:
            defined.update(id(v) for v in inner.outputs)
            used.extend(v for v in inner.inputs if v is not None)
            pending.extend(g for _, g in _subgraphs(inner))
        used.extend(graph.outputs)
    seen: set[int] = set()
    outer = []
    for value in used:
        if id(value) not in defined and id(value) not in seen:
            seen.add(id(value))
            outer.append(value)
    return outer


def _node_reads(node: ir.Node) -> list[ir.Value]:
    reads = [v for v in node.inputs if v is not None]
    if any(True for _ in _subgraphs(node)):
        reads.extend(outer_references(node))
    return reads


@dataclasses.dataclass
class GraphPlan:
    """A compiled graph.  ``execute`` runs it on values placed in its input and outer slots."""

    input_names: tuple[str, ...]
    input_slots: tuple[int, ...]
    outer_slots: tuple[int, ...]
    output_names: tuple[str, ...]
    output_slots: tuple[int, ...]
    steps: list[Step]
    template: list[Any]
    partition: PartitionResult
    constant_ids: frozenset[int]

    def execute(self, inputs: Sequence[Any], outer: Sequence[Any] = ()) -> list[Any]:
        """Run the plan.  ``inputs`` align with ``input_slots``, ``outer`` with ``outer_slots``."""
        values = self.template.copy()
        for slot, value in zip(self.input_slots, inputs):
            values[slot] = value
        for slot, value in zip(self.outer_slots, outer):
            values[slot] = value
        state = current_run()
        options = None if state is None else state.run_options
        step = None
        try:
            for step in self.steps:
                if options is not None and options.terminate:
                    raise Fail("Exiting due to terminate flag being set to true.")
                result = step.call(*[values[i] for i in step.inputs])
                if step.single:
                    values[step.outputs[0]] = result
                else:
                    if len(result) < len(step.outputs):
                        raise Fail(f"the kernel returned {len(result)} outputs, the node has {len(step.outputs)}")
                    for slot, value in zip(step.outputs, result):
                        values[slot] = value
                for slot in step.free:
                    values[slot] = None
        except Exception as error:
            if step is None:
                raise
            raise _attribute_error(error, step) from error
        return [values[slot] for slot in self.output_slots]


def _attribute_error(error: Exception, step: Step) -> Exception:
    """The error re-raised with the node's name and op type, keeping onnxplug's class."""
    if getattr(error, "onnxplug_node", None) is not None:
        return error
    if isinstance(error, OnnxplugError):
        if "terminate flag" in error.message:
            return error
        wrapped: Exception = type(error)(
            f"Non-zero status code returned while running {step.op_type} node. Name:'{step.name}' "
            f"Status Message: {error.message}"
        )
    else:
        wrapped = Fail(
            f"Non-zero status code returned while running {step.op_type} node. Name:'{step.name}' "
            f"Status Message: {type(error).__name__}: {error}"
        )
    wrapped.onnxplug_node = step.name  # type: ignore[attr-defined]
    return wrapped


class SubgraphRunner:
    """A compiled subgraph (If branch, Loop/Scan body), callable by its node's kernel.

    :ivar input_names: the subgraph's formal inputs.
    :ivar output_names: its outputs.
    """

    def __init__(self, plan: GraphPlan) -> None:
        self._plan = plan
        self.input_names = plan.input_names
        self.output_names = plan.output_names

    def __call__(self, inputs: Sequence[Any], outer: Sequence[Any] = ()) -> list[Any]:
        """Run with the formal inputs and the node's outer-scope values."""
        return self._plan.execute(inputs, outer)


def build_plan(
    graph: ir.Graph,
    opsets: Mapping[str, int],
    slots: Sequence[ProviderSlot],
    *,
    outer: Sequence[ir.Value] = (),
    functions: Mapping[tuple[str, str, str], ir.Function] | None = None,
) -> GraphPlan:
    """Compile ``graph`` for the given providers.

    Partitioning may inline function ops nobody claims, which edits ``graph``; the node order
    is computed again afterwards.

    :param outer: values of enclosing scopes this graph may read (for subgraphs), in the order
        their values are passed to ``execute``.
    :param functions: the model's local functions by ``(domain, name, overload)``, for inlining
        (subgraphs are compiled with them too).
    """
    order = execution_order(graph)
    partition = partition_graph(graph, order, opsets, slots, functions=functions)
    if partition.inlined:
        order = execution_order(graph)
    slot_of: dict[int, int] = {}
    template: list[Any] = [None, None]

    def new_slot(value: ir.Value) -> int:
        slot_of[id(value)] = len(template)
        template.append(None)
        return slot_of[id(value)]

    input_values = list(graph.inputs)
    input_slots = tuple(new_slot(v) for v in input_values)
    outer_slots = tuple(new_slot(v) for v in outer)
    constant_ids: set[int] = set()
    fed = {id(v) for v in input_values}
    constants: dict[int, Any] = {}
    for value in graph.initializers.values():
        array = tensor_value(value.const_value)
        if id(value) in fed:
            template[slot_of[id(value)]] = array  # default, replaced when fed
        else:
            template[new_slot(value)] = array
            constants[id(value)] = array
        constant_ids.add(id(array))

    steps: list[Step] = []
    last_use: dict[int, int] = {}
    for index, node in enumerate(order):
        outer_values = outer_references(node) if _subgraphs(node) else []
        formal = [_NONE_SLOT if v is None else slot_of[id(v)] for v in node.inputs]
        implicit = [slot_of[id(v)] for v in outer_values]
        outputs = tuple(new_slot(v) if v.name else _DROP_SLOT for v in node.outputs)
        assignment = partition.assignments[node.name]
        own_opsets = node_opsets(node, opsets)
        context = NodeContext(
            name=node.name,
            op_type=node.op_type,
            domain=assignment.kernel.key.domain,
            since_version=assignment.kernel.key.since_version,
            opsets=own_opsets,
            num_inputs=len(node.inputs),
            num_outputs=len(node.outputs),
            outputs_used=[bool(v.name) and (bool(v.uses()) or v.is_graph_output()) for v in node.outputs],
            input_types=[_type_of(v) for v in node.inputs],
            constants=[None if v is None else constants.get(id(v)) for v in node.inputs],
            compile_subgraph=_subgraph_compiler(node, own_opsets, slots, outer_values, functions),
            num_outer_inputs=len(outer_values),
        )
        attributes = {name: _attribute_value(attr) for name, attr in node.attributes.items()}
        try:
            call = assignment.kernel.build(context, attributes)
        except OnnxplugError:
            raise
        except Exception as error:  # a kernel factory rejecting its node
            raise Fail(f"{context.describe()}: cannot be prepared: {type(error).__name__}: {error}") from error
        single = len(node.outputs) == 1 and _single_output(assignment.kernel)
        step = Step(call, tuple(formal + implicit), outputs, single, node.name, node.op_type,
                    assignment.provider.ort_name, index)
        steps.append(step)
        for slot in step.inputs:
            last_use[slot] = index
        for slot in outputs:
            last_use.setdefault(slot, index)
    kept = {_NONE_SLOT, _DROP_SLOT, *outer_slots}
    output_slots = tuple(slot_of[id(v)] for v in graph.outputs)
    kept.update(output_slots)
    frees: dict[int, list[int]] = {}
    for slot, index in last_use.items():
        if slot not in kept:
            frees.setdefault(index, []).append(slot)
    for index, slots_to_free in frees.items():
        steps[index].free = tuple(sorted(slots_to_free))
    return GraphPlan(
        input_names=tuple(v.name for v in input_values),
        input_slots=input_slots,
        outer_slots=outer_slots,
        output_names=tuple(v.name for v in graph.outputs),
        output_slots=output_slots,
        steps=steps,
        template=template,
        partition=partition,
        constant_ids=frozenset(constant_ids),
    )


def _single_output(kernel: Any) -> bool:
    schema = find_schema(kernel.key.op_type, kernel.key.since_version, kernel.key.domain)
    return schema is None or schema.max_output == 1


def _subgraph_compiler(node: ir.Node, opsets: Mapping[str, int], slots: Sequence[ProviderSlot],
                       outer_values: list[ir.Value],
                       functions: Mapping[tuple[str, str, str], ir.Function] | None) -> Callable[[str], SubgraphRunner]:
    def compile_subgraph(attribute: str) -> SubgraphRunner:
        attr = node.attributes.get(attribute)
        if attr is None or attr.type is not ir.AttributeType.GRAPH:
            raise Fail(f"node '{node.name}' ({node.op_type}) has no graph attribute '{attribute}'")
        return SubgraphRunner(build_plan(attr.value, opsets, slots, outer=outer_values, functions=functions))

    return compile_subgraph


def _type_of(value: ir.Value | None) -> tuple[int, tuple | None] | None:
    if value is None or not isinstance(value.type, ir.TensorType):
        return None
    shape = None
    if value.shape is not None:
        shape = tuple(d if isinstance(d, int) else d.value for d in value.shape)
    return int(value.type.dtype), shape


def _attribute_value(attr: ir.Attr) -> Any:
    kind = attr.type
    value = attr.value
    if kind in (ir.AttributeType.INTS, ir.AttributeType.FLOATS, ir.AttributeType.STRINGS):
        return tuple(value)
    if kind is ir.AttributeType.TENSOR:
        return tensor_value(value)
    if kind is ir.AttributeType.TENSORS:
        return tuple(tensor_value(t) for t in value)
    if kind is ir.AttributeType.FLOAT:
        return float(value)
    if kind is ir.AttributeType.INT:
        return int(value)
    return value
