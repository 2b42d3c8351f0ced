"""The optimizer stage: passes that take a model and return a new one, before partitioning."""

from .rules import STAGES, OpRef, RuleSet

__all__ = ["STAGES", "OpRef", "RuleSet"]
