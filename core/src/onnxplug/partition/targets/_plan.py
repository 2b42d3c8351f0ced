"""Planning for a provider whose runtime is absent: the real partitioner, with a capability table
standing in for the runtime's own capability answer.

:func:`plan_for_target` builds a session in a private :class:`~onnxplug.Environment` holding the
CPU provider and a *planning* provider for the target: the optimizer, the partitioner and the
planner run as they would on the target machine, and the planning provider answers
``capability()`` from the table (fused partitions over the nodes it would claim, declines with the
vendor's condition).  Its partitions are never compiled into anything that runs: calling one
raises.  What comes back is a :class:`TargetPlan` with the session's partition report — the
partitions, the copies at the borders (device-memory targets only), and each declined node with
its reason.  It is a plan, not an execution: the vendor's runtime may still refuse a node the
table accepts (TensorRT's parser, where present, has the last word).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import onnx

from ..._plugins import Environment, default_environment
from ...api import CompiledPartition, DataTransfer, Device, Provider, ProviderFactory
from ...errors import EPFail, InvalidArgument
from ...hookspecs import hookimpl
from ._table import CapabilityTable, table_claims

__all__ = ["KNOWN_TARGETS", "PlannableFactory", "TargetPlan", "check_usability", "find_table", "plan_for_target"]

#: The targets onnxplug plans for (their plugins' short names); CoreML's table is its plugin's.
KNOWN_TARGETS = ("tensorrt", "directml", "nnapi", "coreml")
#: onnxruntime's names of the known targets, for finding a plugin by either name.
_SHORT_NAMES = {
    "TensorrtExecutionProvider": "tensorrt",
    "DmlExecutionProvider": "directml",
    "NnapiExecutionProvider": "nnapi",
    "CoreMLExecutionProvider": "coreml",
}


@runtime_checkable
class PlannableFactory(Protocol):
    """A provider factory that can be planned for without its runtime: it hands out its table."""

    name: str

    def capability_table(self) -> CapabilityTable: ...


class PlannedMemory(DataTransfer):
    """The target's device memory in a plan: it only names the memory, so the planner inserts the
    copies the target would need.  Values stay numpy arrays (nothing runs on the target)."""

    def __init__(self, device_name: str) -> None:
        self.device_name = device_name

    def to_device(self, value: Any) -> Any:
        return np.array(value, copy=True)

    def to_host(self, value: Any) -> Any:
        return np.array(value, copy=True)


class PlanningProvider(Provider):
    """Claims what the table accepts, as fused partitions (the compiling providers' way)."""

    def __init__(self, factory: PlanningFactory, device: Device) -> None:
        super().__init__(factory, device)
        self.table = factory.table
        self._memory = None if self.table.memory is None else PlannedMemory(self.table.memory)

    def capability(self, graph, kernels):
        return table_claims(self.table, graph)

    def compile(self, partition) -> CompiledPartition:
        target = self.table.provider

        def refuse(*values: Any) -> list[Any]:
            raise EPFail(
                f"{partition.name} is part of a plan for {target}, whose runtime is not here: "
                "a plan reports what would run where, it does not run"
            )

        return CompiledPartition(partition.inputs, partition.outputs, refuse)

    def transfer(self) -> DataTransfer | None:
        return self._memory


class PlanningFactory(ProviderFactory):
    """The target's name and memory, with the table as its capability; used by plans only."""

    priority = -1  # never chosen unless named (and it is only ever in a planning environment)

    def __init__(self, table: CapabilityTable) -> None:
        self.table = table
        self.name = table.target
        self.ort_name = table.provider

    def devices(self) -> list[Device]:
        return [Device("planned", 0, vendor="plan", name=f"plan only: {self.table.source}")]

    def create(self, device: Device, options: Mapping[str, str]) -> PlanningProvider:
        self.check_options(options)
        return PlanningProvider(self, device)


class _PlanningPlugin:
    def __init__(self, factory: PlanningFactory) -> None:
        self.factory = factory

    @hookimpl
    def onnxplug_provider_factories(self):
        return [self.factory]


def find_table(target: str, environment: Environment | None = None) -> CapabilityTable:
    """The capability table of ``target`` (a provider's short or onnxruntime name).

    The table comes from the target's plugin: its factory's ``capability_table()``.  A plugin
    that is not an installed entry point but is importable as ``onnxplug_<target>`` (a source
    checkout) is asked too.

    :raises InvalidArgument: no installed plugin has a table for ``target``.
    """
    environment = environment or default_environment()
    factory = environment.factory(target)
    if factory is None:
        factory = _importable_factory(target)
    if factory is None or not isinstance(factory, PlannableFactory):
        names = ", ".join(KNOWN_TARGETS)
        found = "is not installed" if factory is None else "has no capability table"
        raise InvalidArgument(
            f"no capability table for target '{target}': its provider plugin {found} "
            f"(targets onnxplug plans for: {names}; pip install onnxplug[{_SHORT_NAMES.get(target, target)}])"
        )
    table = factory.capability_table()
    if not isinstance(table, CapabilityTable):
        raise InvalidArgument(f"{factory!r}.capability_table() returned {type(table).__name__}, not a CapabilityTable")
    return table


def _importable_factory(target: str) -> ProviderFactory | None:
    target = _SHORT_NAMES.get(target, target)
    if not target.isidentifier():
        return None
    try:
        module = importlib.import_module(f"onnxplug_{target}.plugin")
    except ImportError:
        return None
    hook = getattr(module, "onnxplug_provider_factories", None)
    for factory in (hook() if hook is not None else []) or []:
        if factory.name == target:
            return factory
    return None


@dataclasses.dataclass(frozen=True)
class TargetPlan:
    """What a target provider would run of a model, decided without its runtime.

    :ivar target: the target's short name; ``provider``: its onnxruntime name.
    :ivar source: the table's source and version.
    :ivar report: the planning session's :class:`~onnxplug.PartitionReport` (the target and the
        CPU provider, as the session on the target would have them).
    :ivar notes: the table's caveats.
    """

    target: str
    provider: str
    source: str
    report: Any
    notes: tuple[str, ...] = ()

    @property
    def claimed(self) -> tuple[str, ...]:
        """Names of the nodes the target would run, in execution order."""
        return tuple(n.name for n in self.report.nodes if n.provider == self.provider)

    @property
    def fallback(self) -> tuple[str, ...]:
        """Names of the nodes that would run elsewhere (the CPU provider)."""
        return tuple(n.name for n in self.report.nodes if n.provider != self.provider)

    @property
    def declined(self) -> dict[str, tuple[str, ...]]:
        """Node → the target's reasons, for nodes the target declined that run (not those later folded or inlined)."""
        running = {n.name for n in self.report.nodes}
        own = self.report.declined.get(self.provider, {})
        return {name: tuple(reasons) for name, reasons in sorted(own.items()) if name in running}

    @property
    def fully_supported(self) -> bool:
        return not self.fallback

    def lines(self, title: str) -> list[str]:
        """The plan as text: what the target takes, then the partition report's lines."""
        from ...cli._partition import format_report

        total = len(self.report.nodes)
        claimed = len(self.claimed)
        share = f"{100.0 * claimed / total:.0f}%" if total else "-"
        head = [
            f"plan for {self.provider} (a plan, not an execution: the {self.target} runtime is not used)",
            f"table: {self.source}",
            f"{self.target} would run {claimed} of {total} nodes ({share}) in "
            f"{len(self.report.partitions)} partition{'s' if len(self.report.partitions) != 1 else ''}",
        ]
        head.extend(f"note: {note}" for note in self.notes)
        op_of = {n.name: n.op_type for n in self.report.nodes}
        groups: dict[tuple[str, str], int] = {}
        for name, reasons in self.declined.items():
            # value names differ node to node; the reason without them groups alike declines
            generic = re.sub(r"\[[^\]]*\]", "[...]", re.sub(r"'[^']*'", "'...'", "; ".join(reasons)))
            key = (op_of[name], generic)
            groups[key] = groups.get(key, 0) + 1
        if groups:
            head.append("declined, by op and reason:")
            for (op, why), count in sorted(groups.items(), key=lambda item: (-item[1], item[0])):
                head.append(f"  {op} x{count}: {why}")
        if any("static shapes only" in why for _, why in groups):
            head.append(
                "hint: the target needs static shapes; fix the free dimensions "
                "(onnxplug partition --dim NAME=VALUE, plan_for_target(..., dims={NAME: VALUE})) and plan again"
            )
        return head + format_report(self.report, title)


def plan_for_target(
    model: str | bytes | os.PathLike | onnx.ModelProto,
    target: str | CapabilityTable,
    *,
    sess_options: Any = None,
    environment: Environment | None = None,
    dims: Mapping[str, int] | None = None,
) -> TargetPlan:
    """Plan ``model`` for ``target`` on this machine, whatever its hardware.

    :param model: a path, serialized bytes or a ModelProto.
    :param target: a target name (``"tensorrt"``, ``"directml"``, ``"nnapi"``...) or a table.
    :param sess_options: the :class:`~onnxplug.SessionOptions` the deployment would use (the
        optimization level changes what is left to partition).
    :param environment: where to look the target's plugin up (default: the installed plugins).
    :param dims: free dimensions to fix (name → size) before planning, for targets that need
        static shapes: the model's inputs and outputs get the sizes and shapes are inferred again.
    :raises InvalidArgument: no table for ``target``; a ``dims`` name the model does not use.
    """
    from ...runtime import InferenceSession  # the runtime imports the partition stage

    table = target if isinstance(target, CapabilityTable) else find_table(target, environment)
    if dims:
        model = _fix_dims(model, dims)
    elif isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    planning = Environment(only=["cpu"])
    planning.register(_PlanningPlugin(PlanningFactory(table)), name=f"plan-{table.target}")
    session = InferenceSession(
        model, sess_options, providers=[table.provider, "CPUExecutionProvider"], environment=planning
    )
    return TargetPlan(table.target, table.provider, table.source, session.get_partition_report(), tuple(table.notes))


def _fix_dims(model: str | bytes | os.PathLike | onnx.ModelProto, dims: Mapping[str, int]) -> bytes:
    """The model with the named free dimensions of its inputs and outputs set, and its inferred
    ``value_info`` dropped so that loading infers the shapes again."""
    if isinstance(model, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    elif isinstance(model, bytes):
        proto = onnx.load_model_from_string(model)
    else:
        proto = onnx.load_model(os.fspath(model))
    used: set[str] = set()
    for value in [*proto.graph.input, *proto.graph.output]:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in dims:
                used.add(dim.dim_param)
                dim.dim_value = int(dims[dim.dim_param])
    unknown = sorted(set(dims) - used)
    if unknown:
        raise InvalidArgument(f"the model's inputs and outputs have no free dimension named {', '.join(unknown)}")
    del proto.graph.value_info[:]
    return proto.SerializeToString()


def check_usability(model_path: str, target: str, argv: Sequence[str] = ()) -> int:
    """``python -m onnxplug.tools.check_model_usability MODEL --target T [--html OUT] [--require-all]``:
    print the plan and return the exit status (0; 1 with ``--require-all`` when some node would
    fall back; 2 for a target without a table)."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(prog=f"check_model_usability --target {target}")
    parser.add_argument("--html", metavar="OUT.html", help="also write the picture of the plan")
    parser.add_argument("--require-all", action="store_true", help="exit 1 when any node would fall back")
    args = parser.parse_args(list(argv))
    try:
        plan = plan_for_target(model_path, target)
    except InvalidArgument as error:
        print(f"check_model_usability: {error}", file=sys.stderr)
        return 2
    print("\n".join(plan.lines(str(model_path))))
    if args.html:
        from ...cli._html import write_html

        write_html(plan.report, args.html, title=f"{model_path} (plan for {plan.provider})")
        print(f"wrote {args.html}")
    return 1 if args.require_all and not plan.fully_supported else 0
