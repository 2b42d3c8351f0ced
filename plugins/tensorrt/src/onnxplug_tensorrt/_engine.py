"""TensorRT's real API: the ONNX parser's support answer, one engine per partition, execution.

Not exercised in CI: the TensorRT builder and parser cannot be installed from PyPI (the
``tensorrt-*-libs`` packages download from NVIDIA's index), and nothing here may run without a
GPU.  The code follows TensorRT 10's Python API:

* ``parser_declines``: ``OnnxParser.supports_model_v2`` over the view's model (``supports_model``
  on parsers before 10.1); nodes of subgraphs it marks unsupported are declined with the parser's
  reason, every node when the parser fails before splitting the model.
* ``compile_partition``: ``Builder`` → ``create_network(0)`` (explicit batch) → ``OnnxParser.parse``
  → ``BuilderConfig`` with FP16/INT8 flags, the workspace limit, one optimization profile for
  dynamic inputs (onnxruntime's ``trt_profile_*_shapes`` option format) and the timing cache →
  ``build_serialized_network``.  Serialized engines and the timing cache live in the core's
  compile cache (in memory, and on disk with ``session.compile_cache_dir``).
  FP16/INT8 flags that a strongly-typed-only TensorRT lacks fail with that reason; INT8 has no
  calibrator, so it takes the scales of the model's Q/DQ nodes.  Cache keys carry the TensorRT
  version and the GPU's compute capability (an engine is valid for those only), and a blob that
  does not deserialize is an ``EPFail``, not a ``None`` engine.
* running: only the engine's own input tensors are bound (the parser may drop unused inputs),
  each cast to the engine's dtype; ``set_input_shape`` refusing a shape (outside the profile) is
  an ``EPFail`` naming it; outputs with data-dependent shapes are refused by name; inputs stay
  referenced until ``execute_async_v3`` (on CuPy's current stream) is queued; one run at a time
  per execution context.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import Any

import onnx

from onnxplug import CompileCache
from onnxplug.api import CompiledPartition
from onnxplug.errors import EPFail, InvalidArgument

__all__ = ["Settings", "compile_partition", "engine_signature", "parse_settings", "parser_declines"]

_LOCK = threading.Lock()
_LOGGER: Any = None


def _logger() -> Any:
    global _LOGGER
    with _LOCK:
        if _LOGGER is None:
            import tensorrt

            _LOGGER = tensorrt.Logger(tensorrt.Logger.WARNING)
        return _LOGGER


@dataclasses.dataclass(frozen=True)
class Settings:
    device_id: int = 0
    fp16: bool = False
    int8: bool = False
    workspace: int = 0
    timing_cache: bool = True
    profiles: Mapping[str, Mapping[str, tuple[int, ...]]] = dataclasses.field(default_factory=dict)

    def key(self) -> dict[str, Any]:
        return {"fp16": self.fp16, "int8": self.int8, "workspace": self.workspace, "profiles": repr(self.profiles)}


def _flag(options: Mapping[str, str], key: str, default: bool, where: str) -> bool:
    text = str(options.get(key, "1" if default else "0")).lower()
    if text not in ("0", "1", "true", "false"):
        raise InvalidArgument(f"{where}: {key} must be 0 or 1, got {text!r}")
    return text in ("1", "true")


def _shapes(text: str, key: str, where: str) -> dict[str, tuple[int, ...]]:
    """onnxruntime's profile format: ``input1:1x3x224x224,input2:1x128``."""
    shapes: dict[str, tuple[int, ...]] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, _, dims = entry.rpartition(":")
        try:
            shapes[name] = tuple(int(d) for d in dims.split("x"))
        except ValueError:
            raise InvalidArgument(f"{where}: {key} entry {entry!r} is not name:d1xd2x...") from None
        if not name:
            raise InvalidArgument(f"{where}: {key} entry {entry!r} has no input name")
    return shapes


def parse_settings(options: Mapping[str, str], where: str) -> Settings:
    """Settings from onnxruntime's TensorRT option names.

    :raises InvalidArgument: a malformed value, or profiles that do not name the same inputs.
    """
    try:
        device_id = int(options.get("device_id", "0"))
        workspace = int(options.get("trt_max_workspace_size", "0"))
    except ValueError as error:
        raise InvalidArgument(f"{where}: {error}") from None
    parts = {
        kind: _shapes(options.get(f"trt_profile_{kind}_shapes", ""), f"trt_profile_{kind}_shapes", where)
        for kind in ("min", "opt", "max")
    }
    names = [set(p) for p in parts.values()]
    if any(names) and not (names[0] == names[1] == names[2]):
        raise InvalidArgument(f"{where}: trt_profile_min/opt/max_shapes must name the same inputs")
    profiles = {name: {kind: parts[kind][name] for kind in parts} for name in names[0]}
    return Settings(
        device_id=device_id,
        fp16=_flag(options, "trt_fp16_enable", False, where),
        int8=_flag(options, "trt_int8_enable", False, where),
        workspace=workspace,
        timing_cache=_flag(options, "trt_timing_cache_enable", True, where),
        profiles=profiles,
    )


def parser_declines(model_bytes: bytes) -> dict[str, str]:
    """Node name → reason, for the nodes TensorRT's parser says it cannot take.

    ``supports_model_v2`` (TensorRT 10.1+) is asked first; older parsers answer through
    ``supports_model`` (a list of ``(node indices, supported)`` pairs); a parser with neither
    leaves the claim to the table.
    """
    import tensorrt

    builder = tensorrt.Builder(_logger())
    network = builder.create_network(0)
    parser = tensorrt.OnnxParser(network, _logger())
    nodes = onnx.load_model_from_string(model_bytes).graph.node
    if hasattr(parser, "supports_model_v2"):
        if parser.supports_model_v2(model_bytes):
            return {}
        groups = [
            (list(parser.get_subgraph_nodes(i)), parser.is_subgraph_supported(i)) for i in range(parser.num_subgraphs)
        ]
    elif hasattr(parser, "supports_model"):
        supported, subgraphs = parser.supports_model(model_bytes)
        if supported:
            return {}
        groups = [(list(indices), bool(ok)) for indices, ok in subgraphs]
    else:
        return {}
    errors = "; ".join(str(parser.get_error(i).desc()) for i in range(parser.num_errors)) or "no reason given"
    refused: dict[str, str] = {}
    for positions, supported in groups:
        if supported:
            continue
        for position in positions:
            refused[nodes[position].name] = f"TensorRT's ONNX parser does not support it ({errors})"
    if not groups:  # the parser failed before splitting the model: every node is in doubt
        refused = {node.name: f"TensorRT's ONNX parser rejected the model ({errors})" for node in nodes}
    return refused


def _set_flag(config: Any, name: str, wanted: bool) -> None:
    import tensorrt

    if not wanted:
        return
    flag = getattr(tensorrt.BuilderFlag, name, None)
    if flag is None:  # later TensorRT builds strongly typed networks only
        raise EPFail(
            f"this TensorRT {tensorrt.__version__} has no BuilderFlag.{name} (strongly typed networks only): "
            f"give the model the precision it should run in instead of trt_{name.lower()}_enable"
        )
    config.set_flag(flag)


def _versions(device_id: int) -> dict[str, Any]:
    """What a serialized engine or timing cache is only valid for: the TensorRT version and the
    GPU (its compute capability), so a cache directory shared across machines never hands
    TensorRT an engine it cannot deserialize."""
    import cupy
    import tensorrt

    properties = cupy.cuda.runtime.getDeviceProperties(device_id)
    return {"tensorrt": tensorrt.__version__, "sm": f"{properties.get('major')}.{properties.get('minor')}"}


def _build(data: bytes, settings: Settings, cache: CompileCache, shapes: Mapping[str, tuple[int, ...]]) -> bytes:
    import tensorrt

    builder = tensorrt.Builder(_logger())
    network = builder.create_network(0)
    parser = tensorrt.OnnxParser(network, _logger())
    if not parser.parse(data):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise EPFail(f"TensorRT's ONNX parser rejected the partition: {errors}")
    config = builder.create_builder_config()
    _set_flag(config, "FP16", settings.fp16)
    # INT8 without a calibrator: TensorRT takes the scales from the model's Q/DQ nodes (explicit quantization)
    _set_flag(config, "INT8", settings.int8)
    if settings.workspace:
        config.set_memory_pool_limit(tensorrt.MemoryPoolType.WORKSPACE, settings.workspace)
    dynamic = [network.get_input(i) for i in range(network.num_inputs) if -1 in tuple(network.get_input(i).shape)]
    if dynamic:
        profile = builder.create_optimization_profile()
        for tensor in dynamic:
            given = settings.profiles.get(tensor.name)
            if given is not None:
                profile.set_shape(tensor.name, given["min"], given["opt"], given["max"])
            else:  # no profile: an engine for the shapes of this run (rebuilt for other shapes)
                profile.set_shape(tensor.name, shapes[tensor.name], shapes[tensor.name], shapes[tensor.name])
        config.add_optimization_profile(profile)
    timing_key = CompileCache.key(
        provider="tensorrt", content=b"timing-cache", device=settings.device_id, extra=_versions(settings.device_id)
    )
    if settings.timing_cache:
        timing = config.create_timing_cache(cache.load_bytes(timing_key) or b"")
        config.set_timing_cache(timing, ignore_mismatch=False)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise EPFail("TensorRT failed to build an engine for the partition (see the TensorRT log)")
    if settings.timing_cache:
        cache.store_bytes(timing_key, bytes(config.get_timing_cache().serialize()))
    return bytes(serialized)


def engine_signature(
    shapes: Mapping[str, tuple[int, ...]], profiles: Mapping[str, Any]
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """Which engine a run needs: inputs an optimization profile covers share one engine (any
    shape in the profile's range); every other input's shape is built in, so it is part of the key."""
    return tuple(sorted((name, tuple(shape)) for name, shape in shapes.items() if name not in profiles))


def compile_partition(
    partition: Any, settings: Settings, cache: CompileCache, memory: Any, device_id: int
) -> CompiledPartition:
    """A CompiledPartition running ``partition`` as TensorRT engines on CuPy device arrays."""
    import cupy
    import tensorrt

    data = partition.model_bytes()
    runtime = tensorrt.Runtime(_logger())  # safe: create() ran only after detect() found CUDA
    versions = _versions(device_id)
    lock = threading.Lock()
    engines: dict[tuple, _Engine] = {}

    def engine_for(values: tuple[Any, ...]) -> _Engine:
        shapes = {name: tuple(v.shape) for name, v in zip(partition.inputs, values)}
        signature = engine_signature(shapes, settings.profiles)
        with lock:
            found = engines.get(signature)
            if found is None:
                key = CompileCache.key(
                    provider="tensorrt",
                    content=data,
                    device=device_id,
                    options=settings.key(),
                    extra={"shapes": signature, **versions},
                )
                blob = cache.load_bytes(key)
                if blob is None:
                    blob = cache.get_or_create(key, lambda: _build(data, settings, cache, shapes), len(data))
                    cache.store_bytes(key, blob)
                engine = runtime.deserialize_cuda_engine(blob)
                if engine is None:
                    raise EPFail(
                        f"TensorRT could not deserialize the engine of {partition.name} (see the TensorRT log)"
                    )
                found = engines[signature] = _Engine(engine, tensorrt)
            return found

    def run(*values: Any) -> list[Any]:
        compiled = engine_for(values)
        try:
            with cupy.cuda.Device(device_id), compiled.lock:  # one execution context: one run at a time
                return compiled.run(partition, values, cupy)
        except EPFail:
            raise
        except Exception as error:
            raise EPFail(f"TensorRT failed to run {partition.name}: {type(error).__name__}: {error}") from error

    return CompiledPartition(partition.inputs, partition.outputs, run)


class _Engine:
    """A deserialized engine, its execution context and its I/O tensors."""

    def __init__(self, engine: Any, tensorrt: Any) -> None:
        self.engine = engine
        self.context = engine.create_execution_context()
        self.lock = threading.Lock()
        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        self.inputs = {n for n in names if engine.get_tensor_mode(n) == tensorrt.TensorIOMode.INPUT}
        self.dtypes = {n: tensorrt.nptype(engine.get_tensor_dtype(n)) for n in names}

    def run(self, partition: Any, values: tuple[Any, ...], cupy: Any) -> list[Any]:
        context = self.context
        keep = []  # the buffers must outlive the asynchronous execution that reads them
        for name, value in zip(partition.inputs, values):
            if name not in self.inputs:
                continue  # the parser folded this input away (unused, or only its shape was read)
            value = cupy.ascontiguousarray(cupy.asarray(value, dtype=self.dtypes[name]))
            if not context.set_input_shape(name, tuple(value.shape)):
                raise EPFail(
                    f"TensorRT refused shape {list(value.shape)} for input '{name}' of {partition.name} "
                    "(outside the optimization profile, trt_profile_min/max_shapes)"
                )
            context.set_tensor_address(name, int(value.data.ptr))
            keep.append(value)
        outputs = []
        for name in partition.outputs:
            shape = tuple(context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise EPFail(f"output '{name}' of {partition.name} has a data-dependent shape {list(shape)}")
            out = cupy.empty(shape, dtype=self.dtypes[name])
            context.set_tensor_address(name, int(out.data.ptr))
            outputs.append(out)
        if not context.execute_async_v3(cupy.cuda.get_current_stream().ptr):
            raise EPFail(f"TensorRT failed to run {partition.name}")
        keep.clear()  # CuPy's pool reuses freed memory in stream order, after this execution
        return outputs
