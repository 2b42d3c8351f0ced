"""Plugins' op schemas registered with onnx (``onnx.defs``), which is process-wide: the first
environment to need a schema registers it, and every later one finds it there.

Why a module of its own: onnx's reference evaluator refuses, when first imported, an op name
present in two domains (Gelu, Attention... exist in com.microsoft too), so it is imported before
such a schema is registered, for the sake of every later user in the process; only then, since
its import costs ~14 ms of a fresh process's first session.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["register_process_wide"]

_LOCK = threading.Lock()
#: The domains whose op names onnx itself defines.
_STANDARD_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training")


def register_process_wide(schema: Any, custom_domains: Iterable[str]) -> None:
    """Register ``schema`` (an ``onnx.defs.OpSchema``) unless onnx has it at its version;
    ``custom_domains``: the domains plugins declared schemas in so far."""
    import onnx.defs

    if "onnx.reference" not in sys.modules and _named_elsewhere(schema.name, schema.domain, custom_domains):
        import onnx.reference

    with _LOCK:
        try:
            existing = onnx.defs.get_schema(schema.name, schema.since_version, schema.domain)
        except onnx.defs.SchemaError:
            existing = None
        if existing is None or existing.since_version != schema.since_version:
            onnx.defs.register_schema(schema)


def _named_elsewhere(name: str, domain: str, custom_domains: Iterable[str]) -> bool:
    """Whether an op ``name`` exists in a domain other than ``domain``: onnx's own, or one of
    ``custom_domains``."""
    import onnx.defs

    others = {*_STANDARD_DOMAINS, *custom_domains} - {domain}
    return any(onnx.defs.has(name, other) for other in others)
