"""Session-creation steps on the loaded model that are not planning: unique node names,
initializers overridden from SessionOptions, and writing the model that will run."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from ..errors import InvalidArgument
from ..graph import LoadedModel

__all__ = ["name_nodes", "override_initializers", "write_optimized_model"]


def name_nodes(model: ir.Model) -> None:
    """Give every node a unique name (``<OpType>_<index>`` where missing), as claims, errors
    and profiles refer to nodes by name."""
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


def override_initializers(model: ir.Model, values: Mapping[str, Any]) -> None:
    """Replace initializers by the OrtValues given to ``SessionOptions.add_initializer``.

    :raises InvalidArgument: a name that is not an initializer, or a dtype/shape that differs.
    """
    initializers = model.graph.initializers
    for name, value in values.items():
        if name not in initializers:
            raise InvalidArgument(f"add_initializer: the model has no initializer named '{name}'")
        array = np.asarray(value._onnxplug_value())
        current = initializers[name]
        expected = current.const_value.numpy()
        if array.dtype != expected.dtype or array.shape != expected.shape:
            raise InvalidArgument(
                f"add_initializer: '{name}' holds {expected.dtype}{list(expected.shape)} in the model, "
                f"the given value is {array.dtype}{list(array.shape)}"
            )
        current.const_value = ir.tensor(array, name=name)


def write_optimized_model(loaded: LoadedModel, path: str) -> None:
    """Write the model as it will run (function ops nobody claimed are inlined), loadable by
    other runtimes: graph input/output types come from the original model, external data is
    read in and written beside the file when the model is large."""
    proto = ir.serde.serialize_model(loaded.model)
    original = {info.name: info for info in list(loaded.proto.graph.input) + list(loaded.proto.graph.output)}
    for infos in (proto.graph.input, proto.graph.output):
        for info in infos:
            if info.name in original:
                info.CopyFrom(original[info.name])
    if loaded.base_dir is not None and any(
        t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer
    ):
        onnx.external_data_helper.load_external_data_for_model(proto, loaded.base_dir)
    large = proto.ByteSize() > (1 << 31) - (1 << 26)
    onnx.save(proto, path, save_as_external_data=large, location=os.path.basename(path) + ".data")
