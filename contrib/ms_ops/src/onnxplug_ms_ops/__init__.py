"""onnxruntime's ``com.microsoft`` contrib operators as an onnxplug op library.

The plugin (:mod:`onnxplug_ms_ops.plugin`) declares the operators' schemas, so that onnx's
checker and shape inference know them, and adds numpy kernels for them to the CPU provider.
Models that onnxruntime's optimizer saved (``SessionOptions.optimized_model_filepath``) use
these ops: fused activations, skip/simplified layer normalizations, attention variants and
quantized matmuls.
"""

__version__ = "0.1.0"

#: The domain of onnxruntime's contrib operators.
DOMAIN = "com.microsoft"
