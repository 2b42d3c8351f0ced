"""The library's kernel registry; ``kernel`` registers in the com.microsoft domain by default."""

from __future__ import annotations

import functools

from onnxplug.kernels import KernelRegistry

from .. import DOMAIN

registry = KernelRegistry("ms_ops")
kernel = functools.partial(registry.kernel, domain=DOMAIN)
