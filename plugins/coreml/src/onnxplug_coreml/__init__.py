"""onnxplug's CoreML execution provider: plans and converts on any machine, predicts on macOS."""

__version__ = "0.1.0"
