"""An Environment with the WASM provider, whether or not its entry point is installed.

``environment()`` returns an :class:`onnxplug.Environment` with the CPU provider and this
plugin (registered in-process under its entry-point name ``wasm`` when the distribution's
entry point is not installed, as in a source checkout).
"""

from __future__ import annotations

import onnxplug

__all__ = ["environment"]


def environment() -> onnxplug.Environment:
    """The CPU provider and the WASM provider."""
    env = onnxplug.Environment(only=["cpu", "wasm"])
    if not any(record.name == "wasm" for record in env.plugins):
        from . import plugin

        env.register(plugin, name="wasm")
    return env
