"""The platform layer: a :class:`~onnxplug_directml.graph.DmlGraph` compiled and run through
Direct3D 12 and DirectML, calling their COM interfaces through ``ctypes`` vtables.

**Not exercised in CI** (DirectML needs Windows or WSL2's ``/dev/dxg``; no test runs this
against a stand-in library).  The vtable slots, structure layouts and IIDs are those of
``d3d12.h`` and ``DirectML.h`` (Windows SDK), cross-checked against the Win32 metadata that
``win32more`` generates its bindings from.  What it does, per partition:

* device (once per provider): ``D3D12CreateDevice`` (default adapter, feature level 11.0) →
  ``DMLCreateDevice`` (``IDMLDevice1``) → a direct command queue, allocator, command list, fence
  and ``IDMLCommandRecorder``;
* compile: ``IDMLDevice::CreateOperator`` per node → ``IDMLDevice1::CompileGraph`` →
  ``CreateOperatorInitializer``; the constants (``DML_TENSOR_FLAG_OWNED_BY_DML``) are uploaded and
  bound to the initializer as one buffer array, its output is the persistent resource;
* run: inputs copied through an upload heap into default-heap buffers, a binding table over
  inputs, outputs, temporary and persistent resources, ``RecordDispatch``, the outputs copied
  to a readback heap; each step is its own command list, so buffers rely on the implicit state
  promotion and decay of D3D12 buffers instead of explicit barriers; the fence is polled.

Two calls return structures (``GetBindingProperties``, the descriptor heap's start handles):
on Windows they are called with MSVC's member-function convention (hidden return pointer after
``this``), elsewhere (WSL2's Linux libraries) with the C convention ctypes applies.
"""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any

import numpy as np

from ._com import (
    _P,
    _PP,
    BINDING_BUFFER,
    BINDING_BUFFER_ARRAY,
    BINDING_DESC,
    BINDING_NONE,
    BINDING_PROPERTIES,
    BINDING_TABLE_DESC,
    BUFFER_ARRAY_BINDING,
    BUFFER_BINDING,
    BUFFER_TENSOR_DESC,
    COMMAND_LIST_TYPE_DIRECT,
    DESCRIPTOR_HEAP_CBV_SRV_UAV,
    DESCRIPTOR_HEAP_SHADER_VISIBLE,
    EDGE_DESC,
    EDGE_INPUT,
    EDGE_INTERMEDIATE,
    EDGE_OUTPUT,
    EXECUTION_FLAG_NONE,
    FEATURE_LEVEL_11_0,
    GRAPH_DESC,
    GRAPH_NODE_OPERATOR,
    GUID,
    HEAP_DEFAULT,
    HEAP_DESC,
    HEAP_PROPERTIES,
    HEAP_READBACK,
    HEAP_UPLOAD,
    I32,
    IID,
    INPUT_EDGE,
    INTERMEDIATE_EDGE,
    NODE_DESC,
    OPERATOR_DESC,
    OPERATOR_NODE,
    OPERATOR_STRUCTS,
    OUTPUT_EDGE,
    QUEUE_DESC,
    RANGE,
    RESOURCE_DESC,
    RESOURCE_DIMENSION_BUFFER,
    RESOURCE_FLAG_ALLOW_UNORDERED_ACCESS,
    SCALE_BIAS,
    STATE_COMMON,
    STATE_COPY_DEST,
    STATE_GENERIC_READ,
    TENSOR_DESC,
    TENSOR_FLAG_OWNED_BY_DML,
    TENSOR_TYPE_BUFFER,
    TEXTURE_LAYOUT_ROW_MAJOR,
    U32,
    U64,
    WINDOWS,
    Com,
    _check,
    _struct,
)
from .graph import OPERATORS, DmlGraph, TensorDesc

__all__ = ["DmlCompiledGraph", "DmlDevice"]


class DmlDevice:
    """A D3D12 device with a DirectML device, a direct queue and what submitting work needs."""

    def __init__(self) -> None:
        if WINDOWS:
            d3d12, dml = ctypes.WinDLL("d3d12.dll"), ctypes.WinDLL("DirectML.dll")
        else:
            d3d12, dml = ctypes.CDLL("libd3d12.so"), ctypes.CDLL("libdirectml.so")
        self._lock = threading.Lock()
        device = ctypes.c_void_p()
        create = d3d12.D3D12CreateDevice
        create.argtypes, create.restype = [_P, I32, ctypes.POINTER(GUID), _PP], ctypes.c_long
        _check(
            create(None, FEATURE_LEVEL_11_0, ctypes.byref(IID["ID3D12Device"]), ctypes.byref(device)),
            "D3D12CreateDevice",
        )
        self.d3d = Com(device, "ID3D12Device")
        dml_device = ctypes.c_void_p()
        create_dml = dml.DMLCreateDevice
        create_dml.argtypes, create_dml.restype = [_P, I32, ctypes.POINTER(GUID), _PP], ctypes.c_long
        _check(create_dml(device, 0, ctypes.byref(IID["IDMLDevice1"]), ctypes.byref(dml_device)), "DMLCreateDevice")
        self.dml = Com(dml_device, "IDMLDevice1")
        queue_desc = QUEUE_DESC(COMMAND_LIST_TYPE_DIRECT, 0, 0, 0)
        self.queue = self.d3d.new(8, "CreateCommandQueue", (_P,), ctypes.byref(queue_desc), iid="ID3D12CommandQueue")
        self.allocator = self.d3d.new(
            9, "CreateCommandAllocator", (I32,), COMMAND_LIST_TYPE_DIRECT, iid="ID3D12CommandAllocator"
        )
        self.list = self.d3d.new(
            12,
            "CreateCommandList",
            (U32, I32, _P, _P),
            0,
            COMMAND_LIST_TYPE_DIRECT,
            self.allocator.ptr,
            None,
            iid="ID3D12GraphicsCommandList",
        )
        self.list.hr(9, "Close", ())
        self.fence = self.d3d.new(36, "CreateFence", (U64, I32), 0, 0, iid="ID3D12Fence")
        self.fence_value = 0
        self.recorder = self.dml.new(11, "CreateCommandRecorder", (), iid="IDMLCommandRecorder")

    def buffer(self, size: int, heap: int) -> Com:
        """A committed buffer resource (default heap buffers allow unordered access)."""
        properties = HEAP_PROPERTIES(heap, 0, 0, 1, 1)
        flags = RESOURCE_FLAG_ALLOW_UNORDERED_ACCESS if heap == HEAP_DEFAULT else 0
        desc = RESOURCE_DESC(
            RESOURCE_DIMENSION_BUFFER, 0, max(int(size), 4), 1, 1, 1, 0, 1, 0, TEXTURE_LAYOUT_ROW_MAJOR, flags
        )
        state = {HEAP_DEFAULT: STATE_COMMON, HEAP_UPLOAD: STATE_GENERIC_READ, HEAP_READBACK: STATE_COPY_DEST}[heap]
        return self.d3d.new(
            27,
            "CreateCommittedResource",
            (_P, I32, _P, I32, _P),
            ctypes.byref(properties),
            0,
            ctypes.byref(desc),
            state,
            None,
            iid="ID3D12Resource",
        )

    def write(self, resource: Com, data: np.ndarray) -> None:
        mapped = ctypes.c_void_p()
        empty = RANGE(0, 0)
        resource.hr(8, "Map", (U32, _P, _PP), 0, ctypes.byref(empty), ctypes.byref(mapped))
        ctypes.memmove(mapped, np.ascontiguousarray(data).ctypes.data, data.nbytes)
        resource.call(9, (U32, _P), 0, None)

    def read(self, resource: Com, nbytes: int) -> bytes:
        mapped = ctypes.c_void_p()
        whole = RANGE(0, nbytes)
        resource.hr(8, "Map", (U32, _P, _PP), 0, ctypes.byref(whole), ctypes.byref(mapped))
        data = ctypes.string_at(mapped, nbytes)
        empty = RANGE(0, 0)
        resource.call(9, (U32, _P), 0, ctypes.byref(empty))
        return data

    def submit(self, record) -> None:
        """Record into the command list, execute it and wait for the GPU (fence polled)."""
        with self._lock:
            self.allocator.hr(8, "Reset", ())
            self.list.hr(10, "Reset", (_P, _P), self.allocator.ptr, None)
            record(self.list)
            self.list.hr(9, "Close", ())
            lists = (ctypes.c_void_p * 1)(self.list.ptr)
            self.queue.call(10, (U32, _P), 1, lists)
            self.fence_value += 1
            self.queue.hr(14, "Signal", (_P, U64), self.fence.ptr, self.fence_value)
            while self.fence.call(8, (), restype=U64) < self.fence_value:
                time.sleep(0.0001)

    def copy(self, target: Com, source: Com, nbytes: int) -> None:
        self.submit(lambda cl: cl.call(15, (_P, U64, _P, U64, U64), target.ptr, 0, source.ptr, 0, nbytes))

    def close(self) -> None:
        for com in (self.recorder, self.fence, self.list, self.allocator, self.queue, self.dml, self.d3d):
            com.release()


class DmlCompiledGraph:
    """One DmlGraph as an initialized ``IDMLCompiledOperator`` with its resources."""

    def __init__(self, device: DmlDevice, graph: DmlGraph) -> None:
        self.device, self.graph = device, graph
        self._keep: list[Any] = []
        self._resources: list[Com] = []
        self.heap: Com | None = None
        self.compiled = self._compile()
        self._initialize()

    def _tensor(self, desc: TensorDesc | None) -> Any:
        if desc is None:
            return None
        sizes, strides = (U32 * len(desc.sizes))(*desc.sizes), (U32 * len(desc.strides))(*desc.strides)
        flags = TENSOR_FLAG_OWNED_BY_DML if desc.owned_by_dml else 0
        buffer = BUFFER_TENSOR_DESC(
            desc.data_type,
            flags,
            len(desc.sizes),
            ctypes.cast(sizes, _P),
            ctypes.cast(strides, _P),
            desc.total_bytes,
            0,
        )
        tensor = TENSOR_DESC(TENSOR_TYPE_BUFFER, ctypes.cast(ctypes.pointer(buffer), _P))
        self._keep += [sizes, strides, buffer, tensor]
        return ctypes.cast(ctypes.pointer(tensor), _P)

    def _operator(self, node) -> Com:
        _, fields = OPERATORS[node.operator]
        values: dict[str, Any] = {}
        inputs = iter(node.inputs)
        for field, kind in fields:
            if kind in ("in", "in?"):
                values[field] = self._tensor(next(inputs))
            elif kind == "out":
                values[field] = self._tensor(node.outputs[0])
            elif kind == "ins":
                array = (TENSOR_DESC * len(node.inputs))()
                for i, desc in enumerate(node.inputs):
                    array[i] = ctypes.cast(self._tensor(desc), ctypes.POINTER(TENSOR_DESC)).contents
                self._keep.append(array)
                values[field] = ctypes.cast(array, _P)
            elif kind == "uints":
                array = (U32 * len(node.fields[field]))(*node.fields[field])
                self._keep.append(array)
                values[field] = ctypes.cast(array, _P)
            elif kind == "scale_bias":
                found = node.fields.get(field)
                if found is not None:
                    scale_bias = SCALE_BIAS(*found)
                    self._keep.append(scale_bias)
                    values[field] = ctypes.cast(ctypes.pointer(scale_bias), _P)
            elif kind != "activation":
                values[field] = node.fields[field]
        desc = OPERATOR_STRUCTS[node.operator](**values)
        op_desc = OPERATOR_DESC(node.code, ctypes.cast(ctypes.pointer(desc), _P))
        self._keep += [desc, op_desc]
        return self.device.dml.new(8, "CreateOperator", (_P,), ctypes.byref(op_desc), iid="IDMLOperator")

    def _compile(self) -> Com:
        graph = self.graph
        operators = [self._operator(node) for node in graph.nodes]
        try:
            op_nodes = [OPERATOR_NODE(op.ptr, node.name.encode()) for op, node in zip(operators, graph.nodes)]
            nodes = (NODE_DESC * len(op_nodes))(
                *[NODE_DESC(GRAPH_NODE_OPERATOR, ctypes.cast(ctypes.pointer(n), _P)) for n in op_nodes]
            )
            edges = {kind: [] for kind in (EDGE_INPUT, EDGE_OUTPUT, EDGE_INTERMEDIATE)}
            for a, n, s in graph.input_edges:
                edges[EDGE_INPUT].append(INPUT_EDGE(a, n, s, None))
            for n, s, o in graph.output_edges:
                edges[EDGE_OUTPUT].append(OUTPUT_EDGE(n, s, o, None))
            for n1, s1, n2, s2 in graph.intermediate_edges:
                edges[EDGE_INTERMEDIATE].append(INTERMEDIATE_EDGE(n1, s1, n2, s2, None))
            arrays = {}
            for kind, items in edges.items():
                arrays[kind] = (EDGE_DESC * max(len(items), 1))(
                    *[EDGE_DESC(kind, ctypes.cast(ctypes.pointer(e), _P)) for e in items]
                )
            self._keep += [op_nodes, nodes, edges, arrays]
            desc = GRAPH_DESC(
                len(graph.inputs),
                len(graph.output_edges),
                len(op_nodes),
                ctypes.cast(nodes, _P),
                len(edges[EDGE_INPUT]),
                ctypes.cast(arrays[EDGE_INPUT], _P),
                len(edges[EDGE_OUTPUT]),
                ctypes.cast(arrays[EDGE_OUTPUT], _P),
                len(edges[EDGE_INTERMEDIATE]),
                ctypes.cast(arrays[EDGE_INTERMEDIATE], _P),
            )
            return self.device.dml.new(
                17, "CompileGraph", (_P, I32), ctypes.byref(desc), EXECUTION_FLAG_NONE, iid="IDMLCompiledOperator"
            )
        finally:
            for op in operators:  # the compiled operator keeps what it needs
                op.release()

    def _table(self, dispatchable: Com, descriptors: int) -> Com:
        """A binding table over the graph's one shader-visible descriptor heap."""
        if self.heap is None:
            heap_desc = HEAP_DESC(DESCRIPTOR_HEAP_CBV_SRV_UAV, max(descriptors, 1), DESCRIPTOR_HEAP_SHADER_VISIBLE, 0)
            self.heap = self.device.d3d.new(
                14, "CreateDescriptorHeap", (_P,), ctypes.byref(heap_desc), iid="ID3D12DescriptorHeap"
            )
        cpu = self.heap.struct(9, ctypes.c_size_t) if not WINDOWS else self.heap.struct(9, _HANDLE).ptr
        gpu = self.heap.struct(10, U64) if not WINDOWS else self.heap.struct(10, _GPU_HANDLE).ptr
        desc = BINDING_TABLE_DESC(dispatchable.ptr, cpu, gpu, max(descriptors, 1))
        return self.device.dml.new(12, "CreateBindingTable", (_P,), ctypes.byref(desc), iid="IDMLBindingTable")

    def _binding(self, resource: Com | None, size: int) -> Any:
        if resource is None:
            binding = BINDING_DESC(BINDING_NONE, None)
        else:
            buffer = BUFFER_BINDING(resource.ptr, 0, size)
            self._keep.append(buffer)
            binding = BINDING_DESC(BINDING_BUFFER, ctypes.cast(ctypes.pointer(buffer), _P))
        self._keep.append(binding)
        return binding

    def _upload(self, data: np.ndarray, nbytes: int) -> Com:
        staging = self.device.buffer(nbytes, HEAP_UPLOAD)
        target = self.device.buffer(nbytes, HEAP_DEFAULT)
        padded = np.zeros(nbytes, np.uint8)
        padded[: data.nbytes] = np.frombuffer(np.ascontiguousarray(data).tobytes(), np.uint8)
        self.device.write(staging, padded)
        self.device.copy(target, staging, nbytes)
        staging.release()
        return target

    def _initialize(self) -> None:
        device = self.device
        initializer = device.dml.new(
            10,
            "CreateOperatorInitializer",
            (U32, _P),
            1,
            ctypes.byref(ctypes.c_void_p(self.compiled.ptr.value)),
            iid="IDMLOperatorInitializer",
        )
        try:
            init_props = initializer.struct(8, BINDING_PROPERTIES)
            self.props = self.compiled.struct(8, BINDING_PROPERTIES)
            self.descriptors = max(init_props.RequiredDescriptorCount, self.props.RequiredDescriptorCount)
            temporary = max(init_props.TemporaryResourceSize, self.props.TemporaryResourceSize)
            self.temporary = device.buffer(temporary, HEAP_DEFAULT) if temporary else None
            persistent = self.props.PersistentResourceSize
            self.persistent = device.buffer(persistent, HEAP_DEFAULT) if persistent else None
            table = self._table(initializer, self.descriptors)
            constants = (BUFFER_BINDING * max(len(self.graph.inputs), 1))()
            for index, graph_input in self.graph.constants():
                resource = self._upload(graph_input.value, graph_input.desc.total_bytes)
                self._resources.append(resource)
                constants[index] = BUFFER_BINDING(resource.ptr, 0, graph_input.desc.total_bytes)
            array = BUFFER_ARRAY_BINDING(len(self.graph.inputs), ctypes.cast(constants, _P))
            inputs = BINDING_DESC(BINDING_BUFFER_ARRAY, ctypes.cast(ctypes.pointer(array), _P))
            self._keep += [constants, array, inputs]
            table.call(8, (U32, _P), 1, ctypes.byref(inputs))
            # the initializer's one output is the persistent resource (or nothing)
            table.call(9, (U32, _P), 1, ctypes.byref(self._binding(self.persistent, persistent)))
            if self.temporary is not None and init_props.TemporaryResourceSize:
                table.call(10, (_P,), ctypes.byref(self._binding(self.temporary, temporary)))
            self._dispatch(initializer, table)
            table.release()
        finally:
            initializer.release()

    def _dispatch(self, dispatchable: Com, table: Com) -> None:
        heaps = (ctypes.c_void_p * 1)(self.heap.ptr)

        def record(command_list: Com) -> None:
            command_list.call(28, (U32, _P), 1, heaps)
            self.device.recorder.call(8, (_P, _P, _P), command_list.ptr, dispatchable.ptr, table.ptr)

        self.device.submit(record)

    def run(self, *values: Any) -> list[np.ndarray]:
        graph, device = self.graph, self.device
        table = self._table(self.compiled, self.descriptors)
        owned: list[Com] = []
        try:
            bindings = []
            runtime = iter(values)
            for graph_input in graph.inputs:
                if graph_input.value is not None:
                    bindings.append(self._binding(None, 0))  # owned by DirectML since initialization
                    continue
                array = np.ascontiguousarray(next(runtime), dtype=_dtype(graph_input.desc))
                resource = self._upload(array, graph_input.desc.total_bytes)
                owned.append(resource)
                bindings.append(self._binding(resource, graph_input.desc.total_bytes))
            inputs = (BINDING_DESC * max(len(bindings), 1))(*bindings)
            table.call(8, (U32, _P), len(bindings), inputs)
            outputs = [device.buffer(desc.total_bytes, HEAP_DEFAULT) for desc in graph.output_descs]
            owned += outputs
            out_bindings = (BINDING_DESC * len(outputs))(
                *[self._binding(r, d.total_bytes) for r, d in zip(outputs, graph.output_descs)]
            )
            table.call(9, (U32, _P), len(outputs), out_bindings)
            if self.temporary is not None and self.props.TemporaryResourceSize:
                table.call(10, (_P,), ctypes.byref(self._binding(self.temporary, self.props.TemporaryResourceSize)))
            if self.persistent is not None:
                table.call(11, (_P,), ctypes.byref(self._binding(self.persistent, self.props.PersistentResourceSize)))
            self._dispatch(self.compiled, table)
            results = []
            for resource, desc, shape in zip(outputs, graph.output_descs, graph.output_shapes):
                readback = device.buffer(desc.total_bytes, HEAP_READBACK)
                owned.append(readback)
                device.copy(readback, resource, desc.total_bytes)
                data = np.frombuffer(device.read(readback, desc.total_bytes), _dtype(desc), count=int(np.prod(shape)))
                results.append(data.reshape(shape).copy())
            return results
        finally:
            for resource in owned:
                resource.release()
            table.release()
            self._keep.clear()

    def close(self) -> None:
        for resource in [*self._resources, self.temporary, self.persistent]:
            if resource is not None:
                resource.release()
        self._resources.clear()
        self.compiled.release()
        if self.heap is not None:
            self.heap.release()


_HANDLE = _struct("D3D12_CPU_DESCRIPTOR_HANDLE", [("ptr", ctypes.c_size_t)])
_GPU_HANDLE = _struct("D3D12_GPU_DESCRIPTOR_HANDLE", [("ptr", U64)])


def _dtype(desc: TensorDesc) -> np.dtype:
    return np.dtype(np.float16 if desc.itemsize == 2 else np.float32)
