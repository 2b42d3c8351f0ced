"""Linear memory as device memory: one wasmtime instance of the kernel module per memory, a
first-fit allocator over its heap, and the tensors that live there.

Each session's provider gets its own :class:`LinearMemory` (its own store and instance), so
sessions never share a heap and a session's limit (``wasm_memory_limit``) bounds exactly what
it holds.  The memory grows page by page when the free list cannot serve a request and never
past the limit: a request beyond it is an onnxplug :class:`~onnxplug.errors.Fail` naming the
sizes.  Blocks are returned to the free list when the last tensor viewing them is collected
(the plan drops a value after its last reader), and neighbouring free blocks merge.

wasmtime is imported here, and this module only when a provider or a memory is made.
"""

from __future__ import annotations

import bisect
import ctypes
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from onnxplug.api import DataTransfer
from onnxplug.errors import Fail, InvalidArgument

__all__ = [
    "DEFAULT_LIMIT",
    "KERNELS",
    "K_BATCHNORM",
    "K_BINARY",
    "K_CONV2D",
    "K_COPY",
    "K_LAYERNORM",
    "K_MATMUL",
    "K_MATMUL_NT",
    "K_POOL2D",
    "K_SOFTMAX",
    "K_UNARY",
    "PARAMS_ARG",
    "LinearMemory",
    "WasmTensor",
]

#: The kernel numbers ``dispatch.c`` switches on: the first argument of :meth:`LinearMemory.call`.
K_MATMUL, K_CONV2D, K_POOL2D, K_BATCHNORM, K_BINARY, K_COPY, K_UNARY, K_SOFTMAX, K_LAYERNORM, K_MATMUL_NT = range(10)

#: The provider's kernel module, built from ``csrc`` by ``python -m onnxplug_wasm.build``.
KERNELS = Path(__file__).resolve().parent / "kernels.wasm"
PAGE = 65536
#: int32 slots of the kernel-parameter scratch area.
PARAMS = 256
ALIGN = 64
#: Default ``wasm_memory_limit``: 1 GiB of linear memory per session.
DEFAULT_LIMIT = 1 << 30
#: wasm32 addresses 4 GiB at most.
MAX_LIMIT = 1 << 32

#: Stands for the parameter scratch area's offset in :meth:`LinearMemory.call`'s arguments.
PARAMS_ARG: Any = object()
_ENGINES: dict[bool, Any] = {}
_MODULES: dict[tuple[str, bool], Any] = {}
_LOCK = threading.Lock()


def engine(fuel: bool = False) -> Any:
    """The process's wasmtime engine, with or without fuel metering (compiled modules belong
    to one engine, so each kind is made once).  The provider's own kernels run unmetered;
    sandboxed op libraries (``onnxplug_wasm.sandbox``) run metered."""
    with _LOCK:
        found = _ENGINES.get(fuel)
        if found is None:
            import wasmtime

            config = wasmtime.Config()
            config.consume_fuel = fuel
            found = _ENGINES[fuel] = wasmtime.Engine(config)
        return found


def module(path: Path = KERNELS, fuel: bool = False) -> Any:
    """The compiled module at ``path``, compiled once per process and engine."""
    key = (str(path), fuel)
    found = _MODULES.get(key)
    if found is None:
        import wasmtime

        found = _MODULES[key] = wasmtime.Module.from_file(engine(fuel), key[0])
    return found


class _Block:
    """An allocation; returns itself to its allocator when the last tensor on it is collected."""

    __slots__ = ("__weakref__", "memory", "offset", "size")

    def __init__(self, memory: LinearMemory, offset: int, size: int) -> None:
        self.memory, self.offset, self.size = memory, offset, size

    def __del__(self) -> None:
        memory = self.memory
        if memory is not None:
            self.memory = None
            memory._release(self.offset, self.size)


class WasmTensor:
    """A dense, C-ordered array in a :class:`LinearMemory`.

    Deliberately not array-like (``np.asarray`` on one raises), so a host kernel handed a
    device value (a missing copy) fails instead of reading garbage.  Reshapes share the block.
    """

    __slots__ = ("block", "dtype", "memory", "offset", "shape")
    __array_ufunc__ = None

    def __init__(self, memory: LinearMemory, block: _Block | None, offset: int, shape: Sequence[int], dtype: Any):
        self.memory = memory
        self.block = block
        self.offset = offset
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("a WasmTensor lives in wasm linear memory: copy it to the host first")

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def reshape(self, shape: Sequence[int]) -> WasmTensor:
        return WasmTensor(self.memory, self.block, self.offset, shape, self.dtype)

    def __repr__(self) -> str:
        return f"WasmTensor({self.dtype}{list(self.shape)} @ {self.offset})"


class LinearMemory(DataTransfer):
    """One instance of the kernel module: its linear memory, allocator and kernel entry point.

    :param limit: the most bytes of linear memory this instance may reach (module data included).
    """

    device_name = "wasm"

    def __init__(self, limit: int = DEFAULT_LIMIT, path: Path = KERNELS) -> None:
        import wasmtime

        if not 0 < limit <= MAX_LIMIT:
            raise InvalidArgument(f"wasm_memory_limit must be in (0, {MAX_LIMIT}] bytes, got {limit}")
        self.limit = limit
        self.store = wasmtime.Store(engine())
        self.store.set_limits(memory_size=limit)
        self.instance = wasmtime.Instance(self.store, module(path), [])
        exports = self.instance.exports(self.store)
        self._memory = exports["memory"]
        self._dispatch = exports["dispatch"]
        heap = _align(int(exports["__heap_base"].value(self.store)))
        self._refresh()
        if heap > limit:
            raise InvalidArgument(f"wasm_memory_limit {limit} is below the kernel module's own {heap} bytes")
        self._args = self._view(int(exports["kernel_args_ptr"](self.store)), 16, np.int32)
        self._floats = self._args.view(np.float32)
        self._lock = threading.Lock()  # a wasmtime store runs one call at a time
        self._heap_lock = threading.RLock()  # blocks are freed from __del__, perhaps mid-allocation
        # Kernel parameters (shapes, strides) go to a fixed scratch area, written under the lock.
        self._params_offset = heap
        self._params = self._view(heap, PARAMS, np.int32)
        heap = _align(heap + PARAMS * 4)
        self._starts: list[int] = [heap]  # free blocks, sorted by offset
        self._sizes: list[int] = [self._bytes - heap]
        self.in_use = 0
        self.peak = 0

    # -- allocation ----------------------------------------------------------------------------

    def _refresh(self) -> None:
        self._bytes = int(self._memory.data_len(self.store))
        self._base = ctypes.addressof(self._memory.data_ptr(self.store).contents)

    def allocate(self, nbytes: int, what: str = "a tensor") -> _Block:
        """A block of at least ``nbytes`` (aligned for SIMD), growing the memory if needed."""
        size = _align(max(int(nbytes), 1))
        with self._heap_lock:
            return self._allocate(size, what)

    def _allocate(self, size: int, what: str) -> _Block:
        index = next((i for i, free in enumerate(self._sizes) if free >= size), None)
        if index is None:
            index = self._grow(size, what)
        start = self._starts[index]
        if self._sizes[index] == size:
            del self._starts[index], self._sizes[index]
        else:
            self._starts[index] += size
            self._sizes[index] -= size
        self.in_use += size
        self.peak = max(self.peak, self.in_use)
        return _Block(self, start, size)

    def _grow(self, size: int, what: str) -> int:
        last_free = self._sizes[-1] if self._starts and self._starts[-1] + self._sizes[-1] == self._bytes else 0
        needed = size - last_free
        pages = -(-needed // PAGE)
        if self._bytes + pages * PAGE > self.limit:
            raise Fail(
                f"WasmExecutionProvider: out of linear memory allocating {what} ({nbytes_text(size)}): "
                f"{nbytes_text(self.in_use)} in use of the {nbytes_text(self.limit)} limit "
                "(raise the provider option wasm_memory_limit)"
            )
        old = self._bytes
        self._memory.grow(self.store, pages)
        self._refresh()
        self._release_locked(old, self._bytes - old, False)
        return len(self._starts) - 1

    def _release(self, start: int, size: int, count: bool = True) -> None:
        with self._heap_lock:
            self._release_locked(start, size, count)

    def _release_locked(self, start: int, size: int, count: bool) -> None:
        if count:
            self.in_use -= size
        index = bisect.bisect(self._starts, start)
        if index and self._starts[index - 1] + self._sizes[index - 1] == start:  # merge with the left
            index -= 1
            self._sizes[index] += size
        else:
            self._starts.insert(index, start)
            self._sizes.insert(index, size)
        if index + 1 < len(self._starts) and self._starts[index] + self._sizes[index] == self._starts[index + 1]:
            self._sizes[index] += self._sizes.pop(index + 1)
            del self._starts[index + 1]

    def tensor(self, shape: Sequence[int], dtype: Any = np.float32, what: str = "a tensor") -> WasmTensor:
        """An uninitialised tensor in this memory."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(int(d) for d in shape) * dtype.itemsize
        block = self.allocate(nbytes, what)
        return WasmTensor(self, block, block.offset, shape, dtype)

    # -- host access ---------------------------------------------------------------------------

    def _view(self, offset: int, count: int, dtype: Any) -> np.ndarray:
        dtype = np.dtype(dtype)
        buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(self._base + offset)
        return np.frombuffer(buffer, dtype=dtype, count=count)

    def view(self, value: WasmTensor) -> np.ndarray:
        """A host numpy view of a tensor's bytes (valid until the memory grows)."""
        return self._view(value.offset, value.size, value.dtype).reshape(value.shape)

    def call(self, kernel: int, *args: int | float, params: Sequence[int] = ()) -> None:
        """Run kernel number ``kernel`` of ``dispatch.c`` with ``args`` (ints; floats as float32).

        ``params`` (shapes, strides) are written to the scratch area, whose offset the kernel
        finds in place of any argument given as :data:`PARAMS_ARG`.
        """
        with self._lock:
            slots = self._args
            slots[0] = kernel
            if params:
                if len(params) > PARAMS:
                    raise Fail(f"WasmExecutionProvider: {len(params)} kernel parameters (at most {PARAMS})")
                self._params[: len(params)] = params
            for index, value in enumerate(args, 1):
                if value is PARAMS_ARG:
                    slots[index] = self._params_offset
                elif isinstance(value, float):
                    self._floats[index] = value
                else:
                    slots[index] = value
            try:
                status = self._dispatch(self.store)
            except Exception as error:  # noqa: BLE001 - a trap: wasmtime raises Trap or WasmtimeError
                raise Fail(f"WasmExecutionProvider: the kernel trapped: {error}") from None
        if status:
            raise Fail(f"WasmExecutionProvider: kernel {kernel} is not in the module (status {status})")

    # -- the DataTransfer contract -------------------------------------------------------------

    def owns(self, value: Any) -> bool:
        return isinstance(value, WasmTensor) and value.memory is self

    def to_device(self, value: Any) -> WasmTensor:
        if isinstance(value, WasmTensor):  # another session's memory: through the host
            value = value.memory.to_host(value)
        array = np.asarray(value)
        if array.dtype.kind not in "biuf" or array.dtype.itemsize not in (1, 2, 4, 8):
            raise InvalidArgument(f"wasm linear memory holds numeric tensors, not {array.dtype}")
        tensor = self.tensor(array.shape, array.dtype, f"a {array.dtype}{list(array.shape)} copy")
        self.view(tensor)[...] = array
        return tensor

    def to_host(self, value: Any) -> np.ndarray:
        if not isinstance(value, WasmTensor):
            raise TypeError(f"to_host: expected a WasmTensor, got {type(value).__name__}")
        return np.array(value.memory.view(value), copy=True)

    def from_dlpack(self, value: Any) -> WasmTensor:
        return self.to_device(np.from_dlpack(value))

    def empty(self, shape: Sequence[int], dtype: Any) -> WasmTensor:
        return self.tensor(shape, dtype)

    def shape_and_type(self, value: Any) -> tuple[tuple[int, ...], np.dtype]:
        return value.shape, value.dtype

    def data_ptr(self, value: Any) -> int:
        """The tensor's offset in linear memory: a wasm address."""
        return int(value.offset)

    def from_pointer(self, pointer: int, shape: Sequence[int], dtype: Any) -> WasmTensor:
        tensor = WasmTensor(self, None, int(pointer), shape, dtype)
        if tensor.offset < 0 or tensor.offset + tensor.nbytes > self._bytes:
            raise InvalidArgument(f"wasm address {pointer} + {tensor.nbytes} bytes is outside linear memory")
        return tensor

    def copy_into(self, target: Any, value: Any) -> None:
        self.view(target).reshape(-1)[...] = value.memory.view(value).reshape(-1)


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def nbytes_text(n: int) -> str:
    """``n`` bytes in MiB or KiB, for messages."""
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    return f"{n / 1024:.1f} KiB"
