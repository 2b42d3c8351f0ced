"""A simulated device for onnxplug (see the README)."""

__version__ = "0.1.0"
