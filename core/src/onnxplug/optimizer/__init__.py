"""The optimizer stage: passes that take a model and return a new one, before partitioning.

``optimize(model, level, ...)`` is the stage; rule sets (:class:`RuleSet`) are how plugins add
fusions; ``apply_rule_sets`` applies sets to a copy of a model (for tests and tools).
"""

from .pipeline import LEVELS, OptimizedModel, PassReport, RuleGate, optimize, stages_for_level
from .rewrite import RewriteResult, apply_rule_sets
from .rules import STAGES, LazyRules, OpRef, RuleSet

__all__ = [
    "LEVELS",
    "STAGES",
    "LazyRules",
    "OpRef",
    "OptimizedModel",
    "PassReport",
    "RewriteResult",
    "RuleGate",
    "RuleSet",
    "apply_rule_sets",
    "optimize",
    "stages_for_level",
]
