"""``optimize_model``: onnxruntime.transformers.optimizer's entry point, on onnxplug's optimizer.

onnxruntime runs Python fusion passes per ``model_type`` and then, optionally, its own graph
optimizer.  Here the fusions are those of onnxplug's optimizer stage (the rule sets the
session's providers contribute, gated on their kernels), so ``model_type``, ``num_heads`` and
``hidden_size`` select nothing: they are accepted for compatibility and checked for sense.
The result has onnxruntime's ``OnnxModel`` methods that scripts use: ``save_model_to_file``,
``get_fused_operator_statistics``, ``model`` and ``nodes()``.
"""

from __future__ import annotations

import collections
import os
import tempfile

import onnx

from ..errors import InvalidArgument

__all__ = ["OptimizedModel", "optimize_model"]

MODEL_TYPES = (
    "bert",
    "bart",
    "bert_tf",
    "bert_keras",
    "clip",
    "conformer",
    "gpt2",
    "gpt2_tf",
    "gpt_neox",
    "mmdit",
    "phi",
    "sam2",
    "swin",
    "t5",
    "tnlr",
    "unet",
    "vae",
    "vit",
)
# The fused operators onnxruntime's statistics list (zero when absent), in its order.
FUSED_OPS = (
    "EmbedLayerNormalization",
    "Attention",
    "MultiHeadAttention",
    "Gelu",
    "FastGelu",
    "BiasGelu",
    "GemmFastGelu",
    "LayerNormalization",
    "SimplifiedLayerNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
    "RotaryEmbedding",
)
_LEVELS = {0: "ORT_DISABLE_ALL", 1: "ORT_ENABLE_BASIC", 2: "ORT_ENABLE_EXTENDED", 99: "ORT_ENABLE_ALL"}


class OptimizedModel:
    """The optimized model, with the ``OnnxModel`` methods onnxruntime's result offers."""

    def __init__(self, model: onnx.ModelProto, report=None):
        self.model = model
        self.report = report

    def nodes(self):
        return list(self.model.graph.node)

    def get_fused_operator_statistics(self) -> dict[str, int]:
        """Counts of the fused operator types (onnxruntime's list, zero when absent), plus any
        other com.microsoft operator the optimizer produced."""
        counts = collections.Counter(n.op_type for n in self.model.graph.node)
        stats = {op: counts.get(op, 0) for op in FUSED_OPS}
        for node in self.model.graph.node:
            if node.domain == "com.microsoft" and node.op_type not in stats:
                stats[node.op_type] = counts[node.op_type]
        return stats

    def save_model_to_file(
        self,
        output_path,
        use_external_data_format=False,
        all_tensors_to_one_file=True,
        size_threshold=1024,
        convert_attribute=False,
    ) -> None:
        output_path = os.fspath(output_path)
        folder = os.path.dirname(output_path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        if use_external_data_format:
            onnx.save_model(
                self.model,
                output_path,
                save_as_external_data=True,
                all_tensors_to_one_file=all_tensors_to_one_file,
                location=os.path.basename(output_path) + ".data",
                size_threshold=size_threshold,
                convert_attribute=convert_attribute,
            )
        else:
            onnx.save_model(self.model, output_path)


def optimize_model(
    input,  # noqa: A002 - onnxruntime's parameter name
    model_type: str = "bert",
    num_heads: int = 0,
    hidden_size: int = 0,
    optimization_options=None,
    opt_level: int | None = None,
    use_gpu: bool = False,
    only_onnxruntime: bool = False,
    verbose: bool = False,
    *,
    provider: str | None = None,
) -> OptimizedModel:
    """Optimize a model file or ModelProto with onnxplug's optimizer stage.

    ``opt_level``: 0 disable, 1 basic, 2 extended (the default here: the fusions), 99 all.
    ``provider`` (or ``use_gpu`` for CUDA) chooses the providers whose rule sets apply.
    """
    from ..runtime import GraphOptimizationLevel, InferenceSession, SessionOptions

    if model_type not in MODEL_TYPES:
        raise InvalidArgument(f"model_type {model_type!r} is not one of {', '.join(MODEL_TYPES)}")
    if num_heads < 0 or hidden_size < 0 or (num_heads and hidden_size and hidden_size % num_heads):
        raise InvalidArgument(f"hidden_size {hidden_size} must be a multiple of num_heads {num_heads} (0: detect)")
    level = 2 if opt_level is None else opt_level
    if level not in _LEVELS:
        raise InvalidArgument(f"opt_level must be one of {sorted(_LEVELS)}, got {opt_level}")
    data = input.SerializeToString() if isinstance(input, onnx.ModelProto) else os.fspath(input)
    providers = [provider] if provider else (["CUDAExecutionProvider", "CPUExecutionProvider"] if use_gpu else None)
    with tempfile.TemporaryDirectory(prefix="onnxplug-opt-") as folder:
        target = os.path.join(folder, "optimized.onnx")
        options = SessionOptions()
        options.graph_optimization_level = getattr(GraphOptimizationLevel, _LEVELS[level])
        options.optimized_model_filepath = target
        session = InferenceSession(data, options, providers=providers)
        model = onnx.load(target)
    return OptimizedModel(model, session.get_optimization_report())
