"""Hook implementations (import-light: schemas and kernels are built on first use)."""

from __future__ import annotations

import onnxplug


@onnxplug.hookimpl
def onnxplug_op_schemas():
    from .schemas import op_schemas

    return op_schemas()


@onnxplug.hookimpl
def onnxplug_kernels(provider):
    if provider.name != "cpu":
        return []
    from .kernels import load_registry

    return [load_registry()]
