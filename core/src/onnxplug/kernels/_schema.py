"""Reading ONNX operator schemas: versions, attribute defaults, formal inputs.

Kernels are matched to nodes by the exact ``since_version`` of the schema that the model's opset
selects, so everything here asks ``onnx.defs`` (which also holds schemas registered by op-library
plugins through the ``onnxplug_op_schemas`` hook).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import onnx
import onnx.defs

__all__ = [
    "STANDARD_DOMAINS",
    "normalize_domain",
    "find_schema",
    "schema_versions",
    "attribute_defaults",
    "attribute_value",
]

# Domains whose schemas ship with onnx itself; an op missing from them is an invalid graph,
# while an op missing from any other domain needs an op library.
STANDARD_DOMAINS = frozenset({"", "ai.onnx.ml", "ai.onnx.preview.training", "ai.onnx.preview"})


def normalize_domain(domain: str | None) -> str:
    """``"ai.onnx"`` and ``None`` both mean the default domain ``""``."""
    return "" if domain in (None, "ai.onnx") else domain


def find_schema(op_type: str, opset_version: int, domain: str) -> onnx.defs.OpSchema | None:
    """The schema an opset selects for an op, or ``None`` if the op does not exist there."""
    try:
        return onnx.defs.get_schema(op_type, opset_version, normalize_domain(domain))
    except onnx.defs.SchemaError:
        return None


def schema_versions(op_type: str, domain: str) -> list[int]:
    """Every ``since_version`` onnx knows for an op, oldest first."""
    domain = normalize_domain(domain)
    return sorted(
        s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.name == op_type and s.domain == domain
    )


def attribute_value(attr: onnx.AttributeProto) -> Any:
    """A Python value for an attribute proto: str for strings, tuples for lists, ndarray for tensors."""
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, list):
        return tuple(v.decode("utf-8") if isinstance(v, bytes) else v for v in value)
    return value


@functools.lru_cache(maxsize=4096)
def attribute_defaults(op_type: str, since_version: int, domain: str) -> dict[str, Any]:
    """The schema's default value for every attribute that has one (a fresh dict each call is not
    needed: callers copy before merging)."""
    schema = find_schema(op_type, since_version, domain)
    if schema is None:
        return {}
    defaults: dict[str, Any] = {}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if default is not None and default.type != onnx.AttributeProto.UNDEFINED:
            value = attribute_value(default)
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
            defaults[name] = value
    return defaults
