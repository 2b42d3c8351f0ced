"""onnxplug's CUDA execution provider (``CUDAExecutionProvider``).

Kernels are written against the array API standard (through array-api-compat), so the same
code runs on CuPy arrays on a GPU and, in tests on machines without one, on array-api-strict or
numpy arrays.  CuPy is imported only when devices are listed or a provider is created.
"""

__version__ = "0.1.0"
