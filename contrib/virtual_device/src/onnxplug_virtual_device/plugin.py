"""Hook implementations: import-light, so discovery costs nothing."""

from __future__ import annotations

import onnxplug


@onnxplug.hookimpl
def onnxplug_provider_factories():
    from .provider import VirtualDeviceFactory

    return [VirtualDeviceFactory()]


@onnxplug.hookimpl
def onnxplug_kernels(provider):
    if provider.name != "virtual_device":
        return []
    from .kernels import registry

    return [registry]
