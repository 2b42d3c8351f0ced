"""onnxplug's TensorRT execution provider: plans on any machine, builds engines where TensorRT runs."""

__version__ = "0.1.0"
