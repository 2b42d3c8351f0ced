"""cpu.matmul_add_gemm: MatMul + Add → Gemm where Gemm's broadcast of C means the same."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh
import pytest

from onnxplug_cpu.rule_sets import rule_sets

GEMM = [s for s in rule_sets("basic") if s.name == "cpu.matmul_add_gemm"]
F = onnx.TensorProto.FLOAT


def matmul_add(rng, *, a_shape=("batch", 5), c_shape=(3,), bias_first=False, b_input=False, c_input=False):
    b = rng.standard_normal((5, 3)).astype(np.float32)
    c = rng.standard_normal(c_shape).astype(np.float32)
    inputs = [oh.make_tensor_value_info("a", F, list(a_shape))]
    inits = []
    for name, array, as_input in (("b", b, b_input), ("c", c, c_input)):
        if as_input:
            inputs.append(oh.make_tensor_value_info(name, F, array.shape))
        else:
            inits.append(nh.from_array(array, name))
    add = ["c", "mm"] if bias_first else ["mm", "c"]
    nodes = [oh.make_node("MatMul", ["a", "b"], ["mm"]), oh.make_node("Add", add, ["y"])]
    graph = oh.make_graph(nodes, "mm_add", inputs, [oh.make_tensor_value_info("y", F, None)], initializer=inits)
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8), (b, c)


@pytest.mark.parametrize("c_shape", [(3,), (1, 3), (4, 1), (4, 3), ()])
@pytest.mark.parametrize("bias_first", [False, True])
def test_matmul_add_becomes_gemm(fusion, rng, c_shape, bias_first):
    model, _ = matmul_add(rng, a_shape=(4, 5), c_shape=c_shape, bias_first=bias_first)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    _, applied = fusion.check(model, GEMM, {"a": a}, {"Gemm": 1})
    assert applied == {"cpu.matmul_add_gemm": 1}


def test_dynamic_rows(fusion, rng):
    model, _ = matmul_add(rng, a_shape=("batch", 5))
    a = rng.standard_normal((7, 5)).astype(np.float32)
    fusion.check(model, GEMM, {"a": a}, {"Gemm": 1})


def test_non_constant_c_is_fused(fusion, rng):
    model, (_, c) = matmul_add(rng, a_shape=(4, 5), c_input=True)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    fusion.check(model, GEMM, {"a": a, "c": c}, {"Gemm": 1})


@pytest.mark.parametrize(
    "kwargs,reason",
    [
        ({"a_shape": (2, 4, 5)}, "A is not known to be 2-D"),  # batched A: Gemm is 2-D only
        ({"a_shape": (4, 5), "b_input": True}, "B is not a constant"),
        ({"a_shape": (1, 5), "c_shape": (4, 3)}, "does not broadcast"),  # C would broadcast the rows up
        ({"a_shape": (4, 5), "c_shape": (2, 4, 3)}, "more than 2 dimensions"),
        ({"a_shape": ("batch", 5), "c_shape": (4, 1)}, "does not broadcast"),  # rows may not match the batch
        ({"a_shape": None}, "A is not known to be 2-D"),  # A's rank unknown
    ],
)
def test_lookalikes_are_not_fused(fusion, rng, kwargs, reason):
    a_shape = kwargs.pop("a_shape")
    model, _ = matmul_add(rng, a_shape=a_shape or (4, 5), **kwargs)
    if a_shape is None:
        model.graph.input[0].type.tensor_type.ClearField("shape")
    fusion.assert_unchanged(model, GEMM, reason)


def test_integer_matmul_is_not_fused(fusion, rng):
    """Gemm takes integers only from opset 11 on; integer MatMul + Add stays as it is."""
    i32 = onnx.TensorProto.INT32
    inits = [nh.from_array(np.ones((5, 3), np.int32), "b"), nh.from_array(np.ones(3, np.int32), "c")]
    nodes = [oh.make_node("MatMul", ["a", "b"], ["mm"]), oh.make_node("Add", ["mm", "c"], ["y"])]
    graph = oh.make_graph(
        nodes, "int", [oh.make_tensor_value_info("a", i32, [4, 5])], [oh.make_tensor_value_info("y", i32, None)], inits
    )
    fusion.assert_unchanged(
        oh.make_model(graph, opset_imports=[oh.make_opsetid("", 17)], ir_version=8), GEMM, "Gemm does not take"
    )


def test_opset_6_is_not_fused(fusion, rng):
    """Before opset 7 Gemm's C broadcasts only with ``broadcast=1``; the rule leaves such models alone."""
    model, _ = matmul_add(rng, a_shape=(4, 5))
    model.opset_import[0].version = 6
    next(n for n in model.graph.node if n.op_type == "Add").attribute.append(oh.make_attribute("broadcast", 1))
    fusion.assert_unchanged(model, GEMM, "from opset 7 on")
