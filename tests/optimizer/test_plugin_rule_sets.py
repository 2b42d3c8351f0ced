"""The CPU provider and ms_ops contribute their rule sets through ``onnxplug_rewrite_rules``."""

from __future__ import annotations

import onnx.defs
import pytest

import onnxplug
from onnxplug.optimizer import STAGES, RuleSet

EXPECTED = {
    "basic": ["cpu.conv_bn", "cpu.matmul_add_gemm"],
    "extended": [
        "cpu.layer_norm",
        "ms_ops.rms_norm",
        "ms_ops.skip_layer_norm",
        "ms_ops.skip_rms_norm",
        "ms_ops.gelu",
        "ms_ops.fast_gelu",
        "ms_ops.bias_gelu",
        "ms_ops.fused_matmul",
        "ms_ops.fused_conv",
        "ms_ops.fused_gemm",
    ],
}


def collected(stage):
    env = onnxplug.Environment()
    return [s for result in env.plugin_manager.hook.onnxplug_rewrite_rules(stage=stage) for s in result]


@pytest.mark.parametrize("stage", STAGES)
def test_hook_onnxplug_rewrite_rules(stage):
    sets = collected(stage)
    assert all(isinstance(s, RuleSet) and s.rules and s.produces and s.description for s in sets)
    names = [s.name for s in sets]
    expected = EXPECTED.get(stage, [])
    # in order within each plugin (pluggy decides the order between plugins); ms_ops' attention
    # sets belong to another family and are left out here
    for prefix in ("cpu.", "ms_ops."):
        assert [n for n in names if n in expected and n.startswith(prefix)] == [
            n for n in expected if n.startswith(prefix)
        ]
    assert set(expected) <= set(names)


@pytest.mark.parametrize("stage", ["basic", "extended"])
def test_produced_ops_have_schemas(stage):
    """Every op a set produces is one onnx (with ms_ops' schemas registered) knows."""
    onnxplug.Environment()  # registers the op libraries' schemas
    for rule_set in collected(stage):
        for ref in rule_set.produces:
            assert onnx.defs.has(ref.op_type, ref.domain), (rule_set.name, str(ref))
