"""The plan stage: a partitioned graph turned into steps over integer value slots.

Building a plan does everything that does not depend on the feeds: node order (at the level of
units: single nodes and fused partitions), slot numbers, kernel construction (attribute parsing,
weight prepacking, subgraph compilation), partitions compiled by their provider (with fallback
to other providers' kernels), device copies placed, and the last use of every value, so that a
run is a loop of calls and list stores (see ``_loop``).

The plan never edits the partitioned model: when a partition fails to compile and its nodes fall
back, the plan's own copy of the assignment records it.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import onnx_ir as ir

from ..errors import EPFail, Fail
from ..graph import GraphView, execution_order, node_reads, order_units, subgraphs
from ..kernels import current_run
from ..partition import Assignment, PartitionedModel, PartitionResult, ProviderSlot, build_partition, node_opsets
from ._concat_in_place import write_concats_in_place
from ._loop import load_values, run_sequential
from ._placement import Copy, place
from ._slots import SlotTable
from ._steps import DROP_SLOT, NONE_SLOT, Step, fused_step, kernel_step
from ._straight_line import StraightLine

__all__ = ["GraphPlan", "Step", "SubgraphRunner", "build_plan"]


@dataclasses.dataclass
class GraphPlan:
    """A compiled graph.  ``execute`` runs it on values placed in its input and outer slots.

    :ivar partition: the assignment as planned (after any fallback).
    :ivar order: the nodes that run, in execution order, with their provider's onnxruntime name
        and fused partition (``None`` for kernels) — what reports describe.
    """

    graph: ir.Graph
    input_names: tuple[str, ...]
    input_slots: tuple[int, ...]
    outer_slots: tuple[int, ...]
    output_names: tuple[str, ...]
    output_slots: tuple[int, ...]
    steps: list[Step]
    template: list[Any]
    partition: PartitionResult
    order: list[tuple[ir.Node, str, str | None]]
    copies: list[Copy] = dataclasses.field(default_factory=list)
    #: Per graph output, the slot and provider it is computed in, before its copy home.
    output_sources: tuple[tuple[int, Any], ...] = ()
    #: How many steps at the end copy graph outputs home.
    tail: int = 0
    _input_readers: dict[str, tuple[tuple[str, str], ...]] | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )
    _straight: StraightLine | None = dataclasses.field(default=None, init=False, repr=False, compare=False)
    _input_defaults: tuple[tuple[str, Any], ...] | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )

    def input_defaults(self) -> tuple[tuple[str, Any], ...]:
        """``(name, value when not fed)`` per graph input, in ``input_names`` order: an
        initializer a feed may override, else ``None`` (computed once: ``run()`` reads it)."""
        if self._input_defaults is None:
            self._input_defaults = tuple(
                (name, self.template[slot]) for name, slot in zip(self.input_names, self.input_slots)
            )
        return self._input_defaults

    def execute(self, inputs: Sequence[Any], outer: Sequence[Any] = (), profiler: Any = None) -> list[Any]:
        """Run the plan.  ``inputs`` align with ``input_slots``, ``outer`` with ``outer_slots``."""
        values = load_values(self.template, self.input_slots, inputs, self.outer_slots, outer)
        if profiler is None:
            straight = self._straight
            if straight is None:
                straight = self._straight = StraightLine(self.steps, self.output_slots, self.constant_slots())
            state = current_run()
            straight(values, None if state is None else state.run_options)
        else:
            run_sequential(self.steps, values, profiler)
        return [values[slot] for slot in self.output_slots]

    def constant_slots(self) -> list[int]:
        """Slots holding the same object on every run: the template's values that no feed or
        outer scope replaces."""
        variable = {*self.input_slots, *self.outer_slots}
        return [slot for slot, value in enumerate(self.template) if value is not None and slot not in variable]

    def input_readers(self, name: str) -> tuple[tuple[str, str], ...]:
        """``(op type, provider)`` of every step reading graph input ``name`` (computed once)."""
        if self._input_readers is None:
            self._input_readers = {
                input_name: tuple((s.op_type, s.provider) for s in self.steps if slot in s.inputs)
                for input_name, slot in zip(self.input_names, self.input_slots)
            }
        return self._input_readers[name]

    def execute_on_devices(self, inputs: Sequence[Any], keep: Sequence[bool]) -> list[tuple[Any, Any]]:
        """Run the plan, leaving the outputs flagged in ``keep`` in the memory they were computed
        in; returns ``(value, memory or None)`` per output.  The final copies home still run
        for the others (each output's copy step reads only its own value)."""
        values = load_values(self.template, self.input_slots, inputs)
        homeward = {slot for (slot, device), kept in zip(self.output_sources, keep) if kept and device is not None}
        body = self.steps[: len(self.steps) - self.tail]
        steps = body + [s for s in self.steps[len(body) :] if s.inputs[0] not in homeward]
        run_sequential(steps, values)
        results = []
        for (source, device), slot, kept in zip(self.output_sources, self.output_slots, keep):
            if kept and device is not None:
                results.append((values[source], device.transfer()))
            else:
                results.append((values[slot], None))
        return results


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
    partitioned: PartitionedModel,
    slots: Sequence[ProviderSlot],
    *,
    graph: ir.Graph | None = None,
    outer: Sequence[ir.Value] = (),
    fallback: bool = True,
) -> GraphPlan:
    """Compile ``graph`` (default: the main graph) of a partitioned model for its providers.

    :param outer: values of enclosing scopes this graph may read (for subgraphs), in the order
        their values are passed to ``execute``.
    :param fallback: when a provider fails to compile a partition, run its nodes with other
        providers' kernels (with a warning) instead of failing.
    """
    graph = partitioned.model.graph if graph is None else graph
    opsets = partitioned.graph_opsets[graph]
    planned = partitioned.result(graph)
    partition = PartitionResult(dict(planned.assignments), planned.declined, planned.inlined, dict(planned.fused))
    table = SlotTable()
    input_slots = tuple(table.add(v) for v in graph.inputs)
    outer_slots = tuple(table.add(v) for v in outer)
    table.add_initializers(graph)
    ir_version = partitioned.model.ir_version

    def compile_subgraph(node: ir.Node, node_sets: Mapping[str, int], outer_values: list[ir.Value]):
        def compile_attribute(attribute: str) -> SubgraphRunner:
            attr = node.attributes.get(attribute)
            if attr is None or attr.type is not ir.AttributeType.GRAPH:
                raise Fail(f"node '{node.name}' ({node.op_type}) has no graph attribute '{attribute}'")
            return SubgraphRunner(
                build_plan(partitioned, slots, graph=attr.value, outer=outer_values, fallback=fallback)
            )

        return compile_attribute

    node_of: dict[int, ir.Node] = {}  # id(step) -> its node, for kernel steps

    def node_step(node: ir.Node, assignment: Assignment, index: int) -> Step:
        step = kernel_step(
            node,
            assignment.kernel,
            assignment.provider,
            index,
            table.slot_of,
            table.add,
            table.constants,
            opsets,
            compile_subgraph,
        )
        node_of[id(step)] = node
        return step

    nodes = execution_order(graph)
    readers = _outside_readers(nodes, partition)
    graph_outputs = {id(v) for v in graph.outputs}
    steps: list[Step] = []
    order: list[tuple[ir.Node, str, str | None]] = []
    for index, unit in enumerate(order_units(_units(nodes, partition))):
        assignment = partition.assignments[unit[0].name]
        name = assignment.partition
        if name is None:
            steps.append(node_step(unit[0], assignment, index))
            order.append((unit[0], assignment.provider.ort_name, None))
            continue
        part, inputs, outputs = build_partition(
            name, unit, readers[name], graph_outputs, table.constant_values, opsets, ir_version
        )
        try:
            steps.append(fused_step(name, assignment.provider, part, inputs, outputs, index, table.slot_of, table.add))
            order.extend((node, assignment.provider.ort_name, name) for node in unit)
        except EPFail as error:
            if not fallback:
                raise
            warnings.warn(
                f"{error.message}; its {len(unit)} nodes fall back to other providers", UserWarning, stacklevel=2
            )
            del partition.fused[name]
            for node in unit:
                if subgraphs(node):  # its bodies were left to the compiler: partition them now
                    partitioned = partitioned.with_subgraphs(node, slots)
                provider, kernel = _fallback_kernel(node, opsets, slots, assignment.provider)
                partition.assignments[node.name] = Assignment(provider, kernel)
                steps.append(node_step(node, partition.assignments[node.name], index))
                order.append((node, provider.ort_name, None))

    steps = write_concats_in_place(steps, node_of, table.add_internal, graph_outputs)
    output_slots = tuple(table.slot(v) for v in graph.outputs)
    devices = tuple(slot.provider for slot in slots if slot.provider.transfer() is not None)
    steps, output_slots, copies, sources, tail = place(
        steps, output_slots, table.template, table.constant_slots, table.names, devices=devices, free_slots=outer_slots
    )
    _schedule_frees(steps, {NONE_SLOT, DROP_SLOT, *outer_slots, *output_slots, *(slot for slot, _ in sources)})
    return GraphPlan(
        graph=graph,
        input_names=tuple(v.name for v in graph.inputs),
        input_slots=input_slots,
        outer_slots=outer_slots,
        output_names=tuple(v.name for v in graph.outputs),
        output_slots=output_slots,
        steps=steps,
        template=table.template,
        partition=partition,
        order=order,
        copies=copies,
        output_sources=sources,
        tail=tail,
    )


def _units(nodes: Sequence[ir.Node], partition: PartitionResult) -> list[list[ir.Node]]:
    """Nodes grouped into units: one per kernel node, one per fused partition (members in order)."""
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
    return units


def _fallback_kernel(
    node: ir.Node, opsets: Mapping[str, int], slots: Sequence[ProviderSlot], failed: Any
) -> tuple[Any, Any]:
    """The first other provider with a kernel for ``node`` (CPU, in practice)."""
    view = GraphView(node.graph, node_opsets(node, opsets), [node]).node(node.name)
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
