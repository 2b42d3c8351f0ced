"""Hook implementations of the CoreML provider: import-light (no coremltools), so discovery costs nothing."""

from __future__ import annotations

import onnxplug


@onnxplug.hookimpl
def onnxplug_provider_factories():
    from .provider import CoremlProviderFactory

    return [CoremlProviderFactory()]
