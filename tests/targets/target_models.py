"""Small models for the target tests: one node with chosen inputs (for the tables' conditions),
and two quantized convnets (QDQ and QOperator), built with onnx.helper and seeded weights."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

_DTYPES = {
    "float": TensorProto.FLOAT,
    "float16": TensorProto.FLOAT16,
    "double": TensorProto.DOUBLE,
    "int64": TensorProto.INT64,
    "int32": TensorProto.INT32,
    "int8": TensorProto.INT8,
    "uint8": TensorProto.UINT8,
    "bool": TensorProto.BOOL,
}


def single_node(op, inputs, outputs, *, constants=None, opset=17, domain="", extra_opsets=None, **attributes):
    """A model of one node ``op`` named ``node``.

    :param inputs: ``[(name, dtype, shape)]``; a name in ``constants`` becomes an initializer.
    :param outputs: ``[(name, dtype, shape)]`` (``shape`` may be ``None``).
    :param constants: ``{name: numpy array}``.
    """
    constants = constants or {}
    graph_inputs = [helper.make_tensor_value_info(n, _DTYPES[t], s) for n, t, s in inputs if n not in constants]
    graph_outputs = [helper.make_tensor_value_info(n, _DTYPES[t], s) for n, t, s in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in constants.items()]
    node = helper.make_node(
        op, [n for n, _, _ in inputs], [n for n, _, _ in outputs], name="node", domain=domain, **attributes
    )
    graph = helper.make_graph([node], "single", graph_inputs, graph_outputs, inits)
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items()]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def _q(name, array, dtype=np.int8):
    return numpy_helper.from_array(np.asarray(array, dtype=dtype), name)


def _f(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def qdq_convnet(seed=0):
    """x[1,3,16,16] → Q/DQ → Conv(int8 weights via DQ) → Relu → Q/DQ → MaxPool → Flatten → Q/DQ → MatMul → Softmax."""
    rng = np.random.default_rng(seed)
    inits = [
        _f("x_scale", 0.02),
        _q("x_zp", 0),
        _q("w", rng.integers(-100, 100, (8, 3, 3, 3))),
        _f("w_scale", 0.01),
        _q("w_zp", 0),
        _f("bias", rng.normal(0, 0.1, (8,))),
        _f("a_scale", 0.05),
        _q("a_zp", 0),
        _q("fc", rng.integers(-100, 100, (512, 10))),
        _f("fc_scale", 0.005),
        _q("fc_zp", 0),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="quant_x"),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"], name="dequant_x"),
        helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["wd"], name="dequant_w"),
        helper.make_node("Conv", ["xd", "wd", "bias"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "a_scale", "a_zp"], ["rq"], name="quant_r"),
        helper.make_node("DequantizeLinear", ["rq", "a_scale", "a_zp"], ["rd"], name="dequant_r"),
        helper.make_node("MaxPool", ["rd"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("DequantizeLinear", ["fc", "fc_scale", "fc_zp"], ["fcd"], name="dequant_fc"),
        helper.make_node("MatMul", ["f", "fcd"], ["logits"], name="matmul"),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq_convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def qoperator_convnet(seed=0):
    """x[1,3,16,16] → QuantizeLinear → QLinearConv → MaxPool (uint8) → Flatten → QLinearMatMul → DequantizeLinear."""
    rng = np.random.default_rng(seed)
    u8 = np.uint8
    inits = [
        _f("x_scale", 0.02),
        _q("x_zp", 128, u8),
        _q("w", rng.integers(0, 255, (8, 3, 3, 3)), u8),
        _f("w_scale", 0.01),
        _q("w_zp", 128, u8),
        _f("c_scale", 0.05),
        _q("c_zp", 128, u8),
        numpy_helper.from_array(rng.integers(-100, 100, (8,)).astype(np.int32), "bias"),
        _q("fc", rng.integers(0, 255, (512, 10)), u8),
        _f("fc_scale", 0.005),
        _q("fc_zp", 128, u8),
        _f("y_scale", 0.1),
        _q("y_zp", 128, u8),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="quant_x"),
        helper.make_node(
            "QLinearConv",
            ["xq", "x_scale", "x_zp", "w", "w_scale", "w_zp", "c_scale", "c_zp", "bias"],
            ["cq"],
            name="qconv",
            pads=[1, 1, 1, 1],
        ),
        helper.make_node("MaxPool", ["cq"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node(
            "QLinearMatMul",
            ["f", "c_scale", "c_zp", "fc", "fc_scale", "fc_zp", "y_scale", "y_zp"],
            ["yq"],
            name="qmatmul",
        ),
        helper.make_node("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"], name="dequant_y"),
    ]
    graph = helper.make_graph(
        nodes,
        "qoperator_convnet",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def table_partitions(model, table):
    """The Partitions a session hands to ``compile()`` when ``table`` decides what its provider
    claims: a recording provider under the table's onnxruntime name, for the translators' tests."""
    import onnxplug
    from onnxplug.api import CompiledPartition, Device, Provider, ProviderFactory
    from onnxplug.partition.targets import table_claims

    recorded = []

    class Recorder(Provider):
        def capability(self, graph, kernels):
            return table_claims(table, graph)

        def compile(self, partition):
            recorded.append(partition)
            return CompiledPartition(partition.inputs, partition.outputs, lambda *values: [])

    class Factory(ProviderFactory):
        name, ort_name, priority = f"{table.target}_recorder", table.provider, -1

        def devices(self):
            return [Device("recorder", 0)]

        def create(self, device, options):
            return Recorder(self, device)

    class Plugin:
        @onnxplug.hookimpl
        def onnxplug_provider_factories(self):
            return [Factory()]

    environment = onnxplug.Environment(only=["cpu"])
    environment.register(Plugin(), name="recorder")
    data = model.SerializeToString() if hasattr(model, "SerializeToString") else model
    onnxplug.InferenceSession(data, providers=[table.provider, "CPUExecutionProvider"], environment=environment)
    return recorded
