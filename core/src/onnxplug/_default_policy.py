"""The core's default provider-selection policy, registered like any plugin.

Every :class:`~onnxplug.Environment` registers this module with its plugin manager before the
installed plugins, as ``onnxplug.default_policy``.  Its hook is marked ``trylast``, so a policy
plugin's ``onnxplug_select_providers`` is asked first and this one answers only when no plugin
does (the hook stops at the first non-None result).
"""

from __future__ import annotations

from collections.abc import Sequence

from .api import ProviderFactory
from .hookspecs import hookimpl

__all__ = ["CPU_NAME", "PLUGIN_NAME", "onnxplug_select_providers"]

CPU_NAME = "CPUExecutionProvider"
PLUGIN_NAME = "onnxplug.default_policy"


@hookimpl(trylast=True)
def onnxplug_select_providers(candidates: Sequence[ProviderFactory], policy: str) -> list[ProviderFactory]:
    """The candidates by ``ProviderFactory.priority``, highest first, with the CPU provider last
    whatever its priority (it is the last resort every other provider falls back to); ties
    are broken by name so the order never depends on discovery order."""
    return sorted(candidates, key=lambda f: (f.ort_name == CPU_NAME, -f.priority, f.name))
