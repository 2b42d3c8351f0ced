"""Device memories known to an Environment: what ``OrtValue.ortvalue_from_numpy(x, "cuda", 0)``,
``OrtValue.from_dlpack`` and ``IOBinding.bind_output(name, "cuda")`` look device names up in.

A memory is a :class:`~onnxplug.api.DataTransfer` that a factory hands out through
:meth:`~onnxplug.api.ProviderFactory.memory` for one of its devices, so values can be put on a
device before (and without) any session.  Each memory is asked for once per Environment and
kept, so that values made through it and sessions created later agree on which object owns them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgument

if TYPE_CHECKING:
    from .._plugins import Environment
    from ..api import DataTransfer

__all__ = ["DeviceMemory", "environment_memories", "find_memory", "move", "owner_of"]

# onnxruntime's device names that exist in its API; other names are "Unsupported device type".
_ORT_DEVICE_NAMES = frozenset({"cuda", "gpu", "dml", "npu", "cann", "webgpu", "fpga"})


class DeviceMemory:
    """One device's memory as the Environment lists it: the memory, its device id and the
    factory that provides it (for messages)."""

    __slots__ = ("transfer", "device_id", "factory_name")

    def __init__(self, transfer: DataTransfer, device_id: int, factory_name: str) -> None:
        self.transfer = transfer
        self.device_id = device_id
        self.factory_name = factory_name

    def __repr__(self) -> str:
        return f"{self.transfer.device_name}:{self.device_id} ({self.factory_name})"


def environment_memories(environment: Environment) -> list[DeviceMemory]:
    """Every device memory the environment's factories offer (``Environment.memories`` keeps
    the answer)."""
    found: list[DeviceMemory] = []
    for factory in environment.factories():
        for device in environment.devices(factory):
            try:
                transfer = factory.memory(device)
            except Exception:  # noqa: BLE001 - a broken memory() is a factory without memory
                transfer = None
            if transfer is not None and transfer.device_name:
                found.append(DeviceMemory(transfer, int(device.id), factory.ort_name or factory.name))
    return found


def find_memory(environment: Environment, device_name: str, device_id: int = 0) -> DataTransfer:
    """The memory named ``device_name`` (``"cuda"``, ``"virtual"``...) of device ``device_id``.

    :raises InvalidArgument: no factory offers that memory (the message lists those available).
    :raises Exception: ``device_name`` is neither one of onnxruntime's device names nor any
        installed memory's (onnxruntime raises a plain ``Exception("Unsupported device type")``).
    """
    name = str(device_name).lower()
    memories = environment.memories()
    for memory in memories:
        if memory.transfer.device_name.lower() == name and memory.device_id == int(device_id):
            return memory.transfer
    available = ", ".join(repr(m) for m in memories) or "none (only host memory)"
    if name not in _ORT_DEVICE_NAMES and all(m.transfer.device_name.lower() != name for m in memories):
        raise Exception(f"Unsupported device type: {device_name}")
    raise InvalidArgument(
        f"Can't allocate memory on the device '{device_name}:{device_id}': no installed provider offers it; "
        f"device memories available: {available}"
    )


def owner_of(memories: Any, value: Any) -> DataTransfer | None:
    """The first of ``memories`` (DataTransfer objects) that owns ``value``, else ``None``."""
    for memory in memories:
        if memory.owns(value):
            return memory
    return None


def move(
    value: Any, source: DataTransfer | None, target: DataTransfer | None, wait: Callable[[], None] | None = None
) -> Any:
    """``value``, held in ``source`` (``None``: host memory), copied into ``target`` (``None``:
    host): directly through DLPack where the target imports it, else through host memory.
    ``wait`` (default: the source memory's ``synchronize``) runs first, so the copy reads
    finished data."""
    if source is target:
        return value
    if source is None:
        return target.to_device(value)
    (wait or source.synchronize)()
    if target is None:
        return source.to_host(value)
    if target.accepts_dlpack:
        return target.from_dlpack(value)
    return target.to_device(source.to_host(value))
