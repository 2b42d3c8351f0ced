"""Kernel registration machinery (no kernels live in the core).

See :class:`KernelRegistry` for how a provider or op library declares kernels.
"""

from ._binding import Binding, Scratch
from ._limits import check_allocation, max_tensor_bytes
from ._registry import KernelDef, KernelKey, KernelRegistry, NodeContext
from ._runstate import RunState, check_terminate, current_run, enter_run, leave_run, unseeded_rng
from ._schema import (
    STANDARD_DOMAINS,
    attribute_defaults,
    attribute_value,
    find_schema,
    normalize_domain,
    schema_versions,
)

__all__ = [
    "Binding",
    "KernelDef",
    "KernelKey",
    "KernelRegistry",
    "NodeContext",
    "RunState",
    "STANDARD_DOMAINS",
    "Scratch",
    "attribute_defaults",
    "attribute_value",
    "check_allocation",
    "check_terminate",
    "current_run",
    "enter_run",
    "find_schema",
    "leave_run",
    "max_tensor_bytes",
    "normalize_domain",
    "schema_versions",
    "unseeded_rng",
]
