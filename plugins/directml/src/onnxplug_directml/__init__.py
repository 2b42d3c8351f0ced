"""onnxplug's DirectML execution provider: plans on any machine, detects DirectML where it runs."""

__version__ = "0.1.0"
