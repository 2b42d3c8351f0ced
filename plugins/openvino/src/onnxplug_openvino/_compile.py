"""Compiling a partition with OpenVINO and running it.

``core.read_model(bytes)`` → ``core.compile_model(model, device, config)``.  Compiled models are
kept in the core's compile cache (``onnxplug.CompileCache``) by content (model bytes, device,
properties), so sessions over the same model share them; with ``cache_dir`` OpenVINO also caches
compiled blobs on disk (``CACHE_DIR``, the vendor's own format and invalidation).

Running uses one infer request per thread and partition, created on first use, so one session
can run from many threads.  Inputs are copied into the request's tensors and outputs copied out
of OpenVINO's buffers: the caller owns every array it gets.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from onnxplug import CompileCache
from onnxplug.api import CompiledPartition
from onnxplug.errors import EPFail

from ._options import Settings

__all__ = ["compile_partition"]


def _describe(partition: Any) -> str:
    nodes = ", ".join(partition.nodes[:8]) + (" ..." if len(partition.nodes) > 8 else "")
    return f"partition {partition.name} ({nodes})"


def _compile_cached(data: bytes, settings: Settings, core: Any, cache: CompileCache) -> Any:
    """The compiled model for ``data``, from the session's compile cache (the core's: bounded,
    shared by sessions over the same model and settings); OpenVINO's own ``CACHE_DIR`` blobs, when
    configured, make a miss cheap too."""
    key = CompileCache.key(
        provider="openvino", content=data, device=settings.device, options=dict(settings.config), extra="compiled"
    )
    return cache.get_or_create(
        key, lambda: core.compile_model(core.read_model(data), settings.device, settings.config_dict()), len(data)
    )


def _port_index(ports: Sequence[Any], name: str) -> int | None:
    for index, port in enumerate(ports):
        if name in port.get_names():
            return index
    return None


def _input_feeds(ports: Sequence[Any], partition: Any) -> list[tuple[int, int]]:
    """``(position in the call, compiled input port)`` pairs.

    Parameters keep their ONNX input name as friendly name, except where the frontend folds an
    identity-like op (Dropout, Identity) between an input and an output: the Parameter is then
    renamed after the output.  Inputs the model does not use are dropped.  An unnamed port is
    paired with the one unmatched input of its element type and shape.

    :raises EPFail: a port that cannot be told apart.
    """
    position = {name: i for i, name in enumerate(partition.inputs)}
    feeds: list[tuple[int, int]] = []
    unmatched: list[int] = []
    for index, port in enumerate(ports):
        names = [port.get_node().get_friendly_name(), *sorted(port.get_names())]
        found = next((position[n] for n in names if n in position), None)
        if found is None:
            unmatched.append(index)
        else:
            feeds.append((found, index))
    if unmatched:
        declared = {i.name: i.type.tensor_type for i in partition.model.graph.input}
        free = [name for name in partition.inputs if position[name] not in {f for f, _ in feeds}]
        for index in unmatched:
            port = ports[index]
            shape, element = str(port.get_partial_shape()), port.get_element_type().to_dtype()
            fits = [
                name
                for name in free
                if name in declared
                and _shape_text(declared[name]) == shape
                and onnx.helper.tensor_dtype_to_np_dtype(declared[name].elem_type) == element
            ]
            if len(fits) != 1:
                raise EPFail(
                    f"OpenVINO renamed input port {index} of {_describe(partition)} to "
                    f"{sorted(port.get_names())}; cannot tell which of {free} feeds it"
                )
            free.remove(fits[0])
            feeds.append((position[fits[0]], index))
    return feeds


def _shape_text(tensor_type: onnx.TypeProto.Tensor) -> str:
    dims = [str(d.dim_value) if d.HasField("dim_value") else "?" for d in tensor_type.shape.dim]
    return "[" + ",".join(dims) + "]"


def compile_partition(partition: Any, settings: Settings, core: Any, cache: CompileCache) -> CompiledPartition:
    """A CompiledPartition running ``partition`` on ``settings.device``.

    :raises EPFail: OpenVINO failed to read or compile the partition's model (naming its nodes).
    """
    data = partition.model_bytes()
    try:
        compiled = _compile_cached(data, settings, core, cache)
    except Exception as error:
        raise EPFail(
            f"OpenVINO failed to compile {_describe(partition)} for {settings.device}: {type(error).__name__}: {error}"
        ) from error
    # Which compiled-model port each partition input feeds and each output comes from.  The ports
    # keep the model's order; names are only a fallback, since OpenVINO merges tensor names (a
    # Dropout that folds away gives its input port the output's name too).
    feeds = _input_feeds(compiled.inputs, partition)
    if len(compiled.outputs) == len(partition.outputs):
        sources = list(range(len(partition.outputs)))
    else:
        sources = []
        for name in partition.outputs:
            index = _port_index(compiled.outputs, name)
            if index is None:
                raise EPFail(f"OpenVINO's compiled model for {_describe(partition)} has no output '{name}'")
            sources.append(index)
    expected = _output_dtypes(partition.model)
    local = threading.local()
    where = _describe(partition)

    def request_for_thread() -> Any:
        request = compiled.create_infer_request()
        local.request = request
        local.inputs = [request.get_input_tensor(port) for _, port in feeds]
        local.shapes = [_static_shape(t) for t in local.inputs]
        return request

    def run(*values: Any) -> list[np.ndarray]:
        request = getattr(local, "request", None) or request_for_thread()
        try:
            # Inputs are copied into the request's own tensors (the session hands partitions
            # read-only views, which OpenVINO cannot share); a new shape gets a new tensor.
            tensors, shapes = local.inputs, local.shapes
            for i, (position, port) in enumerate(feeds):
                value = values[position]
                if value.shape == shapes[i]:
                    tensors[i].data[...] = value
                else:
                    tensors[i] = _tensor(np.ascontiguousarray(value))
                    shapes[i] = value.shape
                    request.set_input_tensor(port, tensors[i])
            request.infer()
            outputs = [np.array(request.get_output_tensor(index).data) for index in sources]
        except Exception as error:
            raise EPFail(f"OpenVINO failed to run {where}: {type(error).__name__}: {error}") from error
        for i, dtype in enumerate(expected):
            if dtype is not None and outputs[i].dtype != dtype:
                outputs[i] = outputs[i].astype(dtype)
        return outputs

    return CompiledPartition(partition.inputs, partition.outputs, run)


def _static_shape(tensor: Any) -> tuple[int, ...] | None:
    try:
        return tuple(tensor.get_shape())
    except Exception:  # noqa: BLE001 - a dynamic input has no tensor shape until set
        return None


def _tensor(array: np.ndarray) -> Any:
    import openvino

    return openvino.Tensor(array)  # a copy: OpenVINO owns the memory


def _output_dtypes(model: onnx.ModelProto) -> list[np.dtype | None]:
    """The numpy dtype each output must have (OpenVINO may widen or narrow some types)."""
    found: list[np.dtype | None] = []
    for info in model.graph.output:
        element = info.type.tensor_type.elem_type if info.type.HasField("tensor_type") else 0
        try:
            found.append(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(element)) if element else None)
        except (KeyError, TypeError):
            found.append(None)
    return found
