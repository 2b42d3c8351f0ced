"""Dynamic quantization (QuantizationMode.IntegerOps): weights quantized ahead, activations
quantized at run time by DynamicQuantizeLinear (uint8, range from the tensor itself).

MatMul with a constant B and Conv become::

    DynamicQuantizeLinear(x) -> (x_q, x_scale, x_zp)
    MatMulInteger / ConvInteger(x_q, w_q, x_zp, w_zp) -> int32
    Cast(float) * (x_scale * w_scale) [+ bias]        -> the original output

which is onnxruntime's pattern, so its kernels and fusions apply to the written model.  A MatMul
whose B is not constant is left float unless ``MatMulConstBOnly`` is False (then both sides are
quantized dynamically).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from ._graph import GraphState, quantize_weight
from .quant_utils import QuantType

DYNAMIC_OPS = {"MatMul", "Conv"}


def quantize_dynamic_graph(
    model: onnx.ModelProto,
    op_types,
    nodes_to_quantize,
    nodes_to_exclude,
    per_channel: bool,
    reduce_range: bool,
    weight_type: QuantType,
    extra_options: dict,
) -> onnx.ModelProto:
    state = GraphState(model)
    const_b_only = bool(extra_options.get("MatMulConstBOnly", True))
    symmetric = bool(extra_options.get("WeightSymmetric", weight_type in (QuantType.QInt8, QuantType.QInt16)))
    include, exclude = set(nodes_to_quantize or ()), set(nodes_to_exclude or ())
    wanted = set(op_types) & DYNAMIC_OPS
    dynamic: dict[str, tuple] = {}

    def quantized_input(tensor):
        if tensor not in dynamic:
            outs = [
                state.unique(f"{tensor}_quantized"),
                state.unique(f"{tensor}_scale"),
                state.unique(f"{tensor}_zero_point"),
            ]
            state.emit("DynamicQuantizeLinear", [tensor], outs, f"{tensor}_QuantizeLinear")
            dynamic[tensor] = tuple(outs)
        return dynamic[tensor]

    for node in model.graph.node:
        chosen = (
            node.op_type in wanted
            and node.domain in ("", "ai.onnx")
            and node.name not in exclude
            and (not include or node.name in include)
            and all(state.is_float(n) for n in node.input[:2])
        )
        weight = state.constant(node.input[1]) if chosen else None
        if chosen and weight is None and (node.op_type == "Conv" or const_b_only):
            chosen = False
        if not chosen:
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            state.nodes.append(copy)
            continue
        output = node.output[0]
        x_q, x_scale, x_zero = quantized_input(node.input[0])
        if weight is not None:
            axis = (0 if node.op_type == "Conv" else weight.ndim - 1) if per_channel else None
            quantized, zero, scale = quantize_weight(weight, weight_type, symmetric, reduce_range, axis)
            w_q = state.add_initializer(f"{node.input[1]}_quantized", quantized)
            if np.ndim(zero) and np.all(zero == zero.flat[0]):
                # One zero point for all channels (always so for symmetric weights): onnxruntime's
                # ConvInteger accepts only a per-tensor weight zero point; the scales stay per channel.
                zero = zero.flat[0].reshape(())
            w_zero = state.add_initializer(f"{node.input[1]}_zero_point", zero)
            w_scale = state.add_initializer(f"{node.input[1]}_scale", _scale_shape(scale, node, weight))
        else:
            w_q, w_scale, w_zero = quantized_input(node.input[1])
        acc = state.unique(f"{output}_output_quantized")
        base = node.name or node.op_type
        if node.op_type == "Conv":
            integer = state.emit("ConvInteger", [x_q, w_q, x_zero, w_zero], [acc], f"{base}_quant")
            integer.attribute.extend(node.attribute)
        else:
            state.emit("MatMulInteger", [x_q, w_q, x_zero, w_zero], [acc], f"{base}_quant")
        cast = state.unique(f"{output}_output_quantized_cast_output")
        state.emit("Cast", [acc], [cast], f"{base}_output_quantized_cast", to=TensorProto.FLOAT)
        combined = state.unique(f"{output}_scales_mul_output")
        state.emit("Mul", [x_scale, w_scale], [combined], f"{base}_scales_mul")
        has_bias = node.op_type == "Conv" and len(node.input) > 2 and node.input[2]
        scaled = state.unique(f"{output}_output_scaled") if has_bias else output
        state.emit("Mul", [cast, combined], [scaled], f"{base}_output_scale_mul")
        if has_bias:
            bias = node.input[2]
            constant = state.constant(bias)
            if constant is not None:
                bias = state.add_initializer(f"{bias}_reshaped", constant.reshape((1, -1) + (1,) * (weight.ndim - 2)))
            else:
                shape = state.add_initializer(f"{bias}_shape", np.array([1, -1] + [1] * (weight.ndim - 2), np.int64))
                reshaped = state.unique(f"{bias}_reshaped")
                state.emit("Reshape", [bias, shape], [reshaped], f"{base}_bias_reshape")
                bias = reshaped
            state.emit("Add", [scaled, bias], [output], f"{base}_bias_add")
    return state.finish()


def _scale_shape(scale, node, weight):
    """Per-channel Conv scales broadcast against ``N x C x spatial`` outputs; MatMul's against the last axis."""
    if node.op_type == "Conv" and np.ndim(scale):
        return np.asarray(scale, np.float32).reshape((-1,) + (1,) * (weight.ndim - 2))
    return scale
