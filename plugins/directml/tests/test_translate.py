"""The DirectML translator, checked structurally: for each op of the execution path's subset, the
DirectML operators, tensor descs (sizes, strides, OWNED_BY_DML), fields and graph edges it writes,
validated against the operator schema the platform layer builds its structures from; and the
graphs of the light models' partitions as a session hands them to ``compile()``.

This is onnxplug's own description of a ``DML_GRAPH_DESC``, not a stand-in for DirectML: nothing
here executes it (the COM layer that does runs on Windows/WSL2 only)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug
from onnxplug.api import CompiledPartition, Device, Provider, ProviderFactory
from onnxplug.partition.targets import plan_for_target, table_claims
from onnxplug_directml.graph import OPERATORS, DmlGraph
from onnxplug_directml.provider import DmlProvider, DmlProviderFactory
from onnxplug_directml.table import TABLE
from onnxplug_directml.translate import SUPPORTED, Untranslatable, declines, translate, translate_partition

F, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(0)


def model(op, inputs, outputs, constants=None, opset=17, **attributes):
    constants = {k: np.asarray(v) for k, v in (constants or {}).items()}
    node = helper.make_node(op, [n for n, _, _ in inputs], [n for n, _, _ in outputs], name="node", **attributes)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs if n not in constants],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        [numpy_helper.from_array(v, n) for n, v in constants.items()],
    )
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    built.ir_version = 8
    return built


def dml(built) -> DmlGraph:
    return translate(built, [v.name for v in built.graph.input], [v.name for v in built.graph.output])


X4, Y4 = ("x", F, [1, 4, 6, 6]), ("y", F, [1, 4, 6, 6])
W = rng.normal(size=(8, 4, 3, 3)).astype(np.float32)
CASES = {
    "Abs": (model("Abs", [X4], [Y4]), "ELEMENT_WISE_ABS"),
    "Add": (model("Add", [X4, ("b", F, [4, 1, 1])], [Y4], {"b": np.ones((4, 1, 1), np.float32)}), "ELEMENT_WISE_ADD"),
    "Sub": (model("Sub", [X4, ("z", F, [1, 4, 6, 6])], [Y4]), "ELEMENT_WISE_SUBTRACT"),
    "Mul": (model("Mul", [X4, ("z", F, [6])], [Y4]), "ELEMENT_WISE_MULTIPLY"),
    "Div": (model("Div", [X4, ("z", F, [1, 4, 6, 6])], [Y4]), "ELEMENT_WISE_DIVIDE"),
    "Max": (model("Max", [X4, ("z", F, [1, 4, 6, 6])], [Y4]), "ELEMENT_WISE_MAX"),
    "Min": (model("Min", [X4, ("z", F, [1, 4, 6, 6])], [Y4]), "ELEMENT_WISE_MIN"),
    "Sum": (model("Sum", [X4, ("z", F, [1, 4, 6, 6])], [Y4]), "ELEMENT_WISE_ADD"),
    "Exp": (model("Exp", [X4], [Y4]), "ELEMENT_WISE_EXP"),
    "Floor": (model("Floor", [X4], [Y4]), "ELEMENT_WISE_FLOOR"),
    "Log": (model("Log", [X4], [Y4]), "ELEMENT_WISE_LOG"),
    "Sqrt": (model("Sqrt", [X4], [Y4]), "ELEMENT_WISE_SQRT"),
    "Relu": (model("Relu", [X4], [Y4]), "ACTIVATION_RELU"),
    "Sigmoid": (model("Sigmoid", [X4], [Y4]), "ACTIVATION_SIGMOID"),
    "Tanh": (model("Tanh", [X4], [Y4]), "ACTIVATION_TANH"),
    "Neg": (model("Neg", [X4], [Y4]), "ELEMENT_WISE_IDENTITY"),
    "Elu": (model("Elu", [X4], [Y4], alpha=0.5), "ACTIVATION_ELU"),
    "LeakyRelu": (model("LeakyRelu", [X4], [Y4], alpha=0.2), "ACTIVATION_LEAKY_RELU"),
    "Clip": (
        model("Clip", [X4, ("lo", F, []), ("hi", F, [])], [Y4], {"lo": np.float32(0), "hi": np.float32(6)}),
        "ELEMENT_WISE_CLIP",
    ),
    "Reshape": (
        model("Reshape", [X4, ("s", I64, [2])], [("y", F, [4, 36])], {"s": np.array([4, -1])}),
        "ELEMENT_WISE_IDENTITY",
    ),
    "Flatten": (model("Flatten", [X4], [("y", F, [1, 144])]), "ELEMENT_WISE_IDENTITY"),
    "Squeeze": (
        model("Squeeze", [("x", F, [1, 4, 1]), ("a", I64, [1])], [("y", F, [1, 4])], {"a": np.array([2])}),
        "ELEMENT_WISE_IDENTITY",
    ),
    "Unsqueeze": (
        model("Unsqueeze", [("x", F, [4]), ("a", I64, [1])], [("y", F, [1, 4])], {"a": np.array([0])}),
        "ELEMENT_WISE_IDENTITY",
    ),
    "Identity": (model("Identity", [X4], [Y4]), "ELEMENT_WISE_IDENTITY"),
    "Conv": (
        model(
            "Conv",
            [X4, ("w", F, [8, 4, 3, 3]), ("bias", F, [8])],
            [("y", F, [1, 8, 3, 3])],
            {"w": W, "bias": np.arange(8, dtype=np.float32)},
            pads=[1, 0, 1, 2],
            strides=[2, 2],
        ),
        "CONVOLUTION",
    ),
    "Gemm": (
        model(
            "Gemm",
            [("a", F, [2, 3]), ("b", F, [4, 3]), ("c", F, [4])],
            [("y", F, [2, 4])],
            {"b": np.ones((4, 3), np.float32), "c": np.ones(4, np.float32)},
            transB=1,
            alpha=2.0,
            beta=0.5,
        ),
        "GEMM",
    ),
    "MatMul": (model("MatMul", [("a", F, [2, 5, 3]), ("b", F, [3, 4])], [("y", F, [2, 5, 4])]), "GEMM"),
    "MaxPool": (
        model("MaxPool", [X4], [("y", F, [1, 4, 3, 3])], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        "MAX_POOLING",
    ),
    "AveragePool": (
        model("AveragePool", [X4], [("y", F, [1, 4, 6, 6])], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        "AVERAGE_POOLING",
    ),
    "GlobalAveragePool": (model("GlobalAveragePool", [X4], [("y", F, [1, 4, 1, 1])]), "AVERAGE_POOLING"),
    "GlobalMaxPool": (model("GlobalMaxPool", [X4], [("y", F, [1, 4, 1, 1])]), "MAX_POOLING"),
    "Softmax": (
        model("Softmax", [("x", F, [1, 10, 1, 1])], [("y", F, [1, 10, 1, 1])], axis=1, opset=11),
        "ACTIVATION_SOFTMAX",
    ),
    "Concat": (model("Concat", [("a", F, [2, 3]), ("b", F, [2, 5])], [("y", F, [2, 8])], axis=1), "JOIN"),
    "BatchNormalization": (
        model(
            "BatchNormalization",
            [X4, ("s", F, [4]), ("bb", F, [4]), ("m", F, [4]), ("v", F, [4])],
            [Y4],
            {k: np.ones(4, np.float32) for k in ("s", "bb", "m", "v")},
            epsilon=1e-3,
        ),
        "BATCH_NORMALIZATION",
    ),
    "LRN": (model("LRN", [X4], [Y4], size=3, alpha=1e-4, beta=0.75, bias=2.0), "LOCAL_RESPONSE_NORMALIZATION"),
}


def only(graph: DmlGraph):
    assert len(graph.nodes) == 1, graph.operators()
    return graph.nodes[0]


def _validate(graph: DmlGraph) -> None:
    """Every node fills its operator's schema: tensor slots, scalar fields, array lengths; every
    edge points at an existing input, node and slot."""
    for node in graph.nodes:
        _, fields = OPERATORS[node.operator]
        slots = [kind for _, kind in fields if kind in ("in", "in?")]
        if any(kind == "ins" for _, kind in fields):
            assert node.fields["InputCount"] == len(node.inputs)
        else:
            assert len(node.inputs) == len(slots)
            assert all(d is not None for d, kind in zip(node.inputs, slots) if kind == "in")
        for name, kind in fields:
            if kind in ("uint", "int", "float", "bool"):
                assert name in node.fields, (node.operator, name)
            if kind == "uints":
                assert len(node.fields[name]) == node.fields["DimensionCount"]
        for desc in [*node.inputs, *node.outputs]:
            if desc is not None:
                assert len(desc.sizes) == len(desc.strides) == 4 and desc.total_bytes % 4 == 0
    for source, target, slot in graph.input_edges:
        assert source < len(graph.inputs) and graph.nodes[target].inputs[slot] is not None
    for source, out, target, slot in graph.intermediate_edges:
        assert source < target and out == 0 and graph.nodes[target].inputs[slot] is not None
    assert sorted(o for _, _, o in graph.output_edges) == list(range(len(graph.output_names)))


def test_the_subset_is_part_of_the_table_and_every_op_has_a_case():
    assert SUPPORTED == set(CASES)
    assert {("", op) for op in SUPPORTED} <= set(TABLE.ops)


@pytest.mark.parametrize("op", sorted(CASES))
def test_each_op_of_the_subset_translates(op):
    built, operator = CASES[op]
    graph = dml(built)
    assert only(graph).operator == operator and only(graph).node == "node"
    _validate(graph)
    runtime = [g for g in graph.inputs if g.value is None]
    assert [g.name for g in runtime] == [v.name for v in built.graph.input]
    assert all(g.desc.owned_by_dml == (g.value is not None) for g in graph.inputs)
    out = built.graph.output[0].type.tensor_type.shape
    assert graph.output_shapes[0] == tuple(d.dim_value for d in out.dim)
    assert not declines(built)


def test_convolution_fields_filter_and_bias():
    graph = dml(CASES["Conv"][0])
    node = only(graph)
    assert node.fields["Strides"] == [2, 2] and node.fields["StartPadding"] == [1, 0]
    assert node.fields["EndPadding"] == [1, 2] and node.fields["GroupCount"] == 1
    assert node.fields["Mode"] == 1 and node.fields["Direction"] == 0  # cross-correlation, forward
    assert node.inputs[1].sizes == (8, 4, 3, 3) and node.inputs[2].sizes == (1, 8, 1, 1)
    constants = {g.name: g for _, g in graph.constants()}
    assert np.array_equal(constants["w"].value, W) and constants["bias"].value.tolist() == list(range(8))
    assert (0, 0, 0) in graph.input_edges  # the runtime input x feeds slot 0
    assert node.outputs[0].sizes == (1, 8, 3, 3) and node.outputs[0].total_bytes == 8 * 9 * 4


def test_broadcasts_are_zero_stride_views():
    node = only(dml(CASES["Add"][0]))
    assert node.inputs[0].strides == (0, 36, 6, 1)  # a size-1 dim is read with stride 0
    assert node.inputs[1].sizes == (1, 4, 6, 6) and node.inputs[1].strides == (0, 1, 0, 0)
    assert node.inputs[1].total_bytes == 16  # four floats are read, whatever the view
    node = only(dml(CASES["Mul"][0]))
    assert node.inputs[1].strides == (0, 0, 0, 1)
    node = only(dml(CASES["MatMul"][0]))  # the 2-D B is shared by the batch of A
    assert node.inputs[0].sizes == (1, 2, 5, 3) and node.inputs[1].sizes == (1, 2, 3, 4)
    assert node.inputs[1].strides == (0, 0, 4, 1) and node.fields["TransB"] == 0


def test_gemm_pools_softmax_concat_views_and_scalars():
    node = only(dml(CASES["Gemm"][0]))
    assert (node.fields["TransA"], node.fields["TransB"], node.fields["Alpha"], node.fields["Beta"]) == (0, 1, 2.0, 0.5)
    assert node.inputs[2].sizes == (1, 1, 2, 4) and node.inputs[2].strides == (0, 0, 0, 1)
    node = only(dml(CASES["MaxPool"][0]))  # ceil mode: 6 -> 3 windows of 3, stride 2: one extra end row/column
    assert node.fields["WindowSize"] == [3, 3] and node.fields["EndPadding"] == [1, 1]
    node = only(dml(CASES["AveragePool"][0]))
    assert node.fields["IncludePadding"] is False and node.fields["StartPadding"] == [1, 1]
    node = only(dml(CASES["GlobalAveragePool"][0]))
    assert node.fields["WindowSize"] == [6, 6] and node.fields["Strides"] == [1, 1]
    node = only(dml(CASES["Softmax"][0]))  # Softmax-11 over dims 1.. : [1, 1, rows, cols]
    assert node.inputs[0].sizes == (1, 1, 1, 10) and node.outputs[0].sizes == (1, 1, 1, 10)
    node = only(dml(CASES["Concat"][0]))
    assert node.fields == {"InputCount": 2, "Axis": 3} and [d.sizes for d in node.inputs] == [
        (1, 1, 2, 3),
        (1, 1, 2, 5),
    ]
    node = only(dml(CASES["Reshape"][0]))  # the same bytes read at the new sizes
    assert node.inputs[0].sizes == node.outputs[0].sizes == (1, 1, 4, 36)
    assert only(dml(CASES["Neg"][0])).fields["ScaleBias"] == (-1.0, 0.0)
    assert only(dml(CASES["Clip"][0])).fields == {"Min": 0.0, "Max": 6.0}
    node = only(dml(CASES["BatchNormalization"][0]))
    assert node.fields["Spatial"] is True and node.fields["Epsilon"] == pytest.approx(1e-3)
    assert [d.sizes for d in node.inputs[1:]] == [(1, 4, 1, 1)] * 4
    node = only(dml(CASES["LRN"][0]))
    assert node.fields == {
        "CrossChannel": True,
        "LocalSize": 3,
        "Alpha": pytest.approx(1e-4),
        "Beta": 0.75,
        "Bias": 2.0,
    }


def test_chains_use_intermediate_edges_and_outputs_get_their_own_node():
    graph_proto = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Add", ["r", "x"], ["y"], name="add"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [2, 3]), helper.make_tensor_value_info("x_out", F, [2, 3])],
    )
    graph_proto.node.append(helper.make_node("Identity", ["x"], ["x_out"], name="copy"))
    built = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 17)])
    graph = dml(built)
    assert graph.operators() == ["ACTIVATION_RELU", "ELEMENT_WISE_ADD", "ELEMENT_WISE_IDENTITY"]
    assert graph.intermediate_edges == ((0, 0, 1, 0),)
    assert sorted(graph.input_edges) == [(0, 0, 0), (0, 1, 1), (0, 2, 0)]
    assert graph.output_edges == ((1, 0, 0), (2, 0, 1))
    _validate(graph)


@pytest.mark.parametrize(
    ("built", "reason"),
    [
        (model("Erf", [X4], [Y4]), "outside the DirectML execution path's operator subset"),
        (model("Relu", [("x", F, [1, 2, 3, 4, 5])], [("y", F, [1, 2, 3, 4, 5])]), "rank 5"),
        (model("Relu", [("x", TensorProto.INT32, [2])], [("y", TensorProto.INT32, [2])]), "int32"),
        (model("Relu", [("x", F, ["n", 2])], [("y", F, ["n", 2])]), "no static shape"),
        (model("Softmax", [("x", F, [2, 3])], [("y", F, [2, 3])], axis=0), "not the last"),
        (model("Max", [X4, ("z", F, [1, 4, 6, 6]), ("u", F, [1, 4, 6, 6])], [Y4]), "3 inputs"),
    ],
    ids=["erf", "rank5", "int32", "dynamic", "softmax-axis", "max3"],
)
def test_refusals_name_the_node_and_the_reason(built, reason):
    with pytest.raises(Untranslatable, match=reason):
        dml(built)
    assert reason in declines(built)["node"]


class _Recorder(Provider):
    partitions: list = []

    def capability(self, graph, kernels):
        return table_claims(TABLE, graph)

    def compile(self, partition):
        _Recorder.partitions.append(partition)
        return CompiledPartition(partition.inputs, partition.outputs, lambda *values: [])


class _RecorderFactory(ProviderFactory):
    name, ort_name, priority = "dml_recorder", "DmlExecutionProvider", -1

    def devices(self):
        return [Device("gpu", 0, name="records partitions")]

    def create(self, device, options):
        return _Recorder(self, device)


class _Plugin:
    @onnxplug.hookimpl
    def onnxplug_provider_factories(self):
        return [_RecorderFactory()]


LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "inception_v1"])
def test_light_model_partitions_translate_whole(name):
    """The table's partitions of these convnets lie entirely inside the subset: one DirectML
    graph each, every ONNX node accounted for."""
    _Recorder.partitions = []
    environment = onnxplug.Environment(only=["cpu"])
    environment.register(_Plugin(), name="recorder")
    path = os.path.join(LIGHT, f"light_{name}.onnx")
    onnxplug.InferenceSession(path, providers=["DmlExecutionProvider", "CPUExecutionProvider"], environment=environment)
    assert _Recorder.partitions
    for partition in _Recorder.partitions:
        graph = translate_partition(partition)
        _validate(graph)
        assert {node.node for node in graph.nodes} == set(partition.nodes)
        assert graph.input_names == partition.inputs and graph.output_names == partition.outputs
        assert len([g for g in graph.inputs if g.value is None]) == len(partition.inputs)


class _ClaimingFactory(DmlProviderFactory):
    """The real DirectML provider's capability(), with a device as on Windows; compile() records
    the partitions instead of creating a D3D12 device (this checks the claim, not an execution)."""

    name = "directml_claims"

    def devices(self):
        return [Device("gpu", 0, name="claims only")]

    def create(self, device, options):
        return _RecordingDml(self, device)


class _RecordingDml(DmlProvider):
    def compile(self, partition):
        _Recorder.partitions.append(partition)
        return CompiledPartition(partition.inputs, partition.outputs, lambda *values: [])


class _ClaimingPlugin:
    @onnxplug.hookimpl
    def onnxplug_provider_factories(self):
        return [_ClaimingFactory()]


def test_the_provider_claims_only_the_subset_at_run_time():
    """Relu → Erf → Relu: the table takes Erf, the execution path's subset does not, so the
    provider declines it with that reason (planning would still put it on DirectML)."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"], name="first"),
            helper.make_node("Erf", ["a"], ["b"], name="erf"),
            helper.make_node("Relu", ["b"], ["y"], name="last"),
        ],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [2, 3])],
    )
    built = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    _Recorder.partitions = []
    environment = onnxplug.Environment(only=["cpu"])
    environment.register(_ClaimingPlugin(), name="claims")
    session = onnxplug.InferenceSession(
        built, providers=["DmlExecutionProvider", "CPUExecutionProvider"], environment=environment
    )
    report = session.get_partition_report()
    assert {n.name: n.provider for n in report.nodes} == {
        "first": "DmlExecutionProvider",
        "erf": "CPUExecutionProvider",
        "last": "DmlExecutionProvider",
    }
    assert any(
        "the DirectML execution path does not run it" in r for r in report.declined["DmlExecutionProvider"]["erf"]
    )
    assert sorted(p.nodes for p in _Recorder.partitions) == [("first",), ("last",)]
    assert plan_for_target(built, "directml", environment=environment).claimed == ("first", "erf", "last")
