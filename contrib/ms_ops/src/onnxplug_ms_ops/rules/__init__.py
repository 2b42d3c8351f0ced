"""Rewrite rules that create com.microsoft ops (contributed through ``onnxplug_rewrite_rules``)."""

from __future__ import annotations

from onnxplug.optimizer import OpRef, RuleSet

__all__ = ["rule_sets"]


def rule_sets(stage: str) -> list[RuleSet]:
    """The ms_ops rule sets of an optimizer ``stage`` (``onnxplug.optimizer.STAGES``)."""
    if stage != "extended":
        return []
    from .attention import attention_rules

    return [
        RuleSet(
            name="ms_ops.attention",
            rules=attention_rules(),
            produces=(OpRef("com.microsoft", "MultiHeadAttention"),),
            description="scaled dot-product attention (torch exports) -> com.microsoft MultiHeadAttention",
        )
    ]
