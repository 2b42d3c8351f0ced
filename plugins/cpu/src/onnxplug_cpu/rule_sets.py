"""The CPU provider's rule sets: names, what they produce and their anchors, with the rules
themselves (:mod:`onnxplug_cpu.rules`, :mod:`onnxplug_cpu.rules_conv`) built on first use, so
listing them imports neither onnxscript nor the rule modules."""

from __future__ import annotations

from onnxplug.optimizer import LazyRules, OpRef, RuleSet

__all__ = ["rule_sets"]


def _rules(function: str, module: str = "onnxplug_cpu.rules") -> LazyRules:
    return LazyRules(f"{module}:{function}")


def rule_sets(stage: str) -> list[RuleSet]:
    """The CPU provider's rule sets for ``stage``."""
    if stage == "basic":
        return [
            RuleSet(
                "cpu.conv_bn",
                _rules("conv_bn_rules"),
                produces=[OpRef("", "Conv")],
                anchors={"BatchNormalization"},
                roots={"BatchNormalization"},
                description="BatchNormalization (inference) after Conv folded into the Conv's weights and bias",
            ),
            RuleSet(
                "cpu.conv_mul_add",
                _rules("conv_mul_add_rules", "onnxplug_cpu.rules_conv"),
                produces=[OpRef("", "Conv")],
                anchors={"Conv"},
                roots={"Mul", "Add"},
                description="Conv followed by a constant per-channel Mul or Add folded into its weights and bias",
            ),
            RuleSet(
                "cpu.bn_mul_add",
                _rules("bn_mul_add_rules", "onnxplug_cpu.rules_conv"),
                produces=[OpRef("", "BatchNormalization")],
                anchors={"BatchNormalization"},
                roots={"Mul", "Add"},
                description="inference BatchNormalization followed by a constant per-channel Mul or Add folded into it",
            ),
            RuleSet(
                "cpu.pool_after_pointwise",
                _rules("pool_after_pointwise_rules", "onnxplug_cpu.rules_conv"),
                produces=[OpRef("", "Conv"), OpRef("", "AveragePool")],
                anchors={"AveragePool"},
                roots={"Conv"},
                description="a narrowing 1×1 Conv after an AveragePool moved in front of it (pooling fewer channels)",
            ),
            RuleSet(
                "cpu.matmul_add_gemm",
                _rules("matmul_add_gemm_rules"),
                produces=[OpRef("", "Gemm")],
                anchors={"MatMul"},
                roots={"Add"},
                description="MatMul (2-D A, constant 2-D B) + Add → Gemm",
            ),
        ]
    if stage == "extended":
        from .kernels import _vnni  # no numba import: a look at the CPU's flags

        return [
            RuleSet(
                "cpu.qdq_conv",
                _rules("qdq_conv_rules", "onnxplug_cpu.rules_qdq"),
                produces=[OpRef("", "QLinearConv")],
                anchors={"QuantizeLinear"},
                # The weights' DequantizeLinear must reach the rule; where the rule cannot fire
                # (no VNNI) folding takes it at once, as before.
                keeps_unfolded={"DequantizeLinear"} if _vnni.enabled() else (),
                description="QDQ Conv (DQ → Conv → Q) → QLinearConv where the CPU computes it in int8 (AVX-512 VNNI)",
            ),
            RuleSet(
                "cpu.layer_norm",
                _rules("layer_norm_rules"),
                produces=[OpRef("", "LayerNormalization")],
                anchors={"ReduceMean", "LayerNormalization"},  # the decomposition; LN + bias Add
                description="torch's layer norm decomposition → LayerNormalization (opset ≥ 17)",
            ),
        ]
    return []
