"""The optimizer stage: passes that take a model and return a new one, before partitioning."""

from .rewrite import RewriteResult, apply_rule_sets
from .rules import STAGES, OpRef, RuleSet

__all__ = ["STAGES", "OpRef", "RewriteResult", "RuleSet", "apply_rule_sets"]
