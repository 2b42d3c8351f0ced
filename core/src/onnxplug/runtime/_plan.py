"""Execution plans: a graph turned into steps over integer value slots.

Building a plan does everything that does not depend on the feeds: node order, slot numbers,
partitioning, kernel construction (attribute parsing, weight prepacking, subgraph compilation)
and the last use of every value, so that ``run`` is a loop of calls and list stores.

Slot 0 always holds ``None`` (a missing optional input reads it) and slot 1 is where unused
outputs are dropped.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from ..errors import EPFail, Fail, OnnxplugError
from ..graph import GraphView
from ..graph._scopes import execution_order, node_reads, order_units
from ..kernels._runstate import current_run
from ..partition import Assignment, PartitionResult, ProviderSlot, build_partition, node_opsets, partition_graph
from ._placement import Copy, place
from ._steps import DROP_SLOT, NONE_SLOT, Step, fused_step, kernel_step, tensor_value

__all__ = ["GraphPlan", "Step", "SubgraphRunner", "build_plan", "tensor_value"]


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
    copies: list[Copy] = dataclasses.field(default_factory=list)

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
    ir_version: int = 8,
    fallback: bool = True,
    fold_constants: bool = True,
) -> GraphPlan:
    """Compile ``graph`` for the given providers.

    Partitioning may inline function ops nobody claims, which edits ``graph``; the node order
    is computed again afterwards, at the level of units (single nodes and fused partitions).

    :param outer: values of enclosing scopes this graph may read (for subgraphs), in the order
        their values are passed to ``execute``.
    :param functions: the model's local functions by ``(domain, name, overload)``, for inlining
        (subgraphs are compiled with them too).
    :param ir_version: the model's IR version, stamped on fused partitions' models.
    :param fallback: when a provider fails to compile a partition, run its nodes with other
        providers' kernels (with a warning) instead of failing.
    :param fold_constants: run host nodes whose inputs are all constants once, now (shape
        arithmetic, ConstantOfShape, weight reshapes), instead of on every run.
    """
    partition = partition_graph(graph, execution_order(graph), opsets, slots, functions=functions)
    slot_of: dict[int, int] = {}
    slot_names: dict[int, str] = {}
    template: list[Any] = [None, None]

    def new_slot(value: ir.Value) -> int:
        slot_of[id(value)] = len(template)
        slot_names[len(template)] = value.name or ""
        template.append(None)
        return slot_of[id(value)]

    input_values = list(graph.inputs)
    input_slots = tuple(new_slot(v) for v in input_values)
    outer_slots = tuple(new_slot(v) for v in outer)
    fed = {id(v) for v in input_values}
    constants: dict[int, Any] = {}
    constant_values: dict[int, ir.Value] = {}
    constant_slots: dict[int, Any] = {}
    for value in graph.initializers.values():
        array = tensor_value(value.const_value)
        if id(value) in fed:
            template[slot_of[id(value)]] = array  # default, replaced when fed
        else:
            template[new_slot(value)] = array
            constants[id(value)] = array
            constant_values[id(value)] = value
            constant_slots[slot_of[id(value)]] = array

    def compile_subgraph(node: ir.Node, node_opsets: Mapping[str, int], outer_values: list[ir.Value]):
        def compile_attribute(attribute: str) -> SubgraphRunner:
            attr = node.attributes.get(attribute)
            if attr is None or attr.type is not ir.AttributeType.GRAPH:
                raise Fail(f"node '{node.name}' ({node.op_type}) has no graph attribute '{attribute}'")
            return SubgraphRunner(
                build_plan(
                    attr.value, node_opsets, slots, outer=outer_values, functions=functions, ir_version=ir_version
                )
            )

        return compile_attribute

    nodes = execution_order(graph)  # again: inlining may have added nodes
    by_partition: dict[str, list[ir.Node]] = {}
    units: list[list[ir.Node]] = []
    for node in nodes:
        name = partition.assignments[node.name].partition
        if name is None:
            units.append([node])
        elif name not in by_partition:
            by_partition[name] = [node]
            units.append(by_partition[name])
        else:
            by_partition[name].append(node)
    steps: list[Step] = []
    readers = _outside_readers(nodes, partition)
    graph_outputs = {id(v) for v in graph.outputs}
    for index, unit in enumerate(order_units(units)):
        assignment = partition.assignments[unit[0].name]
        if assignment.partition is None:
            step = kernel_step(
                unit[0],
                assignment.kernel,
                assignment.provider,
                index,
                slot_of,
                new_slot,
                constants,
                opsets,
                compile_subgraph,
            )
            folded = _fold(unit[0], step, template, constant_slots) if fold_constants else None
            if folded is None:
                steps.append(step)
            else:  # computed now: downstream kernels see the values as constants
                for value, array in zip(unit[0].outputs, folded):
                    constants[id(value)] = constant_slots[slot_of[id(value)]] = array
            continue
        part, inputs, outputs = build_partition(
            assignment.partition,
            unit,
            readers[assignment.partition],
            graph_outputs,
            constant_values,
            opsets,
            ir_version,
        )
        try:
            steps.append(
                fused_step(assignment.partition, assignment.provider, part, inputs, outputs, index, slot_of, new_slot)
            )
        except EPFail as error:
            if not fallback:
                raise
            warnings.warn(
                f"{error.message}; its {len(unit)} nodes fall back to other providers", UserWarning, stacklevel=2
            )
            partition.fused.pop(assignment.partition, None)
            for node in unit:
                provider, kernel = _fallback_kernel(node, opsets, slots, assignment.provider)
                partition.assignments[node.name] = Assignment(provider, kernel)
                steps.append(
                    kernel_step(node, kernel, provider, index, slot_of, new_slot, constants, opsets, compile_subgraph)
                )

    output_slots = tuple(slot_of[id(v)] for v in graph.outputs)
    steps, output_slots, copies = place(steps, output_slots, template, constant_slots, slot_names)
    _schedule_frees(steps, {NONE_SLOT, DROP_SLOT, *outer_slots, *output_slots})
    return GraphPlan(
        input_names=tuple(v.name for v in input_values),
        input_slots=input_slots,
        outer_slots=outer_slots,
        output_names=tuple(v.name for v in graph.outputs),
        output_slots=output_slots,
        steps=steps,
        template=template,
        partition=partition,
        copies=copies,
    )


#: Ops whose result differs between runs: never folded.
_NOT_FOLDABLE = frozenset(
    {
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Bernoulli",
        "Multinomial",
        "Dropout",
    }
)
#: Folded results larger than this stay computed per run (a constant kept in memory for good).
_FOLD_LIMIT_BYTES = 64 << 20


def _fold(node: ir.Node, step: Step, template: list[Any], constant_slots: dict[int, Any]) -> list[Any] | None:
    """The node's outputs computed now, when every input is a constant, it runs on the host and
    its result is deterministic; ``None`` otherwise (or when it fails: the run reports it)."""
    if step.device is not None or node.op_type in _NOT_FOLDABLE or not node.inputs:
        return None
    if any(slot not in constant_slots and slot != NONE_SLOT for slot in step.inputs):
        return None
    if any(not v.name for v in node.outputs):
        return None
    try:
        result = step.call(*[template[slot] if slot == NONE_SLOT else constant_slots[slot] for slot in step.inputs])
    except Exception:  # noqa: BLE001 - left to fail at run time, with the node named
        return None
    outputs = [result] if step.single else list(result)[: len(step.outputs)]
    if len(outputs) != len(step.outputs) or not all(isinstance(o, np.ndarray) for o in outputs):
        return None
    if sum(o.nbytes for o in outputs) > _FOLD_LIMIT_BYTES:
        return None
    frozen = []
    for slot, array in zip(step.outputs, outputs):
        if array.flags.writeable:
            array = array.copy() if array.base is not None else array
            array.flags.writeable = False
        template[slot] = array
        frozen.append(array)
    return frozen


def _fallback_kernel(
    node: ir.Node, opsets: Mapping[str, int], slots: Sequence[ProviderSlot], failed: Any
) -> tuple[Any, Any]:
    """The first other provider with a kernel for ``node`` (CPU, in practice)."""
    view = GraphView(node.graph, node_opsets(node, opsets), [node])._nodes[0]
    for slot in slots:
        if slot.provider is failed:
            continue
        kernel = slot.kernels.resolve(view)
        if kernel is not None:
            return slot.provider, kernel
    raise EPFail(
        f"node '{node.name}' ({node.op_type}) fell out of a partition that failed to compile, and no "
        "other provider has a kernel for it"
    )


def _outside_readers(nodes: list[ir.Node], partition: PartitionResult) -> dict[str, set[int]]:
    """Per fused partition, ids of the values that nodes outside it read."""
    readers: dict[str, set[int]] = {name: set() for name in partition.fused}
    for node in nodes:
        own = partition.assignments[node.name].partition
        read = {id(v) for v in node_reads(node)}
        for name in readers:
            if name != own:
                readers[name] |= read
    return readers


def _schedule_frees(steps: list[Step], kept: set[int]) -> None:
    """Give each step the slots whose last reader it is (values die as early as possible)."""
    last_use: dict[int, int] = {}
    for index, step in enumerate(steps):
        for slot in step.inputs:
            last_use[slot] = index
        for slot in step.outputs:
            last_use.setdefault(slot, index)
    frees: dict[int, list[int]] = {}
    for slot, index in last_use.items():
        if slot not in kept:
            frees.setdefault(index, []).append(slot)
    for index, slots_to_free in frees.items():
        steps[index].free = tuple(sorted(slots_to_free))
