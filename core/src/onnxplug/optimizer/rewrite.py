"""Applying rule sets to a model: the step every fusion goes through."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import onnx_ir as ir

from .rules import RuleSet

__all__ = ["RewriteResult", "apply_rule_sets", "rewrite_in_place"]


@dataclasses.dataclass(frozen=True)
class RewriteResult:
    """A rewritten model and how many times each rule set matched (by ``RuleSet.name``)."""

    model: ir.Model
    applied: dict[str, int]


def apply_rule_sets(model: ir.Model, rule_sets: Sequence[RuleSet]) -> RewriteResult:
    """Apply each set in turn to a copy of ``model`` (the caller's model is not changed).

    A set's rules are applied together, repeatedly, until none matches (onnxscript's
    ``RewriteRuleSet.apply_to_model``); the counts say how many rewrites each set made.
    """
    copy = model.clone()
    return RewriteResult(copy, rewrite_in_place(copy, rule_sets))


def rewrite_in_place(model: ir.Model, rule_sets: Sequence[RuleSet]) -> dict[str, int]:
    """Apply each set in turn to ``model`` itself (the optimizer's own copy); rewrites per set."""
    from onnxscript.rewriter import pattern  # imported here: the rewriter is only needed to fuse

    applied: dict[str, int] = {}
    for rule_set in rule_sets:
        # New rule objects per model: shared ones kept the last model alive (RuleSet.fresh_rules).
        rules = rule_set.fresh_rules()
        if not rules:
            continue
        if rule_set.roots is not None:
            rules = tuple(_AtRoots(rule, rule_set.roots) for rule in rules)
        count = pattern.RewriteRuleSet(list(rules)).apply_to_model(model)
        applied[rule_set.name] = applied.get(rule_set.name, 0) + int(count or 0)
    return applied


class _AtRoots:
    """An onnxscript rule tried only at nodes whose op type is one of ``roots`` (see
    :attr:`RuleSet.roots`); everything else is the rule's own."""

    __slots__ = ("_rule", "_roots")

    def __init__(self, rule: Any, roots: frozenset[str]) -> None:
        self._rule = rule
        self._roots = roots

    def try_rewrite(self, model: ir.Model, graph_or_function: Any, node: ir.Node, **options: Any) -> Any:
        if node.op_type not in self._roots:
            return None
        return self._rule.try_rewrite(model, graph_or_function, node, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rule, name)
