"""Hook implementations of the OpenVINO provider: import-light, so discovery costs nothing."""

from __future__ import annotations

import onnxplug


@onnxplug.hookimpl
def onnxplug_provider_factories():
    from .provider import OpenVINOProviderFactory

    return [OpenVINOProviderFactory()]
