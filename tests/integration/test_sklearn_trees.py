"""scikit-learn tree models as skl2onnx writes them, against onnxruntime.

* ``decision_path`` exports feed a TreeEnsembleRegressor output, which onnx cannot type, into a
  LabelEncoder whose onnx shape inference then dereferences a null type and segfaults
  (onnx/onnx#2647); loading must survive it (``graph/_infer.py``) and the model must run.
  Their path regressors list each leaf once per class with one target: onnxruntime counts only
  the first weight of a leaf then.
* Forests fitted on a single class: onnxruntime's one-class rules (label 0/1, one column).
* Labels on every row, values on thresholds included, equal to onnxruntime's sequential
  (one-thread) evaluation; with several threads onnxruntime's labels move only on tied rows.
* onnxruntime's corner cases: integer features compared with float thresholds in float, and
  the two-label rules (int64 labels 1 / 0 when both class ids carry weights).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest

sklearn = pytest.importorskip("sklearn", reason="these suites convert scikit-learn models")
from sklearn import ensemble, tree  # noqa: E402

import onnxplug  # noqa: E402

CLASSIFIERS = {
    "DecisionTreeClassifier": lambda: tree.DecisionTreeClassifier(max_depth=5, random_state=0),
    "RandomForestClassifier": lambda: ensemble.RandomForestClassifier(n_estimators=5, max_depth=5, random_state=0),
    "ExtraTreesClassifier": lambda: ensemble.ExtraTreesClassifier(n_estimators=5, max_depth=5, random_state=0),
}
REGRESSORS = {
    "DecisionTreeRegressor": lambda: tree.DecisionTreeRegressor(max_depth=5, random_state=0),
    "RandomForestRegressor": lambda: ensemble.RandomForestRegressor(n_estimators=5, max_depth=5, random_state=0),
    "ExtraTreesRegressor": lambda: ensemble.ExtraTreesRegressor(n_estimators=5, max_depth=5, random_state=0),
}


def _data(rows: int = 300, features: int = 4, seed: int = 0):
    rng = np.random.RandomState(seed)
    x = rng.rand(rows, features).astype(np.float32)
    classes = (x[:, 0] + x[:, 1] + 0.5 * rng.rand(rows) > 1.2).astype(np.int64) + (x[:, 2] > 0.6)
    target = (2 * x[:, 0] + np.sin(5 * x[:, 1]) + 0.1 * rng.rand(rows)).astype(np.float32)
    return x, classes, target


def _decision_path_model(name, skl_to_onnx):
    x, classes, target = _data()
    is_classifier = name in CLASSIFIERS
    estimator = (CLASSIFIERS if is_classifier else REGRESSORS)[name]().fit(x, classes if is_classifier else target)
    options = {"decision_path": True}
    if is_classifier:
        options["zipmap"] = False
    return skl_to_onnx(estimator, x[:1], options={id(estimator): options}), x


@pytest.mark.parametrize("name", ["DecisionTreeClassifier", "RandomForestRegressor"])
def test_decision_path_load_exits_normally(name, skl_to_onnx, tmp_path):
    """The upstream reproducer: a load that used to die with SIGSEGV in onnx's inference."""
    model, _ = _decision_path_model(name, skl_to_onnx)
    path = tmp_path / "model.onnx"
    path.write_bytes(model)
    code = "import sys, onnxplug; onnxplug.InferenceSession(sys.argv[1]); print('ok')"
    result = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"ended with {result.returncode}: {result.stderr[-2000:]}"
    assert result.stdout.strip() == "ok"


@pytest.mark.parametrize("name", sorted(CLASSIFIERS) + sorted(REGRESSORS))
def test_decision_path_runs_like_onnxruntime(name, skl_to_onnx, matches_ort, tmp_path):
    model, x = _decision_path_model(name, skl_to_onnx)
    # Safe to load in this process only once the child shows it does not crash.
    path = tmp_path / "model.onnx"
    path.write_bytes(model)
    code = "import sys; from onnxplug.graph import load_model; load_model(sys.argv[1])"
    assert subprocess.run([sys.executable, "-c", code, str(path)], timeout=300).returncode == 0
    expected, got = matches_ort(model, {"X": x}, what=name)
    assert expected[-1].dtype == object and got[-1].shape[0] == len(x)  # the decision paths


# --- one class ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["RandomForestClassifier", "ExtraTreesClassifier", "DecisionTreeClassifier"])
def test_single_class_classifier_matches_onnxruntime(name, skl_to_onnx, matches_ort):
    x, _, _ = _data(60)
    estimator = CLASSIFIERS[name]().fit(x, np.full(len(x), 4))
    model = skl_to_onnx(estimator, x[:1], options={id(estimator): {"zipmap": False}})
    expected, got = matches_ort(model, {"X": x}, what=name)
    assert got[1].shape == (len(x), 1)


def _one_class_tree(post_transform: str, base_values, labels=(7,)) -> bytes:
    """One stump with a negative and a positive leaf, one class label."""
    helper = onnx.helper
    attrs = {
        "nodes_treeids": [0, 0, 0],
        "nodes_nodeids": [0, 1, 2],
        "nodes_featureids": [0, 0, 0],
        "nodes_values": [0.5, 0.0, 0.0],
        "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"],
        "nodes_truenodeids": [1, 0, 0],
        "nodes_falsenodeids": [2, 0, 0],
        "class_treeids": [0, 0],
        "class_nodeids": [1, 2],
        "class_ids": [0, 0],
        "class_weights": [-0.75, 0.25],
        "post_transform": post_transform,
    }
    if base_values is not None:
        attrs["base_values"] = list(base_values)
    if isinstance(labels[0], str):
        attrs["classlabels_strings"] = list(labels)
    else:
        attrs["classlabels_int64s"] = list(labels)
    node = helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml", **attrs)
    label_type = onnx.TensorProto.STRING if isinstance(labels[0], str) else onnx.TensorProto.INT64
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, 1])],
        [
            helper.make_tensor_value_info("label", label_type, [None]),
            helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, [None, 1]),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX", "PROBIT"])
@pytest.mark.parametrize("base", [None, (0.5,), (-0.25,), (0.5, 0.25)], ids=["no-base", "base+", "base-", "two-bases"])
def test_single_class_rules(post, base, matches_ort):
    x = np.array([[0.1], [0.9], [0.5], [2.0]], np.float32)
    if post == "PROBIT":
        if base is None or len(base) == 2:
            base = (0.4,)  # probit needs its score inside (0, 1)
        x = np.array([[0.9], [2.0]], np.float32)
    matches_ort(_one_class_tree(post, base), {"X": x}, what=f"{post} {base}")


# --- labels on every row ----------------------------------------------------------------------


def _tree_thresholds(model: bytes) -> list[tuple[int, float]]:
    proto = onnx.load_from_string(model)
    found = []
    for node in proto.graph.node:
        if node.op_type.startswith("TreeEnsemble"):
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            for feature, value, mode in zip(attrs["nodes_featureids"], attrs["nodes_values"], attrs["nodes_modes"]):
                if mode != b"LEAF":
                    found.append((feature, value))
    return found


def _with_threshold_rows(x: np.ndarray, thresholds) -> np.ndarray:
    """Rows whose features sit exactly on a split (and one float32 step either side)."""
    rows = [x]
    for step in (0.0, np.inf, -np.inf):
        planted = np.resize(x, (len(thresholds), x.shape[1]))  # a copy: x repeated or cut to fit
        for row, (feature, value) in enumerate(thresholds):
            value = np.float32(value)
            planted[row, feature] = value if step == 0 else np.nextafter(value, np.float32(step))
        rows.append(planted)
    return np.concatenate(rows).astype(np.float32)


ENSEMBLES = {
    "RandomForestClassifier": lambda: ensemble.RandomForestClassifier(n_estimators=60, random_state=0),
    "ExtraTreesClassifier": lambda: ensemble.ExtraTreesClassifier(n_estimators=60, random_state=0),
    "GradientBoostingClassifier-2": lambda: ensemble.GradientBoostingClassifier(n_estimators=20, random_state=0),
    "GradientBoostingClassifier-3": lambda: ensemble.GradientBoostingClassifier(n_estimators=20, random_state=0),
    "GradientBoostingRegressor": lambda: ensemble.GradientBoostingRegressor(n_estimators=20, random_state=0),
    "RandomForestRegressor": lambda: ensemble.RandomForestRegressor(n_estimators=20, max_depth=8, random_state=0),
}


@pytest.mark.parametrize("name", sorted(ENSEMBLES))
def test_ensemble_labels_equal_onnxruntime_on_every_row(name, skl_to_onnx, matches_ort):
    x, classes, target = _data(3000, 5, seed=1)
    y = target if "Regressor" in name else (classes > 0).astype(np.int64) if name.endswith("-2") else classes
    estimator = ENSEMBLES[name]().fit(x[:800], y[:800])
    options = None if "Regressor" in name else {id(estimator): {"zipmap": False}}
    model = skl_to_onnx(estimator, x[:1], options=options)
    feeds = {"X": _with_threshold_rows(x, _tree_thresholds(model))}
    matches_ort(model, feeds, what=name)


def test_hist_gradient_boosting_if_skl2onnx_exports_it(skl_to_onnx, matches_ort):
    x, classes, _ = _data(500, 5)
    estimator = ensemble.HistGradientBoostingClassifier(max_iter=10, random_state=0).fit(x, classes)
    try:
        model = skl_to_onnx(estimator, x[:1], options={id(estimator): {"zipmap": False}})
    except Exception as error:  # noqa: BLE001 - the converter's own failure, not onnxplug's
        pytest.skip(f"skl2onnx cannot export HistGradientBoostingClassifier here: {str(error)[:120]}")
    matches_ort(model, {"X": _with_threshold_rows(x, _tree_thresholds(model))}, what="HistGradientBoosting")


def test_multithreaded_onnxruntime_differs_only_on_ties(skl_to_onnx, ort_run):
    """What "labels differ on a few rows out of a thousand" was: onnxruntime with several threads
    sums a forest's trees in per-thread chunks, which changes float32 rounding; only rows whose
    best two classes are equal up to that rounding can change label.  onnxplug is sequential."""
    x, classes, _ = _data(3000, 6, seed=2)
    estimator = ensemble.RandomForestClassifier(n_estimators=100, random_state=0).fit(x[:1000], classes[:1000])
    model = skl_to_onnx(estimator, x[:1], options={id(estimator): {"zipmap": False}})
    label, probabilities = onnxplug.InferenceSession(model).run(None, {"X": x})
    np.testing.assert_array_equal(label, estimator.predict(x))
    for threads in (2, 4):
        other_label, other_probabilities = ort_run(model, {"X": x}, threads=threads)
        np.testing.assert_allclose(other_probabilities, probabilities, rtol=0, atol=1e-5)
        differ = np.nonzero(other_label != label)[0]
        top_two = np.sort(probabilities[differ], axis=1)[:, -2:]
        assert np.all(top_two[:, 1] - top_two[:, 0] <= 1e-6), f"{threads} threads: a non-tied row changed label"


def test_integer_features_compare_as_float_like_onnxruntime(matches_ort):
    """onnxruntime compares an int64 feature with a float threshold in float: 2**24 + 1 rounds
    to 2**24 and so takes the ``<=`` branch of a split at 2**24."""
    helper = onnx.helper
    node = helper.make_node(
        "TreeEnsembleClassifier",
        ["X"],
        ["label", "scores"],
        domain="ai.onnx.ml",
        classlabels_int64s=[10, 20],
        nodes_treeids=[0, 0, 0],
        nodes_nodeids=[0, 1, 2],
        nodes_featureids=[0, 0, 0],
        nodes_values=[float(2**24), 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 0, 0],
        nodes_falsenodeids=[2, 0, 0],
        class_treeids=[0, 0],
        class_nodeids=[1, 2],
        class_ids=[0, 1],
        class_weights=[1.0, 1.0],
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", onnx.TensorProto.INT64, [None, 1])],
        [
            helper.make_tensor_value_info("label", onnx.TensorProto.INT64, [None]),
            helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, [None, 2]),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    model = helper.make_model(graph, opset_imports=opsets).SerializeToString()
    x = np.array([[2**24 - 1], [2**24], [2**24 + 1], [2**24 + 2], [2**25 + 3]], np.int64)
    expected, _ = matches_ort(model, {"X": x})
    # The rounded comparison this test is about: 2**24 + 1 reaches the first leaf, 2**24 + 2 not.
    assert expected[1][2].tolist() == [-1.0, 1.0] and expected[1][3].tolist() == [0.0, 1.0]


def _stump_classifier(class_ids, class_nodeids, class_weights, labels, base_values=None) -> bytes:
    helper = onnx.helper
    strings = isinstance(labels[0], str)
    attrs = {"classlabels_strings" if strings else "classlabels_int64s": list(labels)}
    if base_values:
        attrs["base_values"] = list(base_values)
    node = helper.make_node(
        "TreeEnsembleClassifier",
        ["X"],
        ["label", "scores"],
        domain="ai.onnx.ml",
        nodes_treeids=[0, 0, 0],
        nodes_nodeids=[0, 1, 2],
        nodes_featureids=[0, 0, 0],
        nodes_values=[0.5, 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 0, 0],
        nodes_falsenodeids=[2, 0, 0],
        class_treeids=[0] * len(class_ids),
        class_nodeids=class_nodeids,
        class_ids=class_ids,
        class_weights=class_weights,
        **attrs,
    )
    label_type = onnx.TensorProto.STRING if strings else onnx.TensorProto.INT64
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [None, 1])],
        [
            helper.make_tensor_value_info("label", label_type, [None]),
            helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, [None, 2]),
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


TWO_LABELS = {
    "both-classes": ([0, 1, 0, 1], [1, 1, 2, 2], [0.8, 0.2, 0.3, 0.7], [10, 20]),
    "one-class-per-leaf": ([0, 1], [1, 2], [1.0, 1.0], [10, 20]),
    "mixed-signs": ([0, 1, 0, 1], [1, 1, 2, 2], [-0.8, 0.2, 0.3, -0.7], [10, 20]),
    "strings": ([0, 1, 0, 1], [1, 1, 2, 2], [0.8, 0.2, 0.3, 0.7], ["a", "b"]),
    "two-base-values": ([0, 1, 0, 1], [1, 1, 2, 2], [0.8, 0.2, 0.3, 0.7], [10, 20], [0.1, 0.2]),
    "class-1-only": ([1, 1], [1, 2], [0.3, 0.9], [10, 20]),
}


@pytest.mark.parametrize("case", sorted(TWO_LABELS))
def test_two_label_rules_match_onnxruntime(case, matches_ort):
    """With both class ids weighted, onnxruntime labels int64 rows 1 / 0 themselves."""
    x = np.array([[0.1], [0.9]], np.float32)
    matches_ort(_stump_classifier(*TWO_LABELS[case]), {"X": x}, what=case)
