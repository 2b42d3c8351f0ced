"""onnxplug's OpenVINO execution provider (``OpenVINOExecutionProvider``).

Registered through the ``onnxplug`` entry point ``openvino``.  The ``openvino`` package is imported
only when devices are listed or a provider is created, never at discovery.
"""

__version__ = "0.1.0"

__all__ = ["clear_caches"]


def clear_caches() -> None:
    """Forget the cached capability answers and compiled models (benchmarks of creation time,
    tests): they live in the core's process-wide compile cache, which this clears."""
    from onnxplug import default_compile_cache

    default_compile_cache().clear()
