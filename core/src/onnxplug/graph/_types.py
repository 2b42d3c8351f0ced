"""ONNX element types, numpy dtypes and onnxruntime's type strings, in one place.

onnxruntime prints types as ``tensor(float)``, ``seq(tensor(int64))``, ``map(int64,tensor(float))``
and ``optional(...)``; users compare against those strings, so they are reproduced exactly.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

__all__ = [
    "ELEMENT_NAMES",
    "element_name",
    "np_dtype",
    "onnx_element_type",
    "type_string",
    "shape_list",
    "static_shape",
]

# onnxruntime's spelling of each TensorProto element type.
ELEMENT_NAMES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "float",
    onnx.TensorProto.UINT8: "uint8",
    onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.INT16: "int16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int64",
    onnx.TensorProto.STRING: "string",
    onnx.TensorProto.BOOL: "bool",
    onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.DOUBLE: "double",
    onnx.TensorProto.UINT32: "uint32",
    onnx.TensorProto.UINT64: "uint64",
    onnx.TensorProto.COMPLEX64: "complex64",
    onnx.TensorProto.COMPLEX128: "complex128",
    onnx.TensorProto.BFLOAT16: "bfloat16",
    onnx.TensorProto.FLOAT8E4M3FN: "float8e4m3fn",
    onnx.TensorProto.FLOAT8E4M3FNUZ: "float8e4m3fnuz",
    onnx.TensorProto.FLOAT8E5M2: "float8e5m2",
    onnx.TensorProto.FLOAT8E5M2FNUZ: "float8e5m2fnuz",
    onnx.TensorProto.UINT4: "uint4",
    onnx.TensorProto.INT4: "int4",
    onnx.TensorProto.FLOAT4E2M1: "float4e2m1",
}
for _name, _code in (("FLOAT8E8M0", "float8e8m0"), ("UINT2", "uint2"), ("INT2", "int2")):
    if hasattr(onnx.TensorProto, _name):
        ELEMENT_NAMES[getattr(onnx.TensorProto, _name)] = _code

_NP_BY_ELEMENT: dict[int, np.dtype] = {}
for _elem in ELEMENT_NAMES:
    if _elem == onnx.TensorProto.STRING:
        _NP_BY_ELEMENT[_elem] = np.dtype(object)
        continue
    try:
        _NP_BY_ELEMENT[_elem] = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(_elem))
    except (KeyError, TypeError, ValueError):  # an element type this onnx cannot map
        pass

_ELEMENT_BY_NP: dict[np.dtype, int] = {}
for _elem, _dt in _NP_BY_ELEMENT.items():
    _ELEMENT_BY_NP.setdefault(_dt, _elem)
_ELEMENT_BY_NP[np.dtype(object)] = onnx.TensorProto.STRING


def element_name(elem_type: int) -> str:
    """onnxruntime's name for a TensorProto element type (``1`` → ``"float"``)."""
    return ELEMENT_NAMES.get(int(elem_type), f"unknown({int(elem_type)})")


def np_dtype(elem_type: int) -> np.dtype:
    """The numpy dtype that holds a TensorProto element type (strings are ``object``)."""
    try:
        return _NP_BY_ELEMENT[int(elem_type)]
    except KeyError:
        raise ValueError(f"element type {int(elem_type)} has no numpy dtype") from None


def onnx_element_type(dtype: np.dtype) -> int | None:
    """The TensorProto element type of a numpy dtype, ``None`` if ONNX has none.

    Unicode and byte-string arrays map to STRING, like onnxruntime accepts them.
    """
    dtype = np.dtype(dtype)
    if dtype.kind in "US":
        return onnx.TensorProto.STRING
    return _ELEMENT_BY_NP.get(dtype)


def type_string(type_proto: onnx.TypeProto | None) -> str:
    """onnxruntime's type string for a TypeProto, e.g. ``seq(tensor(int64))``.

    Works from the proto rather than onnx-ir's types because onnx-ir has no map type.
    """
    if type_proto is None:
        return "tensor(undefined)"
    kind = type_proto.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({element_name(type_proto.tensor_type.elem_type)})"
    if kind == "sparse_tensor_type":
        return f"sparse_tensor({element_name(type_proto.sparse_tensor_type.elem_type)})"
    if kind == "sequence_type":
        return f"seq({type_string(type_proto.sequence_type.elem_type)})"
    if kind == "optional_type":
        return f"optional({type_string(type_proto.optional_type.elem_type)})"
    if kind == "map_type":
        key = element_name(type_proto.map_type.key_type)
        return f"map({key},{type_string(type_proto.map_type.value_type)})"
    return "tensor(undefined)"


def shape_list(type_proto: onnx.TypeProto | None) -> list:
    """The shape as onnxruntime's NodeArg reports it.

    Ints for known dims, the symbol for ``dim_param``, ``None`` for unknown ones, and ``[]`` for
    an unranked tensor or a non-tensor type (an ``optional(tensor)`` reports the inner shape).
    """
    if type_proto is None:
        return []
    kind = type_proto.WhichOneof("value")
    if kind == "optional_type":
        return shape_list(type_proto.optional_type.elem_type)
    if kind not in ("tensor_type", "sparse_tensor_type"):
        return []
    tensor = getattr(type_proto, kind)
    if not tensor.HasField("shape"):
        return []
    dims: list = []
    for dim in tensor.shape.dim:
        which = dim.WhichOneof("value")
        if which == "dim_value" and dim.dim_value >= 0:
            dims.append(int(dim.dim_value))
        elif which == "dim_param":
            dims.append(dim.dim_param)
        else:
            dims.append(None)
    return dims


def ir_type_string(value_type: object) -> str | None:
    """The type string of an onnx-ir type object, ``None`` when unknown."""
    if value_type is None:
        return None
    kind = type(value_type).__name__
    if kind == "TensorType":
        return f"tensor({element_name(value_type.dtype)})"
    if kind == "SparseTensorType":
        return f"sparse_tensor({element_name(value_type.dtype)})"
    inner = ir_type_string(getattr(value_type, "elem_type", None))
    if inner is None:
        return None
    if kind == "SequenceType":
        return f"seq({inner})"
    if kind == "OptionalType":
        return f"optional({inner})"
    return None


def static_shape(value: ir.Value | None) -> tuple[int, ...] | None:
    """A tensor value's shape where every dimension is a known non-negative int, else ``None``
    (what constant folding and the plan may compute with or allocate from)."""
    if value is None or value.shape is None or not isinstance(value.type, ir.TensorType):
        return None
    dims = tuple(value.shape)
    if not all(isinstance(d, int) and d >= 0 for d in dims):
        return None
    return dims  # type: ignore[return-value]
