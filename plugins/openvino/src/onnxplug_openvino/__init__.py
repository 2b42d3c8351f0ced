"""onnxplug's OpenVINO execution provider (``OpenVINOExecutionProvider``).

Registered through the ``onnxplug`` entry point ``openvino``.  The ``openvino`` package is imported
only when devices are listed or a provider is created, never at discovery.
"""

__version__ = "0.1.0"
