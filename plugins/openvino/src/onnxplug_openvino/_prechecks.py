"""What OpenVINO's CPU plugin cannot take whatever its ONNX frontend says: element types,
dynamic ranks, other domains, and the patterns it converts but computes differently from the
ONNX reference (each found by a test, each declined with its reason)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["SUPPORTED_ELEMENTS", "has_rank", "precheck"]

#: Element types OpenVINO's ONNX frontend and CPU plugin both handle.  Not float64 (the CPU plugin
#: computes it in float32) nor bfloat16 (wrong results in the ONNX conformance cases).
SUPPORTED_ELEMENTS = frozenset(
    {
        TensorProto.FLOAT,
        TensorProto.FLOAT16,
        TensorProto.INT8,
        TensorProto.INT16,
        TensorProto.INT32,
        TensorProto.INT64,
        TensorProto.UINT8,
        TensorProto.UINT16,
        TensorProto.UINT32,
        TensorProto.UINT64,
        TensorProto.BOOL,
    }
)

#: Domains OpenVINO has no conversion for (they stay with other providers).
_FOREIGN_DOMAINS = {
    "ai.onnx.ml": "ai.onnx.ml ops have no OpenVINO conversion",
    "ai.onnx.preview.training": "training ops have no OpenVINO conversion",
}

#: Ops OpenVINO converts but computes differently from the ONNX spec (found with the ONNX node
#: conformance cases, OpenVINO 2026.4): declined whatever their inputs, so that results never
#: change when OpenVINO is added.
KNOWN_MISMATCHES: dict[str, str] = {
    "BitShift": "OpenVINO's BitShift differs from ONNX for negative values and shifts past the width",
    "DFT": "OpenVINO's DFT differs from ONNX (onesided/inverse outputs and shapes)",
    "DynamicQuantizeLinear": "OpenVINO's DynamicQuantizeLinear rounds differently from ONNX",
    "NonMaxSuppression": "OpenVINO's NonMaxSuppression differs from ONNX at the IoU threshold boundary",
    "TopK": "OpenVINO's TopK does not order equal values by index as ONNX requires",
    "Attention": "OpenVINO's Attention differs from ONNX (windows, causal masks with past, bfloat16)",
    "ReduceMax": "OpenVINO's ReduceMax gives -FLT_MAX for -inf inputs and may drop NaN",
    "ReduceMin": "OpenVINO's ReduceMin gives FLT_MAX for inf inputs and may drop NaN",
}

#: onnxruntime's com.microsoft quantized element-wise ops (what its QOperator quantizer writes
#: around QLinearConv: a YOLO-style model's SiLU, residual Add, Concat and detection head).
#: OpenVINO converts them but its results differ from onnxruntime's kernels — by up to the whole
#: 8-bit range for int8 Sigmoid, LeakyRelu, Mul, AveragePool and Softmax, by one step for Add,
#: Concat and uint8 Sigmoid/Softmax (OpenVINO 2026.4, tests/quantization/test_openvino_quantized.py)
#: — and the errors add up through a network: the YOLO model's boxes came back off by 76 pixels.
KNOWN_CONTRIB_MISMATCHES: dict[str, str] = {
    op: f"OpenVINO's com.microsoft {op} computes differently from onnxruntime's kernel"
    for op in (
        "QLinearSigmoid",
        "QLinearLeakyRelu",
        "QLinearMul",
        "QLinearAdd",
        "QLinearConcat",
        "QLinearAveragePool",
        "QLinearSoftmax",
    )
}

_RESIZE_LIMITS = (
    ("coordinate_transformation_mode", b"align_corners", "align_corners coordinates"),
    ("antialias", 1, "antialias"),
    ("exclude_outside", 1, "exclude_outside"),
)


def _attribute(node: onnx.NodeProto, name: str, default=None):
    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default


def _dims(types: dict[str, onnx.TypeProto], name: str) -> list[int | None] | None:
    type_proto = types.get(name)
    if type_proto is None or not has_rank(type_proto):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in type_proto.tensor_type.shape.dim]


def _pool_drops_last_window(node: onnx.NodeProto, types: dict[str, onnx.TypeProto]) -> bool:
    """ceil_mode pooling where ONNX drops a last window that would start in the end padding
    (OpenVINO keeps it); unknown shapes count as dropping."""
    dims = _dims(types, node.input[0])
    kernel = list(_attribute(node, "kernel_shape", []))
    if dims is None or any(d is None for d in dims[2:]) or len(dims) - 2 != len(kernel):
        return True
    spatial = len(kernel)
    strides = list(_attribute(node, "strides", [1] * spatial))
    dilations = list(_attribute(node, "dilations", [1] * spatial))
    pads = list(_attribute(node, "pads", [0] * 2 * spatial))
    if _attribute(node, "auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return True
    for axis in range(spatial):
        size, begin, end = dims[2 + axis], pads[axis], pads[spatial + axis]
        span = (kernel[axis] - 1) * dilations[axis] + 1
        count = -(-(size + begin + end - span) // strides[axis]) + 1
        if (count - 1) * strides[axis] >= size + begin:
            return True
    return False


def _per_channel_weight_scales(node: onnx.NodeProto, constants: dict[str, TensorProto]) -> bool:
    """Whether a QLinearConv's weight scale (input 4) may differ between output channels: a
    constant with more than one distinct value, or not a constant of a single element."""
    if len(node.input) < 5:
        return False
    tensor = constants.get(node.input[4])
    if tensor is None:
        return True
    values = numpy_helper.to_array(tensor).ravel()
    return values.size > 1 and bool((values != values[0]).any())


def _mismatch(node: onnx.NodeProto, types: dict[str, onnx.TypeProto], constants: dict[str, TensorProto]) -> str | None:
    """Why OpenVINO would compute ``node`` differently from ONNX, or ``None``."""
    op = node.op_type
    if op in KNOWN_MISMATCHES:
        return KNOWN_MISMATCHES[op]
    if op in ("GRU", "LSTM", "RNN"):
        if _attribute(node, "layout", 0) == 1:
            return f"OpenVINO's {op} differs from ONNX with layout=1 (batch first)"
        if op == "LSTM" and len(node.input) > 7 and node.input[7]:
            return "OpenVINO's LSTM differs from ONNX with peepholes"
    if op in ("MaxPool", "AveragePool", "LpPool") and _attribute(node, "ceil_mode", 0) == 1:
        if _pool_drops_last_window(node, types):
            return "ceil_mode where ONNX drops the last window (it would start in the padding); OpenVINO keeps it"
    if op == "Resize":
        for name, value, label in _RESIZE_LIMITS:
            if _attribute(node, name) in (value, value.decode() if isinstance(value, bytes) else value):
                return f"OpenVINO's Resize differs from ONNX with {label}"
        if _attribute(node, "keep_aspect_ratio_policy", b"stretch") not in (b"stretch", "stretch"):
            return "OpenVINO's Resize differs from ONNX with keep_aspect_ratio_policy other than stretch"
        if _attribute(node, "mode") in (b"cubic", "cubic") and _attribute(node, "cubic_coeff_a", -0.75) != -0.75:
            return "OpenVINO's cubic Resize differs from ONNX with cubic_coeff_a other than -0.75"
    if op == "RoiAlign" and _attribute(node, "mode", b"avg") in (b"max", "max"):
        return "OpenVINO's RoiAlign differs from ONNX in max mode"
    if op == "SpaceToDepth" and _attribute(node, "mode", b"DCR") in (b"CRD", "CRD"):
        return "OpenVINO's SpaceToDepth ignores mode=CRD"
    if op in ("Conv", "ConvTranspose") and len(node.input) > 1:
        dims = _dims(types, node.input[1])
        if dims is None or None in dims:
            return f"OpenVINO's CPU plugin needs {op} weights of a static shape ('{node.input[1]}' has none)"
    if op == "QLinearConv" and _per_channel_weight_scales(node, constants):
        # Off by up to 76 steps of the 8-bit output on a single node, any padding or stride
        # (OpenVINO 2026.4); equal scales in a per-channel tensor agree.
        return "OpenVINO's QLinearConv differs from ONNX with per-output-channel weight scales"
    if op == "Tile" and len(node.input) > 1 and node.input[1] not in constants:
        return "OpenVINO's Tile gives wrong results when repeats is not a constant"
    if op == "QuantizeLinear":
        if len(node.input) > 1 and node.input[1] not in constants:
            return "OpenVINO's QuantizeLinear rounds differently from ONNX when the scale is computed at run time"
        for name in node.output[:1]:
            element = types.get(name)
            if element is not None and element.tensor_type.elem_type in (TensorProto.UINT16, TensorProto.INT16):
                return "OpenVINO's 16-bit QuantizeLinear rounds differently from ONNX"
    if op.startswith(("Reduce", "ArgM")) and node.input:
        dims = _dims(types, node.input[0])
        if dims is not None and 0 in dims:
            return f"OpenVINO's {op} differs from ONNX on empty tensors"
    return None


def precheck(node: onnx.NodeProto, types: dict[str, onnx.TypeProto], constants: dict[str, TensorProto]) -> str | None:
    """Why OpenVINO cannot take ``node`` whatever its frontend says, or ``None``."""
    if not node.name:
        return "the node has no name"
    domain = "" if node.domain == "ai.onnx" else node.domain
    if domain in _FOREIGN_DOMAINS:
        return _FOREIGN_DOMAINS[domain]
    mismatch = _mismatch(node, types, constants) if not domain else None
    if domain == "com.microsoft":
        mismatch = KNOWN_CONTRIB_MISMATCHES.get(node.op_type)
    if mismatch is not None:
        return mismatch
    for role, names in (("input", node.input), ("output", node.output)):
        for name in names:
            if not name:
                continue
            type_proto = types.get(name)
            if type_proto is None:
                if role == "input":
                    return f"the type of input '{name}' is unknown"
                continue
            kind = type_proto.WhichOneof("value")
            if kind != "tensor_type":
                return f"{role} '{name}' is a {kind.replace('_type', '')}: OpenVINO takes tensors only"
            element = type_proto.tensor_type.elem_type
            if element not in SUPPORTED_ELEMENTS:
                label = TensorProto.DataType.Name(element).lower() if element else "undefined"
                return f"{role} '{name}' has element type {label}, which OpenVINO does not support"
            if role == "input" and not type_proto.tensor_type.HasField("shape"):
                return f"input '{name}' has a dynamic rank, which OpenVINO's CPU plugin does not support"
    return None


def has_rank(type_proto: onnx.TypeProto) -> bool:
    return type_proto.WhichOneof("value") == "tensor_type" and type_proto.tensor_type.HasField("shape")
