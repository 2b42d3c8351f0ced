"""The WASM provider and its factory.

Detection never raises: without wasmtime (``pip install onnxplug[wasm]``) there is no device
and ``unavailable_reason`` says so.  Each provider (one per session) owns a
:class:`~onnxplug_wasm.memory.LinearMemory`, its own wasmtime instance of the kernel module, so
the core copies the session's constants into it once when the plan is built and places copies
where a value crosses to or from the CPU provider.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from typing import Any

from onnxplug.api import Device, KernelProvider, ProviderContext, ProviderFactory
from onnxplug.errors import InvalidArgument

__all__ = ["WasmProvider", "WasmProviderFactory"]

_INSTALL = "pip install onnxplug[wasm]"
FLOAT = "tensor(float)"


class WasmProvider(KernelProvider):
    """Runs the nodes its kernels claim inside its own wasm instance."""

    def __init__(self, factory: ProviderFactory, device: Device, memory: Any) -> None:
        super().__init__(factory, device)
        self.memory = memory

    def capability(self, graph, kernels):
        kept = []
        for claim in super().capability(graph, kernels):
            node = graph.node(claim.node)
            reason = decline_reason(node, kernels.resolve(node))
            if reason is None:
                kept.append(claim)
            else:
                graph.decline(node, reason)
        return kept

    def transfer(self) -> Any:
        return self.memory

    def close(self) -> None:
        self.memory = None


class WasmProviderFactory(ProviderFactory):
    """``WasmExecutionProvider``: float32 kernels compiled to WebAssembly, run by wasmtime.

    Options: ``wasm_memory_limit`` (bytes of linear memory a session may use, default 1 GiB,
    at most 4 GiB).
    """

    name = "wasm"
    ort_name = "WasmExecutionProvider"
    # Used only when a session names it: slower than the native CPU provider, it is chosen for
    # isolation and portability, never by default.
    priority = -1
    option_names = frozenset({"wasm_memory_limit"})

    def __init__(self) -> None:
        self._reason = ""
        self._memory: Any = None

    def devices(self) -> list[Device]:
        try:
            import wasmtime
        except ImportError:
            self._reason = f"wasmtime is not installed ({_INSTALL})"
            return []
        except Exception as error:  # noqa: BLE001 - a broken install must not break discovery
            self._reason = f"wasmtime failed to import: {type(error).__name__}: {error}"
            return []
        from .memory import KERNELS

        if not KERNELS.exists():
            self._reason = f"the kernel module {KERNELS} is missing (python -m onnxplug_wasm.build)"
            return []
        try:
            version = importlib.metadata.version("wasmtime")
        except importlib.metadata.PackageNotFoundError:  # a wasmtime not installed as a distribution
            version = "(unknown version)"
        del wasmtime
        return [Device("wasm", 0, vendor="Bytecode Alliance", name=f"wasmtime {version} (wasm32 + SIMD)")]

    def unavailable_reason(self) -> str:
        if not self._reason:
            self.devices()
        return self._reason or "no device found"

    def memory(self, device: Device) -> Any:
        """A memory for values made before a session (``OrtValue.ortvalue_from_numpy(x, "wasm")``);
        sessions copy such values into their own memory."""
        if self._memory is None:
            from .memory import LinearMemory

            self._memory = LinearMemory()
        return self._memory

    def create(
        self, device: Device, options: Mapping[str, str], context: ProviderContext | None = None
    ) -> WasmProvider:
        self.check_options(options)
        from .memory import DEFAULT_LIMIT, MAX_LIMIT, LinearMemory

        text = options.get("wasm_memory_limit")
        limit = DEFAULT_LIMIT
        if text is not None:
            try:
                limit = int(text)
            except ValueError:
                raise InvalidArgument(
                    f"{self.ort_name}: wasm_memory_limit must be an integer (bytes), got {text!r}"
                ) from None
            if not 0 < limit <= MAX_LIMIT:
                raise InvalidArgument(f"{self.ort_name}: wasm_memory_limit must be in (0, {MAX_LIMIT}], got {limit}")
        if not self.devices():
            raise InvalidArgument(f"{self.ort_name}: {self.unavailable_reason()}")
        return WasmProvider(self, device, LinearMemory(limit))


def decline_reason(node: Any, kernel: Any) -> str | None:
    """Why the wasm kernels cannot take a node their registry has (types, ranks, attributes)."""
    host = set(kernel.host_inputs) if kernel is not None else set()
    for index, (name, kind) in enumerate(zip(node.inputs, node.input_types)):
        if name and index not in host and kind != FLOAT:
            return f"input {index} is {kind or 'of unknown type'}: the wasm kernels take float32 tensors"
    for name, kind in zip(node.outputs, node.output_types):
        if name and kind != FLOAT:
            return f"output '{name}' is {kind or 'of unknown type'}: the wasm kernels make float32 tensors"
    op, attributes = node.op_type, node.attributes
    outputs = [name for name in node.outputs if name]
    if op in ("Conv", "MaxPool", "AveragePool"):
        shape = node.input_shapes[0] if node.input_shapes else None
        rank = (
            len(shape)
            if shape is not None
            else (len(attributes["kernel_shape"]) + 2 if "kernel_shape" in attributes else None)
        )
        if rank is None:
            return f"{op} of unknown rank: the wasm kernels take 1-D and 2-D windows"
        if rank not in (3, 4):
            return f"{op} of rank {rank}: the wasm kernels take 1-D and 2-D windows"
    if op in ("MaxPool", "Dropout") and len(outputs) > 1:
        return f"{op}'s second output (indices or mask) is not made by the wasm kernel"
    if op == "Dropout" and len(node.inputs) > 2 and node.inputs[2]:
        return "Dropout with a training_mode input: the wasm provider runs inference only"
    if op == "BatchNormalization" and (len(outputs) > 1 or attributes.get("training_mode", 0)):
        return "BatchNormalization in training mode is not supported by the wasm kernel"
    if op == "Gelu" and attributes.get("approximate", "none") != "none":
        return "Gelu with approximate='tanh' is not supported by the wasm kernel"
    if op == "LayerNormalization" and attributes.get("stash_type", 1) != 1:
        return "LayerNormalization with stash_type other than 1 is not supported by the wasm kernel"
    if op == "BatchNormalization" and node.since_version == 7 and not attributes.get("spatial", 1):
        return "BatchNormalization with spatial=0 is not supported by the wasm kernel"
    return None
