"""A sweep over scikit-learn's converters: skl2onnx's model, onnxplug against onnxruntime.

Labels must be equal, probabilities and values within 1e-5.  Each case is a small model on
fixed-seed data; the list covers linear and logistic models, SVMs, neighbours, naive Bayes,
trees and ensembles (gradient boosting included), scalers, encoders, decompositions and
pipelines with ColumnTransformer.  Text vectorizers are left out: skl2onnx writes them with
``com.microsoft:Tokenizer``, which no onnxplug op library provides.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytest.importorskip("sklearn", reason="the sweep fits scikit-learn models")
skl2onnx = pytest.importorskip("skl2onnx", reason="the sweep converts with skl2onnx")
from skl2onnx.common.data_types import StringTensorType  # noqa: E402
from sklearn import (  # noqa: E402
    cluster,
    compose,
    decomposition,
    ensemble,
    impute,
    linear_model,
    naive_bayes,
    neighbors,
    neural_network,
    pipeline,
    preprocessing,
    svm,
    tree,
)

_RNG = np.random.RandomState(0)
X = _RNG.rand(200, 4).astype(np.float32)
COUNTS = np.floor(X * 10).astype(np.float32)  # non-negative features for multinomial models
WITH_NAN = np.where(X > 0.9, np.nan, X).astype(np.float32)
Y2 = (X[:, 0] + X[:, 1] > 1).astype(np.int64)
Y3 = Y2 + (X[:, 2] > 0.6)
YR = (X @ np.array([1.0, 2.0, -1.0, 0.5])).astype(np.float32)
CATEGORIES = np.array([["a", "x"], ["b", "y"], ["c", "x"], ["a", "z"]] * 50)


def _column_pipeline():
    numeric = pipeline.make_pipeline(impute.SimpleImputer(), preprocessing.StandardScaler())
    binned = preprocessing.KBinsDiscretizer(n_bins=3, encode="onehot-dense", quantile_method="averaged_inverted_cdf")
    columns = compose.ColumnTransformer([("num", numeric, [0, 1]), ("bins", binned, [2, 3])])
    return pipeline.Pipeline([("pre", columns), ("clf", linear_model.LogisticRegression())])


def _categorical_pipeline():
    onehot = preprocessing.OneHotEncoder(handle_unknown="ignore")
    columns = compose.ColumnTransformer([("onehot", onehot, [0]), ("ord", preprocessing.OrdinalEncoder(), [1])])
    return pipeline.Pipeline([("pre", columns), ("clf", ensemble.RandomForestClassifier(10, random_state=0))])


def _voting():
    members = [("lr", linear_model.LogisticRegression()), ("dt", tree.DecisionTreeClassifier(max_depth=3))]
    return ensemble.VotingClassifier(members, voting="soft", flatten_transform=False)


def _stacking():
    members = [("lr", linear_model.LogisticRegression()), ("dt", tree.DecisionTreeClassifier(max_depth=3))]
    return ensemble.StackingClassifier(members)


_MLP = {"hidden_layer_sizes": (8,), "max_iter": 300, "random_state": 0}

#: name -> (estimator factory, features, target or None)
CASES = {
    "LinearRegression": (linear_model.LinearRegression, X, YR),
    "Ridge": (linear_model.Ridge, X, YR),
    "Lasso": (lambda: linear_model.Lasso(alpha=0.01), X, YR),
    "LogisticRegression-binary": (linear_model.LogisticRegression, X, Y2),
    "LogisticRegression-multiclass": (linear_model.LogisticRegression, X, Y3),
    "SGDClassifier": (lambda: linear_model.SGDClassifier(random_state=0), X, Y3),
    "RidgeClassifier": (linear_model.RidgeClassifier, X, Y3),
    "Perceptron": (linear_model.Perceptron, X, Y2),
    "LinearSVC": (svm.LinearSVC, X, Y3),
    "LinearSVR": (svm.LinearSVR, X, YR),
    "SVC-rbf-probability": (lambda: svm.SVC(probability=True, random_state=0), X, Y3),
    "SVC-linear-binary": (lambda: svm.SVC(kernel="linear"), X, Y2),
    "SVC-poly": (lambda: svm.SVC(kernel="poly"), X, Y3),
    "SVC-sigmoid": (lambda: svm.SVC(kernel="sigmoid"), X, Y3),
    "NuSVC": (svm.NuSVC, X, Y2),
    "SVR-rbf": (svm.SVR, X, YR),
    "SVR-poly": (lambda: svm.SVR(kernel="poly"), X, YR),
    "OneClassSVM": (svm.OneClassSVM, X, None),
    "KNeighborsClassifier": (neighbors.KNeighborsClassifier, X, Y3),
    "KNeighborsRegressor": (neighbors.KNeighborsRegressor, X, YR),
    "GaussianNB": (naive_bayes.GaussianNB, X, Y3),
    "MultinomialNB": (naive_bayes.MultinomialNB, COUNTS, Y3),
    "BernoulliNB": (naive_bayes.BernoulliNB, X, Y3),
    "ComplementNB": (naive_bayes.ComplementNB, COUNTS, Y3),
    "DecisionTreeClassifier": (lambda: tree.DecisionTreeClassifier(max_depth=5), X, Y3),
    "DecisionTreeRegressor": (lambda: tree.DecisionTreeRegressor(max_depth=5), X, YR),
    "RandomForestClassifier": (lambda: ensemble.RandomForestClassifier(10, random_state=0), X, Y3),
    "ExtraTreesRegressor": (lambda: ensemble.ExtraTreesRegressor(10, random_state=0), X, YR),
    "GradientBoostingClassifier": (lambda: ensemble.GradientBoostingClassifier(n_estimators=10), X, Y3),
    "GradientBoostingRegressor": (lambda: ensemble.GradientBoostingRegressor(n_estimators=10), X, YR),
    "AdaBoostClassifier": (lambda: ensemble.AdaBoostClassifier(n_estimators=10, random_state=0), X, Y3),
    "AdaBoostRegressor": (lambda: ensemble.AdaBoostRegressor(n_estimators=10, random_state=0), X, YR),
    "BaggingClassifier": (lambda: ensemble.BaggingClassifier(n_estimators=5, random_state=0), X, Y3),
    "VotingClassifier-soft": (_voting, X, Y3),
    "StackingClassifier": (_stacking, X, Y3),
    "IsolationForest": (lambda: ensemble.IsolationForest(n_estimators=10, random_state=0), X, None),
    "MLPClassifier": (lambda: neural_network.MLPClassifier(**_MLP), X, Y3),
    "MLPRegressor": (lambda: neural_network.MLPRegressor(**_MLP), X, YR),
    "KMeans": (lambda: cluster.KMeans(3, n_init=2, random_state=0), X, None),
    "StandardScaler": (preprocessing.StandardScaler, X, None),
    "MinMaxScaler": (preprocessing.MinMaxScaler, X, None),
    "RobustScaler": (preprocessing.RobustScaler, X, None),
    "MaxAbsScaler": (preprocessing.MaxAbsScaler, X, None),
    "Normalizer": (preprocessing.Normalizer, X, None),
    "Binarizer": (lambda: preprocessing.Binarizer(threshold=0.5), X, None),
    "PolynomialFeatures": (lambda: preprocessing.PolynomialFeatures(2), X, None),
    "KBinsDiscretizer": (
        lambda: preprocessing.KBinsDiscretizer(3, encode="ordinal", quantile_method="averaged_inverted_cdf"),
        X,
        None,
    ),
    "SimpleImputer": (impute.SimpleImputer, WITH_NAN, None),
    "PCA": (lambda: decomposition.PCA(2), X, None),
    "TruncatedSVD": (lambda: decomposition.TruncatedSVD(2), X, None),
    "Pipeline-scaler-logistic": (
        lambda: pipeline.make_pipeline(preprocessing.StandardScaler(), linear_model.LogisticRegression()),
        X,
        Y3,
    ),
    "Pipeline-scaler-logistic-binary": (
        lambda: pipeline.make_pipeline(preprocessing.StandardScaler(), linear_model.LogisticRegression()),
        X,
        Y2,
    ),
    "Pipeline-scaler-linear": (
        lambda: pipeline.make_pipeline(preprocessing.StandardScaler(), linear_model.LinearRegression()),
        X,
        YR,
    ),
    "ColumnTransformer-numeric": (_column_pipeline, X, Y3),
    "OneHotEncoder": (lambda: preprocessing.OneHotEncoder(handle_unknown="ignore"), CATEGORIES, None),
    "OrdinalEncoder": (preprocessing.OrdinalEncoder, CATEGORIES, None),
    "ColumnTransformer-categorical": (_categorical_pipeline, CATEGORIES, Y3),
}
#: Looser tolerances, with the reason.  SVR-poly sums 118 cubed kernels of magnitude ~1e3 with
#: alternating signs: in float32 the summation order decides the fourth decimal (onnxruntime
#: itself is 5e-4 away from scikit-learn's float64 prediction), so 1e-3 absolute.
TOLERANCE = {"SVR-poly": 1e-3}
#: Default ZipMap output (a list of dicts) on, as converted models usually ship.
ZIPMAP_CASES = ("LogisticRegression-multiclass", "RandomForestClassifier")


def _convert(name: str, skl_to_onnx, zipmap: bool = False) -> tuple[bytes, np.ndarray]:
    factory, features, target = CASES[name]
    estimator = factory()
    options = None
    if hasattr(estimator, "predict_proba") and not zipmap:
        options = {id(estimator): {"zipmap": False}}
    kwargs = {}
    if features.dtype.kind == "U":
        kwargs["initial_types"] = [("X", StringTensorType([None, features.shape[1]]))]
    if name == "IsolationForest":  # skl2onnx refuses its default ai.onnx.ml opset (4) for it
        kwargs["target_opset"] = {"": 17, "ai.onnx.ml": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence and deprecation chatter from small fits
        estimator.fit(features, target) if target is not None else estimator.fit(features)
        sample = None if "initial_types" in kwargs else features[:1]
        return skl_to_onnx(estimator, sample, options=options, **kwargs), features


@pytest.mark.parametrize("name", sorted(CASES))
def test_converter_matches_onnxruntime(name, skl_to_onnx, matches_ort):
    model, features = _convert(name, skl_to_onnx)
    matches_ort(model, {"X": features}, atol=TOLERANCE.get(name, 1e-5), what=name)


#: Models whose single rows take the linear models' one-row path (and, for the pipelines, the
#: CPU provider's fused Scaler → model → Normalizer step).
ROW_CASES = (
    "LinearRegression",
    "LogisticRegression-binary",
    "LogisticRegression-multiclass",
    "RidgeClassifier",
    "LinearSVC",
    "Pipeline-scaler-logistic",
    "Pipeline-scaler-logistic-binary",
    "Pipeline-scaler-linear",
)


@pytest.mark.parametrize("name", ROW_CASES)
def test_single_rows_match_onnxruntime(name, skl_to_onnx):
    """Served models are called a row at a time: each of 12 rows alone, against onnxruntime."""
    import onnxplug

    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle")
    model, features = _convert(name, skl_to_onnx)
    oracle = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    session = onnxplug.InferenceSession(model)
    if name.startswith("Pipeline"):  # the Scaler and the model run as one fused step
        assert len(session.get_partition_report().partitions) == 1
    for row in range(12):
        feeds = {"X": features[row : row + 1]}
        expected, got = oracle.run(None, feeds), session.run(None, feeds)
        for index, (want, have) in enumerate(zip(expected, got, strict=True)):
            assert have.dtype == want.dtype and have.shape == want.shape, f"{name} row {row} output {index}"
            np.testing.assert_allclose(have, want, rtol=0, atol=1e-5, err_msg=f"{name} row {row} output {index}")


@pytest.mark.parametrize("name", ZIPMAP_CASES)
def test_zipmap_output_matches_onnxruntime(name, skl_to_onnx, matches_ort):
    model, features = _convert(name, skl_to_onnx, zipmap=True)
    expected, _ = matches_ort(model, {"X": features}, what=name)
    assert isinstance(expected[1], list) and isinstance(expected[1][0], dict)
