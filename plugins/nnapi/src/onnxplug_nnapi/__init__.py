"""onnxplug's NNAPI execution provider: plans on any machine, detects Android's NNAPI where it runs."""

__version__ = "0.1.0"
