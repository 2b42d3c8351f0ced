"""A DirectML operator graph as plain data: what ``IDMLDevice1::CompileGraph`` is given, per partition.

The translator (:mod:`onnxplug_directml.translate`) writes a :class:`DmlGraph`: the graph inputs
(the partition's inputs, then its constants, which DirectML owns and takes at initialization),
one :class:`DmlNode` per DirectML operator with the fields of its ``DML_*_OPERATOR_DESC``, and
the input, intermediate and output edges of ``DML_GRAPH_DESC``.  The platform layer
(:mod:`onnxplug_directml.d3d12`) turns each node into the ctypes structure its :data:`OPERATORS`
entry describes.  Keeping the description apart from COM is what lets it be checked anywhere.

Numeric codes and field orders are DirectML's (``DirectML.h``, Windows SDK; the same values as
the Win32 metadata that ``win32more`` generates its ``DirectML`` module from): ``DML_OPERATOR_TYPE``,
``DML_TENSOR_DATA_TYPE``, ``DML_CONVOLUTION_MODE``/``DIRECTION``, ``DML_MATRIX_TRANSFORM``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "DATA_TYPES",
    "OPERATORS",
    "DmlGraph",
    "DmlNode",
    "GraphInput",
    "TensorDesc",
    "packed_strides",
]

#: ``DML_TENSOR_DATA_TYPE`` of the element types the translator uses.
DATA_TYPES = {np.dtype(np.float32): 1, np.dtype(np.float16): 2}

# Field kinds of an operator description, in the structure's order:
#   "in" / "in?"  a DML_TENSOR_DESC* of an input slot (optional: NULL when absent)
#   "ins"         a DML_TENSOR_DESC array over all input slots (JOIN), its count in the field before
#   "out"         a DML_TENSOR_DESC* of the output slot
#   "uint", "int", "float", "bool"   scalars (BOOL is a 4-byte int)
#   "uints"       a UINT* array (the length is the DimensionCount field)
#   "scale_bias"  a DML_SCALE_BIAS* (NULL or (scale, bias))
#   "activation"  a DML_OPERATOR_DESC* for a fused activation (always NULL here)
_UNARY = (("InputTensor", "in"), ("OutputTensor", "out"), ("ScaleBias", "scale_bias"))
_BINARY = (("ATensor", "in"), ("BTensor", "in"), ("OutputTensor", "out"))
_ACTIVATION = (("InputTensor", "in"), ("OutputTensor", "out"))
_WINDOW = (
    ("InputTensor", "in"),
    ("OutputTensor", "out"),
    ("DimensionCount", "uint"),
    ("Strides", "uints"),
    ("WindowSize", "uints"),
    ("StartPadding", "uints"),
    ("EndPadding", "uints"),
)

#: DirectML operator name → (``DML_OPERATOR_TYPE``, the fields of its ``DML_*_OPERATOR_DESC``).
OPERATORS: dict[str, tuple[int, tuple[tuple[str, str], ...]]] = {
    "ELEMENT_WISE_IDENTITY": (1, _UNARY),
    "ELEMENT_WISE_ABS": (2, _UNARY),
    "ELEMENT_WISE_ADD": (4, _BINARY),
    "ELEMENT_WISE_CLIP": (8, _UNARY + (("Min", "float"), ("Max", "float"))),
    "ELEMENT_WISE_DIVIDE": (10, _BINARY),
    "ELEMENT_WISE_EXP": (11, _UNARY),
    "ELEMENT_WISE_FLOOR": (12, _UNARY),
    "ELEMENT_WISE_LOG": (13, _UNARY),
    "ELEMENT_WISE_MAX": (21, _BINARY),
    "ELEMENT_WISE_MIN": (23, _BINARY),
    "ELEMENT_WISE_MULTIPLY": (24, _BINARY),
    "ELEMENT_WISE_SQRT": (29, _UNARY),
    "ELEMENT_WISE_SUBTRACT": (30, _BINARY),
    "ACTIVATION_ELU": (35, _ACTIVATION + (("Alpha", "float"),)),
    "ACTIVATION_LEAKY_RELU": (39, _ACTIVATION + (("Alpha", "float"),)),
    "ACTIVATION_RELU": (44, _ACTIVATION),
    "ACTIVATION_SIGMOID": (47, _ACTIVATION),
    "ACTIVATION_SOFTMAX": (48, _ACTIVATION),
    "ACTIVATION_TANH": (51, _ACTIVATION),
    "CONVOLUTION": (
        53,
        (
            ("InputTensor", "in"),
            ("FilterTensor", "in"),
            ("BiasTensor", "in?"),
            ("OutputTensor", "out"),
            ("Mode", "int"),
            ("Direction", "int"),
            ("DimensionCount", "uint"),
            ("Strides", "uints"),
            ("Dilations", "uints"),
            ("StartPadding", "uints"),
            ("EndPadding", "uints"),
            ("OutputPadding", "uints"),
            ("GroupCount", "uint"),
            ("FusedActivation", "activation"),
        ),
    ),
    "GEMM": (
        54,
        (
            ("ATensor", "in"),
            ("BTensor", "in"),
            ("CTensor", "in?"),
            ("OutputTensor", "out"),
            ("TransA", "int"),
            ("TransB", "int"),
            ("Alpha", "float"),
            ("Beta", "float"),
            ("FusedActivation", "activation"),
        ),
    ),
    "AVERAGE_POOLING": (56, _WINDOW + (("IncludePadding", "bool"),)),
    "MAX_POOLING": (58, _WINDOW),
    "JOIN": (63, (("InputCount", "uint"), ("InputTensors", "ins"), ("OutputTensor", "out"), ("Axis", "uint"))),
    "BATCH_NORMALIZATION": (
        72,
        (
            ("InputTensor", "in"),
            ("MeanTensor", "in"),
            ("VarianceTensor", "in"),
            ("ScaleTensor", "in"),
            ("BiasTensor", "in"),
            ("OutputTensor", "out"),
            ("Spatial", "bool"),
            ("Epsilon", "float"),
            ("FusedActivation", "activation"),
        ),
    ),
    "LOCAL_RESPONSE_NORMALIZATION": (
        74,
        (
            ("InputTensor", "in"),
            ("OutputTensor", "out"),
            ("CrossChannel", "bool"),
            ("LocalSize", "uint"),
            ("Alpha", "float"),
            ("Beta", "float"),
            ("Bias", "float"),
        ),
    ),
}

CONVOLUTION_MODE_CROSS_CORRELATION = 1
CONVOLUTION_DIRECTION_FORWARD = 0
MATRIX_TRANSFORM_NONE, MATRIX_TRANSFORM_TRANSPOSE = 0, 1


def packed_strides(sizes: Sequence[int]) -> tuple[int, ...]:
    """Element strides of a C-order tensor of ``sizes``."""
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= int(size)
    return tuple(reversed(strides))


@dataclasses.dataclass(frozen=True)
class TensorDesc:
    """A ``DML_BUFFER_TENSOR_DESC``: element type, sizes and strides (in elements).

    ``strides`` with zeros is a broadcast view; the bytes the buffer needs are computed from the
    furthest element (``TotalTensorSizeInBytes``, rounded up to 4 as ``DMLCalcBufferTensorSize``).
    """

    data_type: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    owned_by_dml: bool = False

    @property
    def itemsize(self) -> int:
        return 2 if self.data_type == DATA_TYPES[np.dtype(np.float16)] else 4

    @property
    def total_bytes(self) -> int:
        last = sum((size - 1) * stride for size, stride in zip(self.sizes, self.strides)) + 1
        return (last * self.itemsize + 3) & ~3

    @classmethod
    def packed(cls, data_type: int, sizes: Sequence[int], owned_by_dml: bool = False) -> TensorDesc:
        sizes = tuple(int(s) for s in sizes)
        return cls(data_type, sizes, packed_strides(sizes), owned_by_dml)


@dataclasses.dataclass(frozen=True)
class GraphInput:
    """A graph input: a partition input (``value`` is None) or a constant DirectML owns."""

    name: str
    desc: TensorDesc
    value: np.ndarray | None = None


@dataclasses.dataclass
class DmlNode:
    """One ``DML_OPERATOR_GRAPH_NODE_DESC``: the operator, its input and output tensor descs (by
    slot, ``None`` for an absent optional input) and its scalar and array fields."""

    operator: str
    name: str
    inputs: list[TensorDesc | None]
    outputs: list[TensorDesc]
    fields: dict[str, object]
    node: str  # the ONNX node it comes from

    @property
    def code(self) -> int:
        return OPERATORS[self.operator][0]


@dataclasses.dataclass(frozen=True)
class DmlGraph:
    """A whole ``DML_GRAPH_DESC`` and the names of the partition's inputs and outputs.

    :ivar input_edges: ``(graph input, node, input slot)``
    :ivar intermediate_edges: ``(node, output slot, node, input slot)``
    :ivar output_edges: ``(node, output slot, graph output)``
    """

    inputs: tuple[GraphInput, ...]
    nodes: tuple[DmlNode, ...]
    input_edges: tuple[tuple[int, int, int], ...]
    intermediate_edges: tuple[tuple[int, int, int, int], ...]
    output_edges: tuple[tuple[int, int, int], ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    output_descs: tuple[TensorDesc, ...]
    output_shapes: tuple[tuple[int, ...], ...]

    def operators(self) -> list[str]:
        return [node.operator for node in self.nodes]

    def constants(self) -> list[tuple[int, GraphInput]]:
        return [(i, g) for i, g in enumerate(self.inputs) if g.value is not None]

    def elements(self, desc: TensorDesc) -> int:
        return math.prod(desc.sizes)
