"""QuantizeLinear → DequantizeLinear pairs on float32 activations, run as one pass ("fake quant").

Why: a QDQ model (onnxruntime's default quantization format) computes float operators on
dequantized values, so between two float operators every activation goes through
``QuantizeLinear`` (divide, round, saturate, cast to 8 bits) and straight back through
``DequantizeLinear`` (cast to float, subtract the zero point, scale).  Separately that is about
ten passes over the tensor and two allocations; fused, the value never leaves float32:

    t = rint(x / s_q);  t = clip(t, low - z_q, high - z_q);  y = (t + (z_q - z_dq)) * s_dq

which gives the same bits as the two kernels: ``x / s_q`` and its rounding are the same float32
operations; saturating ``t + z_q`` to ``[low, high]`` equals adding ``z_q`` to ``t`` saturated to
``[low - z_q, high - z_q]`` (integers below 2**24 are exact in float32, and larger ``t``
saturate to the same bound either way); the dequantization's subtraction is an exact integer
difference before the same float32 product (adding the offset also turns -0.0 into 0.0, as the
integer round trip does).  NaN quantizes to the zero point, as in ``QuantizeLinear``.

The CPU provider claims such pairs as a two-node fused partition (:func:`qdq_pairs`) only for
the nodes it runs, so another provider that takes QDQ models (OpenVINO) still sees the pattern.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from onnxplug.api import CompiledPartition, Partition
from onnxplug.graph import GraphView

from ._jit import compiler
from ._readers import value_readers

__all__ = ["compile_qdq_pair", "fake_quantize", "fake_quantize_into", "qdq_pairs"]

#: Integer types of the fused pairs: 8- and 16-bit, whose values and zero-point differences are
#: exact in float32.
_RANGES = {
    "tensor(int8)": (-128, 127),
    "tensor(uint8)": (0, 255),
    "tensor(int16)": (-32768, 32767),
    "tensor(uint16)": (0, 65535),
}
_NP_RANGES = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}
_NP_RANGES.update({np.dtype(np.int16): (-32768, 32767), np.dtype(np.uint16): (0, 65535)})


def _plain(node, inputs: int) -> bool:
    """A per-tensor Q or DQ node: float32 scale given, zero point given, no block size, and
    (DQ) no output type other than the scale's; quantization ``precision`` left default."""
    attrs = node.attributes
    for name in ("block_size", "precision"):
        if name in attrs and attrs[name].value:
            return False
    if node.op_type == "DequantizeLinear" and "output_dtype" in attrs and attrs["output_dtype"].value:
        return False
    if len(node.inputs) != inputs or not all(node.inputs):
        return False
    shapes = node.input_shapes
    return all(shapes[i] is not None and len(shapes[i]) <= 1 and all(d == 1 for d in shapes[i]) for i in (1, 2))


def qdq_pairs(graph: GraphView, claimed: set[str]) -> list[tuple[str, str]]:
    """``(QuantizeLinear, DequantizeLinear)`` node names to fuse: both in ``claimed``, the Q's
    float32 output read by that DQ only (not a graph output), per-tensor 8/16-bit integers."""
    readers = value_readers(graph)
    outputs = set(graph.outputs)
    pairs = []
    for node in graph.nodes:
        if node.op_type != "QuantizeLinear" or node.domain != "" or node.name not in claimed:
            continue
        (value,) = node.outputs
        users = readers.get(value, [])
        if value in outputs or len(users) != 1:
            continue
        dq = users[0]
        if dq.op_type != "DequantizeLinear" or dq.domain != "" or dq.name not in claimed or dq.inputs[0] != value:
            continue
        q_types, dq_types = node.input_types, dq.input_types
        if q_types[0] != "tensor(float)" or q_types[1] != "tensor(float)" or dq_types[1] != "tensor(float)":
            continue
        if q_types[2] not in _RANGES or dq_types[2] != q_types[2] or node.output_types[0] != q_types[2]:
            continue
        if _plain(node, 3) and _plain(dq, 3):
            pairs.append((node.name, dq.name))
    return pairs


def fake_quantize(x: np.ndarray, q_scale, q_zero, dq_scale, dq_zero, *, out: np.ndarray | None = None) -> np.ndarray:
    """``DequantizeLinear(QuantizeLinear(x, q_scale, q_zero), dq_scale, dq_zero)`` for float32
    ``x`` and per-tensor parameters, in one fresh float32 array (see the module docstring), or
    in ``out`` (``x`` itself when the caller owns it: no allocation at all)."""
    low, high = _NP_RANGES[q_zero.dtype]
    zq = float(q_zero.reshape(()))
    t = np.divide(x, q_scale.reshape(()).astype(np.float32), dtype=np.float32, out=out)
    np.rint(t, out=t)
    np.clip(t, np.float32(low - zq), np.float32(high - zq), out=t)
    np.add(t, np.float32(zq - float(dq_zero.reshape(()))), out=t)
    np.multiply(t, dq_scale.reshape(()).astype(np.float32), out=t)
    flat = t.reshape(-1)
    # A dot product reads the tensor once, without a temporary: NaN survives it (the clipped
    # values cannot overflow into one), so the rare NaN input costs a second look only then.
    if flat.size and np.isnan(np.dot(flat, flat)):
        missing = np.isnan(flat)
        centred = zq - float(dq_zero.reshape(()))
        flat[missing] = np.float32(centred) * dq_scale.reshape(()).astype(np.float32)
    return t


@functools.cache
def _compiled():
    """The numba kernels of :func:`fake_quantize_into` (without, with a Relu first), or ``None``
    when numba is unavailable or disabled (``ONNXPLUG_CPU_JIT=0``)."""
    jit = compiler()
    if jit is None:
        return None

    # Branch-free and in place on one array, so LLVM vectorises them (a second output array it
    # cannot prove distinct made them 9× slower): min/max instead of a NaN test (NaN comes out
    # NaN and is fixed afterwards, as in fake_quantize); the division stays a division.
    @jit
    def plain(x, q_scale, low, high, offset, dq_scale):  # pragma: no cover - compiled
        for i in range(x.shape[0]):
            t = min(max(np.rint(x[i] / q_scale), low), high)
            x[i] = (t + offset) * dq_scale

    @jit
    def after_relu(x, q_scale, low, high, offset, dq_scale):  # pragma: no cover - compiled
        zero = np.float32(0.0)
        for i in range(x.shape[0]):
            t = min(max(np.rint(max(x[i], zero) / q_scale), low), high)
            x[i] = (t + offset) * dq_scale

    kernels = (plain, after_relu)
    return kernels


def fake_quantize_into(x: np.ndarray, out: np.ndarray, q_scale, q_zero, dq_scale, dq_zero, *, relu: bool = False):
    """:func:`fake_quantize` of ``Relu(x)`` (``relu``) or ``x`` written into ``out`` (which may
    be ``x``): both float32 and C-contiguous.  One compiled pass (about 4× faster than numpy's
    five), the same float32 operations in the same order, so the same bits; numpy without numba."""
    kernels = _compiled()
    if kernels is None:
        if relu:
            x = np.maximum(x, np.float32(0), out=out)
        return fake_quantize(x, q_scale, q_zero, dq_scale, dq_zero, out=out)
    low, high = _NP_RANGES[q_zero.dtype]
    zq, centred = float(q_zero.reshape(())), float(q_zero.reshape(())) - float(dq_zero.reshape(()))
    scale, back = (
        np.float32(q_scale.reshape(()).item()),
        np.float32(dq_scale.reshape(()).item()),
    )  # scalars, not 0-d arrays
    flat_out = out.reshape(-1)
    if out is not x:
        np.copyto(out, x)
    kernel = kernels[1 if relu else 0]
    kernel(flat_out, scale, np.float32(low - zq), np.float32(high - zq), np.float32(centred), back)
    if flat_out.size and np.isnan(np.dot(flat_out, flat_out)):  # NaN input: the zero point
        flat_out[np.isnan(flat_out)] = np.float32(centred) * back
    return out


def _is_scalar(value) -> bool:
    return isinstance(value, np.ndarray) and value.size == 1


def compile_qdq_pair(partition: Partition, fallback) -> CompiledPartition:
    """A partition of one Q→DQ pair as one call.  ``fallback(x, s, z, s2, z2, q_node, dq_node)``
    runs the two kernels when run-time values leave the fused path's domain (an overridden
    scale that is not a scalar, an input that is not float32)."""
    model = partition.model
    by_type = {node.op_type: node for node in model.graph.node}
    q_node, dq_node = by_type["QuantizeLinear"], by_type["DequantizeLinear"]
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    positions = {name: index for index, name in enumerate(partition.inputs)}
    names = [q_node.input[0], q_node.input[1], q_node.input[2], dq_node.input[1], dq_node.input[2]]
    attrs = (
        {a.name: onnx.helper.get_attribute_value(a) for a in q_node.attribute},
        {a.name: onnx.helper.get_attribute_value(a) for a in dq_node.attribute},
    )

    def fetch(values: Sequence[np.ndarray]) -> list:
        return [values[positions[name]] if name in positions else constants[name] for name in names]

    def run(*values):
        x, s, z, s2, z2 = fetch(values)
        if (
            x.dtype == np.float32
            and all(_is_scalar(p) for p in (s, z, s2, z2))
            and s.dtype == s2.dtype == np.float32
            and z.dtype in _NP_RANGES
            and z2.dtype == z.dtype
        ):
            return [fake_quantize_into(np.ascontiguousarray(x), np.empty(x.shape, np.float32), s, z, s2, z2)]
        return [fallback(x, s, z, s2, z2, *attrs)]

    return CompiledPartition(partition.inputs, partition.outputs, run)
