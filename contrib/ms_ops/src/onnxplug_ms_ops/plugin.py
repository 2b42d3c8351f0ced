"""Hook implementations (import-light: schemas and kernels are built on first use)."""

from __future__ import annotations

import onnxplug


@onnxplug.hookimpl
def onnxplug_op_schemas():
    # onnx.reference indexes every registered schema by bare op name when it is first imported
    # and refuses names that exist in two domains.  Gelu, Trilu, Attention and RotaryEmbedding
    # exist in both the ONNX and the com.microsoft domain, so registering ours first would make
    # `import onnx.reference` (ReferenceEvaluator, onnxruntime's quantization tools) fail for
    # the rest of the process.  Importing it now lets it index onnx's own schemas only.
    import onnx.reference  # noqa: F401

    from .schemas import op_schemas

    return op_schemas()


@onnxplug.hookimpl
def onnxplug_kernels(provider):
    if provider.name != "cpu":
        return []
    from .kernels import load_registry

    return [load_registry()]


@onnxplug.hookimpl
def onnxplug_rewrite_rules(stage):
    from .rules import rule_sets  # their rules (and onnxscript) load only when a graph can use them

    return rule_sets(stage)
