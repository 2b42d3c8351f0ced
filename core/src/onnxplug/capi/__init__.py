"""Import paths that onnxruntime code uses (``onnxruntime.capi...``)."""
