"""Device and memory descriptors with onnxruntime's names: OrtDevice, OrtMemoryInfo, OrtArenaCfg.

onnxplug keeps every value a session hands out in host memory, so these describe rather than
allocate: a descriptor for a CUDA device can be built (as onnxruntime's CPU build allows), and
only allocating on it fails.  The numbers (device types, vendor ids) are onnxruntime's, so code
comparing them keeps working.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = [
    "OrtAllocatorType",
    "OrtArenaCfg",
    "OrtDevice",
    "OrtDeviceVendorId",
    "OrtMemType",
    "OrtMemoryInfo",
    "cpu_memory_info",
]


class OrtDeviceVendorId(enum.IntEnum):
    """PCI vendor ids, as onnxruntime numbers them."""

    NONE = 0x0000
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086


# onnxruntime's OrtDevice type codes (cuda, webgpu and gpu share the GPU code; npu and cann too).
#: onnxruntime's device type codes by name (OrtDevice.cpu() == 0 ...).
DEVICE_TYPE_CODES = _TYPE_CODES = {"cpu": 0, "gpu": 1, "cuda": 1, "webgpu": 1, "fpga": 2, "npu": 3, "cann": 3, "dml": 4}
# What OrtDevice.make gives: DirectML devices are GPUs of vendor Microsoft there (OrtDevice.dml(),
# the older code 4, is kept for code that compares with it).
_MAKE_CODES = {**_TYPE_CODES, "dml": 1}
# The vendor a device name implies when the caller gives none.
_NAME_VENDORS = {
    "cuda": OrtDeviceVendorId.NVIDIA,
    "dml": OrtDeviceVendorId.MICROSOFT,
    "cann": OrtDeviceVendorId.HUAWEI,
    "webgpu": OrtDeviceVendorId.NONE,
}


class OrtDevice:
    """A device descriptor: ``OrtDevice.make("cuda", 0)``, or from codes
    ``OrtDevice(OrtDevice.cuda(), OrtDevice.default_memory(), vendor_id, device_id)``."""

    _TYPES = _TYPE_CODES

    def __init__(self, device_type: int = 0, memory_type: int = 0, vendor_id: int = 0, device_id: int = 0) -> None:
        self._type = int(device_type)
        self._memory = int(memory_type)
        self._vendor = int(vendor_id)
        self._id = int(device_id)

    @classmethod
    def make(cls, ort_device_name: str, device_id: int = 0, vendor_id: int = -1) -> OrtDevice:
        """A descriptor by name (``cpu``, ``cuda``, ``gpu``, ``npu``, ``dml``, ``cann``, ``webgpu``).

        :raises Exception: an unknown name (onnxruntime raises a plain ``Exception`` too).
        """
        name = str(ort_device_name).lower()
        code = _MAKE_CODES.get(name)
        if code is None or name == "fpga":
            raise Exception(f"Unsupported device type: {ort_device_name}")
        if vendor_id < 0:
            vendor_id = int(_NAME_VENDORS.get(name, OrtDeviceVendorId.NONE))
        return cls(code, 0, vendor_id, device_id)

    @staticmethod
    def cpu() -> int:
        return 0

    @staticmethod
    def gpu() -> int:
        return 1

    @staticmethod
    def cuda() -> int:
        return 1

    @staticmethod
    def webgpu() -> int:
        return 1

    @staticmethod
    def fpga() -> int:
        return 2

    @staticmethod
    def npu() -> int:
        return 3

    @staticmethod
    def cann() -> int:
        return 3

    @staticmethod
    def dml() -> int:
        return 4

    @staticmethod
    def default_memory() -> int:
        return 0

    def device_type(self) -> int:
        return self._type

    def device_id(self) -> int:
        return self._id

    def device_vendor_id(self) -> int:
        return self._vendor

    def vendor_id(self) -> int:
        """The name onnxruntime's compiled ``OrtDevice`` uses for :meth:`device_vendor_id`."""
        return self._vendor

    def device_vendor(self) -> int:
        """Alias of :meth:`device_vendor_id` kept for earlier onnxplug code."""
        return self._vendor

    def device_mem_type(self) -> int:
        return self._memory

    def mem_type(self) -> int:
        return self._memory

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtDevice) and (self._type, self._memory, self._vendor, self._id) == (
            other._type,
            other._memory,
            other._vendor,
            other._id,
        )

    def __hash__(self) -> int:
        return hash((self._type, self._memory, self._vendor, self._id))

    def __repr__(self) -> str:
        return f"OrtDevice(type={self._type}, mem={self._memory}, vendor={self._vendor:#x}, id={self._id})"


class OrtAllocatorType(enum.IntEnum):
    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtMemType(enum.IntEnum):
    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1
    DEFAULT = 0


class OrtMemoryInfo:
    """Where a value lives: ``OrtMemoryInfo("Cpu", OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, OrtMemType.DEFAULT)``.

    Only host memory exists for values onnxplug hands out, so ``name`` is ``"Cpu"`` for every
    memory info a session reports.
    """

    def __init__(
        self, name: str, allocator_type: OrtAllocatorType, device_id: int, mem_type: OrtMemType, vendor_id: int = 0
    ) -> None:
        if not isinstance(allocator_type, OrtAllocatorType) or not isinstance(mem_type, OrtMemType):
            raise TypeError(
                "OrtMemoryInfo(name, allocator_type: OrtAllocatorType, device_id: int, mem_type: OrtMemType): "
                f"got {type(allocator_type).__name__} and {type(mem_type).__name__}"
            )
        self.name = str(name)
        self.allocator_type = allocator_type
        self.device_id = int(device_id)
        self.mem_type = mem_type
        self.device_mem_type = 0
        self.device_vendor_id = int(vendor_id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OrtMemoryInfo) and vars(self) == vars(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"OrtMemoryInfo(name={self.name!r}, device_id={self.device_id}, mem_type={self.mem_type.name})"


def cpu_memory_info() -> OrtMemoryInfo:
    """The memory info of host values (what onnxruntime's CPU provider reports)."""
    return OrtMemoryInfo("Cpu", OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, OrtMemType.DEFAULT)


class OrtArenaCfg:
    """Arena settings for ``create_and_register_allocator``: four ints, or a dict of them.

    numpy allocates onnxplug's values, so there is no arena to configure: the settings are
    checked and kept, and have no effect (see ``docs/api.md``).
    """

    _KEYS = (
        "max_mem",
        "arena_extend_strategy",
        "initial_chunk_size_bytes",
        "max_dead_bytes_per_chunk",
        "initial_growth_chunk_size_bytes",
        "max_power_of_two_extend_bytes",
    )

    def __init__(self, *args: Any) -> None:
        values = dict.fromkeys(self._KEYS, -1)
        values["max_mem"] = 0
        if len(args) == 1 and isinstance(args[0], Mapping):
            for key, value in args[0].items():
                if key not in values:
                    raise RuntimeError(f"Invalid OrtArenaCfg option: {key}")
                values[key] = int(value)
        elif len(args) == 4:
            for key, value in zip(self._KEYS[:4], args):
                values[key] = int(value)
        else:
            raise TypeError(
                "OrtArenaCfg(max_mem, arena_extend_strategy, initial_chunk_size_bytes, "
                "max_dead_bytes_per_chunk) or OrtArenaCfg(dict)"
            )
        self.__dict__.update(values)
