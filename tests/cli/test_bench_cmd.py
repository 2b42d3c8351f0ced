"""``onnxplug bench``: latency, and the per-op-type breakdown from the profiler."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from onnxplug.cli import main
from onnxplug.cli._bench import op_breakdown


def _model(path):
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Relu", ["m"], ["r"], name="relu"),
        helper.make_node("Add", ["r", "x"], ["a"], name="add1"),
        helper.make_node("Add", ["a", "x"], ["y"], name="add2"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        [onnx.numpy_helper.from_array(np.eye(8, dtype=np.float32), "w")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_bench_by_op_lists_every_op_type_with_its_node_count(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    _model(path)
    code = main(["bench", str(path), "--repeat", "3", "--warmup", "1", "--by-op", "--dim", "batch=4"])
    out = capsys.readouterr().out
    assert code == 0
    assert "median" in out and "over 3 runs" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.strip()}
    assert rows["Add"][3] == "2"  # two Add nodes per run
    assert rows["MatMul"][3] == "1" and rows["Relu"][3] == "1"


def test_op_breakdown_sums_node_events_per_run_and_reports_the_rest():
    trace = [
        {"cat": "Session", "name": "model_run", "dur": 100},
        {"cat": "Node", "dur": 30, "args": {"op_name": "Conv"}},
        {"cat": "Node", "dur": 50, "args": {"op_name": "Conv"}},
        {"cat": "Node", "dur": 10, "args": {"op_name": "Relu"}},
        {"cat": "Session", "name": "model_run", "dur": 100},
        {"cat": "Node", "dur": 40, "args": {"op_name": "Conv"}},
        {"cat": "Node", "dur": 40, "args": {"op_name": "Conv"}},
        {"cat": "Node", "dur": 10, "args": {"op_name": "Relu"}},
    ]
    rows = {op: (us, share, nodes) for op, us, share, nodes in op_breakdown(trace, runs=2)}
    assert rows["Conv"] == (80.0, 0.8, 2)
    assert rows["Relu"] == (10.0, 0.1, 1)
    assert rows["(outside nodes)"] == (10.0, 0.1, 0)
