"""Hook implementations: import-light (no CuPy, no kernels) so discovery costs nothing."""

from __future__ import annotations

import onnxplug


@onnxplug.hookimpl
def onnxplug_provider_factories():
    from .provider import CUDAProviderFactory

    return [CUDAProviderFactory()]


@onnxplug.hookimpl
def onnxplug_kernels(provider):
    if provider.name != "cuda":
        return []
    from .kernels import registry

    return [registry]
