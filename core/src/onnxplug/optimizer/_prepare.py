"""The steps every optimization level runs, ``ORT_DISABLE_ALL`` included: unique node names
(claims, errors and profiles refer to nodes by name), opset imports for domains nodes use but
the model forgot, and initializers replaced by ``SessionOptions.add_initializer`` values."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
import onnx_ir as ir

from ..errors import InvalidArgument
from ..graph import all_nodes

__all__ = ["fill_missing_opsets", "name_nodes", "override_initializers"]


def name_nodes(model: ir.Model) -> None:
    """Give every node a unique name (``<OpType>_<index>`` where missing or taken)."""
    taken: set[str] = set()
    index = 0
    pending = [model.graph]
    while pending:
        graph = pending.pop()
        for node in graph:
            name = node.name
            if not name or name in taken:
                base = f"{node.op_type}_{index}" if not name else name
                name, suffix = base, 1
                while name in taken:
                    name, suffix = f"{base}_{suffix}", suffix + 1
                node.name = name
            taken.add(name)
            index += 1
            for attr in node.attributes.values():
                if attr.type is ir.AttributeType.GRAPH:
                    pending.append(attr.value)
                elif attr.type is ir.AttributeType.GRAPHS:
                    pending.extend(attr.value)


def fill_missing_opsets(model: ir.Model) -> None:
    """Import, at its newest version, every domain a node uses that the model does not import.

    Exporters (onnxruntime's transformer optimizer among them) leave out ``com.microsoft``, and
    fusions add ops of domains the model did not use; onnxruntime accepts such models the same
    way.  Run after op-library schemas are registered.
    """
    imported = {("" if d == "ai.onnx" else d) for d in model.opset_imports}
    used = {node.domain or "" for node in all_nodes(model.graph)} - imported
    used.discard("ai.onnx")
    if not used:
        return
    newest: dict[str, int] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain in used:
            newest[schema.domain] = max(newest.get(schema.domain, 0), schema.since_version)
    for domain, version in newest.items():
        model.opset_imports[domain] = version


def override_initializers(model: ir.Model, values: Mapping[str, np.ndarray]) -> None:
    """Replace initializers by the arrays given to ``SessionOptions.add_initializer``.

    :raises InvalidArgument: a name that is not an initializer, or a dtype/shape that differs.
    """
    initializers = model.graph.initializers
    for name, value in values.items():
        if name not in initializers:
            raise InvalidArgument(f"add_initializer: the model has no initializer named '{name}'")
        array = np.asarray(value)
        current = initializers[name]
        expected = current.const_value.numpy()
        if array.dtype != expected.dtype or array.shape != expected.shape:
            raise InvalidArgument(
                f"add_initializer: '{name}' holds {expected.dtype}{list(expected.shape)} in the model, "
                f"the given value is {array.dtype}{list(array.shape)}"
            )
        current.const_value = ir.tensor(array, name=name)
