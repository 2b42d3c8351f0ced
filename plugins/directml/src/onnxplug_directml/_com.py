"""The COM plumbing of the DirectML platform layer: IIDs, constants, structure layouts, and
interface pointers called by vtable slot through ``ctypes``.

Layouts, slots and IIDs follow ``d3d12.h`` and ``DirectML.h`` (Windows SDK), cross-checked against
the Win32 metadata ``win32more`` generates from.  Importing this module loads no library.
"""

from __future__ import annotations

import ctypes
import sys
import uuid
from typing import Any

from onnxplug.errors import EPFail

from .graph import OPERATORS

WINDOWS = sys.platform == "win32"
_FUNCTYPE = ctypes.WINFUNCTYPE if WINDOWS else ctypes.CFUNCTYPE
_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)


class GUID(ctypes.Structure):
    _fields_ = [
        ("Data1", ctypes.c_uint32),
        ("Data2", ctypes.c_uint16),
        ("Data3", ctypes.c_uint16),
        ("Data4", ctypes.c_ubyte * 8),
    ]

    @classmethod
    def of(cls, text: str) -> GUID:
        raw = uuid.UUID(text).bytes
        return cls(
            int.from_bytes(raw[0:4], "big"),
            int.from_bytes(raw[4:6], "big"),
            int.from_bytes(raw[6:8], "big"),
            (ctypes.c_ubyte * 8)(*raw[8:]),
        )


IID = {
    "ID3D12Device": GUID.of("189819f1-1db6-4b57-be54-1821339b85f7"),
    "ID3D12CommandQueue": GUID.of("0ec870a6-5d7e-4c22-8cfc-5baae07616ed"),
    "ID3D12CommandAllocator": GUID.of("6102dee4-af59-4b09-b999-b44d73f09b24"),
    "ID3D12GraphicsCommandList": GUID.of("5b160d0f-ac1b-4185-8ba8-b3ae42a5a455"),
    "ID3D12Fence": GUID.of("0a753dcf-c4d8-4b91-adf6-be5a60d95a76"),
    "ID3D12DescriptorHeap": GUID.of("8efb471d-616c-4f49-90f7-127bb763fa51"),
    "ID3D12Resource": GUID.of("696442be-a72e-4059-bc79-5b5c98040fad"),
    "IDMLDevice1": GUID.of("a0884f9a-d2be-4355-aa5d-5901281ad1d2"),
    "IDMLOperator": GUID.of("26caae7a-3081-4633-9581-226fbe57695d"),
    "IDMLCompiledOperator": GUID.of("6b15e56a-bf5c-4902-92d8-da3a650afea4"),
    "IDMLOperatorInitializer": GUID.of("427c1113-435c-469c-8676-4d5dd072f813"),
    "IDMLBindingTable": GUID.of("29c687dc-de74-4e3b-ab00-1168f2fc3cfc"),
    "IDMLCommandRecorder": GUID.of("e6857a76-2e3e-4fdd-bff4-5d2ba10fb453"),
}

# d3d12.h constants
FEATURE_LEVEL_11_0 = 0xB000
COMMAND_LIST_TYPE_DIRECT = 0
HEAP_DEFAULT, HEAP_UPLOAD, HEAP_READBACK = 1, 2, 3
RESOURCE_DIMENSION_BUFFER = 1
TEXTURE_LAYOUT_ROW_MAJOR = 1
RESOURCE_FLAG_ALLOW_UNORDERED_ACCESS = 0x4
STATE_COMMON, STATE_COPY_DEST, STATE_GENERIC_READ = 0, 0x400, 0xAC3
DESCRIPTOR_HEAP_CBV_SRV_UAV, DESCRIPTOR_HEAP_SHADER_VISIBLE = 0, 1
# DirectML.h constants
TENSOR_TYPE_BUFFER, TENSOR_FLAG_OWNED_BY_DML = 1, 1
GRAPH_NODE_OPERATOR = 1
EDGE_INPUT, EDGE_OUTPUT, EDGE_INTERMEDIATE = 1, 2, 3
BINDING_NONE, BINDING_BUFFER, BINDING_BUFFER_ARRAY = 0, 1, 2
EXECUTION_FLAG_NONE = 0


def _struct(name: str, fields: list[tuple[str, Any]]) -> type:
    return type(name, (ctypes.Structure,), {"_fields_": fields})


U32, U64, F32, I32 = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_float, ctypes.c_int32
QUEUE_DESC = _struct("D3D12_COMMAND_QUEUE_DESC", [("Type", I32), ("Priority", I32), ("Flags", I32), ("NodeMask", U32)])
HEAP_PROPERTIES = _struct(
    "D3D12_HEAP_PROPERTIES",
    [
        ("Type", I32),
        ("CPUPageProperty", I32),
        ("MemoryPoolPreference", I32),
        ("CreationNodeMask", U32),
        ("VisibleNodeMask", U32),
    ],
)
RESOURCE_DESC = _struct(
    "D3D12_RESOURCE_DESC",
    [
        ("Dimension", I32),
        ("Alignment", U64),
        ("Width", U64),
        ("Height", U32),
        ("DepthOrArraySize", ctypes.c_uint16),
        ("MipLevels", ctypes.c_uint16),
        ("Format", I32),
        ("SampleCount", U32),
        ("SampleQuality", U32),
        ("Layout", I32),
        ("Flags", I32),
    ],
)
HEAP_DESC = _struct(
    "D3D12_DESCRIPTOR_HEAP_DESC", [("Type", I32), ("NumDescriptors", U32), ("Flags", I32), ("NodeMask", U32)]
)
RANGE = _struct("D3D12_RANGE", [("Begin", ctypes.c_size_t), ("End", ctypes.c_size_t)])
BUFFER_TENSOR_DESC = _struct(
    "DML_BUFFER_TENSOR_DESC",
    [
        ("DataType", I32),
        ("Flags", I32),
        ("DimensionCount", U32),
        ("Sizes", _P),
        ("Strides", _P),
        ("TotalTensorSizeInBytes", U64),
        ("GuaranteedBaseOffsetAlignment", U32),
    ],
)
TENSOR_DESC = _struct("DML_TENSOR_DESC", [("Type", I32), ("Desc", _P)])
OPERATOR_DESC = _struct("DML_OPERATOR_DESC", [("Type", I32), ("Desc", _P)])
SCALE_BIAS = _struct("DML_SCALE_BIAS", [("Scale", F32), ("Bias", F32)])
OPERATOR_NODE = _struct("DML_OPERATOR_GRAPH_NODE_DESC", [("Operator", _P), ("Name", ctypes.c_char_p)])
NODE_DESC = _struct("DML_GRAPH_NODE_DESC", [("Type", I32), ("Desc", _P)])
INPUT_EDGE = _struct(
    "DML_INPUT_GRAPH_EDGE_DESC",
    [("GraphInputIndex", U32), ("ToNodeIndex", U32), ("ToNodeInputIndex", U32), ("Name", ctypes.c_char_p)],
)
OUTPUT_EDGE = _struct(
    "DML_OUTPUT_GRAPH_EDGE_DESC",
    [("FromNodeIndex", U32), ("FromNodeOutputIndex", U32), ("GraphOutputIndex", U32), ("Name", ctypes.c_char_p)],
)
INTERMEDIATE_EDGE = _struct(
    "DML_INTERMEDIATE_GRAPH_EDGE_DESC",
    [
        ("FromNodeIndex", U32),
        ("FromNodeOutputIndex", U32),
        ("ToNodeIndex", U32),
        ("ToNodeInputIndex", U32),
        ("Name", ctypes.c_char_p),
    ],
)
EDGE_DESC = _struct("DML_GRAPH_EDGE_DESC", [("Type", I32), ("Desc", _P)])
GRAPH_DESC = _struct(
    "DML_GRAPH_DESC",
    [
        ("InputCount", U32),
        ("OutputCount", U32),
        ("NodeCount", U32),
        ("Nodes", _P),
        ("InputEdgeCount", U32),
        ("InputEdges", _P),
        ("OutputEdgeCount", U32),
        ("OutputEdges", _P),
        ("IntermediateEdgeCount", U32),
        ("IntermediateEdges", _P),
    ],
)
BINDING_PROPERTIES = _struct(
    "DML_BINDING_PROPERTIES",
    [("RequiredDescriptorCount", U32), ("TemporaryResourceSize", U64), ("PersistentResourceSize", U64)],
)
BINDING_TABLE_DESC = _struct(
    "DML_BINDING_TABLE_DESC",
    [
        ("Dispatchable", _P),
        ("CPUDescriptorHandle", ctypes.c_size_t),
        ("GPUDescriptorHandle", U64),
        ("SizeInDescriptors", U32),
    ],
)
BUFFER_BINDING = _struct("DML_BUFFER_BINDING", [("Buffer", _P), ("Offset", U64), ("SizeInBytes", U64)])
BUFFER_ARRAY_BINDING = _struct("DML_BUFFER_ARRAY_BINDING", [("BindingCount", U32), ("Bindings", _P)])
BINDING_DESC = _struct("DML_BINDING_DESC", [("Type", I32), ("Desc", _P)])

_KINDS = {"uint": U32, "int": I32, "float": F32, "bool": I32}
#: One ctypes structure per operator description, from the schema in graph.py.
OPERATOR_STRUCTS = {
    name: _struct(f"DML_{name}_OPERATOR_DESC", [(field, _KINDS.get(kind, _P)) for field, kind in fields])
    for name, (_, fields) in OPERATORS.items()
}


def _check(hr: int, what: str) -> None:
    if hr < 0:
        raise EPFail(f"DirectML: {what} failed (HRESULT 0x{hr & 0xFFFFFFFF:08X})")


class Com:
    """A COM interface pointer; methods are called by vtable slot."""

    def __init__(self, pointer: ctypes.c_void_p, name: str) -> None:
        self.ptr = pointer
        self.name = name

    def _fn(self, slot: int, restype: Any, argtypes: tuple) -> Any:
        vtable = ctypes.cast(self.ptr, ctypes.POINTER(ctypes.POINTER(ctypes.c_void_p))).contents
        return _FUNCTYPE(restype, _P, *argtypes)(vtable[slot])

    def call(self, slot: int, argtypes: tuple, *args: Any, restype: Any = None) -> Any:
        return self._fn(slot, restype, argtypes)(self.ptr, *args)

    def hr(self, slot: int, what: str, argtypes: tuple, *args: Any) -> None:
        _check(self.call(slot, argtypes, *args, restype=ctypes.c_long), f"{self.name}::{what}")

    def new(self, slot: int, what: str, argtypes: tuple, *args: Any, iid: str) -> Com:
        """A method whose last two parameters are ``REFIID, void**``: the new interface."""
        out = ctypes.c_void_p()
        self.hr(slot, what, (*argtypes, ctypes.POINTER(GUID), _PP), *args, ctypes.byref(IID[iid]), ctypes.byref(out))
        return Com(out, iid)

    def struct(self, slot: int, kind: type) -> Any:
        """A method returning a structure (see the module docstring for the two conventions)."""
        if WINDOWS:
            result = kind()
            self.call(slot, (ctypes.POINTER(kind),), ctypes.byref(result), restype=_P)
            return result
        return self.call(slot, (), restype=kind)

    def release(self) -> None:
        if self.ptr:
            self.call(2, (), restype=ctypes.c_ulong)
            self.ptr = ctypes.c_void_p()
