"""Linear models at batch 1 and the fused ``[Scaler →] LinearClassifier [→ Normalizer]`` step.

The one-row path (:mod:`onnxplug_cpu.kernels._linear_model`) must give what the batch path gives
for the same row, and the fused chain (:mod:`onnxplug_cpu.kernels._linear_chain`) what the three
nodes give run one by one (split here by exposing the intermediate values as graph outputs, which
keeps the CPU provider from fusing them), within a unit in the last place of float32.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.errors import InvalidArgument

FEATURES = 6


def _rng(seed=0):
    return np.random.default_rng(seed)


def _pipeline(
    *,
    classes=3,
    post="SOFTMAX",
    scaler=True,
    normalizer=True,
    regressor=False,
    offset=None,
    scale=None,
    string_labels=False,
    expose=(),
    declared=(None, FEATURES),
):
    """A skl2onnx-shaped pipeline on input ``X`` ([N, FEATURES] float); ``expose`` adds
    intermediate values (``scaled``, ``raw``) as graph outputs."""
    rng = _rng(classes + 10 * regressor)
    nodes = []
    source = "X"
    if scaler:
        nodes.append(
            helper.make_node(
                "Scaler",
                ["X"],
                ["scaled"],
                domain="ai.onnx.ml",
                name="scaler",
                offset=list(rng.standard_normal(FEATURES) if offset is None else offset),
                scale=list(rng.random(FEATURES) + 0.5 if scale is None else scale),
            )
        )
        source = "scaled"
    targets = 1 if classes == 2 else classes
    coefficients = list(rng.standard_normal(targets * FEATURES))
    intercepts = list(rng.standard_normal(targets))
    if regressor:
        nodes.append(
            helper.make_node(
                "LinearRegressor",
                [source],
                ["Y"],
                domain="ai.onnx.ml",
                name="model",
                coefficients=coefficients,
                intercepts=intercepts,
                targets=targets,
                post_transform=post,
            )
        )
        outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    else:
        labels = (
            {"classlabels_strings": [f"c{i}" for i in range(classes)]}
            if string_labels
            else {"classlabels_ints": list(range(classes))}
        )
        probabilities = "raw" if normalizer else "P"
        nodes.append(
            helper.make_node(
                "LinearClassifier",
                [source],
                ["label", probabilities],
                domain="ai.onnx.ml",
                name="model",
                coefficients=coefficients,
                intercepts=intercepts,
                post_transform=post,
                multi_class=1 if classes > 2 else 0,
                **labels,
            )
        )
        if normalizer:
            nodes.append(helper.make_node("Normalizer", ["raw"], ["P"], domain="ai.onnx.ml", name="norm", norm="L1"))
        label_type = TensorProto.STRING if string_labels else TensorProto.INT64
        outputs = [
            helper.make_tensor_value_info("label", label_type, None),
            helper.make_tensor_value_info("P", TensorProto.FLOAT, None),
        ]
    outputs += [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in expose]
    graph = helper.make_graph(
        nodes,
        "pipeline",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, None if declared is None else list(declared))],
        outputs,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)])
    return model.SerializeToString()


def _session(model):
    return onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"])


def _features(rows=40, seed=1):
    x = (_rng(seed).standard_normal((rows, FEATURES)) * 2).astype(np.float32)
    x[0] = 0
    return x


def _assert_close(got, want):
    """The fused chain against the nodes one by one.  The separate Scaler rounds the scaled
    features to float32 (the fused step keeps them in float64), which moves a score by up to
    about 2^-24 times the sum of its terms' sizes (~10 here): 2e-6 absolute, seen at 7e-7."""
    assert len(got) == len(want)
    for have, expected in zip(got, want):
        if expected.dtype.kind in "iOU":
            np.testing.assert_array_equal(have, expected)
        else:
            assert have.dtype == expected.dtype and have.shape == expected.shape
            np.testing.assert_allclose(have, expected, rtol=1e-6, atol=2e-6)


CLASSIFIERS = [
    {"classes": 3, "post": "SOFTMAX"},
    {"classes": 3, "post": "LOGISTIC"},
    {"classes": 3, "post": "NONE"},
    {"classes": 4, "post": "SOFTMAX", "string_labels": True},
    {"classes": 2, "post": "LOGISTIC"},
    {"classes": 2, "post": "NONE"},
    {"classes": 3, "post": "PROBIT", "normalizer": False},
    {"classes": 3, "post": "SOFTMAX_ZERO"},
]


@pytest.mark.parametrize("case", CLASSIFIERS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_fused_chain_matches_the_nodes_one_by_one(case):
    fused = _session(_pipeline(**case))
    partitions = fused.get_partition_report().partitions
    members = ("scaler", "model", "norm") if case.get("normalizer", True) else ("scaler", "model")
    assert list(partitions.values()) == [members]
    split = _session(_pipeline(**case, expose=("scaled", "raw") if case.get("normalizer", True) else ("scaled",)))
    assert split.get_partition_report().partitions == {}
    x = _features()
    _assert_close(fused.run(None, {"X": x}), split.run(["label", "P"], {"X": x}))
    for row in range(len(x)):  # one row at a time: the one-row path
        one = x[row : row + 1]
        _assert_close(fused.run(None, {"X": one}), split.run(["label", "P"], {"X": one}))


@pytest.mark.parametrize("case", CLASSIFIERS, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_one_row_path_matches_the_batch_path(case):
    """A lone classifier (no fusion): each row alone against the same row in a batch."""
    session = _session(_pipeline(**{**case, "scaler": False, "normalizer": False}, declared=None))
    x = _features()
    x[1, 2] = np.nan
    x[2, 0] = np.inf
    x[3] = 1e30  # scores overflow float32 but not float64
    labels, probabilities = session.run(None, {"X": x})
    for row in range(len(x)):
        label, probability = session.run(None, {"X": x[row : row + 1]})
        np.testing.assert_array_equal(label, labels[row : row + 1])
        np.testing.assert_allclose(probability, probabilities[row : row + 1], rtol=3e-7, atol=1e-7)
    one_dimensional = session.run(None, {"X": x[4]})  # a 1-D input is one row
    np.testing.assert_array_equal(one_dimensional[0], labels[4:5])


def test_nan_rows_follow_numpy():
    """A NaN score is the best class (the first one, as numpy's argmax) and its probabilities are
    NaN, through the fused step as through the nodes one by one."""
    fused = _session(_pipeline())
    split = _session(_pipeline(expose=("scaled", "raw")))
    x = _features(3)
    x[1, 3] = np.nan
    for rows in (x, x[1:2]):
        got, want = fused.run(None, {"X": rows}), split.run(["label", "P"], {"X": rows})
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(np.isnan(got[1]), np.isnan(want[1]))
        assert np.isnan(got[1][-1 if len(rows) == 1 else 1]).all()


@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_fused_regressor(targets, post):
    fused = _session(_pipeline(regressor=True, classes=targets, post=post))
    assert list(fused.get_partition_report().partitions.values()) == [("scaler", "model")]
    split = _session(_pipeline(regressor=True, classes=targets, post=post, expose=("scaled",)))
    x = _features()
    _assert_close(fused.run(None, {"X": x}), split.run(["Y"], {"X": x}))
    for row in range(len(x)):
        one = x[row : row + 1]
        _assert_close(fused.run(None, {"X": one}), split.run(["Y"], {"X": one}))


def test_features_far_from_zero_keep_their_precision():
    """The Scaler folded into the weights: features around 1e5 with a spread of 1, as
    StandardScaler sees a year or a price, against the pipeline in float64."""
    offset = np.full(FEATURES, 1e5, np.float32)
    scale = np.full(FEATURES, 0.5, np.float32)
    model = _pipeline(regressor=True, classes=1, post="NONE", offset=offset, scale=scale)
    x = (1e5 + _rng(3).standard_normal((20, FEATURES))).astype(np.float32)
    (got,) = _session(model).run(None, {"X": x})
    regressor = onnx.load_from_string(model).graph.node[1]
    weights, (bias,) = (np.array(helper.get_attribute_value(a), np.float64) for a in regressor.attribute[:2])
    want = ((x.astype(np.float64) - offset) * scale) @ weights + bias
    np.testing.assert_allclose(got[:, 0], want, rtol=1e-6, atol=1e-6)
    for row in range(3):
        (one,) = _session(model).run(None, {"X": x[row : row + 1]})
        np.testing.assert_allclose(one[0, 0], want[row], rtol=1e-6, atol=1e-6)


def test_one_scale_value_for_every_feature():
    fused = _session(_pipeline(offset=[0.5], scale=[2.0]))
    assert fused.get_partition_report().partitions
    split = _session(_pipeline(offset=[0.5], scale=[2.0], expose=("scaled", "raw")))
    x = _features()
    _assert_close(fused.run(None, {"X": x}), split.run(["label", "P"], {"X": x}))


def test_not_fused_where_a_value_is_needed_elsewhere_or_the_scaler_does_not_fit():
    exposed = _session(_pipeline(expose=("scaled",)))
    assert list(exposed.get_partition_report().partitions.values()) == [("model", "norm")]
    # A Scaler with 4 offsets for 6 features: the Scaler kernel reports it, as without fusion.
    wrong = _session(_pipeline(offset=[0.0] * 4))
    assert list(wrong.get_partition_report().partitions.values()) == [("model", "norm")]
    with pytest.raises(InvalidArgument, match="offset has 4 values for 6 features"):
        wrong.run(None, {"X": _features(2)})


@pytest.mark.parametrize("rows", [1, 3])
def test_wrong_width_is_an_invalid_argument(rows):
    session = _session(_pipeline(declared=(None, None)))
    bad = np.zeros((rows, FEATURES + 1), np.float32)
    with pytest.raises(InvalidArgument):
        session.run(None, {"X": bad})
