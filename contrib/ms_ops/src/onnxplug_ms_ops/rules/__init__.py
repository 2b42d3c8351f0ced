"""Fusions into onnxruntime's contrib ops, one module per family.

:func:`rule_sets` lists them in the order they must run: a set that matches another set's
result comes after it (skip norms after the norms, BiasGelu after Gelu, FusedGemm after the CPU
provider's MatMul + Add → Gemm).
"""

from __future__ import annotations

from onnxplug.optimizer import RuleSet

__all__ = ["rule_sets"]


def rule_sets(stage: str) -> list[RuleSet]:
    """This library's rule sets for an optimizer ``stage`` (all of them are "extended")."""
    if stage != "extended":
        return []
    from . import fused, gelu, normalization

    return [*normalization.rule_sets(), *gelu.rule_sets(), *fused.rule_sets()]
