"""The platform layer: a :class:`~onnxplug_nnapi.program.Program` replayed into Android's
``libneuralnetworks.so`` through ``ctypes``, compiled once, executed per call.

**Not exercised in CI** (NNAPI exists on Android only, and no test runs this against a stand-in
library).  It is a direct transcription of the NDK C API (``NeuralNetworks.h``; signatures as
the NDK documents them):

* model: ``ANeuralNetworksModel_create`` → ``addOperand`` per operand (an
  ``ANeuralNetworksOperandType``: type, dimensionCount, dimensions, scale, zeroPoint) →
  ``setOperandValue`` for constants (NNAPI copies values up to 128 bytes and keeps a pointer to
  larger ones, so the program's arrays stay referenced for the model's life) and
  ``setOperandSymmPerChannelQuantParams`` for per-channel filters → ``addOperation`` per
  operation → ``identifyInputsAndOutputs`` → optionally ``relaxComputationFloat32toFloat16`` →
  ``finish``;
* compilation: ``ANeuralNetworksCompilation_create`` (or ``createForDevices`` when devices are
  filtered: ``ANeuralNetworks_getDevice`` / ``ANeuralNetworksDevice_getType``) →
  ``setPreference`` → ``finish``;
* execution: ``ANeuralNetworksExecution_create`` → ``setInput`` / ``setOutput`` on host buffers
  → ``compute`` (API 29; ``startCompute`` + ``ANeuralNetworksEvent_wait`` before) → ``free``.

Inputs and outputs are plain host buffers (``setInput``/``setOutput``); shared ``ANeuralNetworksMemory``
pools for them are not used.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from onnxplug.errors import EPFail

from .program import NO_ERROR, OPERAND, Program, dtype_of

__all__ = ["DEVICE_CPU", "NnapiModel", "load_library"]

LIBRARY = "libneuralnetworks.so"
DEVICE_CPU = 2  # ANEURALNETWORKS_DEVICE_CPU
PREFER_FAST_SINGLE_ANSWER = 1  # ANEURALNETWORKS_PREFER_FAST_SINGLE_ANSWER
_RESULTS = {
    1: "OUT_OF_MEMORY",
    2: "INCOMPLETE",
    3: "UNEXPECTED_NULL",
    4: "BAD_DATA",
    5: "OP_FAILED",
    6: "BAD_STATE",
    7: "UNMAPPABLE",
    8: "OUTPUT_INSUFFICIENT_SIZE",
    9: "UNAVAILABLE_DEVICE",
}


class OperandType(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int32),
        ("dimensionCount", ctypes.c_uint32),
        ("dimensions", ctypes.POINTER(ctypes.c_uint32)),
        ("scale", ctypes.c_float),
        ("zeroPoint", ctypes.c_int32),
    ]


class SymmPerChannelQuantParams(ctypes.Structure):
    _fields_ = [
        ("channelDim", ctypes.c_uint32),
        ("scaleCount", ctypes.c_uint32),
        ("scales", ctypes.POINTER(ctypes.c_float)),
    ]


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_U32P = ctypes.POINTER(ctypes.c_uint32)
_SIGNATURES: dict[str, tuple] = {
    "ANeuralNetworksModel_create": (_PP,),
    "ANeuralNetworksModel_free": (_P,),
    "ANeuralNetworksModel_addOperand": (_P, ctypes.POINTER(OperandType)),
    "ANeuralNetworksModel_setOperandValue": (_P, ctypes.c_int32, _P, ctypes.c_size_t),
    "ANeuralNetworksModel_setOperandSymmPerChannelQuantParams": (
        _P,
        ctypes.c_int32,
        ctypes.POINTER(SymmPerChannelQuantParams),
    ),
    "ANeuralNetworksModel_addOperation": (_P, ctypes.c_int32, ctypes.c_uint32, _U32P, ctypes.c_uint32, _U32P),
    "ANeuralNetworksModel_identifyInputsAndOutputs": (_P, ctypes.c_uint32, _U32P, ctypes.c_uint32, _U32P),
    "ANeuralNetworksModel_relaxComputationFloat32toFloat16": (_P, ctypes.c_bool),
    "ANeuralNetworksModel_finish": (_P,),
    "ANeuralNetworksCompilation_create": (_P, _PP),
    "ANeuralNetworksCompilation_createForDevices": (_P, _PP, ctypes.c_uint32, _PP),
    "ANeuralNetworksCompilation_setPreference": (_P, ctypes.c_int32),
    "ANeuralNetworksCompilation_finish": (_P,),
    "ANeuralNetworksCompilation_free": (_P,),
    "ANeuralNetworksExecution_create": (_P, _PP),
    "ANeuralNetworksExecution_setInput": (_P, ctypes.c_int32, ctypes.POINTER(OperandType), _P, ctypes.c_size_t),
    "ANeuralNetworksExecution_setOutput": (_P, ctypes.c_int32, ctypes.POINTER(OperandType), _P, ctypes.c_size_t),
    "ANeuralNetworksExecution_compute": (_P,),
    "ANeuralNetworksExecution_startCompute": (_P, _PP),
    "ANeuralNetworksEvent_wait": (_P,),
    "ANeuralNetworksEvent_free": (_P,),
    "ANeuralNetworksExecution_free": (_P,),
    "ANeuralNetworks_getDeviceCount": (_U32P,),
    "ANeuralNetworks_getDevice": (ctypes.c_uint32, _PP),
    "ANeuralNetworksDevice_getType": (_P, ctypes.POINTER(ctypes.c_int32)),
}
_VOID = {"ANeuralNetworksModel_free", "ANeuralNetworksCompilation_free", "ANeuralNetworksExecution_free"}
_VOID |= {"ANeuralNetworksEvent_free"}
_LOCK = threading.Lock()
_LIBRARY: Any = None


def load_library() -> Any:
    """``libneuralnetworks.so`` with the signatures above declared (functions of later API
    levels the device lacks are left out; callers check)."""
    global _LIBRARY
    with _LOCK:
        if _LIBRARY is None:
            library = ctypes.CDLL(LIBRARY)
            for name, argtypes in _SIGNATURES.items():
                function = getattr(library, name, None)
                if function is None:
                    continue
                function.argtypes = list(argtypes)
                function.restype = None if name in _VOID else ctypes.c_int
            _LIBRARY = library
        return _LIBRARY


def _check(result: int, what: str) -> None:
    if result != NO_ERROR:
        raise EPFail(f"NNAPI {what} failed: ANEURALNETWORKS_{_RESULTS.get(result, result)}")


def _u32(values: Sequence[int]) -> ctypes.Array:
    return (ctypes.c_uint32 * max(len(values), 1))(*values)


class NnapiModel:
    """One program as a finished ``ANeuralNetworksModel`` and ``ANeuralNetworksCompilation``.

    :param fp16: let NNAPI compute float32 in float16 (onnxruntime's ``NNAPI_FLAG_USE_FP16``).
    :param device_filter: ``None`` (NNAPI chooses), ``"cpu_only"`` or ``"cpu_disabled"``
        (onnxruntime's ``NNAPI_FLAG_CPU_ONLY`` / ``NNAPI_FLAG_CPU_DISABLED``).
    """

    def __init__(self, program: Program, *, fp16: bool = False, device_filter: str | None = None) -> None:
        self.program = program
        self.lib = load_library()
        self._keep: list[Any] = []  # buffers NNAPI keeps pointers to (values over 128 bytes)
        self._lock = threading.Lock()
        self.model = ctypes.c_void_p()
        self.compilation = ctypes.c_void_p()
        try:
            self._build(fp16)
            self._compile(device_filter)
        except BaseException:
            self.close()
            raise

    def _operand_type(self, dims: Sequence[int], code: int, scale: float, zero_point: int) -> OperandType:
        dimensions = _u32(dims)
        self._keep.append(dimensions)
        return OperandType(code, len(dims), dimensions, scale, zero_point)

    def _build(self, fp16: bool) -> None:
        lib, program = self.lib, self.program
        _check(lib.ANeuralNetworksModel_create(ctypes.byref(self.model)), "ANeuralNetworksModel_create")
        for operand in program.operands:
            kind = self._operand_type(operand.dims, operand.code, operand.scale, operand.zero_point)
            _check(lib.ANeuralNetworksModel_addOperand(self.model, ctypes.byref(kind)), f"addOperand {operand.label}")
            if operand.channel_quant is not None:
                channel, scales = operand.channel_quant
                array = (ctypes.c_float * len(scales))(*scales)
                self._keep.append(array)
                params = SymmPerChannelQuantParams(channel, len(scales), array)
                _check(
                    lib.ANeuralNetworksModel_setOperandSymmPerChannelQuantParams(
                        self.model, operand.index, ctypes.byref(params)
                    ),
                    f"setOperandSymmPerChannelQuantParams {operand.label}",
                )
            if operand.value is not None:
                data = np.ascontiguousarray(operand.value)
                self._keep.append(data)
                _check(
                    lib.ANeuralNetworksModel_setOperandValue(self.model, operand.index, data.ctypes.data, data.nbytes),
                    f"setOperandValue {operand.label}",
                )
        for operation in program.operations:
            inputs, outputs = _u32(operation.inputs), _u32(operation.outputs)
            _check(
                lib.ANeuralNetworksModel_addOperation(
                    self.model, operation.code, len(operation.inputs), inputs, len(operation.outputs), outputs
                ),
                f"addOperation {operation.name} (node {operation.node})",
            )
        inputs, outputs = _u32(program.inputs), _u32(program.outputs)
        _check(
            lib.ANeuralNetworksModel_identifyInputsAndOutputs(
                self.model, len(program.inputs), inputs, len(program.outputs), outputs
            ),
            "identifyInputsAndOutputs",
        )
        if fp16:
            _check(lib.ANeuralNetworksModel_relaxComputationFloat32toFloat16(self.model, True), "relax to float16")
        _check(lib.ANeuralNetworksModel_finish(self.model), "ANeuralNetworksModel_finish")

    def _devices(self, device_filter: str) -> list[ctypes.c_void_p]:
        lib = self.lib
        if getattr(lib, "ANeuralNetworks_getDevice", None) is None:
            raise EPFail("NNAPI device selection needs API 29 (ANeuralNetworks_getDevice)")
        count = ctypes.c_uint32(0)
        _check(lib.ANeuralNetworks_getDeviceCount(ctypes.byref(count)), "getDeviceCount")
        chosen = []
        for index in range(count.value):
            device, kind = ctypes.c_void_p(), ctypes.c_int32(0)
            _check(lib.ANeuralNetworks_getDevice(index, ctypes.byref(device)), "getDevice")
            _check(lib.ANeuralNetworksDevice_getType(device, ctypes.byref(kind)), "ANeuralNetworksDevice_getType")
            if (kind.value == DEVICE_CPU) == (device_filter == "cpu_only"):
                chosen.append(device)
        if not chosen:
            raise EPFail(f"no NNAPI device fits {device_filter}")
        return chosen

    def _compile(self, device_filter: str | None) -> None:
        lib = self.lib
        if device_filter is None:
            _check(
                lib.ANeuralNetworksCompilation_create(self.model, ctypes.byref(self.compilation)),
                "ANeuralNetworksCompilation_create",
            )
        else:
            devices = self._devices(device_filter)
            array = (ctypes.c_void_p * len(devices))(*[d.value for d in devices])
            _check(
                lib.ANeuralNetworksCompilation_createForDevices(
                    self.model, array, len(devices), ctypes.byref(self.compilation)
                ),
                "ANeuralNetworksCompilation_createForDevices",
            )
        _check(lib.ANeuralNetworksCompilation_setPreference(self.compilation, PREFER_FAST_SINGLE_ANSWER), "preference")
        _check(lib.ANeuralNetworksCompilation_finish(self.compilation), "ANeuralNetworksCompilation_finish")

    def run(self, *values: Any) -> list[np.ndarray]:
        """Execute on host arrays (in the program's input order); the outputs as new arrays."""
        lib, program = self.lib, self.program
        inputs = []
        for position, (index, value) in enumerate(zip(program.inputs, values)):
            operand = program.operand(index)
            array = np.ascontiguousarray(value, dtype=dtype_of(operand.code))
            if tuple(array.shape) != operand.dims:
                raise EPFail(
                    f"NNAPI input '{program.input_names[position]}' was compiled for shape {list(operand.dims)}, "
                    f"given {list(array.shape)}"
                )
            inputs.append(array)
        outputs = [np.empty(program.operand(i).dims, dtype_of(program.operand(i).code)) for i in program.outputs]
        execution = ctypes.c_void_p()
        with self._lock:  # an execution is single-use; the compilation is shared
            _check(lib.ANeuralNetworksExecution_create(self.compilation, ctypes.byref(execution)), "Execution_create")
            try:
                for position, array in enumerate(inputs):
                    _check(
                        lib.ANeuralNetworksExecution_setInput(
                            execution, position, None, array.ctypes.data, array.nbytes
                        ),
                        f"setInput {program.input_names[position]}",
                    )
                for position, array in enumerate(outputs):
                    _check(
                        lib.ANeuralNetworksExecution_setOutput(
                            execution, position, None, array.ctypes.data, array.nbytes
                        ),
                        f"setOutput {program.output_names[position]}",
                    )
                self._compute(execution)
            finally:
                lib.ANeuralNetworksExecution_free(execution)
        return [
            out.astype(np.bool_) if program.operand(i).code == OPERAND["TENSOR_BOOL8"] else out
            for i, out in zip(program.outputs, outputs)
        ]

    def _compute(self, execution: ctypes.c_void_p) -> None:
        lib = self.lib
        if getattr(lib, "ANeuralNetworksExecution_compute", None) is not None:
            _check(lib.ANeuralNetworksExecution_compute(execution), "ANeuralNetworksExecution_compute")
            return
        event = ctypes.c_void_p()
        _check(lib.ANeuralNetworksExecution_startCompute(execution, ctypes.byref(event)), "startCompute")
        try:
            _check(lib.ANeuralNetworksEvent_wait(event), "ANeuralNetworksEvent_wait")
        finally:
            lib.ANeuralNetworksEvent_free(event)

    def close(self) -> None:
        if self.compilation:
            self.lib.ANeuralNetworksCompilation_free(self.compilation)
            self.compilation = ctypes.c_void_p()
        if self.model:
            self.lib.ANeuralNetworksModel_free(self.model)
            self.model = ctypes.c_void_p()
        self._keep.clear()
