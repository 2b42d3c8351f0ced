"""CPU kernels of the com.microsoft ops, one module per op family.

The modules decorate into one registry; :func:`load_registry` imports them all once.  It is
called from the ``onnxplug_kernels`` hook, that is after the Environment registered this
library's schemas, so the kernels' signatures are checked against them
(:meth:`KernelRegistry.validate`).
"""

from __future__ import annotations

import functools
import importlib

from onnxplug.kernels import KernelRegistry

from ._registry import registry

#: The kernel modules, imported in this order.
MODULES = (
    "elementwise",
    "attention",
    "fused",
    "gqa",
    "normalization",
    "quantized",
    "qlinear",
    "qpool",
    "qlinalg",
    "qtransformer",
    "qlstm",
    "qconv",
    "qgather",
    "bnb4",
    "ml",
)


@functools.cache
def load_registry() -> KernelRegistry:
    """The registry with every kernel module imported."""
    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}")
    return registry
