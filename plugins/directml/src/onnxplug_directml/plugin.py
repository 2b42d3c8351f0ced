"""Hook implementations of the DirectML provider: import-light, so discovery costs nothing."""

from __future__ import annotations

import onnxplug


@onnxplug.hookimpl
def onnxplug_provider_factories():
    from .provider import DmlProviderFactory

    return [DmlProviderFactory()]
