"""onnxplug.transformers: onnxruntime.transformers' ``optimizer.optimize_model`` on onnxplug's
optimizer stage."""
