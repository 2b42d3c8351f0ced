"""The plugin: the module that the ``onnxplug`` entry point names.

Keep it import-light: onnxplug imports every installed plugin when it builds an Environment,
so the schemas and kernels are imported inside the hooks, when they are asked for.
"""

from __future__ import annotations

import onnxplug


@onnxplug.hookimpl
def onnxplug_op_schemas():
    from .schemas import op_schemas

    return op_schemas()


@onnxplug.hookimpl
def onnxplug_kernels(provider):
    if provider.name != "cpu":  # numpy kernels: only the CPU provider can run them
        return []
    from .kernels import registry

    return [registry]
