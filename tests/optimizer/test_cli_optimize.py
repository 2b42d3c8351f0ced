"""``onnxplug optimize``: writes the optimized model and lists what each pass changed."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxplug.cli import main
from onnxplug.testing import make_model


def test_optimize_writes_the_model_and_reports_each_pass(tmp_path, capsys):
    nodes = [
        helper.make_node("Mul", ["w", "w"], ["w2"]),
        helper.make_node("Identity", ["x"], ["i"]),
        helper.make_node("Add", ["i", "w2"], ["y"]),
    ]
    model = make_model(
        nodes, [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])], {"w": np.ones(2, np.float32)}
    )
    source, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    assert main(["optimize", str(source), "-o", str(out), "--level", "basic"]) == 0
    printed = capsys.readouterr().out
    assert "constant-folding" in printed and "folded 1" in printed
    assert "no-op-removal" in printed and "Identity 1" in printed
    assert "nodes: 3 -> 1" in printed
    assert [n.op_type for n in onnx.load(out).graph.node] == ["Add"]


def test_optimize_at_disable_changes_nothing(tmp_path, capsys):
    nodes = [helper.make_node("Identity", ["x"], ["y"])]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])])
    source, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(model, source)
    assert main(["optimize", str(source), "-o", str(out), "--level", "disable"]) == 0
    assert "nodes: 1 -> 1" in capsys.readouterr().out
