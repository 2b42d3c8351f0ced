"""An NNAPI program as plain data: the operands and operations an ``ANeuralNetworksModel`` is built from.

The translator (:mod:`onnxplug_nnapi.translate`) writes a :class:`Program`; the ctypes layer
(:mod:`onnxplug_nnapi.ndk`) replays it call by call into ``libneuralnetworks.so``
(``ANeuralNetworksModel_addOperand`` per operand, ``setOperandValue`` for constants,
``addOperation`` per operation, ``identifyInputsAndOutputs``).  Keeping the description separate
from the library is what lets the translation be checked on any machine.

The numeric codes are the NDK's, from ``NeuralNetworks.h`` (Android NDK; AOSP
``frameworks/ml/nn/runtime/include/NeuralNetworks.h``, the ``OperandCode``, ``OperationCode``,
``FuseCode`` and ``ResultCode`` enums).  Those enums are frozen by the NDK's stability rules, so
they are safe to restate here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

__all__ = ["OPERAND", "OPERATION", "Operand", "Operation", "Program", "ProgramBuilder", "dtype_of"]


class _Codes(dict):
    """A name → code table with the reverse lookup used in messages and tests."""

    def name(self, code: int) -> str:
        for key, value in self.items():
            if value == code:
                return key
        return str(code)


#: ``OperandCode``: scalar and tensor operand types.
OPERAND = _Codes(
    FLOAT32=0,
    INT32=1,
    UINT32=2,
    TENSOR_FLOAT32=3,
    TENSOR_INT32=4,
    TENSOR_QUANT8_ASYMM=5,
    BOOL=6,
    TENSOR_QUANT16_SYMM=7,
    TENSOR_FLOAT16=8,
    TENSOR_BOOL8=9,
    TENSOR_QUANT8_SYMM_PER_CHANNEL=11,
    TENSOR_QUANT16_ASYMM=12,
    TENSOR_QUANT8_SYMM=13,
    TENSOR_QUANT8_ASYMM_SIGNED=14,
)

#: ``OperationCode``: the operations the translator emits (a subset of the enum).
OPERATION = _Codes(
    ADD=0,
    AVERAGE_POOL_2D=1,
    CONCATENATION=2,
    CONV_2D=3,
    DEPTHWISE_CONV_2D=4,
    DEPTH_TO_SPACE=5,
    DEQUANTIZE=6,
    FLOOR=8,
    FULLY_CONNECTED=9,
    LOCAL_RESPONSE_NORMALIZATION=13,
    LOGISTIC=14,
    MAX_POOL_2D=17,
    MUL=18,
    RELU=19,
    RELU1=20,
    RELU6=21,
    RESHAPE=22,
    RESIZE_BILINEAR=23,
    SOFTMAX=25,
    TANH=28,
    DIV=30,
    MEAN=31,
    PAD=32,
    STRIDED_SLICE=35,
    SUB=36,
    TRANSPOSE=37,
    ABS=38,
    CAST=45,
    EXP=49,
    GATHER=51,
    GROUPED_CONV_2D=55,
    LOG=60,
    MAXIMUM=65,
    MINIMUM=66,
    NEG=67,
    PAD_V2=69,
    POW=70,
    PRELU=71,
    QUANTIZE=72,
    SIN=85,
    SPLIT=87,
    SQRT=88,
    RESIZE_NEAREST_NEIGHBOR=94,
    ELU=98,
    BATCH_MATMUL=102,
)

#: ``FuseCode``: the activation fused into an operation (the translator fuses none).
FUSED_NONE = 0
#: ``ResultCode`` 0.
NO_ERROR = 0

_SCALARS = {OPERAND["FLOAT32"]: np.float32, OPERAND["INT32"]: np.int32, OPERAND["UINT32"]: np.uint32}
_TENSORS = {
    OPERAND["TENSOR_FLOAT32"]: np.float32,
    OPERAND["TENSOR_FLOAT16"]: np.float16,
    OPERAND["TENSOR_INT32"]: np.int32,
    OPERAND["TENSOR_QUANT8_ASYMM"]: np.uint8,
    OPERAND["TENSOR_QUANT8_ASYMM_SIGNED"]: np.int8,
    OPERAND["TENSOR_QUANT8_SYMM_PER_CHANNEL"]: np.int8,
    OPERAND["TENSOR_QUANT8_SYMM"]: np.int8,
    OPERAND["TENSOR_BOOL8"]: np.bool_,
}


def dtype_of(code: int) -> np.dtype:
    """The numpy element type of an operand code (NNAPI ``BOOL`` scalars are one byte)."""
    if code == OPERAND["BOOL"]:
        return np.dtype(np.uint8)
    found = _SCALARS.get(code, _TENSORS.get(code))
    if found is None:
        raise KeyError(f"no element type for operand code {code}")
    return np.dtype(found)


@dataclasses.dataclass(frozen=True)
class Operand:
    """One ``ANeuralNetworksOperandType`` (type, dimensions, scale, zero point), and its value
    when it is a constant.

    :ivar value: the constant's data exactly as ``setOperandValue`` receives it (C order, the
        operand's element type), or ``None`` for an input or an intermediate.
    :ivar channel_quant: ``(channelDim, scales)`` for ``TENSOR_QUANT8_SYMM_PER_CHANNEL``
        (``setOperandSymmPerChannelQuantParams``).
    :ivar label: the ONNX value (or the role) it stands for, for messages and tests.
    """

    index: int
    code: int
    dims: tuple[int, ...]
    scale: float = 0.0
    zero_point: int = 0
    value: np.ndarray | None = None
    channel_quant: tuple[int, tuple[float, ...]] | None = None
    label: str = ""

    @property
    def type_name(self) -> str:
        return OPERAND.name(self.code)

    @property
    def is_scalar(self) -> bool:
        return self.code in _SCALARS or self.code == OPERAND["BOOL"]

    def scalar(self) -> float | int | bool:
        """A scalar constant's value (tests and messages)."""
        if self.value is None or not self.is_scalar:
            raise ValueError(f"operand {self.index} ({self.label}) is not a scalar constant")
        item = self.value.reshape(-1)[0].item()
        return bool(item) if self.code == OPERAND["BOOL"] else item


@dataclasses.dataclass(frozen=True)
class Operation:
    """One ``ANeuralNetworksModel_addOperation``: the code and the operand indices."""

    code: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    node: str  # the ONNX node it comes from

    @property
    def name(self) -> str:
        return OPERATION.name(self.code)


@dataclasses.dataclass(frozen=True)
class Program:
    """A whole ``ANeuralNetworksModel``: operands, operations in order, and the model's inputs
    and outputs (operand indices in the partition's call and return order)."""

    operands: tuple[Operand, ...]
    operations: tuple[Operation, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    layout: str  # "nhwc" or "nchw": how the spatial operations were laid out

    def operand(self, index: int) -> Operand:
        return self.operands[index]

    def ops(self) -> list[str]:
        return [operation.name for operation in self.operations]


class ProgramBuilder:
    """Appends operands and operations; hands out indices in the order NNAPI will assign them."""

    def __init__(self) -> None:
        self.operands: list[Operand] = []
        self.operations: list[Operation] = []

    def tensor(self, code: int, dims: Sequence[int], *, scale=0.0, zero_point=0, label="", channel_quant=None) -> int:
        operand = Operand(
            len(self.operands),
            code,
            tuple(int(d) for d in dims),
            float(scale),
            int(zero_point),
            label=label,
            channel_quant=channel_quant,
        )
        self.operands.append(operand)
        return operand.index

    def constant(self, code: int, data, *, scale=0.0, zero_point=0, label="", channel_quant=None) -> int:
        dtype = dtype_of(code)
        array = np.ascontiguousarray(np.asarray(data).astype(dtype, copy=False))
        dims = () if code in _SCALARS or code == OPERAND["BOOL"] else array.shape
        operand = Operand(
            len(self.operands),
            code,
            tuple(int(d) for d in dims),
            float(scale),
            int(zero_point),
            array,
            channel_quant,
            label,
        )
        self.operands.append(operand)
        return operand.index

    def int32(self, value: int, label: str = "") -> int:
        return self.constant(OPERAND["INT32"], np.int32(value), label=label)

    def float32(self, value: float, label: str = "") -> int:
        return self.constant(OPERAND["FLOAT32"], np.float32(value), label=label)

    def bool(self, value: bool, label: str = "") -> int:
        return self.constant(OPERAND["BOOL"], np.uint8(bool(value)), label=label)

    def int32s(self, values: Sequence[int], label: str = "") -> int:
        return self.constant(OPERAND["TENSOR_INT32"], np.asarray(values, dtype=np.int32).reshape(-1), label=label)

    def operation(self, name: str, inputs: Sequence[int], outputs: Sequence[int], node: str) -> None:
        self.operations.append(Operation(OPERATION[name], tuple(inputs), tuple(outputs), node))

    def like(self, index: int, dims: Sequence[int] | None = None, label: str = "") -> int:
        """A new intermediate operand of the same type and quantization as ``index``."""
        source = self.operands[index]
        return self.tensor(
            source.code,
            source.dims if dims is None else dims,
            scale=source.scale,
            zero_point=source.zero_point,
            label=label or source.label,
        )
