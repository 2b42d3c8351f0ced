"""onnxplug.tools: model tools with onnxruntime.tools' role — ``validate`` (where two providers'
results part), and ``check_model_usability`` (``python -m onnxplug.tools.check_model_usability
MODEL --target nnapi``)."""
