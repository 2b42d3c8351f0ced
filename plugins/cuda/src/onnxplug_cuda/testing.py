"""The CUDA provider on a test backend, for machines without a GPU.

``environment_for("array_api_strict")`` is an :class:`onnxplug.Environment` with the CPU provider
and this plugin's factory built on array-api-strict arrays (or ``"numpy"``), registered
in-process under the name ``cuda``: sessions asking for ``CUDAExecutionProvider`` in it run the
real kernels and memory contract, with the standard's arrays standing in for CuPy's.
"""

from __future__ import annotations

import onnxplug

from .provider import CUDAProviderFactory

__all__ = ["BACKENDS", "environment_for"]

#: The test backends: the array API standard's reference arrays, and numpy.
BACKENDS = ("array_api_strict", "numpy")


class _BackendPlugin:
    def __init__(self, backend: str) -> None:
        self.backend = backend

    @onnxplug.hookimpl
    def onnxplug_provider_factories(self):
        return [CUDAProviderFactory(backend=self.backend)]

    @onnxplug.hookimpl
    def onnxplug_kernels(self, provider):
        from .kernels import registry

        return [registry] if provider.name == "cuda" else []


def environment_for(backend: str) -> onnxplug.Environment:
    """An Environment with the CPU provider and the CUDA provider on ``backend``."""
    environment = onnxplug.Environment(only=["cpu"])
    environment.register(_BackendPlugin(backend), name="cuda")
    return environment
