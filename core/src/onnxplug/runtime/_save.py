"""Writing the optimized model (``SessionOptions.optimized_model_filepath``), loadable by other
runtimes: onnxruntime loads what onnxplug writes at ``ORT_ENABLE_EXTENDED`` and below (fusions
produce onnxruntime's own com.microsoft ops)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import onnx
import onnx_ir as ir

from ..errors import InvalidArgument

__all__ = ["write_optimized_model"]

#: onnxruntime's default for ``session.optimized_model_external_initializers_min_size_in_bytes``.
_DEFAULT_MIN_EXTERNAL_BYTES = 1024


def write_optimized_model(
    model: ir.Model,
    original: onnx.ModelProto,
    base_dir: str | None,
    path: str,
    config: Mapping[str, str],
) -> None:
    """Write ``model`` to ``path``.

    Graph input/output types come from the ``original`` proto (onnx-ir has no map type).  With
    the config entry ``session.optimized_model_external_initializers_file_name``, initializers
    of at least ``session.optimized_model_external_initializers_min_size_in_bytes`` (1024) bytes
    go to that file beside ``path``, as onnxruntime does; a model too large for one protobuf
    gets ``<name>.data`` without being asked.

    :raises InvalidArgument: an external file name that is not a plain name in the model's folder.
    """
    proto = ir.serde.serialize_model(model)
    declared = {info.name: info for info in list(original.graph.input) + list(original.graph.output)}
    for infos in (proto.graph.input, proto.graph.output):
        for info in infos:
            if info.name in declared:
                info.CopyFrom(declared[info.name])
    if base_dir is not None and any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
        onnx.external_data_helper.load_external_data_for_model(proto, base_dir)
    external = config.get("session.optimized_model_external_initializers_file_name", "")
    if external:
        if os.path.isabs(external) or os.path.basename(external) != external or external in (".", ".."):
            raise InvalidArgument(
                "session.optimized_model_external_initializers_file_name must be a file name in the folder of "
                f"optimized_model_filepath, got '{external}'"
            )
        size = config.get("session.optimized_model_external_initializers_min_size_in_bytes", "")
        try:
            threshold = int(size) if size else _DEFAULT_MIN_EXTERNAL_BYTES
        except ValueError:
            raise InvalidArgument(
                f"session.optimized_model_external_initializers_min_size_in_bytes must be an integer, got '{size}'"
            ) from None
        target = os.path.join(os.path.dirname(os.path.abspath(path)), external)
        if os.path.exists(target):
            os.remove(target)  # onnx appends to an existing file
        onnx.save(
            proto,
            path,
            save_as_external_data=True,
            all_tensors_to_one_file=True,
            location=external,
            size_threshold=threshold,
        )
        return
    large = proto.ByteSize() > (1 << 31) - (1 << 26)
    onnx.save(proto, path, save_as_external_data=large, location=os.path.basename(path) + ".data")
