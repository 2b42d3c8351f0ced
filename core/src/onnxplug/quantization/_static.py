"""Static quantization of a graph from calibrated ranges, in the QDQ or the QOperator format.

Which inputs of an operator are activations, weights or biases is declared per operator below.
Three choices follow onnxruntime's quantizer:

- A ReLU whose input comes only from a quantized Conv/MatMul/Gemm/Add/Mul is removed when
  activations are asymmetric: the producer's output takes the ReLU's range, whose zero point is
  the type's minimum, so saturation clamps negatives exactly as the ReLU did.
- Data-movement operators (Reshape, Transpose, MaxPool...) give their output the quantization
  parameters of their input, so they can run on the integers unchanged.
- Biases of Conv and Gemm become int32 with scale ``input_scale * weight_scale`` and zero point 0.

QDQ writes ``QuantizeLinear → DequantizeLinear`` pairs around float operators (weights stored
quantized, followed by a DequantizeLinear). QOperator writes QLinearConv / QLinearMatMul and the
data-movement operators on integers, with QuantizeLinear where a float tensor enters integer work
and DequantizeLinear where an integer tensor is read as float.
"""

from __future__ import annotations

import numpy as np
import onnx

from ._graph import GraphState, quantize_bias, quantize_weight, tensor_params
from .quant_utils import QuantFormat, QuantType

# op type -> the input positions that are activations (None: all of them).
ACTIVATION_INPUTS = {
    "Conv": (0,),
    "MatMul": (0, 1),
    "Gemm": (0,),
    "Add": (0, 1),
    "Mul": (0, 1),
    "Relu": (0,),
    "Clip": (0,),
    "Sigmoid": (0,),
    "Softmax": (0,),
    "AveragePool": (0,),
    "GlobalAveragePool": (0,),
    "Concat": None,
    "MaxPool": (0,),
    "Reshape": (0,),
    "Transpose": (0,),
    "Flatten": (0,),
    "Squeeze": (0,),
    "Unsqueeze": (0,),
}
DIRECT = {"MaxPool", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"}
WEIGHTED = {"Conv", "MatMul", "Gemm"}
RELU_FUSABLE = {"Conv", "MatMul", "Gemm", "Add", "Mul"}
# What the QOperator format writes as integer operators; everything else stays float there.
QOPERATOR_OPS = {"Conv", "MatMul", "Relu"} | DIRECT
QDQ_OPS = set(ACTIVATION_INPUTS)


class StaticQuantizer:
    """One model, one set of choices: ``tensors_to_calibrate()`` then ``quantize(ranges)``."""

    def __init__(
        self,
        model: onnx.ModelProto,
        quant_format: QuantFormat,
        op_types,
        nodes_to_quantize,
        nodes_to_exclude,
        per_channel: bool,
        reduce_range: bool,
        activation_type: QuantType,
        weight_type: QuantType,
        extra_options: dict,
    ):
        self.model = model
        self.format = quant_format
        supported = QOPERATOR_OPS if quant_format is QuantFormat.QOperator else QDQ_OPS
        self.op_types = set(op_types) & supported
        self.per_channel = per_channel
        self.reduce_range = reduce_range
        self.activation_type = activation_type
        self.weight_type = weight_type
        self.activation_symmetric = bool(extra_options.get("ActivationSymmetric", False))
        self.weight_symmetric = bool(
            extra_options.get("WeightSymmetric", weight_type in (QuantType.QInt8, QuantType.QInt16))
        )
        self.matmul_const_b_only = bool(extra_options.get("MatMulConstBOnly", False))
        self.axes = dict(extra_options.get("QDQOpTypePerChannelSupportToAxis", {}))
        include = set(nodes_to_quantize or ())
        exclude = set(nodes_to_exclude or ())
        self.selected = [
            n
            for n in model.graph.node
            if n.op_type in self.op_types
            and n.domain in ("", "ai.onnx")
            and n.name not in exclude
            and (not include or n.name in include)
        ]
        self._selected_ids = {id(n) for n in self.selected}
        self._relu_after = self._find_relu_fusions()

    # --- structure ---------------------------------------------------------------------

    def _find_relu_fusions(self) -> dict[int, onnx.NodeProto]:
        """Selected producer node id -> the selected ReLU it can absorb."""
        if self.activation_symmetric:
            return {}
        consumers: dict[str, list] = {}
        for node in self.model.graph.node:
            for name in node.input:
                consumers.setdefault(name, []).append(node)
        outputs = {o.name for o in self.model.graph.output}
        fusable = RELU_FUSABLE if self.format is QuantFormat.QDQ else {"Conv", "MatMul"}
        found = {}
        for node in self.selected:
            if node.op_type not in fusable or node.output[0] in outputs:
                continue
            users = consumers.get(node.output[0], [])
            if len(users) == 1 and users[0].op_type == "Relu" and id(users[0]) in self._selected_ids:
                found[id(node)] = users[0]
        return found

    def _activation_inputs(self, node) -> list[str]:
        slots = ACTIVATION_INPUTS[node.op_type]
        names = list(node.input) if slots is None else [node.input[i] for i in slots if i < len(node.input)]
        if node.op_type == "MatMul" and self.matmul_const_b_only:
            names = names[:1]
        return [n for n in names if n]

    def tensors_to_calibrate(self) -> list[str]:
        """Every float activation a selected node reads or writes (initializers excluded)."""
        init = {i.name for i in self.model.graph.initializer}
        names: list[str] = []
        for node in self.selected:
            for name in [*self._activation_inputs(node), node.output[0]]:
                if name and name not in init and name not in names:
                    names.append(name)
        return names

    # --- rewriting ---------------------------------------------------------------------

    def quantize(self, ranges) -> onnx.ModelProto:
        state = GraphState(self.model)
        self.state = state
        self.params: dict[str, tuple] = {}
        for name, data in ranges.items():
            low, high = data.range_value if hasattr(data, "range_value") else data
            self.params[name] = tensor_params(low, high, self.activation_type, self.activation_symmetric)
        fused = {id(relu): producer for producer, relu in self._relu_after.items()}
        if self.format is QuantFormat.QDQ:
            self._pairs: dict[str, str] = {}
            self._done: set[str] = set()
        else:
            self._qvalues: dict[str, tuple] = {}
            self._float_ready = {i.name for i in self.model.graph.input} | set(state.initializers)
        for node in self.model.graph.node:
            if id(node) in fused:
                continue  # absorbed by its producer
            if id(node) not in self._selected_ids or not self._quantizable(node):
                self._emit_float(node)
                continue
            relu = self._relu_after.get(id(node))
            output = relu.output[0] if relu is not None else node.output[0]
            if relu is not None and output not in self.params:
                relu = None
                output = node.output[0]
            if relu is None and id(node) in self._relu_after:
                self._emit_float(self._relu_after.pop(id(node)), later=True)
            if node.op_type in DIRECT and self._activation_inputs(node)[0] in self.params:
                self.params[output] = self.params[self._activation_inputs(node)[0]]
            if self.format is QuantFormat.QDQ:
                self._qdq_node(node, output)
            else:
                self._qop_node(node, output)
        self._flush_later()
        if self.format is QuantFormat.QOperator:
            self._dequantize_float_reads()
        return state.finish()

    def _quantizable(self, node) -> bool:
        acts = self._activation_inputs(node)
        if not acts or not all(self.state.is_float(a) for a in acts):
            return False
        if node.op_type in DIRECT:
            # Runs on integers only if its input is quantized already (QOperator) or calibrated (QDQ).
            first = acts[0]
            return first in (self._qvalues if self.format is QuantFormat.QOperator else self.params)
        if node.op_type in WEIGHTED:
            weight = node.input[1]
            weight_const = self.state.constant(weight) is not None
            if not weight_const and (node.op_type != "MatMul" or self.matmul_const_b_only):
                return False
            if not weight_const and weight not in self.params:
                return False
            if node.op_type == "Gemm" and any(a.name == "transA" and a.i for a in node.attribute):
                return self.format is QuantFormat.QDQ
        if self.format is QuantFormat.QOperator and node.op_type == "Relu":
            return False  # only as part of a producer (above); alone it stays float
        return all(a in self.params for a in acts if self.state.constant(a) is None)

    _later: list

    def _emit_float(self, node, later=False):
        if later:
            self.__dict__.setdefault("_later", []).append(node)
            return
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        if self.format is QuantFormat.QOperator:
            self._float_ready.update(copy.output)
        self.state.nodes.append(copy)

    def _flush_later(self):
        for node in self.__dict__.pop("_later", []):
            self._emit_float(node)

    def _weight_axis(self, node):
        if not self.per_channel:
            return None
        if node.op_type in self.axes:
            return int(self.axes[node.op_type])
        if node.op_type == "Conv":
            return 0
        if node.op_type == "Gemm":
            return 0 if any(a.name == "transB" and a.i for a in node.attribute) else 1
        return -1  # MatMul: one scale per output column

    def _weight(self, name, axis):
        """Quantized initializer, scale and zero point of a weight (cached: weights can be shared)."""
        key = (name, axis)
        if key not in self.state.weights_cache:
            array = self.state.constant(name)
            if axis is not None:
                axis = axis + array.ndim if axis < 0 else axis
            quantized, zero, scale = quantize_weight(
                array, self.weight_type, self.weight_symmetric, self.reduce_range, axis
            )
            names = (
                self.state.add_initializer(f"{name}_quantized", quantized),
                self.state.add_initializer(f"{name}_scale", scale),
                self.state.add_initializer(f"{name}_zero_point", zero),
            )
            self.state.weights_cache[key] = (names, scale, axis)
        return self.state.weights_cache[key]

    def _bias(self, name, input_scale, weight_scale):
        bias = self.state.constant(name)
        quantized, scale = quantize_bias(bias, input_scale, weight_scale)
        zero = (scale * 0).astype("int32")
        return (
            self.state.add_initializer(f"{name}_quantized", quantized),
            self.state.add_initializer(f"{name}_quantized_scale", scale),
            self.state.add_initializer(f"{name}_quantized_zero_point", zero),
        )

    def _param_names(self, tensor):
        zero, scale = self.params[tensor]
        return (
            self.state.add_initializer(f"{tensor}_scale", scale),
            self.state.add_initializer(f"{tensor}_zero_point", zero),
        )

    def _bias_allowed(self, node):
        if node.op_type != "Gemm":
            return True
        attrs = {a.name: a.f for a in node.attribute if a.type == onnx.AttributeProto.FLOAT}
        bias = self.state.constant(node.input[2]) if len(node.input) > 2 else None
        return attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0 and bias is not None and bias.ndim == 1

    # --- QDQ ---------------------------------------------------------------------------------

    def _qdq_input(self, tensor):
        if tensor in self._done:
            return tensor
        if tensor not in self._pairs:
            scale, zero = self._param_names(tensor)
            q = self.state.unique(f"{tensor}_QuantizeLinear_Output")
            dq = self.state.unique(f"{tensor}_DequantizeLinear_Output")
            self.state.emit("QuantizeLinear", [tensor, scale, zero], [q], f"{tensor}_QuantizeLinear")
            self.state.emit("DequantizeLinear", [q, scale, zero], [dq], f"{tensor}_DequantizeLinear")
            self._pairs[tensor] = dq
        return self._pairs[tensor]

    def _qdq_node(self, node, output):
        new = onnx.NodeProto()
        new.CopyFrom(node)
        acts = set(self._activation_inputs(node))
        weight_scale = None
        for index, name in enumerate(node.input):
            if node.op_type in WEIGHTED and index == 1 and self.state.constant(name) is not None:
                (q, scale, zero), weight_scale, axis = self._weight(name, self._weight_axis(node))
                dq = self.state.unique(f"{name}_DequantizeLinear_Output")
                extra = {"axis": axis} if axis is not None else {}
                self.state.emit("DequantizeLinear", [q, scale, zero], [dq], f"{name}_DequantizeLinear", **extra)
                new.input[index] = dq
            elif name in acts and self.state.constant(name) is None:
                new.input[index] = self._qdq_input(name)
        if node.op_type in ("Conv", "Gemm") and len(node.input) > 2 and weight_scale is not None:
            if self._bias_allowed(node) and self.state.constant(node.input[2]) is not None:
                input_scale = self.params[node.input[0]][1]
                q, scale, zero = self._bias(node.input[2], input_scale, weight_scale)
                dq = self.state.unique(f"{node.input[2]}_DequantizeLinear_Output")
                extra = {"axis": 0} if np.ndim(weight_scale) else {}
                self.state.emit(
                    "DequantizeLinear", [q, scale, zero], [dq], f"{node.input[2]}_DequantizeLinear", **extra
                )
                new.input[2] = dq
        if output in self.params and self.state.is_float(node.output[0]):
            raw = self.state.unique(f"{output}_QuantizeLinear_Input")
            new.output[0] = raw
            scale, zero = self._param_names(output)
            q = self.state.unique(f"{output}_QuantizeLinear_Output")
            self.state.emit("QuantizeLinear", [raw, scale, zero], [q], f"{output}_QuantizeLinear")
            self.state.emit("DequantizeLinear", [q, scale, zero], [output], f"{output}_DequantizeLinear")
            self._done.add(output)
        elif output != node.output[0]:
            new.output[0] = output
        self.state.nodes.append(new)

    # --- QOperator ---------------------------------------------------------------------------

    def _quantized(self, tensor):
        """(quantized name, scale name, zero-point name) of an activation, quantizing it if needed."""
        if tensor not in self._qvalues:
            scale, zero = self._param_names(tensor)
            q = self.state.unique(f"{tensor}_quantized")
            self.state.emit("QuantizeLinear", [tensor, scale, zero], [q], f"{tensor}_QuantizeLinear")
            self._qvalues[tensor] = (q, scale, zero)
        return self._qvalues[tensor]

    def _qop_node(self, node, output):
        state = self.state
        attrs = list(node.attribute)
        if node.op_type in DIRECT:
            q, scale, zero = self._qvalues[node.input[0]]
            out = state.unique(f"{output}_quantized")
            new = onnx.NodeProto()
            new.CopyFrom(node)
            new.input[0] = q
            del new.output[:]
            new.output.append(out)
            new.name = state.unique(f"{node.name}_quant" if node.name else f"{node.op_type}_quant")
            state.nodes.append(new)
            self._qvalues[output] = (out, scale, zero)
            return
        x, x_scale, x_zero = self._quantized(node.input[0])
        if state.constant(node.input[1]) is not None:
            (w, w_scale, w_zero), weight_scale, _ = self._weight(node.input[1], self._weight_axis(node))
        else:
            w, w_scale, w_zero = self._quantized(node.input[1])
            weight_scale = None
        y_scale, y_zero = self._param_names(output)
        out = state.unique(f"{output}_quantized")
        name = f"{node.name}_quant" if node.name else f"{node.op_type}_quant"
        if node.op_type == "Conv":
            inputs = [x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero]
            if len(node.input) > 2 and node.input[2]:
                input_scale = self.params[node.input[0]][1]
                inputs.append(self._bias(node.input[2], input_scale, weight_scale)[0])
            new = state.emit("QLinearConv", inputs, [out], name)
            new.attribute.extend(attrs)
        else:
            state.emit("QLinearMatMul", [x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero], [out], name)
        self._qvalues[output] = (out, y_scale, y_zero)

    def _dequantize_float_reads(self):
        """A DequantizeLinear for every integer-only tensor that a float node or the graph reads."""
        reads = {name for node in self.state.nodes for name in node.input} | self.state.graph_outputs
        for tensor, (q, scale, zero) in list(self._qvalues.items()):
            if tensor in reads and tensor not in self._float_ready:
                self.state.emit("DequantizeLinear", [q, scale, zero], [tensor], f"{tensor}_DequantizeLinear")
                self._float_ready.add(tensor)
