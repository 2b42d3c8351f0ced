"""``optimize``: the optimizer stage as one call, level by level, with a report of every pass.

The stage takes the loaded model and returns a new one; the caller's model is never edited
(``ir.Model.clone`` shares tensor payloads, so a copy of a large model costs little).

==================== ==========================================================================
level                passes
==================== ==========================================================================
ORT_DISABLE_ALL      preparation only: unique node names, missing opset imports,
                     ``add_initializer`` overrides
ORT_ENABLE_BASIC     + Constant nodes lifted to initializers, Shape/Size of static shapes,
                     constant folding, no-op removal, common-subexpression elimination, dead
                     nodes and unused initializers removed (repeated until nothing changes)
ORT_ENABLE_EXTENDED  + the ``"extended"`` rule sets plugins contribute (fusions), then the basic
                     passes again
ORT_ENABLE_ALL       + the ``"layout"`` rule sets (layout choices, provider-specific fusions)
==================== ==========================================================================

A rule set runs only when the session can run what it produces (see :class:`RuleGate`), and is
tried only on a graph holding one of its :attr:`RuleSet.anchors` op types (and, where it names
them, one of its :attr:`RuleSet.anchor_edges`), and not again on a graph it found nothing in.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np
import onnx
import onnx_ir as ir

from ..graph import all_nodes
from ._cleanup import eliminate_common_subexpressions, remove_dead_code, remove_no_ops
from ._fold import Evaluator, fold_constants, lift_constant_nodes, materialize_fills, simplify_shapes
from ._prepare import fill_missing_opsets, name_nodes, override_initializers
from .rewrite import rewrite_in_place
from .rules import OpRef, RuleSet

__all__ = ["LEVELS", "OptimizedModel", "PassReport", "RuleGate", "optimize", "stages_for_level"]

#: onnxruntime's levels by value (GraphOptimizationLevel): 0, 1, 2, 99.
LEVELS = {0: "ORT_DISABLE_ALL", 1: "ORT_ENABLE_BASIC", 2: "ORT_ENABLE_EXTENDED", 99: "ORT_ENABLE_ALL"}

#: How many rounds the basic passes get to reach a fixed point.
_BASIC_ROUNDS = 4
#: How many times a stage's rule sets are applied, at most, to reach a fixed point.
_RULE_ROUNDS = 3


def stages_for_level(level: int) -> tuple[str, ...]:
    """The rule-set stages a level runs (``ORT_ENABLE_ALL`` runs every stage)."""
    if level >= 99:
        return ("basic", "extended", "layout")
    if level >= 2:
        return ("basic", "extended")
    if level >= 1:
        return ("basic",)
    return ()


@dataclasses.dataclass(frozen=True)
class PassReport:
    """What one pass changed: node counts (all graphs) before and after, and what it did
    (``{"folded": 12}``, ``{"ms_ops.skip_layer_norm": 24}``...)."""

    name: str
    nodes_before: int
    nodes_after: int
    changes: Mapping[str, int]

    @property
    def changed(self) -> bool:
        return bool(self.changes) or self.nodes_before != self.nodes_after


@dataclasses.dataclass(frozen=True)
class OptimizedModel:
    """The optimizer's output: a new model, the opsets it resolves with, and the pass reports.

    :ivar skipped: rule sets not applied, with the reason (an op no session provider runs).
    :ivar nodes_before: nodes (all graphs) of the model the optimizer was given.
    """

    model: ir.Model
    level: int
    passes: tuple[PassReport, ...]
    skipped: Mapping[str, str]
    nodes_before: int

    @property
    def nodes_after(self) -> int:
        """Nodes (all graphs) of the optimized model."""
        return _count(self.model)

    @property
    def opsets(self) -> dict[str, int]:
        return {("" if d == "ai.onnx" else d): v for d, v in self.model.opset_imports.items()}

    def fusions(self) -> dict[str, int]:
        """Rewrites per rule set, over every pass."""
        totals: Counter[str] = Counter()
        for report in self.passes:
            if report.name.startswith("rules:"):
                totals.update(report.changes)
        return dict(totals)


class RuleGate:
    """Decides which rule sets a session may apply.

    :param providers: short names of the session's providers.
    :param has_kernel: ``has_kernel(domain, op_type, since_version)``: whether the session can
        run that schema version where the fused op would land (sessions ask their first
        provider, so a fusion never takes nodes from a provider asked before the one running it).
    """

    def __init__(self, providers: Iterable[str], has_kernel: Callable[[str, str, int], bool]) -> None:
        self._providers = frozenset(providers)
        self._has_kernel = has_kernel
        # (id(rule set), opsets) → (the rule set, answer): a session asks for its cache key, then
        # optimize asks again, and sessions may share a gate (``runtime._rule_gates``); the rule
        # set kept beside its answer tells a set made again at a freed one's address apart.
        self._answers: dict[tuple[int, frozenset], tuple[RuleSet, str | None]] = {}

    def why_not(self, rule_set: RuleSet, opsets: Mapping[str, int]) -> str | None:
        """``None`` when ``rule_set`` may run; otherwise the reason it may not."""
        key = (id(rule_set), frozenset(opsets.items()))
        known = self._answers.get(key)
        if known is None or known[0] is not rule_set:
            known = self._answers[key] = (rule_set, self._why_not(rule_set, opsets))
        return known[1]

    def _why_not(self, rule_set: RuleSet, opsets: Mapping[str, int]) -> str | None:
        if rule_set.providers is not None and not self._providers.intersection(rule_set.providers):
            return f"meant for {', '.join(rule_set.providers)}, not among the session's providers"
        for op in rule_set.produces:
            if not self._runnable(op, opsets):
                if rule_set.providers is not None:
                    continue  # a provider's own rules produce what that provider compiles
                return f"no provider of the session runs {op}"
        return None

    def _runnable(self, op: OpRef, opsets: Mapping[str, int]) -> bool:
        since = _since_version(op.op_type, op.domain, op.version or opsets.get(op.domain))
        return since is not None and self._has_kernel(op.domain, op.op_type, since)


_SINCE_VERSIONS: dict[tuple[str, str, int | None], int] = {}


def _since_version(op_type: str, domain: str, version: int | None) -> int | None:
    """The schema version an op resolves to at ``version`` of its domain (the newest when
    ``None``); ``None`` when there is none.  Found versions are cached (every session's gate
    asks the same); misses are not, since an op library may register the schema later."""
    key = (op_type, domain, version)
    found = _SINCE_VERSIONS.get(key)
    if found is None:
        try:
            schema = (
                onnx.defs.get_schema(op_type, domain)
                if version is None
                else onnx.defs.get_schema(op_type, version, domain)
            )
        except onnx.defs.SchemaError:
            return None
        found = _SINCE_VERSIONS.setdefault(key, schema.since_version)
    return found


def _count(model: ir.Model) -> int:
    return sum(1 for _ in all_nodes(model.graph))


def _op_types(model: ir.Model) -> set[str]:
    """Op types of every node: the graph, its subgraphs and the model's functions (onnxscript
    applies rules to functions too)."""
    found = {node.op_type for node in all_nodes(model.graph)}
    for function in model.functions.values():
        found.update(node.op_type for node in all_nodes(function))
    return found


def _edges(model: ir.Model) -> set[tuple[str, str]]:
    """``(producer, consumer)`` op types of every value read by a node, in every graph and
    function (a read from inside a subgraph counts for the outer producer: that only adds)."""
    found = set()
    nodes = [*all_nodes(model.graph), *(n for f in model.functions.values() for n in all_nodes(f))]
    for node in nodes:
        for output in node.outputs:
            found.update((node.op_type, user.op_type) for user, _ in output.uses())
    return found


class _Recorder:
    """Runs passes on the optimizer's own copy and records a PassReport for each.

    Only passes change the copy, so the node count after one pass is the count before the next,
    a pass that reports no change leaves the count (it is not walked again), and the op types
    present stay known until a pass changes something.  ``version`` counts the changes, so that
    a rule set that found nothing is not tried again on the same graph.
    """

    def __init__(self, model: ir.Model) -> None:
        self.model = model
        self.reports: list[PassReport] = []
        self.version = 0
        self._nodes = _count(model)
        self._op_types: set[str] | None = None
        self._edges: set[tuple[str, str]] | None = None

    def run(self, name: str, function: Callable[[ir.Model], Mapping[str, int]]) -> bool:
        before = self._nodes
        changes = {key: int(count) for key, count in function(self.model).items() if count}
        if changes:
            self._nodes = _count(self.model)
        report = PassReport(name, before, self._nodes, changes)
        self.reports.append(report)
        if report.changed:
            self._op_types = self._edges = None
            self.version += 1
        return report.changed

    def may_match(self, rule_set: RuleSet) -> bool:
        """Whether some rule of ``rule_set`` could match (one of its anchors is present, and one
        of its anchor edges where it names them)."""
        if rule_set.anchors is not None:
            if self._op_types is None:
                self._op_types = _op_types(self.model)
            if self._op_types.isdisjoint(rule_set.anchors):
                return False
        if rule_set.anchor_edges is not None:
            if self._edges is None:
                self._edges = _edges(self.model)
            if self._edges.isdisjoint(rule_set.anchor_edges):
                return False
        return True


def _basic(
    recorder: _Recorder,
    opsets: Mapping[str, int],
    evaluate: Evaluator | None,
    node_opsets: Callable,
    keep: frozenset[str] = frozenset(),
) -> None:
    recorder.run("lift-constants", lambda m: {"lifted": lift_constant_nodes(m)})
    for _ in range(_BASIC_ROUNDS):
        changed = recorder.run("shape-simplification", lambda m: {"replaced": simplify_shapes(m)})
        if evaluate is not None:
            changed |= recorder.run(
                "constant-folding", lambda m: {"folded": fold_constants(m, opsets, evaluate, node_opsets, keep)}
            )
        changed |= recorder.run("no-op-removal", remove_no_ops)
        changed |= recorder.run("common-subexpressions", eliminate_common_subexpressions)
        changed |= recorder.run("dead-code", remove_dead_code)
        if not changed:
            break


def optimize(
    model: ir.Model,
    level: int,
    *,
    rule_sets: Mapping[str, Sequence[RuleSet]] | None = None,
    gate: RuleGate | None = None,
    evaluate: Evaluator | None = None,
    node_opsets: Callable[[ir.Node, Mapping[str, int]], Mapping[str, int]] | None = None,
    initializers: Mapping[str, np.ndarray] | None = None,
    handed_over: bool = False,
) -> OptimizedModel:
    """Optimize a copy of ``model`` at ``level`` (0, 1, 2 or 99, as GraphOptimizationLevel), or,
    ``handed_over``, ``model`` itself: its caller gives it up (nobody reads it afterwards), and
    the copy would cost a share of the session's creation for nothing (ResNet-50 as loaded,
    415 nodes: 9 ms of ~100).

    :param rule_sets: stage → the rule sets plugins contributed for it.
    :param gate: which rule sets the session can run (all of them when ``None``).
    :param evaluate: computes a node from constant inputs, for folding (no folding when ``None``).
    :param node_opsets: the opsets a node resolves with (default: the model's).
    :param initializers: ``add_initializer`` overrides, applied first.
    :raises InvalidArgument: an override that does not fit its initializer.
    """
    nodes_before = _count(model)
    copy = model if handed_over else model.clone()
    override_initializers(copy, initializers or {})
    fill_missing_opsets(copy)
    name_nodes(copy)
    recorder = _Recorder(copy)
    opsets = {("" if d == "ai.onnx" else d): v for d, v in copy.opset_imports.items()}
    resolve = node_opsets or (lambda node, default: default)
    skipped: dict[str, str] = {}
    stages = stages_for_level(level)
    applicable_by_stage: dict[str, list[RuleSet]] = {}
    for stage in stages:
        applicable_by_stage[stage] = []
        for rule_set in (rule_sets or {}).get(stage, ()):
            reason = None if gate is None else gate.why_not(rule_set, opsets)
            if reason is None:
                applicable_by_stage[stage].append(rule_set)
            else:
                skipped[rule_set.name] = reason
    # Ops a rule set consumes with their constant inputs wait for the rule stages; whatever no
    # rule took is folded by the basic passes that follow them.
    keep = frozenset().union(*(rs.keeps_unfolded for sets in applicable_by_stage.values() for rs in sets))
    if keep and _op_types(copy).isdisjoint(keep):
        keep = frozenset()  # nothing to keep: no second round of basic passes
    if "basic" in stages:
        _basic(recorder, opsets, evaluate, resolve, keep)
    fused = False
    # id(rule set) → the graph version it last found nothing in: the same graph, the same nothing.
    settled: dict[int, int] = {}
    for stage in stages:
        applicable = applicable_by_stage[stage]
        # Sets of different plugins may build on each other's results (a skip norm over the
        # LayerNormalization another plugin fused): repeat the stage until nothing matches.
        for _ in range(_RULE_ROUNDS):
            matched = False
            for rule_set in applicable:
                if settled.get(id(rule_set)) == recorder.version or not recorder.may_match(rule_set):
                    continue
                if recorder.run(f"rules:{stage}", lambda m, rule_set=rule_set: rewrite_in_place(m, [rule_set])):
                    matched = True
                else:
                    settled[id(rule_set)] = recorder.version
            fused |= matched
            if not matched:
                break
    if fused or keep:
        fill_missing_opsets(copy)
        _basic(recorder, opsets, evaluate, resolve)
    # folded ConstantOfShape results are views of one value until here (see _fold._broadcast_fill)
    recorder.run("materialize-fills", lambda m: {"written": materialize_fills(m)})
    name_nodes(copy)
    return OptimizedModel(copy, level, tuple(recorder.reports), skipped, nodes_before)
