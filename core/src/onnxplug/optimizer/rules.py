"""Rule sets: the unit in which plugins contribute graph rewrites to the optimizer.

A plugin returns :class:`RuleSet` objects from the ``onnxplug_rewrite_rules(stage)`` hook.  Each
set carries onnxscript rewrite rules (``onnxscript.rewriter.pattern.RewriteRule``: a target
pattern, an optional check, a replacement) and says which ops its replacements create.  The
optimizer applies a set only when the session can run every op it ``produces`` — some provider
of the session has a kernel for it at the model's opset (or, for a set that names ``providers``,
one of those providers is in the session) — so a CPU-only install never ends up with a node
nobody runs.

Stages follow onnxruntime's optimization levels: ``"basic"`` (ORT_ENABLE_BASIC and above),
``"extended"`` (ORT_ENABLE_EXTENDED and above) and ``"layout"`` (ORT_ENABLE_ALL: layout choices
and provider-specific fusions).
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = ["STAGES", "LazyRules", "OpRef", "RuleSet"]

#: Optimizer stages in the order they run; a level runs its own stage and those before it.
STAGES = ("basic", "extended", "layout")


@dataclasses.dataclass(frozen=True)
class OpRef:
    """An op a rule creates: ``domain`` ("" for ai.onnx), ``op_type``, and the opset version of
    ``domain`` it is written for (``None``: whatever the model imports, or the newest)."""

    domain: str
    op_type: str
    version: int | None = None

    def __str__(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}"


class LazyRules(Sequence):
    """A rule set's rules, built when first used, and anew for each model the optimizer applies
    them to (:meth:`build`).

    ``build`` is a zero-argument callable or a ``"module:function"`` string returning the rules.
    Building onnxscript rules imports onnxscript's rewriter (a quarter of a second); a plugin
    that lists its sets with lazy rules costs nothing in a session whose graphs hold none of a
    set's :attr:`RuleSet.anchors`, since the optimizer then never asks for the rules.  As a
    sequence it lists rule objects built once and kept, for reports and tests.

    .. versionadded:: 0.2
    """

    def __init__(self, build: Callable[[], Sequence[Any]] | str) -> None:
        self._build = build
        self._rules: tuple[Any, ...] | None = None
        self._lock = threading.Lock()

    def _builder(self) -> Callable[[], Sequence[Any]]:
        build = self._build
        if isinstance(build, str):
            module, _, function = build.partition(":")
            build = getattr(importlib.import_module(module), function)
        return build

    def _get(self) -> tuple[Any, ...]:
        if self._rules is None:
            with self._lock:
                if self._rules is None:
                    self._rules = tuple(self._builder()())
        return self._rules

    def build(self) -> tuple[Any, ...]:
        """New rule objects, built now: what the optimizer applies to each model.

        Why not the kept ones: an onnxscript rule keeps its last match (the graph it was found
        in), and rule classes keep per-match state between ``check`` and ``rewrite``.  Applied
        from one shared instance, the rules kept the last optimized model (every initializer of
        it: ResNet-50's 100 MB of folded weights) alive after its session was gone, and two
        sessions created at once on two threads would have shared the match state.  Building
        the 85 rules of onnxplug's own sets takes about 5 ms.

        .. versionadded:: 0.5
        """
        return tuple(self._builder()())

    def __len__(self) -> int:
        return len(self._get())

    def __getitem__(self, index):  # type: ignore[override]
        return self._get()[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._get())

    def __repr__(self) -> str:
        state = "built" if self._rules is not None else "not built"
        return f"LazyRules({self._build!r}, {state})"


@dataclasses.dataclass(frozen=True)
class RuleSet:
    """Rewrite rules of one kind, contributed by a plugin.

    :ivar name: a dotted name for reports and ``onnxplug optimize`` (``"ms_ops.skip_layer_norm"``).
    :ivar rules: onnxscript ``RewriteRule`` objects, applied together until none matches (a
        :class:`LazyRules` builds them on first use).
    :ivar produces: the ops the replacements create (the gate: every one must be runnable).
    :ivar providers: provider short names the set is meant for; ``None``: any session whose
        providers can run ``produces``.
    :ivar description: one line for docs and reports.
    :ivar anchors: op types (any domain) of which every match of every rule contains at least
        one — for each rule, any op its pattern cannot match without.  The optimizer does not
        try the set on a graph (with its subgraphs and functions) holding none of them, which
        leaves the graph as trying would, at no cost: a six-node model no longer runs every
        fusion's matcher at every node.  ``None`` (the default): always tried.

        .. versionadded:: 0.2
    :ivar anchor_edges: pairs ``(producer, consumer)`` of op types (any domain) of which every
        match of every rule contains at least one: a node of the first type whose output a node
        of the second type reads (QuickGelu's ``x * Sigmoid(x)`` needs ``("Sigmoid", "Mul")``).
        Checked in addition to :attr:`anchors`, for sets whose anchor ops are common on their
        own: a Sigmoid that feeds no Mul no longer imports onnxscript's rewriter.  ``None``
        (the default): not checked.

        .. versionadded:: 0.4
    :ivar keeps_unfolded: op types (standard domain) whose nodes the rules consume with their
        constant inputs, so the basic level's constant folding must leave them for the rule
        stages (a QDQ fusion needs ``DequantizeLinear(weights)``, not the float weights folding
        would make of it).  What no rule consumed is folded after the rule stages.  Only sets
        the session applies count.

        .. versionadded:: 0.3
    :ivar roots: op types (any domain) of the node every rule's pattern ends at (its output
        node: the node onnxscript tries a rule at).  The optimizer offers the set's rules only
        nodes of these types; onnxscript otherwise tries every rule at every node, and those
        failing tries (35 FusedConv rules at each of ResNet-50's 280 nodes, twice) were a
        sixth of its session's creation.  ``None`` (the default): every node.

        .. versionadded:: 0.6
    """

    name: str
    rules: Sequence[Any]
    produces: Sequence[OpRef] = ()
    providers: tuple[str, ...] | None = None
    description: str = ""
    anchors: frozenset[str] | None = None
    anchor_edges: frozenset[tuple[str, str]] | None = None
    keeps_unfolded: frozenset[str] = frozenset()
    roots: frozenset[str] | None = None

    def fresh_rules(self) -> tuple[Any, ...]:
        """The rules to apply to one model: new objects where :attr:`rules` is a
        :class:`LazyRules` (see :meth:`LazyRules.build`), else the set's own (shared) objects.

        .. versionadded:: 0.5
        """
        return self.rules.build() if isinstance(self.rules, LazyRules) else tuple(self.rules)

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a RuleSet needs a name")
        if not isinstance(self.rules, LazyRules):
            object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "produces", tuple(self.produces))
        if self.anchors is not None:
            if isinstance(self.anchors, str):
                raise TypeError(f"RuleSet {self.name}: anchors must be a collection of op types, not a string")
            object.__setattr__(self, "anchors", frozenset(self.anchors))
        if self.anchor_edges is not None:
            edges = frozenset(tuple(edge) for edge in self.anchor_edges)
            if not all(len(edge) == 2 and all(isinstance(op, str) for op in edge) for edge in edges):
                raise TypeError(f"RuleSet {self.name}: anchor_edges must be (producer, consumer) pairs of op types")
            object.__setattr__(self, "anchor_edges", edges)
        if self.roots is not None:
            if isinstance(self.roots, str):
                raise TypeError(f"RuleSet {self.name}: roots must be a collection of op types, not a string")
            object.__setattr__(self, "roots", frozenset(self.roots))
        if isinstance(self.keeps_unfolded, str):
            raise TypeError(f"RuleSet {self.name}: keeps_unfolded must be a collection of op types, not a string")
        object.__setattr__(self, "keeps_unfolded", frozenset(self.keeps_unfolded))
