"""The capability-table engine, through the real planner: each kind of check claims the nodes
that meet it and declines the others with a reason that names what the node has instead."""

from __future__ import annotations

import numpy as np
import pytest
from target_models import single_node

from onnxplug.errors import EPFail
from onnxplug.partition.targets import (
    AnyOf,
    AttributeIn,
    AttributeTest,
    CapabilityTable,
    ConstantInput,
    ConstantValue,
    InputAbsent,
    InputRank,
    InputTypes,
    NoOutput,
    OpSupport,
    StaticInput,
    plan_for_target,
    types,
)

PROVIDER = "ToyExecutionProvider"


def _table(*rows, **kwargs):
    return CapabilityTable("toy", PROVIDER, "a toy table for tests", rows=list(rows), **kwargs)


def _decision(model, table):
    """``None`` when the toy provider claims the node named ``node``, else its reason."""
    plan = plan_for_target(model.SerializeToString(), table)
    if "node" in plan.claimed:
        return None
    return "; ".join(plan.declined["node"])


X4 = [("x", "float", [1, 3, 8, 8])]
Y = [("y", "float", None)]


def test_op_not_in_the_table_is_declined_with_the_table_named():
    assert _decision(single_node("Relu", X4, Y), _table(OpSupport("Abs"))) == "ai.onnx::Relu is not in the toy table"


def test_types_claim_listed_and_decline_others():
    table = _table(OpSupport("Relu", types=types("FP32")))
    assert _decision(single_node("Relu", X4, Y), table) is None
    why = _decision(single_node("Relu", [("x", "double", [2])], [("y", "double", [2])]), table)
    assert why == "input 0 ('x') is double; Relu-14 takes float"


def test_types_per_registered_version():
    """A mapping {since: types} holds from each version on (onnxruntime's ``N+``)."""
    table = _table(OpSupport("Equal", types={7: types("FP32"), 11: types("FP32", "INT32")}))
    ints = [("a", "int32", [4]), ("b", "int32", [4])]
    out = [("y", "bool", [4])]
    assert _decision(single_node("Equal", ints, out, opset=11), table) is None
    assert "Equal-7 takes float" in _decision(single_node("Equal", ints, out, opset=10), table)
    newer = _table(OpSupport("Equal", types={13: types("INT32")}))
    assert _decision(single_node("Equal", ints, out, opset=11), newer) == (
        "Equal-11 is older than the first supported version (13)"
    )


def test_opset_range():
    table = _table(OpSupport("Relu"), opsets={"": (9, 13)})
    assert _decision(single_node("Relu", X4, Y, opset=13), table) is None
    assert _decision(single_node("Relu", X4, Y, opset=17), table) == (
        "opset 17 of ai.onnx is outside the supported range 9..13"
    )


def test_constant_input():
    table = _table(OpSupport("Conv", checks=(ConstantInput(1, "weights W"),)))
    weights = {"w": np.ones((4, 3, 3, 3), np.float32)}
    inputs = [*X4, ("w", "float", [4, 3, 3, 3])]
    assert _decision(single_node("Conv", inputs, Y, constants=weights), table) is None
    assert _decision(single_node("Conv", inputs, Y), table) == (
        "weights W ('w') must be a constant initializer; here it is computed at run time"
    )


def test_constant_value():
    table = _table(OpSupport("Pad", checks=(ConstantValue(1, lambda v: (v >= 0).all(), "pads non-negative"),)))
    inputs = [*X4, ("pads", "int64", [8])]
    good = {"pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)}
    bad = {"pads": np.array([0, 0, -1, 1, 0, 0, 1, 1], np.int64)}
    assert _decision(single_node("Pad", inputs, Y, constants=good), table) is None
    assert _decision(single_node("Pad", inputs, Y, constants=bad), table) == (
        "pads non-negative: 'pads' does not meet it"
    )
    assert _decision(single_node("Pad", inputs, Y), table) == "pads non-negative: 'pads' is computed at run time"


def test_input_rank_and_unknown_rank():
    table = _table(OpSupport("MaxPool", checks=(InputRank(0, (4,), "2-D pooling only"),)))
    assert _decision(single_node("MaxPool", X4, Y, kernel_shape=[2, 2]), table) is None
    one_d = single_node("MaxPool", [("x", "float", [1, 3, 8])], Y, kernel_shape=[2])
    assert _decision(one_d, table) == "2-D pooling only: input 0 ('x') has rank 3"


def test_attribute_in_uses_the_default_when_absent():
    table = _table(OpSupport("Pad", checks=(AttributeIn("mode", ("constant",), "constant", "constant mode only"),)))
    inputs = [*X4, ("pads", "int64", [8])]
    pads = {"pads": np.zeros(8, np.int64)}
    assert _decision(single_node("Pad", inputs, Y, constants=pads), table) is None
    assert _decision(single_node("Pad", inputs, Y, constants=pads, mode="reflect"), table) == (
        "constant mode only: mode='reflect'"
    )


def test_attribute_test_and_input_absent_and_no_output():
    ones = AttributeTest("dilations", lambda d: all(v == 1 for v in d), (), "dilations all ones")
    table = _table(OpSupport("MaxPool", checks=(ones, NoOutput(1, "Indices unsupported"))))
    assert _decision(single_node("MaxPool", X4, Y, kernel_shape=[2, 2], dilations=[2, 2]), table) == (
        "dilations all ones: dilations=(2, 2)"
    )
    two = [("y", "float", None), ("i", "int64", None)]
    assert _decision(single_node("MaxPool", X4, two, kernel_shape=[2, 2]), table) == (
        "Indices unsupported: the node produces output 1 ('i')"
    )
    clip = _table(OpSupport("Clip", checks=(InputAbsent(2, "max unsupported"),)))
    inputs = [*X4, ("lo", "float", []), ("hi", "float", [])]
    bounds = {"lo": np.float32(0), "hi": np.float32(6)}
    assert _decision(single_node("Clip", inputs, Y, constants=bounds), clip) == (
        "max unsupported: input 2 ('hi') is given"
    )


def test_any_of_and_input_types():
    options = (InputTypes(1, types("INT32"), "int32"), ConstantInput(1, "indices"))
    either = AnyOf(options, "indices constant unless int32")
    table = _table(OpSupport("Gather", checks=(either,)))
    data = ("x", "float", [5, 4])
    assert _decision(single_node("Gather", [data, ("i", "int32", [2])], Y), table) is None
    constant = {"i": np.array([0, 1], np.int64)}
    assert _decision(single_node("Gather", [data, ("i", "int64", [2])], Y, constants=constant), table) is None
    why = _decision(single_node("Gather", [data, ("i", "int64", [2])], Y), table)
    assert why.startswith("indices constant unless int32 (int32: input 1 is int64; indices ('i') must be a constant")


def test_static_shapes_table_wide_and_per_input():
    dynamic = single_node("Relu", [("x", "float", ["batch", 3])], [("y", "float", ["batch", 3])])
    assert _decision(dynamic, _table(OpSupport("Relu"))) is None
    assert _decision(dynamic, _table(OpSupport("Relu"), static_shapes=True)) == (
        "static shapes only: input 'x' has dynamic dimensions ['batch']"
    )
    per_axis = _table(OpSupport("Hardmax", checks=(StaticInput(0, "axis size known", "axis", -1),)))
    assert _decision(single_node("Hardmax", [("x", "float", ["n", 4])], Y), per_axis) is None
    assert _decision(single_node("Hardmax", [("x", "float", [4, "n"])], Y), per_axis) == (
        "axis size known: 'x' has no static size along axis -1"
    )


def test_table_rows_are_checked():
    with pytest.raises(ValueError, match="lists ai.onnx::Relu twice"):
        _table(OpSupport("Relu"), OpSupport("Relu"))
    with pytest.raises(ValueError, match="unknown type name 'FP33'"):
        types("FP33")


def test_claimed_nodes_fuse_and_planned_partitions_never_run():
    table = _table(OpSupport("Relu"), OpSupport("Abs"), memory="cuda")
    plan = plan_for_target(single_node("Relu", X4, Y).SerializeToString(), table)
    assert plan.fully_supported and list(plan.report.partitions) == ["toy_partition_0"]
    copies = [str(c) for c in plan.report.copies]
    assert copies == ["x: host -> ToyExecutionProvider", "y: ToyExecutionProvider -> host"]
    host = plan_for_target(single_node("Relu", X4, Y).SerializeToString(), _table(OpSupport("Relu")))
    assert host.report.copies == ()  # a host-memory target (NNAPI) needs no copies
    from onnxplug.partition.targets._plan import PlanningFactory

    provider = PlanningFactory(table).create(PlanningFactory(table).devices()[0], {})
    compiled = provider.compile(type("P", (), {"name": "toy_partition_0", "inputs": ("x",), "outputs": ("y",)})())
    with pytest.raises(EPFail, match="part of a plan for ToyExecutionProvider"):
        compiled(np.zeros(1, np.float32))


def test_find_table_by_either_name():
    from onnxplug.partition.targets import find_table
    from onnxplug_nnapi.table import TABLE

    assert find_table("nnapi") is TABLE
    assert find_table("NnapiExecutionProvider") is TABLE


def test_nodes_with_subgraphs_are_declined_with_the_reason():
    from onnx import TensorProto, helper

    def branch(value):
        out = helper.make_tensor_value_info(f"b{value}", TensorProto.FLOAT, [1])
        const = helper.make_node(
            "Constant", [], [f"b{value}"], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [value])
        )
        return helper.make_graph([const], f"branch{value}", [], [out])

    node = helper.make_node("If", ["c"], ["y"], name="node", then_branch=branch(1.0), else_branch=branch(0.0))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    assert _decision(model, _table(OpSupport("If", typed=()))) == (
        "If has subgraphs (else_branch, then_branch); a table cannot check their bodies"
    )
