"""ai.onnx.ml kernels on tiny hand-built models.

ONNX ships few node cases for this domain, so each op is checked here against hand-computed
values or, where the semantics are onnxruntime's de-facto convention (binary classifiers,
SVM probabilities), against onnxruntime itself as a test-only oracle.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import onnxplug

ML = "ai.onnx.ml"


def _model(op, attrs, inputs, outputs, ml_opset=3, opset=17):
    """inputs/outputs: (name, type proto) pairs; attrs are passed to make_node."""
    node = helper.make_node(op, [n for n, _ in inputs], [n for n, _ in outputs], domain=ML, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_value_info(n, t) for n, t in inputs],
        [helper.make_value_info(n, t) for n, t in outputs],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(ML, ml_opset)], ir_version=8
    )


def _tensor(elem, shape=None):
    return helper.make_tensor_type_proto(elem, shape)


def _run(model, feeds):
    sess = onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle for this test")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _same(got, want, rtol=1e-5, atol=1e-6):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap: a sequence of maps
            _same_maps(g, w)
            continue
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype.kind == "f":
            assert g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            assert g.tolist() == w.tolist()


def _same_maps(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert set(g) == set(w)
        for k in w:
            assert isinstance(g[k], float)
            assert g[k] == pytest.approx(w[k], rel=1e-6)


FLOAT = _tensor(TP.FLOAT)
INT64 = _tensor(TP.INT64)
STRING = _tensor(TP.STRING)
X = np.array([[1.0, -2.0, 3.5], [0.0, 4.0, -1.0], [2.5, 0.5, 0.25], [-3.0, 1.0, 2.0]], np.float32)


# --- simple transforms -----------------------------------------------------------------------


def test_array_feature_extractor_rejects_out_of_range():
    model = _model("ArrayFeatureExtractor", {}, [("X", FLOAT), ("Y", INT64)], [("Z", FLOAT)])
    got = _run(model, {"X": X, "Y": np.array([2, 0], np.int64)})
    np.testing.assert_array_equal(got[0], X[:, [2, 0]])
    with pytest.raises(onnxplug.errors.InvalidArgument, match="out of range"):
        _run(model, {"X": X, "Y": np.array([3], np.int64)})


DOUBLE = _tensor(TP.DOUBLE)
MAP = helper.make_map_type_proto
PARITY = {
    "normalizer_max_nan": (
        "Normalizer",
        {"norm": "MAX"},
        [("X", FLOAT)],
        [("Y", FLOAT)],
        {"X": np.array([[-1, -2, -4], [0, 0, 0], [1, np.nan, 3]], np.float32)},
        3,
    ),
    "normalizer_1d": (
        "Normalizer",
        {"norm": "L2"},
        [("X", FLOAT)],
        [("Y", FLOAT)],
        {"X": np.array([1, -2, 3], np.float32)},
        3,
    ),
    "normalizer_int": (
        "Normalizer",
        {"norm": "L1"},
        [("X", INT64)],
        [("Y", FLOAT)],
        {"X": np.array([[1, -2, 3]], np.int64)},
        3,
    ),
    "afe_1d": (
        "ArrayFeatureExtractor",
        {},
        [("X", FLOAT), ("Y", INT64)],
        [("Z", FLOAT)],
        {"X": np.array([1, 2, 3], np.float32), "Y": np.array([2, 0], np.int64)},
        3,
    ),
    "afe_3d": (
        "ArrayFeatureExtractor",
        {},
        [("X", FLOAT), ("Y", INT64)],
        [("Z", FLOAT)],
        {"X": np.arange(24, dtype=np.float32).reshape(2, 3, 4), "Y": np.array([[3, 1]], np.int64)},
        3,
    ),
    "afe_strings": (
        "ArrayFeatureExtractor",
        {},
        [("X", STRING), ("Y", INT64)],
        [("Z", STRING)],
        {"X": np.array([["a", "b"], ["c", "d"]], dtype=object), "Y": np.array([1], np.int64)},
        3,
    ),
    "scaler_int": (
        "Scaler",
        {"offset": [1.0], "scale": [0.5]},
        [("X", INT64)],
        [("Y", FLOAT)],
        {"X": np.array([[1, 2], [3, 4]], np.int64)},
        3,
    ),
    "scaler_double": (
        "Scaler",
        {"offset": [1.0, 2.0], "scale": [0.5, 2.0]},
        [("X", DOUBLE)],
        [("Y", FLOAT)],
        {"X": np.array([[1, 2], [3, 4]], np.float64)},
        3,
    ),
    "one_hot_float": (
        "OneHotEncoder",
        {"cats_int64s": [1, 2, 3]},
        [("X", FLOAT)],
        [("Y", FLOAT)],
        {"X": np.array([[1.0, 2.7, 3.0]], np.float32)},
        3,
    ),
    "one_hot_strings_2d": (
        "OneHotEncoder",
        {"cats_strings": ["a", "b"]},
        [("X", STRING)],
        [("Y", FLOAT)],
        {"X": np.array([["a", "c"], ["b", "a"]], dtype=object)},
        3,
    ),
    "imputer_1d": (
        "Imputer",
        {"imputed_value_floats": [9.0], "replaced_value_float": 0.0},
        [("X", FLOAT)],
        [("Y", FLOAT)],
        {"X": np.array([0, 1, 0], np.float32)},
        3,
    ),
    "label_encoder_4_tensor_values": (
        "LabelEncoder",
        {"keys_strings": ["a", "b"], "values_tensor": helper.make_tensor("v", TP.DOUBLE, [2], [0.5, 1.5])},
        [("X", STRING)],
        [("Y", DOUBLE)],
        {"X": np.array(["b", "z"], dtype=object)},
        4,
    ),
    "label_encoder_2_strings": (
        "LabelEncoder",
        {"keys_strings": ["a", "b"], "values_strings": ["x", "y"]},
        [("X", STRING)],
        [("Y", STRING)],
        {"X": np.array([["b", "z"]], dtype=object)},
        2,
    ),
    "label_encoder_2_float_keys": (
        "LabelEncoder",
        {"keys_floats": [0.5, 1.5], "values_int64s": [5, 6]},
        [("X", FLOAT)],
        [("Y", INT64)],
        {"X": np.array([1.5, 2.0], np.float32)},
        2,
    ),
    "label_encoder_1_int_to_string": (
        "LabelEncoder",
        {"classes_strings": ["a", "b"], "default_string": "?"},
        [("X", INT64)],
        [("Y", STRING)],
        {"X": np.array([1, 5, 0, -1], np.int64)},
        1,
    ),
    "cast_map_to_string": (
        "CastMap",
        {"cast_to": "TO_STRING"},
        [("X", MAP(TP.INT64, FLOAT))],
        [("Y", STRING)],
        {"X": {2: 1.5, 0: -3.25}},
        3,
    ),
    "cast_map_to_int64": (
        "CastMap",
        {"cast_to": "TO_INT64"},
        [("X", MAP(TP.INT64, FLOAT))],
        [("Y", INT64)],
        {"X": {2: 1.5, 0: -3.75}},
        3,
    ),
    "zip_map_strings": (
        "ZipMap",
        {"classlabels_strings": ["a", "b"]},
        [("X", FLOAT)],
        [("Z", helper.make_sequence_type_proto(MAP(TP.STRING, FLOAT)))],
        {"X": np.array([[0.1, 0.9]], np.float32)},
        3,
    ),
    "linear_regressor_1d": (
        "LinearRegressor",
        {"coefficients": [1.0, 2.0], "intercepts": [0.5]},
        [("X", FLOAT)],
        [("Y", FLOAT)],
        {"X": np.array([1, 2], np.float32)},
        3,
    ),
    "linear_regressor_probit": (
        "LinearRegressor",
        {"coefficients": [0.1, 0.2], "intercepts": [0.3], "post_transform": "PROBIT"},
        [("X", FLOAT)],
        [("Y", FLOAT)],
        {"X": np.array([[0.5, 0.25], [1, 1]], np.float32)},
        3,
    ),
    "linear_classifier_strings": (
        "LinearClassifier",
        {"coefficients": [1.0, 2.0, 0, 1, -1, 0], "intercepts": [0.5, 0, 0], "classlabels_strings": ["a", "b", "c"]},
        [("X", FLOAT)],
        [("Y", STRING), ("Z", FLOAT)],
        {"X": np.array([[1, 2], [-3, 0.5]], np.float32)},
        3,
    ),
}


@pytest.mark.parametrize("case", sorted(PARITY))
def test_matches_onnxruntime(case):
    op, attrs, inputs, outputs, feeds, ml_opset = PARITY[case]
    model = _model(op, attrs, inputs, outputs, ml_opset=ml_opset)
    _same(_run(model, feeds), _ort(model, feeds))


def test_binarizer_rejects_nan():
    model = _model("Binarizer", {"threshold": 0.0}, [("X", FLOAT)], [("Y", FLOAT)])
    with pytest.raises(onnxplug.errors.InvalidArgument, match="NaN"):
        _run(model, {"X": np.array([1.0, np.nan], np.float32)})


def test_binarizer_and_scaler_and_normalizer():
    model = _model("Binarizer", {"threshold": 0.5}, [("X", FLOAT)], [("Y", FLOAT)])
    np.testing.assert_array_equal(_run(model, {"X": X})[0], (X > 0.5).astype(np.float32))
    model = _model("Scaler", {"offset": [1.0, 0.0, -1.0], "scale": [2.0, 0.5, 1.0]}, [("X", FLOAT)], [("Y", FLOAT)])
    np.testing.assert_allclose(_run(model, {"X": X})[0], (X - [1, 0, -1]) * [2, 0.5, 1])
    for norm in ("MAX", "L1", "L2"):
        model = _model("Normalizer", {"norm": norm}, [("X", FLOAT)], [("Y", FLOAT)])
        _same(_run(model, {"X": X}), _ort(model, {"X": X}))


def test_imputer_replaces_nan_per_column():
    x = np.array([[np.nan, 1.0], [2.0, np.nan]], np.float32)
    model = _model(
        "Imputer",
        {"imputed_value_floats": [7.0, 8.0], "replaced_value_float": float("nan")},
        [("X", FLOAT)],
        [("Y", FLOAT)],
    )
    np.testing.assert_array_equal(_run(model, {"X": x})[0], [[7.0, 1.0], [2.0, 8.0]])
    xi = np.array([[0, 5], [3, 0]], np.int64)
    model = _model("Imputer", {"imputed_value_int64s": [-1], "replaced_value_int64": 0}, [("X", INT64)], [("Y", INT64)])
    np.testing.assert_array_equal(_run(model, {"X": xi})[0], [[-1, 5], [3, -1]])


def test_category_mapper_both_directions():
    attrs = {"cats_strings": ["a", "b", "c"], "cats_int64s": [10, 20, 30], "default_int64": -7, "default_string": "?"}
    model = _model("CategoryMapper", attrs, [("X", STRING)], [("Y", INT64)])
    got = _run(model, {"X": np.array([["b", "zz"], ["c", "a"]], dtype=object)})
    np.testing.assert_array_equal(got[0], [[20, -7], [30, 10]])
    model = _model("CategoryMapper", attrs, [("X", INT64)], [("Y", STRING)])
    got = _run(model, {"X": np.array([30, 11, 10], np.int64)})
    assert got[0].tolist() == ["c", "?", "a"]


def test_label_encoder_versions():
    model = _model(
        "LabelEncoder", {"classes_strings": ["x", "y"], "default_int64": 9}, [("X", STRING)], [("Y", INT64)], ml_opset=1
    )
    np.testing.assert_array_equal(_run(model, {"X": np.array(["y", "q", "x"], dtype=object)})[0], [1, 9, 0])
    attrs = {"keys_floats": [0.5, float("nan")], "values_strings": ["half", "nan"], "default_string": "-"}
    model = _model("LabelEncoder", attrs, [("X", FLOAT)], [("Y", STRING)], ml_opset=2)
    got = _run(model, {"X": np.array([np.nan, 0.5, 3.0], np.float32)})
    assert got[0].tolist() == ["nan", "half", "-"]
    attrs = {"keys_int64s": [3, 1], "values_floats": [0.25, 1.5], "default_float": -1.0}
    model = _model("LabelEncoder", attrs, [("X", INT64)], [("Y", FLOAT)], ml_opset=4)
    np.testing.assert_array_equal(_run(model, {"X": np.array([1, 2, 3], np.int64)})[0], [1.5, -1.0, 0.25])


def test_one_hot_encoder():
    model = _model("OneHotEncoder", {"cats_int64s": [4, 2, 7]}, [("X", INT64)], [("Y", FLOAT)])
    got = _run(model, {"X": np.array([[2, 5]], np.int64)})
    np.testing.assert_array_equal(got[0], [[[0, 1, 0], [0, 0, 0]]])
    model = _model("OneHotEncoder", {"cats_strings": ["a", "b"], "zeros": 0}, [("X", STRING)], [("Y", FLOAT)])
    np.testing.assert_array_equal(_run(model, {"X": np.array(["b"], dtype=object)})[0], [[0, 1]])
    with pytest.raises(onnxplug.errors.InvalidArgument):
        _run(model, {"X": np.array(["c"], dtype=object)})


def test_feature_vectorizer_pads_and_truncates():
    model = _model("FeatureVectorizer", {"inputdimensions": [2, 3]}, [("A", FLOAT), ("B", INT64)], [("Y", FLOAT)])
    got = _run(model, {"A": X[:2], "B": np.array([[1], [2]], np.int64)})
    np.testing.assert_array_equal(got[0], [[1, -2, 1, 0, 0], [0, 4, 2, 0, 0]])


def test_dict_vectorizer_and_cast_map():
    map_type = helper.make_map_type_proto(TP.STRING, FLOAT)
    model = _model("DictVectorizer", {"string_vocabulary": ["a", "b", "c"]}, [("X", map_type)], [("Y", FLOAT)])
    got = _run(model, {"X": {"c": 2.0, "a": 1.0}})
    np.testing.assert_array_equal(got[0], np.array([[1.0, 0.0, 2.0]], np.float32))
    map_type = helper.make_map_type_proto(TP.INT64, STRING)
    model = _model(
        "CastMap", {"cast_to": "TO_FLOAT", "map_form": "SPARSE", "max_map": 4}, [("X", map_type)], [("Y", FLOAT)]
    )
    np.testing.assert_array_equal(_run(model, {"X": {3: "1.5", 1: "2"}})[0], [[0, 2, 0, 1.5]])


def test_zip_map_gives_python_floats():
    seq_map = helper.make_sequence_type_proto(helper.make_map_type_proto(TP.INT64, FLOAT))
    model = _model("ZipMap", {"classlabels_int64s": [3, 5]}, [("X", FLOAT)], [("Z", seq_map)])
    got = _run(model, {"X": np.array([[0.25, 0.75], [1.0, 0.0]], np.float32)})[0]
    assert got == [{3: 0.25, 5: 0.75}, {3: 1.0, 5: 0.0}]
    assert all(type(k) is int and type(v) is float for row in got for k, v in row.items())


# --- linear models and SVMs ------------------------------------------------------------------

POST = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"]
CLASSIFIER_OUT = [("Y", INT64), ("Z", FLOAT)]


@pytest.mark.parametrize("labels", [[1, 2, 3], [0, 1, 2]], ids=["labels-1-2-3", "labels-0-1-2"])
@pytest.mark.parametrize("post", POST)
@pytest.mark.parametrize("binary", [True, False])
def test_linear_classifier_matches_onnxruntime(post, binary, labels):
    """Labels 0, 1, 2 (scikit-learn's) are the best class's index itself; others are looked up."""
    attrs = {"coefficients": [0.5, 0.25, -1.0], "intercepts": [0.1], "classlabels_ints": [3, 8]}
    if not binary:
        attrs = {
            "coefficients": [0.5, 0.25, -1.0, 1.0, 0.0, 0.5, -0.5, 1.0, 1.0],
            "intercepts": [0.1, 0.2, -0.3],
            "classlabels_ints": labels,
        }
    model = _model("LinearClassifier", dict(attrs, post_transform=post), [("X", FLOAT)], CLASSIFIER_OUT)
    _same(_run(model, {"X": X}), _ort(model, {"X": X}))


def test_linear_classifier_with_an_unknown_transform_is_refused_at_creation():
    attrs = {"coefficients": [0.5, 0.25, -1.0], "intercepts": [0.1], "classlabels_ints": [3, 8]}
    model = _model("LinearClassifier", dict(attrs, post_transform="SQUASH"), [("X", FLOAT)], CLASSIFIER_OUT)
    with pytest.raises(onnxplug.OnnxplugError, match="unknown post_transform 'SQUASH'"):
        onnxplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX"])
def test_linear_regressor(post):
    attrs = {"coefficients": [0.5, 0.25, -1.0, 1.0, 0.0, 0.5], "intercepts": [0.1, -0.2], "targets": 2}
    model = _model("LinearRegressor", dict(attrs, post_transform=post), [("X", FLOAT)], [("Y", FLOAT)])
    _same(_run(model, {"X": X}), _ort(model, {"X": X}))


SV = [1.0, 0.0, 1.0, -1.0, 2.0, 0.5, 0.5, 0.5, -2.0, 0.0, 1.0, 1.0]


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("proba", [False, True])
def test_svm_classifier_three_classes(kernel, proba):
    attrs = {
        "kernel_type": kernel,
        "kernel_params": [0.3, 0.1, 2.0],
        "support_vectors": SV,
        "vectors_per_class": [1, 2, 1],
        "coefficients": [0.5, -0.5, 1.0, -1.0, 0.25, 0.75, -0.2, 0.4],
        "rho": [0.1, -0.2, 0.3],
        "classlabels_ints": [0, 1, 2],
    }
    if proba:
        attrs.update(prob_a=[-1.5, -0.5, -2.0], prob_b=[0.1, -0.2, 0.05])
    model = _model("SVMClassifier", attrs, [("X", FLOAT)], CLASSIFIER_OUT)
    _same(_run(model, {"X": X}), _ort(model, {"X": X}), rtol=1e-4, atol=1e-5)


SVM_LAYOUTS = {
    "linear_3": {
        "kernel_type": "LINEAR",
        "kernel_params": [0.1, 0.0, 1.0],
        "rho": [0.1],
        "classlabels_ints": [0, 1, 2],
        "coefficients": [0.5, -0.5, 1.0, 0.2, 0.1, -0.3, -1.0, 0.4, 0.2],
    },
    "linear_2_mixed": {
        "kernel_type": "LINEAR",
        "kernel_params": [0.1, 0.0, 1.0],
        "rho": [0.1],
        "classlabels_ints": [0, 1],
        "coefficients": [0.5, -0.5, 1.0, 0.3, 0.2, -0.1],
    },
    "linear_2_positive": {
        "kernel_type": "LINEAR",
        "kernel_params": [0.1, 0.0, 1.0],
        "rho": [-0.1],
        "classlabels_ints": [3, 4],
        "coefficients": [0.5, 0.5, 1.0, 0.1, 0.2, 0.3],
    },
    "svc_2_mixed": {
        "kernel_type": "RBF",
        "kernel_params": [0.3, 0.0, 3.0],
        "support_vectors": SV[:9],
        "vectors_per_class": [2, 1],
        "coefficients": [0.5, -0.5, 1.0],
        "rho": [0.1],
        "classlabels_strings": ["no", "yes"],
    },
    "svc_2_positive": {
        "kernel_type": "RBF",
        "kernel_params": [0.3, 0.0, 3.0],
        "support_vectors": SV[:9],
        "vectors_per_class": [2, 1],
        "coefficients": [0.5, 0.5, 1.0],
        "rho": [-0.6],
        "classlabels_ints": [0, 1],
    },
    "svc_2_proba": {
        "kernel_type": "RBF",
        "kernel_params": [0.3, 0.0, 3.0],
        "support_vectors": SV[:9],
        "vectors_per_class": [2, 1],
        "coefficients": [0.5, -0.5, 1.0],
        "rho": [0.1],
        "prob_a": [-1.2],
        "prob_b": [0.3],
        "classlabels_ints": [0, 1],
    },
}


@pytest.mark.parametrize("post", POST)
@pytest.mark.parametrize("layout", sorted(SVM_LAYOUTS))
def test_svm_classifier_layouts(post, layout):
    attrs = dict(SVM_LAYOUTS[layout], post_transform=post)
    label_type = STRING if "classlabels_strings" in attrs else INT64
    model = _model("SVMClassifier", attrs, [("X", FLOAT)], [("Y", label_type), ("Z", FLOAT)])
    _same(_run(model, {"X": X}), _ort(model, {"X": X}), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", ["LINEAR", "RBF"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(kernel, one_class):
    attrs = {
        "kernel_type": kernel,
        "kernel_params": [0.3, 0.1, 2.0],
        "support_vectors": SV[:9],
        "n_supports": 3,
        "coefficients": [0.5, -0.5, 1.0],
        "rho": [0.1],
        "one_class": one_class,
    }
    model = _model("SVMRegressor", attrs, [("X", FLOAT)], [("Y", FLOAT)])
    _same(_run(model, {"X": X}), _ort(model, {"X": X}))


# --- tree ensembles --------------------------------------------------------------------------

# Two trees over 3 features: tree 0 splits on f0 then f2, tree 1 is a stump on f1 (BRANCH_LT).
NODES = {
    "nodes_treeids": [0, 0, 0, 0, 0, 1, 1, 1],
    "nodes_nodeids": [0, 1, 2, 3, 4, 0, 1, 2],
    "nodes_featureids": [0, 2, 0, 0, 0, 1, 0, 0],
    "nodes_values": [0.5, 1.0, 0.0, 0.0, 0.0, 0.75, 0.0, 0.0],
    "nodes_modes": ["BRANCH_LEQ", "BRANCH_GT", "LEAF", "LEAF", "LEAF", "BRANCH_LT", "LEAF", "LEAF"],
    "nodes_truenodeids": [1, 3, 0, 0, 0, 1, 0, 0],
    "nodes_falsenodeids": [2, 4, 0, 0, 0, 2, 0, 0],
    "nodes_missing_value_tracks_true": [1, 0, 0, 0, 0, 0, 0, 0],
}
LEAVES = [(0, 2), (0, 3), (0, 4), (1, 1), (1, 2)]
XT = np.vstack([X, [[np.nan, 0.0, 2.0]]]).astype(np.float32)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"])
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_tree_regressor_matches_onnxruntime(aggregate, post):
    # Small weights keep PROBIT's argument inside (0, 1).
    targets = [(t, n, k, w) for (t, n), w in zip(LEAVES, [0.1, -0.2, 0.3, 0.05, 0.4]) for k in (0, 1)]
    attrs = dict(
        NODES,
        target_treeids=[t[0] for t in targets],
        target_nodeids=[t[1] for t in targets],
        target_ids=[t[2] for t in targets],
        target_weights=[t[3] * (1 + t[2]) for t in targets],
        n_targets=2,
        base_values=[0.05, -0.05],
        aggregate_function=aggregate,
        post_transform=post,
    )
    model = _model("TreeEnsembleRegressor", attrs, [("X", FLOAT)], [("Y", FLOAT)])
    _same(_run(model, {"X": XT}), _ort(model, {"X": XT}), rtol=1e-4, atol=1e-5)


def test_tree_regressor_v3_double_tensors():
    attrs = dict(
        NODES,
        target_treeids=[0, 0, 0, 1, 1],
        target_nodeids=[2, 3, 4, 1, 2],
        target_ids=[0] * 5,
        target_weights_as_tensor=helper.make_tensor("w", TP.DOUBLE, [5], [1.0, -2.0, 3.0, 0.5, 4.0]),
        n_targets=1,
    )
    model = _model("TreeEnsembleRegressor", attrs, [("X", FLOAT)], [("Y", FLOAT)])
    del attrs["target_weights_as_tensor"]
    plain = _model(
        "TreeEnsembleRegressor", dict(attrs, target_weights=[1.0, -2.0, 3.0, 0.5, 4.0]), [("X", FLOAT)], [("Y", FLOAT)]
    )
    # onnxruntime only takes double tensors with double inputs, so the float-list model is the oracle.
    _same(_run(model, {"X": XT}), _ort(plain, {"X": XT}))


BINARY_LAYOUTS = ["binary_one_class", "binary_class0", "binary_both", "binary_mixed_sign"]
TREE_CLASSIFIER_CASES = (
    [(layout, None) for layout in ["multiclass", *BINARY_LAYOUTS]]
    + [("multiclass", [0.1, 0.2, -0.3])]
    + [(layout, [0.1, 0.2]) for layout in BINARY_LAYOUTS]
    # binary_both with one base value is left out: onnxruntime leaves its second score uninitialised.
    + [(layout, [0.1]) for layout in BINARY_LAYOUTS if layout != "binary_both"]
)


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize(("layout", "base"), TREE_CLASSIFIER_CASES)
def test_tree_classifier_matches_onnxruntime(post, layout, base):
    # The two-class cases pin onnxruntime's has-score / base-value conventions.
    if layout == "multiclass":
        ids, labels, weights = [0, 1, 2, 1, 2], [10, 20, 30], [0.5, 0.25, 1.0, 0.75, 0.125]
    elif layout == "binary_one_class":
        ids, labels, weights = [1] * 5, [0, 1], [0.1, 0.3, 0.2, 0.4, 0.25]
    elif layout == "binary_class0":
        ids, labels, weights = [0] * 5, [0, 1], [0.1, 0.3, 0.2, 0.4, 0.25]
    elif layout == "binary_both":
        ids, labels, weights = [0, 1, 0, 1, 0], [0, 1], [0.5, 0.25, 1.0, 0.75, 0.125]
    else:
        ids, labels, weights = [0] * 5, [4, 9], [0.5, -0.25, 1.0, -0.75, 0.125]
    attrs = dict(
        NODES,
        class_treeids=[t for t, _ in LEAVES],
        class_nodeids=[n for _, n in LEAVES],
        class_ids=ids,
        class_weights=weights,
        classlabels_int64s=labels,
        post_transform=post,
    )
    if base is not None:
        attrs["base_values"] = base
    model = _model("TreeEnsembleClassifier", attrs, [("X", FLOAT)], CLASSIFIER_OUT)
    _same(_run(model, {"X": XT}), _ort(model, {"X": XT}))


def _tree_ensemble_v5(elem, aggregate, post):
    # Three trees: a LEQ root over a GT node, a BRANCH_MEMBER stump and a NEQ stump.
    attrs = {
        "nodes_featureids": [0, 2, 1, 0],
        "nodes_modes": helper.make_tensor("m", TP.UINT8, [4], [0, 3, 6, 5]),
        "nodes_splits": helper.make_tensor("s", elem, [4], [0.5, 1.0, 0.0, 2.5]),
        "nodes_truenodeids": [1, 0, 2, 4],
        "nodes_trueleafs": [0, 1, 1, 1],
        "nodes_falsenodeids": [2, 1, 3, 5],
        "nodes_falseleafs": [1, 1, 1, 1],
        "nodes_missing_value_tracks_true": [1, 0, 0, 0],
        "tree_roots": [0, 2, 3],
        "membership_values": helper.make_tensor("mv", elem, [4], [4.0, -2.0, 1.0, float("nan")]),
        "leaf_targetids": [0, 1, 0, 1, 2, 2],
        "leaf_weights": helper.make_tensor("w", elem, [6], [1.0, 2.0, 3.0, 4.0, -1.0, 0.5]),
        "n_targets": 3,
        "aggregate_function": aggregate,
        "post_transform": post,
    }
    return _model("TreeEnsemble", attrs, [("X", _tensor(elem))], [("Y", _tensor(elem))], ml_opset=5, opset=21)


@pytest.mark.parametrize("elem", [TP.FLOAT, TP.DOUBLE])
@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("post", [0, 3])
def test_tree_ensemble_v5_matches_onnxruntime(elem, aggregate, post):
    x = XT.astype(np.float64 if elem == TP.DOUBLE else np.float32)
    model = _tree_ensemble_v5(elem, aggregate, post)
    _same(_run(model, {"X": x}), _ort(model, {"X": x}))


@pytest.mark.parametrize(("ours", "theirs"), [(1, 2), (2, 1)])
def test_tree_ensemble_v5_post_transform_codes_follow_onnx(ours, theirs):
    # ONNX numbers SOFTMAX 1 and LOGISTIC 2; onnxruntime 1.2x reads them the other way round,
    # so its opposite code is the oracle for the spec's meaning.
    model, oracle = _tree_ensemble_v5(TP.FLOAT, 1, ours), _tree_ensemble_v5(TP.FLOAT, 1, theirs)
    _same(_run(model, {"X": XT}), _ort(oracle, {"X": XT}))


def test_tree_ensemble_is_vectorised_over_samples():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20000, 3)).astype(np.float32)
    attrs = dict(
        NODES,
        target_treeids=[0, 0, 0, 1, 1],
        target_nodeids=[2, 3, 4, 1, 2],
        target_ids=[0] * 5,
        target_weights=[1.0, -2.0, 3.0, 0.5, 4.0],
        n_targets=1,
    )
    model = _model("TreeEnsembleRegressor", attrs, [("X", FLOAT)], [("Y", FLOAT)])
    _same(_run(model, {"X": x}), _ort(model, {"X": x}))


@pytest.mark.parametrize("ufunc", [np.add, np.maximum, np.fmax])
@pytest.mark.parametrize("shape", [(1, 3), (100, 1), (100, 2), (100, 3), (100, 7), (100, 8), (100, 12)])
def test_row_reduce_gives_numpys_bits(ufunc, shape):
    """Column by column (short rows of many samples) or numpy's own: the same bits either way."""
    from onnxplug_cpu.kernels._post_transforms import row_reduce

    rng = np.random.default_rng(0)
    table = rng.normal(size=shape) * 10.0 ** rng.integers(-8, 8, size=shape)
    table[rng.random(shape) < 0.05] = np.nan
    expected = ufunc.reduce(table, axis=1, keepdims=True)
    np.testing.assert_array_equal(row_reduce(ufunc, table), expected)
