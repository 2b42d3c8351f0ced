"""The provider's kernel registry: importing this module registers every kernel module."""

from __future__ import annotations

from . import kernels_elementwise, kernels_nn  # noqa: F401 - imported for their registrations
from ._common import registry

__all__ = ["OPS", "registry"]

#: The op types the provider has kernels for.
OPS = frozenset(kernel.key.op_type for kernel in registry)
