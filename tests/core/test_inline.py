"""Function inlining: model-local functions and ONNX schema functions nobody claims.

A fake provider ("prim") with kernels for a handful of primitive ops only is registered in a
fresh Environment, so every function op must run through its body.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.helper as oh
import pytest

import onnxplug
from onnxplug.api import Device, KernelProvider, ProviderFactory
from onnxplug.graph import np_dtype
from onnxplug.kernels import KernelRegistry

kernels = KernelRegistry("prim")


@kernels.kernel("Add", since=(14,))
def add(a, b):
    return a + b


@kernels.kernel("Mul", since=(14,))
def mul(a, b):
    return a * b


@kernels.kernel("Identity", since=(16,))
def identity(x):
    return x


@kernels.kernel("Neg", since=(13,))
def neg(x):
    return -x


@kernels.kernel("If", since=(16,), factory=True)
def if_(ctx, *, then_branch, else_branch):
    branches = {True: ctx.subgraph("then_branch"), False: ctx.subgraph("else_branch")}
    return lambda cond, *outer: tuple(branches[bool(cond)]((), outer))


@kernels.kernel("Max", since=(13,))
def maximum(*xs):
    return np.maximum.reduce(np.broadcast_arrays(*xs))


@kernels.kernel("Exp", since=(13,))
def exp(x):
    return np.exp(x)


@kernels.kernel("Log", since=(13,))
def log(x):
    return np.log(x)


@kernels.kernel("Tanh", since=(13,))
def tanh(x):
    return np.tanh(x)


@kernels.kernel("Cast", since=(13,))
def cast(x, *, to):
    return x.astype(np_dtype(to))


@kernels.kernel("Constant", since=(13,))
def constant(**attrs):
    return np.asarray(attrs["value"])


class PrimFactory(ProviderFactory):
    name = "prim"
    ort_name = "PrimExecutionProvider"
    priority = 10

    def devices(self):
        return [Device("cpu")]

    def create(self, device, options):
        self.check_options(options)
        return KernelProvider(self, device)


class PrimPlugin:
    @onnxplug.hookimpl
    def onnxplug_provider_factories(self):
        return [PrimFactory()]

    @onnxplug.hookimpl
    def onnxplug_kernels(self, provider):
        return [kernels] if provider.name == "prim" else []


@pytest.fixture(scope="module")
def environment():
    env = onnxplug.Environment(entry_points=[])
    env.register(PrimPlugin(), name="prim")
    return env


def session(environment, model: onnx.ModelProto):
    return onnxplug.InferenceSession(
        model.SerializeToString(), providers=["PrimExecutionProvider"], enable_fallback=0, environment=environment
    )


def one_op_model(op: str, opset: int, **attrs) -> onnx.ModelProto:
    graph = oh.make_graph(
        [oh.make_node(op, ["x"], ["y"], **attrs)],
        "g",
        [oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])],
    )
    return oh.make_model(graph, opset_imports=[oh.make_opsetid("", opset)])


def local_model(functions, call_op="F", attrs=None) -> onnx.ModelProto:
    graph = oh.make_graph(
        [oh.make_node(call_op, ["x", "z"], ["y"], domain="local", **(attrs or {}))],
        "g",
        [
            oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2]),
            oh.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2]),
        ],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    )
    return oh.make_model(
        graph, functions=functions, opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("local", 1)]
    )


X = np.array([-1.0, 0.0, 2.0], dtype=np.float32)
A = np.array([1.0, 2.0], dtype=np.float32)
B = np.array([3.0, 4.0], dtype=np.float32)


def test_model_local_function_is_inlined_with_attribute_references(environment):
    scale = oh.make_node("Constant", [], ["s"])
    scale.attribute.append(onnx.AttributeProto(name="value", ref_attr_name="scale", type=onnx.AttributeProto.TENSOR))
    body = [oh.make_node("Add", ["a", "b"], ["t"]), scale, oh.make_node("Mul", ["t", "s"], ["y"])]
    function = oh.make_function("local", "F", ["a", "b"], ["y"], body, [oh.make_opsetid("", 18)], ["scale"])
    model = local_model([function], attrs={"scale": oh.make_tensor("s", onnx.TensorProto.FLOAT, [], [2.0])})
    sess = session(environment, model)
    (y,) = sess.run(None, {"x": A, "z": B})
    np.testing.assert_allclose(y, (A + B) * 2)
    assert sess.partition_counts() == {"PrimExecutionProvider": 3}


def test_function_calling_function_and_passthrough_output(environment):
    inner = oh.make_function(
        "local", "G", ["a"], ["y", "a"], [oh.make_node("Exp", ["a"], ["y"])], [oh.make_opsetid("", 18)]
    )
    outer = oh.make_function(
        "local",
        "F",
        ["a", "b"],
        ["y"],
        [oh.make_node("G", ["a"], ["e", "a2"], domain="local"), oh.make_node("Add", ["e", "a2"], ["y"])],
        [oh.make_opsetid("", 18), oh.make_opsetid("local", 1)],
    )
    (y,) = session(environment, local_model([outer, inner])).run(None, {"x": A, "z": B})
    np.testing.assert_allclose(y, np.exp(A) + A, rtol=1e-6)


def test_functions_inside_subgraphs_and_subgraphs_inside_functions(environment):
    # F's body is an If whose branches read F's input; F itself is called in an If branch.
    branch = oh.make_graph([oh.make_node("Neg", ["a"], ["r"])], "then", [], [oh.make_tensor_value_info("r", 1, None)])
    other = oh.make_graph([oh.make_node("Exp", ["a"], ["r"])], "else", [], [oh.make_tensor_value_info("r", 1, None)])
    function = oh.make_function(
        "local",
        "F",
        ["a", "c"],
        ["y"],
        [oh.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=other)],
        [oh.make_opsetid("", 18)],
    )
    calls = oh.make_graph(
        [oh.make_node("F", ["x", "c"], ["t"], domain="local")], "calls", [], [oh.make_tensor_value_info("t", 1, None)]
    )
    plain = oh.make_graph(
        [oh.make_node("Mul", ["x", "x"], ["t"])], "plain", [], [oh.make_tensor_value_info("t", 1, None)]
    )
    graph = oh.make_graph(
        [oh.make_node("If", ["d"], ["y"], then_branch=calls, else_branch=plain)],
        "g",
        [
            oh.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2]),
            oh.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
            oh.make_tensor_value_info("d", onnx.TensorProto.BOOL, []),
        ],
        [oh.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])],
    )
    model = oh.make_model(
        graph, functions=[function], opset_imports=[oh.make_opsetid("", 18), oh.make_opsetid("local", 1)]
    )
    sess = session(environment, model)
    for c, d, expected in [(True, True, -A), (False, True, np.exp(A)), (True, False, A * A)]:
        (y,) = sess.run(None, {"x": A, "c": np.array(c), "d": np.array(d)})
        np.testing.assert_allclose(y, expected, rtol=1e-6)


def test_schema_function_nested_and_context_dependent(environment):
    # Mish-18 -> Softplus (function at opset 18) -> CastLike (context-dependent) -> Cast.
    sess = session(environment, one_op_model("Mish", 18))
    (y,) = sess.run(None, {"x": X})
    np.testing.assert_allclose(y, X * np.tanh(np.log1p(np.exp(X))), rtol=1e-6)
    assert y.dtype == np.float32
    assert sess.get_outputs()[0].name == "y"


def test_body_is_chosen_for_the_models_opset(environment):
    # Relu-14 has a body only for opset 18 and later (it needs Max-13 and CastLike-15).
    (y,) = session(environment, one_op_model("Relu", 18)).run(None, {"x": X})
    np.testing.assert_array_equal(y, np.maximum(X, 0))
    with pytest.raises(onnxplug.NotImplemented, match="Relu"):
        session(environment, one_op_model("Relu", 14))


def test_unclaimed_body_node_names_its_origin(environment):
    with pytest.raises(onnxplug.NotImplemented, match=r"HardSigmoid.*inlined from the body of ai\.onnx::HardSwish"):
        session(environment, one_op_model("HardSwish", 14))


def test_claimed_function_op_is_not_inlined(environment):
    registry = KernelRegistry("prim-mish")

    @registry.kernel("Mish", since=(18,))
    def mish(x):
        return np.full_like(x, 7.0)

    class Extra:
        @onnxplug.hookimpl
        def onnxplug_kernels(self, provider):
            return [registry] if provider.name == "prim" else []

    env = onnxplug.Environment(entry_points=[])
    env.register(PrimPlugin(), name="prim")
    env.register(Extra(), name="prim-mish")
    sess = session(env, one_op_model("Mish", 18))
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], np.full(3, 7.0, np.float32))
    assert sess.partition_counts() == {"PrimExecutionProvider": 1}


@pytest.mark.parametrize("cycle", [["F"], ["F", "G"]])
def test_recursive_functions_are_invalid(environment, cycle):
    functions = []
    for index, name in enumerate(cycle):
        callee = cycle[(index + 1) % len(cycle)]
        functions.append(
            oh.make_function(
                "local",
                name,
                ["a", "b"],
                ["y"],
                [oh.make_node(callee, ["a", "b"], ["y"], domain="local")],
                [oh.make_opsetid("", 18), oh.make_opsetid("local", 1)],
            )
        )
    with pytest.raises(onnxplug.InvalidGraph, match="calls itself"):
        session(environment, local_model(functions))


def test_the_optimized_model_is_copied_only_where_a_node_is_inlined(environment, monkeypatch):
    """The partition stage partitions the optimized model as it is, read-only, and copies it only
    where a node nobody claims is to be replaced by its function body (``partition._model``)."""
    from onnxplug.runtime import session as session_module

    made = []
    real = session_module.partition_model

    def spy(model, *rest):
        partitioned = real(model, *rest)
        made.append((model, partitioned))
        return partitioned

    monkeypatch.setattr(session_module, "partition_model", spy)
    sess = session(environment, one_op_model("Neg", 18))
    model, partitioned = made[-1]
    assert partitioned.model is model and not partitioned.own_copy
    np.testing.assert_array_equal(sess.run(None, {"x": X})[0], -X)

    function = oh.make_function(
        "local", "F", ["a", "b"], ["y"], [oh.make_node("Add", ["a", "b"], ["y"])], [oh.make_opsetid("", 18)]
    )
    sess = session(environment, local_model([function]))
    model, partitioned = made[-1]
    assert partitioned.own_copy and partitioned.model is not model
    assert [node.op_type for node in model.graph] == ["F"]  # the optimizer's model is not edited
    assert [node.op_type for node in partitioned.model.graph] == ["Add"]
    np.testing.assert_array_equal(sess.run(None, {"x": A, "z": B})[0], A + B)
