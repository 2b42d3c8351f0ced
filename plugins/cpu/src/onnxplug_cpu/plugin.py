"""Hook implementations of the CPU provider (import-light: kernels load on first use)."""

from __future__ import annotations

import onnxplug


@onnxplug.hookimpl
def onnxplug_provider_factories():
    from .provider import CPUProviderFactory

    return [CPUProviderFactory()]


@onnxplug.hookimpl
def onnxplug_kernels(provider):
    if provider.name != "cpu":
        return []
    from .kernels import load_registry

    return [load_registry()]


@onnxplug.hookimpl
def onnxplug_rewrite_rules(stage):
    from .rule_sets import rule_sets  # their rules (and onnxscript) load only when a graph can use them

    return rule_sets(stage)
