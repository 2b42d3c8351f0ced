"""Shape inference at load time must never take the process down.

onnx's inference functions for a few ops read their first input's type without checking that
it is known (onnx/onnx#2647); fed by a value onnx cannot type, they segfault.  Every load runs
in a child process so that a crash shows up as a failed test rather than killing pytest.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxplug.graph._infer import PARKED_DOMAIN, UNGUARDED_INPUT_TYPE, WEIGHT_BYTES, infer_types, weightless_copy

_TREE5 = {
    "tree_roots": [0],
    "nodes_featureids": [0],
    "nodes_splits": helper.make_tensor("s", TensorProto.FLOAT, [1], [0.5]),
    "nodes_modes": helper.make_tensor("m", TensorProto.UINT8, [1], [0]),
    "nodes_truenodeids": [0],
    "nodes_trueleafs": [1],
    "nodes_falsenodeids": [1],
    "nodes_falseleafs": [1],
    "leaf_targetids": [0, 0],
    "leaf_weights": helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0]),
}

#: One node per op that crashes onnx's inference on an untyped first input.
CASES = {
    "LabelEncoder": ("ai.onnx.ml", {"keys_floats": [1.0], "values_strings": ["a"], "default_string": "z"}),
    "DictVectorizer": ("ai.onnx.ml", {"string_vocabulary": ["a"]}),
    "TreeEnsemble": ("ai.onnx.ml", _TREE5),
    "EyeLike": ("", {"dtype": 1}),
    "RegexFullMatch": ("", {"pattern": "a"}),
}


def _fed_by_untyped(op: str, domain: str, attrs: dict) -> onnx.ModelProto:
    """``op`` fed by the output of an op from a domain onnx has no schema for."""
    nodes = [
        helper.make_node("Opaque", ["x"], ["u"], domain="test.opaque"),
        helper.make_node(op, ["u"], ["y"], domain=domain, **attrs),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 1])],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 5), helper.make_opsetid("test.opaque", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def _in_a_function() -> onnx.ModelProto:
    """The LabelEncoder case inside a model-local function (onnx infers bodies per call)."""
    ml_opsets = [helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 4)]
    body = [
        helper.make_node("Opaque", ["a"], ["u"], domain="test.opaque"),
        helper.make_node("LabelEncoder", ["u"], ["b"], domain="ai.onnx.ml", keys_floats=[1.0], values_strings=["a"]),
    ]
    function = helper.make_function(
        "local", "F", ["a"], ["b"], body, opset_imports=ml_opsets + [helper.make_opsetid("test.opaque", 1)]
    )
    graph = helper.make_graph(
        [helper.make_node("F", ["x"], ["y"], domain="local")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
    )
    opsets = ml_opsets + [helper.make_opsetid("test.opaque", 1), helper.make_opsetid("local", 1)]
    return helper.make_model(graph, opset_imports=opsets, functions=[function])


def _load_in_child(models: dict[str, onnx.ModelProto], tmp_path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Load each model in one child process; the child prints a name once its model loaded."""
    paths = []
    for name, model in models.items():
        path = tmp_path / f"{name}.onnx"
        onnx.save(model, path)
        paths.append(str(path))
    code = (
        "import os, sys\n"
        "from onnxplug.graph import load_model\n"
        "for path in sys.argv[1:]:\n"
        "    load_model(path)\n"
        "    print(os.path.basename(path)[:-5], flush=True)\n"
    )
    result = subprocess.run([sys.executable, "-c", code, *paths], capture_output=True, text=True, timeout=300)
    return result, result.stdout.split()


def test_every_listed_op_has_a_case():
    assert {op for _, op in UNGUARDED_INPUT_TYPE} - {"OneHotEncoder"} == set(CASES)


def test_load_survives_untyped_inputs(tmp_path):
    models = {op: _fed_by_untyped(op, *CASES[op]) for op in sorted(CASES)}
    # onnx hands a declared-but-empty type on as a null pointer too.
    empty = _fed_by_untyped("LabelEncoder", *CASES["LabelEncoder"])
    empty.graph.value_info.add().name = "u"
    models["empty_value_info"] = empty
    models["function_body"] = _in_a_function()
    result, loaded = _load_in_child(models, tmp_path)
    died_on = next((name for name in models if name not in loaded), None)
    assert result.returncode == 0, f"load of {died_on} ended with {result.returncode}: {result.stderr[-2000:]}"
    assert loaded == list(models)


def test_a_parked_node_rejoins_once_its_input_is_typed():
    # Identity types "u" in the first round; the LabelEncoder is then inferred as usual.
    nodes = [
        helper.make_node("Identity", ["x"], ["u"]),
        helper.make_node("LabelEncoder", ["u"], ["y"], domain="ai.onnx.ml", keys_floats=[1.0], values_strings=["a"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 4)])
    inferred = infer_types(model)
    types = {v.name: v.type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
    assert types["y"].tensor_type.elem_type == TensorProto.STRING
    assert [n.domain for n in inferred.graph.node] == ["", "ai.onnx.ml"]
    assert PARKED_DOMAIN not in {op.domain for op in inferred.opset_import}


def test_parked_nodes_keep_their_domain_and_the_rest_is_inferred(tmp_path):
    nodes = [
        helper.make_node("Opaque", ["x"], ["u"], domain="test.opaque"),
        helper.make_node("LabelEncoder", ["u"], ["s"], domain="ai.onnx.ml", keys_floats=[1.0], values_strings=["a"]),
        helper.make_node("Relu", ["x"], ["r"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [
            helper.make_tensor_value_info("s", TensorProto.UNDEFINED, None),
            helper.make_tensor_value_info("r", TensorProto.UNDEFINED, None),
        ],
    )
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 4), helper.make_opsetid("test.opaque", 1)]
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    # In a child: without the parking this load segfaults.
    code = (
        "import sys\n"
        "from onnxplug.graph import load_model\n"
        "loaded = load_model(sys.argv[1])\n"
        "print(','.join(n.domain or '-' for n in loaded.proto.graph.node))\n"
        "print({o.name: o.type.tensor_type.elem_type for o in loaded.proto.graph.output}['r'])\n"
        "print(sorted(loaded.opsets))\n"
    )
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    domains, relu_type, opset_domains = result.stdout.splitlines()
    assert domains == "test.opaque,ai.onnx.ml,-"
    assert int(relu_type) == TensorProto.FLOAT
    assert PARKED_DOMAIN not in opset_domains


def test_weights_travel_to_inference_without_their_data_and_the_types_match_onnxs():
    from onnx import numpy_helper

    weight = np.random.default_rng(0).standard_normal((WEIGHT_BYTES // 4, 2)).astype(np.float32)
    untyped = helper.make_tensor_value_info
    then_branch = helper.make_graph([helper.make_node("Relu", ["m"], ["t"])], "then", [], [untyped("t", 1, None)])
    else_branch = helper.make_graph([helper.make_node("Neg", ["m"], ["e"])], "else", [], [untyped("e", 1, None)])
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("If", ["c"], ["branch"], then_branch=then_branch, else_branch=else_branch),
            helper.make_node("Reshape", ["branch", "shape"], ["y"]),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, WEIGHT_BYTES // 4]),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.array([2, 3], np.int64), "shape")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    skeleton = weightless_copy(model)  # what onnx's inference is given
    assert not skeleton.graph.initializer[0].raw_data and list(skeleton.graph.initializer[0].dims) == list(weight.shape)
    assert skeleton.graph.initializer[1] == model.graph.initializer[1]  # small tensors keep their data
    expected = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    inferred = infer_types(model)
    assert inferred.graph.value_info == expected.graph.value_info and len(inferred.graph.value_info) >= 2
    assert inferred.graph.output == expected.graph.output  # y: float [2, 3], from the shape constant
    assert inferred.graph.node[1].attribute == expected.graph.node[1].attribute  # the branches' types
    np.testing.assert_array_equal(numpy_helper.to_array(inferred.graph.initializer[0]), weight)
