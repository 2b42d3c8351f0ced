"""Regenerate the embedded demo: a digit classifier trained on scikit-learn's 8x8 digits.

Writes ``core/src/onnxplug/demo/digits.onnx`` and ``digits_samples.npz`` (held-out digits with
their true labels).  The data set ships inside scikit-learn, so nothing is downloaded.

    python scripts/make_demo.py          # needs scikit-learn

The network is exported by hand with ``onnx.helper`` (no converter package needed):
pixels / 16 → Gemm → Relu → Gemm → Softmax, plus ArgMax for the label.
"""

from __future__ import annotations

import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = pathlib.Path(__file__).resolve().parents[1] / "core" / "src" / "onnxplug" / "demo"
SAMPLES = 24


def train():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    digits = load_digits()
    x = digits.data.astype(np.float32) / 16.0
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.25, random_state=0, stratify=digits.target
    )
    model = MLPClassifier(hidden_layer_sizes=(48,), max_iter=600, random_state=0)
    model.fit(x_train, y_train)
    print(f"held-out accuracy (scikit-learn): {model.score(x_test, y_test):.3f}")
    return model, (x_test * 16.0).astype(np.float32), y_test.astype(np.int64)


def export(model) -> onnx.ModelProto:
    w1, w2 = (w.astype(np.float32) for w in model.coefs_)
    b1, b2 = (b.astype(np.float32) for b in model.intercepts_)
    nodes = [
        helper.make_node("Div", ["pixels", "max_pixel"], ["scaled"], name="scale"),
        helper.make_node("Gemm", ["scaled", "w1", "b1"], ["hidden_pre"], name="dense1"),
        helper.make_node("Relu", ["hidden_pre"], ["hidden"], name="relu1"),
        helper.make_node("Gemm", ["hidden", "w2", "b2"], ["logits"], name="dense2"),
        helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1),
        helper.make_node("ArgMax", ["probabilities"], ["label"], name="argmax", axis=1, keepdims=0),
    ]
    initializers = [
        numpy_helper.from_array(np.array(16.0, np.float32), "max_pixel"),
        numpy_helper.from_array(w1, "w1"),
        numpy_helper.from_array(b1, "b1"),
        numpy_helper.from_array(w2, "w2"),
        numpy_helper.from_array(b2, "b2"),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_mlp",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 64])],
        [
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10]),
            helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"]),
        ],
        initializers,
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="onnxplug-demo")
    proto.ir_version = 8
    proto.doc_string = "8x8 digit classifier (scikit-learn MLP) for `onnxplug run`"
    onnx.checker.check_model(proto)
    return proto


def main() -> None:
    model, x_test, y_test = train()
    OUT.mkdir(parents=True, exist_ok=True)
    onnx.save(export(model), OUT / "digits.onnx")
    np.savez_compressed(OUT / "digits_samples.npz", pixels=x_test[:SAMPLES], labels=y_test[:SAMPLES])
    print(f"wrote {OUT / 'digits.onnx'} and {SAMPLES} samples")


if __name__ == "__main__":
    main()
