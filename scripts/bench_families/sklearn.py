"""Classical ML through skl2onnx: tree ensembles and linear pipelines, at batch 1 and batch 1000.

Each model is fitted here on a synthetic dataset (``make_classification`` / ``make_regression``,
20 features, seed 0) and converted with skl2onnx (classifiers with ``zipmap=False``, as serving
code usually asks, so the probabilities come back as one tensor).  Names end in ``-b1`` or
``-b1000``, the batch the feeds have.
"""

from __future__ import annotations

import functools

import numpy as np

from . import BenchModel

FEATURES = 20


@functools.cache
def _fitted(name: str):
    from sklearn.datasets import make_classification, make_regression
    from sklearn.ensemble import (
        GradientBoostingClassifier,
        GradientBoostingRegressor,
        RandomForestClassifier,
        RandomForestRegressor,
    )
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    classify = name in ("rf_clf", "gb_clf", "logreg")
    if classify:
        x, y = make_classification(n_samples=2000, n_features=FEATURES, n_informative=10, n_classes=3, random_state=0)
    else:
        x, y = make_regression(n_samples=2000, n_features=FEATURES, noise=0.1, random_state=0)
    model = {
        "rf_clf": lambda: RandomForestClassifier(n_estimators=100, max_depth=10, random_state=0),
        "rf_reg": lambda: RandomForestRegressor(n_estimators=100, max_depth=10, random_state=0),
        "gb_clf": lambda: GradientBoostingClassifier(n_estimators=100, max_depth=3, random_state=0),
        "gb_reg": lambda: GradientBoostingRegressor(n_estimators=100, max_depth=3, random_state=0),
        "logreg": lambda: make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)),
        "linreg": lambda: make_pipeline(StandardScaler(), LinearRegression()),
    }[name]()
    model.fit(x.astype(np.float32), y)
    from skl2onnx import to_onnx

    options = {id(model): {"zipmap": False}} if classify and not hasattr(model, "steps") else None
    if classify and hasattr(model, "steps"):
        options = {id(model.steps[-1][1]): {"zipmap": False}}
    onnx_model = to_onnx(model, x[:1].astype(np.float32), options=options, target_opset={"": 17, "ai.onnx.ml": 3})
    return onnx_model.SerializeToString(), x.astype(np.float32)


def _build(name: str, batch: int):
    def build() -> tuple[bytes, dict[str, np.ndarray]]:
        data, x = _fitted(name)
        return data, {"X": np.ascontiguousarray(x[:batch])}

    return build


MODELS = [
    BenchModel(f"{name}-b{batch}", _build(name, batch))
    for name in ("rf_clf", "rf_reg", "gb_clf", "gb_reg", "logreg", "linreg")
    for batch in (1, 1000)
]
