"""Fusions into onnxruntime's contrib ops, one module per family.

:func:`rule_sets` lists them in the order they must run: attention first (``fused_matmul`` would
otherwise turn the scores' MatMul + Div into a FusedMatMul and hide the pattern), then a set that
matches another set's result after it (skip norms after the norms, BiasGelu after Gelu, FusedGemm
after the CPU provider's MatMul + Add → Gemm).  The optimizer repeats a stage until no set
matches, so the order across plugins does not decide what fuses.
"""

from __future__ import annotations

from onnxplug.optimizer import OpRef, RuleSet

__all__ = ["rule_sets"]


def rule_sets(stage: str) -> list[RuleSet]:
    """This library's rule sets for an optimizer ``stage`` (all of them are "extended")."""
    if stage != "extended":
        return []
    from . import fused, gelu, normalization
    from .attention import attention_rules

    attention = RuleSet(
        name="ms_ops.attention",
        rules=attention_rules(),
        produces=(OpRef("com.microsoft", "MultiHeadAttention"),),
        anchors={"Softmax"},
        description="scaled dot-product attention (torch exports) -> com.microsoft MultiHeadAttention",
    )
    return [attention, *normalization.rule_sets(), *gelu.rule_sets(), *fused.rule_sets()]
