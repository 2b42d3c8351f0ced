"""Sandboxed custom ops: an op library ships its kernels as a ``.wasm`` module and a manifest,
and onnxplug runs them inside wasmtime with a memory and a fuel (instruction) limit, so a
third-party kernel can be used without trusting native code.

The manifest (JSON, next to the module)::

    {
      "module": "ops.wasm",
      "domain": "ai.example.sandboxed",
      "memory_limit": 16777216,          # bytes of linear memory the module may reach
      "fuel": 100000000,                 # instructions per call (wasmtime fuel units)
      "ops": [
        {"op": "Squareplus", "inputs": ["X"], "outputs": ["Y"], "export": "squareplus"}
      ]
    }

The kernel ABI is deliberately small: every input and output is float32 and of input 0's shape
(element-wise ops, checked before the call); the module exports ``memory``, ``__heap_base`` and
``<export>(n, in_0, ..., out_0, ...) -> i32``, the pointers being where the host placed each
array in the module's memory, from ``__heap_base`` on; a non-zero status is a failure.  Each
call gets a fresh instance (no state survives between calls) with the fuel reset; a trap (out
of fuel, an out-of-bounds access, ``memory.grow`` refused past the limit followed by a wild
write) becomes an onnxplug :class:`~onnxplug.errors.Fail` naming the op and what happened.

Use it from an op-library plugin module (``examples/sandboxed_ops/plugin.py``)::

    library = SandboxLibrary.load(Path(__file__).with_name("manifest.json"))

    @onnxplug.hookimpl
    def onnxplug_op_schemas():
        return library.op_schemas()

    @onnxplug.hookimpl
    def onnxplug_kernels(provider):
        return library.kernels(provider)
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from onnxplug.errors import Fail, InvalidArgument, PluginError
from onnxplug.kernels import KernelRegistry

__all__ = ["SandboxLibrary", "SandboxedOp"]

_FLOAT = "tensor(float)"
PAGE = 65536


@dataclasses.dataclass(frozen=True)
class SandboxedOp:
    """One op of a manifest."""

    op: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    export: str


class SandboxLibrary:
    """The ops of one manifest, their schemas and a CPU-provider registry of sandboxed kernels.

    :param module_path: the ``.wasm`` file.
    :param memory_limit: bytes of linear memory an instance may reach.
    :param fuel: instructions (wasmtime fuel) one call may execute.
    """

    def __init__(self, module_path: Path, domain: str, ops: list[SandboxedOp], memory_limit: int, fuel: int):
        self.module_path = Path(module_path)
        self.domain = domain
        self.ops = tuple(ops)
        self.memory_limit = int(memory_limit)
        self.fuel = int(fuel)
        self._module: Any = None

    @classmethod
    def load(cls, manifest: str | Path) -> SandboxLibrary:
        """Read a manifest; errors name the file and the field."""
        path = Path(manifest)
        try:
            data = json.loads(path.read_text())
            ops = [
                SandboxedOp(entry["op"], tuple(entry["inputs"]), tuple(entry["outputs"]), entry["export"])
                for entry in data["ops"]
            ]
            library = cls(path.parent / data["module"], data["domain"], ops, data["memory_limit"], data["fuel"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise PluginError(f"{path}: not a valid sandboxed op manifest ({type(error).__name__}: {error})") from None
        for op in ops:
            if not op.inputs or not op.outputs:
                raise PluginError(f"{path}: op {op.op} needs at least one input and one output")
        if not 0 < library.memory_limit <= 1 << 32 or library.fuel <= 0:
            raise PluginError(f"{path}: memory_limit must be in (0, 4 GiB] and fuel positive")
        return library

    # -- what the op-library hooks return ----------------------------------------------------------

    def op_schemas(self) -> list[Any]:
        from onnx.defs import OpSchema

        schemas = []
        for op in self.ops:
            schemas.append(
                OpSchema(
                    op.op,
                    self.domain,
                    1,
                    f"Sandboxed wasm kernel '{op.export}' of {self.module_path.name}.",
                    inputs=[OpSchema.FormalParameter(name, "T", "") for name in op.inputs],
                    outputs=[OpSchema.FormalParameter(name, "T", "") for name in op.outputs],
                    type_constraints=[("T", [_FLOAT], "float32 tensors")],
                )
            )
        return schemas

    def kernels(self, provider: Any) -> list[KernelRegistry]:
        if provider.name != "cpu":  # the kernels take host arrays and copy them into the sandbox
            return []
        registry = KernelRegistry(f"sandbox:{self.module_path.name}")
        for op in self.ops:
            registry.kernel(op.op, since=(1,), domain=self.domain)(self._kernel(op))
        return [registry]

    # -- running -----------------------------------------------------------------------------------

    def _kernel(self, op: SandboxedOp):
        def kernel(*inputs):
            outputs = self.run(op, [np.asarray(value) for value in inputs])
            return outputs[0] if len(outputs) == 1 else outputs  # the core stores one output as is

        kernel.__name__ = kernel.__qualname__ = op.export
        return kernel

    def _compiled(self) -> Any:
        if self._module is None:
            import wasmtime

            from .memory import engine

            try:
                self._module = wasmtime.Module.from_file(engine(fuel=True), str(self.module_path))
            except Exception as error:  # noqa: BLE001 - wasmtime's errors for a file that is no module
                raise PluginError(f"{self.module_path}: not a valid wasm module: {error}") from None
        return self._module

    def run(self, op: SandboxedOp, inputs: list[np.ndarray]) -> tuple[np.ndarray, ...]:
        """Run ``op`` on host arrays in a fresh, limited instance; return the outputs."""
        import wasmtime

        shape = inputs[0].shape
        for name, value in zip(op.inputs, inputs):
            if value.dtype != np.float32 or value.shape != shape:
                raise InvalidArgument(
                    f"{op.op}: sandboxed kernels take float32 inputs of one shape; '{name}' is "
                    f"{value.dtype}{list(value.shape)}, input 0 {list(shape)}"
                )
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * 4
        store = wasmtime.Store(engine_for_sandbox())
        store.set_limits(memory_size=self.memory_limit, instances=1, tables=1, memories=1)
        store.set_fuel(self.fuel)
        try:
            instance = wasmtime.Instance(store, self._compiled(), [])
            exports = instance.exports(store)
            memory, function = exports["memory"], exports[op.export]
            heap = int(exports["__heap_base"].value(store))
        except KeyError as error:
            raise Fail(f"{op.op}: {self.module_path.name} does not export {error}") from None
        except wasmtime.WasmtimeError as error:
            raise Fail(f"{op.op}: {self.module_path.name} cannot be instantiated: {error}") from None
        stride = _round(nbytes)
        offsets = [_round(heap) + i * stride for i in range(len(inputs) + len(op.outputs))]
        end = offsets[-1] + nbytes
        if end > self.memory_limit:
            raise Fail(
                f"{op.op}: {len(inputs) + len(op.outputs)} arrays of {nbytes} bytes do not fit the sandbox's "
                f"memory limit of {self.memory_limit} bytes"
            )
        have = memory.data_len(store)
        if end > have:
            memory.grow(store, -(-(end - have) // PAGE))
        base = ctypes.addressof(memory.data_ptr(store).contents)
        for offset, value in zip(offsets, inputs):
            ctypes.memmove(base + offset, np.ascontiguousarray(value).ctypes.data, nbytes)
        try:
            status = function(store, count, *offsets)
        except wasmtime.Trap as error:
            raise Fail(f"{op.op}: the sandboxed kernel '{op.export}' was stopped: {_why(error, self)}") from None
        except wasmtime.WasmtimeError as error:
            raise Fail(f"{op.op}: the sandboxed kernel '{op.export}' failed: {error}") from None
        if status:
            raise Fail(f"{op.op}: the sandboxed kernel '{op.export}' returned status {status}")
        base = ctypes.addressof(memory.data_ptr(store).contents)  # it may have grown the memory
        outputs = []
        for offset in offsets[len(inputs) :]:
            out = np.empty(shape, np.float32)
            ctypes.memmove(out.ctypes.data, base + offset, nbytes)
            outputs.append(out)
        return tuple(outputs)


def engine_for_sandbox() -> Any:
    from .memory import engine

    return engine(fuel=True)


def _round(offset: int) -> int:
    return -(-offset // 16) * 16


def _why(error: Exception, library: SandboxLibrary) -> str:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    lowered = str(error).lower()
    if "fuel" in lowered:
        return f"it ran out of fuel (limit {library.fuel} instructions per call): {text}"
    if "out of bounds" in lowered:
        return (
            "out-of-bounds memory access inside the sandbox (the module's memory is limited to "
            f"{library.memory_limit} bytes; memory.grow past it fails): {text}"
        )
    return text
