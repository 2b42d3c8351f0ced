"""Kernel registration machinery (no kernels live in the core).

See :class:`KernelRegistry` for how a provider or op library declares kernels.
"""

from ._limits import check_allocation, max_tensor_bytes
from ._registry import KernelDef, KernelKey, KernelRegistry, NodeContext
from ._runstate import check_terminate, current_run, unseeded_rng
from ._schema import attribute_defaults, find_schema, normalize_domain, schema_versions

__all__ = [
    "KernelDef",
    "KernelKey",
    "KernelRegistry",
    "NodeContext",
    "attribute_defaults",
    "check_allocation",
    "check_terminate",
    "current_run",
    "find_schema",
    "max_tensor_bytes",
    "normalize_domain",
    "schema_versions",
    "unseeded_rng",
]
