"""CPU kernels, one module per op family.

Every module listed in :data:`MODULES` registers its kernels into the shared registry when it is
imported; :func:`load_registry` imports them all once.  A meta-test checks that every module in
this package is listed.
"""

from __future__ import annotations

import functools
import importlib

from onnxplug.kernels import KernelRegistry

from ._registry import registry

#: The kernel modules, imported in this order.
MODULES = (
    "activation",
    "attention",
    "attention_linear",
    "bitwise",
    "cast",
    "construct",
    "control_flow",
    "elementwise",
    "image",
    "image_decode",
    "indexing",
    "logical",
    "math",
    "ml",
    "ml_forest",
    "ml_linear",
    "ml_trees",
    "nn",
    "normalization",
    "optional",
    "pool",
    "quantization",
    "quantized_products",
    "random",
    "reduce",
    "resize",
    "rnn",
    "scatter",
    "sequence",
    "shape",
    "signal",
    "sorting",
    "text",
    "training",
    "unary",
)


@functools.cache
def load_registry() -> KernelRegistry:
    """The CPU registry with every kernel module imported."""
    for name in MODULES:
        importlib.import_module(f"{__name__}.{name}")
    return registry
