"""Hook implementations of the WASM provider: import-light (no wasmtime, no kernels), so
discovery costs nothing."""

from __future__ import annotations

import onnxplug


@onnxplug.hookimpl
def onnxplug_provider_factories():
    from .provider import WasmProviderFactory

    return [WasmProviderFactory()]


@onnxplug.hookimpl
def onnxplug_kernels(provider):
    if provider.name != "wasm":
        return []
    from .kernels import registry

    return [registry]
