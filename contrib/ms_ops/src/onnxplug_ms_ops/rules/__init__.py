"""Fusions into onnxruntime's contrib ops, one module per family.

:func:`rule_sets` lists them in the order they must run: attention first (``fused_matmul`` would
otherwise turn the scores' MatMul + Div into a FusedMatMul and hide the pattern), then a set that
matches another set's result after it (skip norms after the norms, BiasGelu after Gelu, FusedGemm
after the CPU provider's MatMul + Add → Gemm).  The optimizer repeats a stage until no set
matches, so the order across plugins does not decide what fuses.
"""

from __future__ import annotations

from onnxplug.optimizer import LazyRules, OpRef, RuleSet

from .. import DOMAIN

__all__ = ["BATCH_NORM_ACTIVATIONS", "CONV_ACTIVATIONS", "rule_sets"]

#: The activations a FusedConv takes from a following node (its rules' roots, with the adds).
CONV_ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "LeakyRelu", "HardSigmoid", "Clip")
#: The activations fused after an inference BatchNormalization.
BATCH_NORM_ACTIVATIONS = ("Relu", "Clip")


def _rules(module: str, function: str) -> LazyRules:
    """Rules built on first use: listing the sets imports neither onnxscript nor the modules."""
    return LazyRules(f"onnxplug_ms_ops.rules.{module}:{function}")


def rule_sets(stage: str) -> list[RuleSet]:
    """This library's rule sets for an optimizer ``stage`` (all of them are "extended")."""
    if stage != "extended":
        return []
    return [
        RuleSet(
            "ms_ops.attention",
            _rules("attention", "attention_rules"),
            produces=[OpRef(DOMAIN, "MultiHeadAttention")],
            anchors={"Softmax"},
            # the scores reach Softmax from their scaling (Mul or Div) or the mask's Add
            anchor_edges={("Mul", "Softmax"), ("Div", "Softmax"), ("Add", "Softmax")},
            description="scaled dot-product attention (torch exports) -> com.microsoft MultiHeadAttention",
        ),
        RuleSet(
            "ms_ops.attention_bias",
            _rules("attention", "attention_bias_rules"),
            produces=[OpRef(DOMAIN, "MultiHeadAttention")],
            anchors={"MultiHeadAttention"},
            description="the Q, K and V projections' bias Adds → MultiHeadAttention's bias input",
        ),
        RuleSet(
            "ms_ops.rms_norm",
            _rules("normalization", "rms_norm_rules"),
            produces=[OpRef("", "SimplifiedLayerNormalization")],
            anchors={"ReduceMean"},
            description="torch's RMS norm (LLaMA, T5) → SimplifiedLayerNormalization",
        ),
        RuleSet(
            "ms_ops.skip_layer_norm",
            _rules("normalization", "skip_layer_norm_rules"),
            produces=[OpRef(DOMAIN, "SkipLayerNormalization")],
            anchors={"LayerNormalization"},
            description="Add (+ bias) then LayerNormalization → SkipLayerNormalization",
        ),
        RuleSet(
            "ms_ops.skip_rms_norm",
            _rules("normalization", "skip_rms_norm_rules"),
            produces=[OpRef(DOMAIN, "SkipSimplifiedLayerNormalization")],
            anchors={"SimplifiedLayerNormalization"},
            description="Add (+ bias) then SimplifiedLayerNormalization → SkipSimplifiedLayerNormalization",
        ),
        RuleSet(
            "ms_ops.gelu",
            _rules("gelu", "gelu_rules"),
            produces=[OpRef(DOMAIN, "Gelu")],
            anchors={"Erf"},
            description="the erf form of Gelu → com.microsoft Gelu",
        ),
        RuleSet(
            "ms_ops.fast_gelu",
            _rules("gelu", "fast_gelu_rules"),
            produces=[OpRef(DOMAIN, "FastGelu")],
            anchors={"Tanh", "FastGelu"},  # the approximation; FastGelu + bias Add
            description="the tanh approximation of Gelu (GPT-2) → FastGelu, with a preceding bias Add folded in",
        ),
        RuleSet(
            "ms_ops.quick_gelu",
            _rules("gelu", "quick_gelu_rules"),
            produces=[OpRef(DOMAIN, "QuickGelu")],
            anchors={"Sigmoid"},
            anchor_edges={("Sigmoid", "Mul")},
            description="x * Sigmoid(x) (SiLU) → com.microsoft QuickGelu(alpha=1)",
        ),
        RuleSet(
            "ms_ops.bias_gelu",
            _rules("gelu", "bias_gelu_rules"),
            produces=[OpRef(DOMAIN, "BiasGelu")],
            anchors={"Gelu"},  # ai.onnx's or com.microsoft's
            description="Add of a bias vector then Gelu → BiasGelu",
        ),
        RuleSet(
            "ms_ops.fused_matmul",
            _rules("fused", "fused_matmul_rules"),
            produces=[OpRef(DOMAIN, "FusedMatMul")],
            anchors={"MatMul", "FusedMatMul"},
            description="MatMul with a scalar scale or a last-two-axes Transpose → FusedMatMul",
        ),
        RuleSet(
            "ms_ops.fused_conv",
            _rules("fused", "fused_conv_rules"),
            produces=[OpRef(DOMAIN, "FusedConv")],
            anchors={"Conv"},
            roots={*CONV_ACTIVATIONS, "QuickGelu", "Add", "Sum"},
            description="Conv (+ a residual Add or Sum of its shape) + activation → FusedConv",
        ),
        RuleSet(
            "ms_ops.fused_batch_norm",
            _rules("fused", "fused_batch_norm_rules"),
            produces=[OpRef(DOMAIN, "FusedConv")],
            anchors={"BatchNormalization"},
            roots=set(BATCH_NORM_ACTIVATIONS),
            description="BatchNormalization (inference) + Relu or Clip → a depthwise 1×1 FusedConv",
        ),
        RuleSet(
            "ms_ops.fused_gemm",
            _rules("fused", "fused_gemm_rules"),
            produces=[OpRef(DOMAIN, "FusedGemm")],
            anchors={"Gemm"},
            description="Gemm + activation → FusedGemm",
        ),
    ]
