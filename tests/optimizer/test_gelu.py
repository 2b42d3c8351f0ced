"""ms_ops.gelu, ms_ops.fast_gelu, ms_ops.bias_gelu: the Gelu forms torch writes → contrib ops."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.helper as oh
import onnx.numpy_helper as nh
import pytest

from onnxplug_ms_ops.rules import rule_sets as ms_rule_sets

SETS = {s.name: s for s in ms_rule_sets("extended")}
F = onnx.TensorProto.FLOAT
MS = "com.microsoft"


class Graph:
    """A tiny graph writer: ``g.op("Mul", a, b)`` returns the output name; floats become constants."""

    def __init__(self, shape=(2, 3, 8)):
        self.nodes, self.inits, self.shape = [], [], shape

    def const(self, value, dtype=np.float32):
        name = f"c{len(self.inits)}"
        self.inits.append(nh.from_array(np.array(value, dtype), name))
        return name

    def op(self, op_type, *inputs, domain="", **attrs):
        names = [self.const(i) if isinstance(i, float) else i for i in inputs]
        out = f"t{len(self.nodes)}"
        self.nodes.append(oh.make_node(op_type, names, [out], domain=domain, **attrs))
        return out

    def model(self, out, opset=18, extra_inputs=()):
        inputs = [oh.make_tensor_value_info("x", F, list(self.shape)), *extra_inputs]
        graph = oh.make_graph(
            self.nodes, "g", inputs, [oh.make_tensor_value_info(out, F, None)], initializer=self.inits
        )
        opsets = [oh.make_opsetid("", opset), oh.make_opsetid(MS, 1)]
        return oh.make_model(graph, opset_imports=opsets, ir_version=8)


def erf_term(g, x, *, by_mul=False, one_first=False):
    scaled = g.op("Mul", x, 1 / math.sqrt(2)) if by_mul else g.op("Div", x, math.sqrt(2))
    erf = g.op("Erf", scaled)
    return g.op("Add", 1.0, erf) if one_first else g.op("Add", erf, 1.0)


def tanh_term(g, x, *, cube="Pow"):
    cubed = g.op("Pow", x, 3.0) if cube == "Pow" else g.op("Mul", x, g.op("Mul", x, x))
    inner = g.op("Add", x, g.op("Mul", 0.044715, cubed))
    return g.op("Add", 1.0, g.op("Tanh", g.op("Mul", math.sqrt(2 / math.pi), inner)))


def half_x(g, x, term, grouping):
    if grouping == "torchlib":  # Mul(Mul(x, term), 0.5)
        return g.op("Mul", g.op("Mul", x, term), 0.5)
    if grouping == "hf":  # 0.5 * x * term, as HF's NewGELUActivation writes it
        return g.op("Mul", g.op("Mul", 0.5, x), term)
    return g.op("Mul", x, g.op("Mul", 0.5, term))  # x * (0.5 * term)


@pytest.mark.parametrize("grouping", ["torchlib", "hf", "inner"])
@pytest.mark.parametrize("by_mul,one_first", [(False, False), (True, True)])
def test_erf_gelu(fusion, rng, grouping, by_mul, one_first):
    g = Graph()
    out = half_x(g, "x", erf_term(g, "x", by_mul=by_mul, one_first=one_first), grouping)
    x = rng.standard_normal(g.shape).astype(np.float32) * 3
    _, applied = fusion.check(g.model(out), [SETS["ms_ops.gelu"]], {"x": x}, {f"{MS}.Gelu": 1})
    assert applied == {"ms_ops.gelu": 1}


@pytest.mark.parametrize("grouping", ["torchlib", "hf", "inner"])
@pytest.mark.parametrize("cube", ["Pow", "Mul"])
def test_tanh_gelu(fusion, rng, grouping, cube):
    g = Graph()
    out = half_x(g, "x", tanh_term(g, "x", cube=cube), grouping)
    x = rng.standard_normal(g.shape).astype(np.float32) * 3
    fusion.check(g.model(out), [SETS["ms_ops.fast_gelu"]], {"x": x}, {f"{MS}.FastGelu": 1})


@pytest.mark.parametrize("gelu_form", ["erf", "onnx"])
@pytest.mark.parametrize("bias_first", [False, True])
def test_bias_gelu(fusion, rng, gelu_form, bias_first):
    g = Graph()
    bias = g.const(rng.standard_normal(8))
    added = g.op("Add", bias, "x") if bias_first else g.op("Add", "x", bias)
    if gelu_form == "erf":
        out, opset = half_x(g, added, erf_term(g, added), "torchlib"), 18
    else:
        out, opset = g.op("Gelu", added), 20
    x = rng.standard_normal(g.shape).astype(np.float32)
    sets = [SETS["ms_ops.gelu"], SETS["ms_ops.bias_gelu"]]
    _, applied = fusion.check(g.model(out, opset=opset), sets, {"x": x}, {f"{MS}.BiasGelu": 1})
    assert applied["ms_ops.bias_gelu"] == 1


def test_wrong_constants_are_not_gelu(fusion):
    g = Graph()
    scaled = g.op("Div", "x", 1.5)  # not sqrt(2)
    out = half_x(g, "x", g.op("Add", g.op("Erf", scaled), 1.0), "torchlib")
    fusion.assert_unchanged(g.model(out), [SETS["ms_ops.gelu"]])


def test_erf_of_another_tensor_is_not_gelu(fusion):
    g = Graph()
    term = erf_term(g, "y")
    out = half_x(g, "x", term, "torchlib")
    fusion.assert_unchanged(
        g.model(out, extra_inputs=[oh.make_tensor_value_info("y", F, [2, 3, 8])]), [SETS["ms_ops.gelu"]]
    )


def test_wrong_cubic_coefficient_is_not_fast_gelu(fusion):
    g = Graph()
    inner = g.op("Add", "x", g.op("Mul", 0.05, g.op("Pow", "x", 3.0)))
    term = g.op("Add", 1.0, g.op("Tanh", g.op("Mul", math.sqrt(2 / math.pi), inner)))
    fusion.assert_unchanged(g.model(half_x(g, "x", term, "hf")), [SETS["ms_ops.fast_gelu"]])


@pytest.mark.parametrize("bias_shape", [(3, 8), (1,)])
def test_bias_that_broadcasts_is_not_bias_gelu(fusion, rng, bias_shape):
    g = Graph()
    out = g.op("Gelu", g.op("Add", "x", g.const(rng.standard_normal(bias_shape))))
    fusion.assert_unchanged(g.model(out, opset=20), [SETS["ms_ops.bias_gelu"]], "bias")


def test_tanh_gelu_op_is_not_bias_gelu(fusion, rng):
    g = Graph()
    out = g.op("Gelu", g.op("Add", "x", g.const(rng.standard_normal(8))), approximate="tanh")
    fusion.assert_unchanged(g.model(out, opset=20), [SETS["ms_ops.bias_gelu"]])


@pytest.mark.parametrize("bias_shape,fused", [((8,), True), ((3, 8), False), ((1,), False)])
def test_fast_gelu_takes_the_bias(fusion, rng, bias_shape, fused):
    """GPT-2's MLP: MatMul + Add(bias) + tanh Gelu; the bias Add goes into FastGelu."""
    g = Graph()
    added = g.op("Add", "x", g.const(rng.standard_normal(bias_shape)))
    out = half_x(g, added, tanh_term(g, added), "hf")
    x = rng.standard_normal(g.shape).astype(np.float32)
    expected = {f"{MS}.FastGelu": 1} if fused else {"Add": 1, f"{MS}.FastGelu": 1}
    fused_model, _ = fusion.check(g.model(out), [SETS["ms_ops.fast_gelu"]], {"x": x}, expected)
    assert len(next(n for n in fused_model.graph if n.op_type == "FastGelu").inputs) == (2 if fused else 1)


@pytest.mark.parametrize("sigmoid_first", [False, True])
@pytest.mark.parametrize("shape", [(2, 3, 8), (1, 16, 24, 24)])  # the second takes the compiled pass
def test_silu_is_quick_gelu(fusion, rng, sigmoid_first, shape):
    """torch's SiLU export, x * Sigmoid(x), in either operand order → QuickGelu(alpha=1)."""
    g = Graph(shape)
    sig = g.op("Sigmoid", "x")
    out = g.op("Mul", sig, "x") if sigmoid_first else g.op("Mul", "x", sig)
    x = rng.standard_normal(shape).astype(np.float32) * 8
    fused, applied = fusion.check(g.model(out), [SETS["ms_ops.quick_gelu"]], {"x": x}, {f"{MS}.QuickGelu": 1})
    assert applied == {"ms_ops.quick_gelu": 1}
    node = next(n for n in fused.graph if n.op_type == "QuickGelu")
    assert node.attributes.get_float("alpha") == 1.0


def test_sigmoid_of_another_tensor_is_not_quick_gelu(fusion):
    g = Graph()
    out = g.op("Mul", "x", g.op("Sigmoid", "y"))
    model = g.model(out, extra_inputs=[oh.make_tensor_value_info("y", F, [2, 3, 8])])
    fusion.assert_unchanged(model, [SETS["ms_ops.quick_gelu"]])


def test_double_silu_is_not_quick_gelu(fusion):
    """QuickGelu's CPU kernel in onnxruntime is float32 only, so float64 graphs keep their nodes."""
    g = Graph()
    g.nodes.append(oh.make_node("Cast", ["x"], ["xd"], to=onnx.TensorProto.DOUBLE))
    out = g.op("Mul", "xd", g.op("Sigmoid", "xd"))
    g.nodes.append(oh.make_node("Cast", [out], ["y"], to=F))
    fusion.assert_unchanged(g.model("y"), [SETS["ms_ops.quick_gelu"]], "float32")
