"""onnxplug's CPU execution provider: every ONNX operator, in numpy.

Registered through the ``onnxplug`` entry point ``cpu`` like any third-party provider; nothing
in the core imports this package.
"""

__version__ = "0.1.0"
