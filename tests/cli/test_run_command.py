"""``onnxplug run MODEL``: random inputs with symbolic dimensions, ``--dim``, given ``.npy`` files
and how warnings and failures are printed."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnxplug.cli import main


def _save(tmp_path, nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def _reshaped(tmp_path, target):
    """x[n] and y[n] added, the sum reshaped to the constant ``target``."""
    shape = numpy_helper.from_array(np.array(target, np.int64), "target")
    return _save(
        tmp_path,
        [helper.make_node("Reshape", ["x", "target"], ["r"]), helper.make_node("Add", ["x", "y"], ["s"])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["n"]) for n in ("x", "y")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("r", "s")],
        [shape],
    )  # fmt: skip


def test_symbolic_dim_inferred_from_a_constant_reshape_and_shared(tmp_path, capsys):
    assert main(["run", _reshaped(tmp_path, [3, 4])]) == 0
    out = capsys.readouterr().out
    assert "r: float32 [3, 4]" in out
    assert "s: float32 [12]" in out  # y shares the dim "n" with x


def test_failure_hints_at_dim_and_dim_fixes_it(tmp_path, capsys):
    model = _reshaped(tmp_path, [-1, 4])  # -1: n is not inferred, and 1 element cannot be [-1, 4]
    assert main(["run", model]) == 1
    err = capsys.readouterr().err
    assert "hint: random inputs gave these symbolic dimensions 1: x:0 (n), y:0 (n)" in err
    assert "--dim NAME=V or --dim INPUT:INDEX=V" in err
    assert main(["run", model, "--dim", "n=8"]) == 0
    assert "r: float32 [2, 4]" in capsys.readouterr().out


def test_unnamed_dim_by_input_and_position(tmp_path, capsys):
    model = _save(
        tmp_path,
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    assert main(["run", model, "--dim", "x:0=5", "--dim", "x:2=2"]) == 0
    assert "y: float32 [5, 3, 2]" in capsys.readouterr().out
    assert main(["run", model, "--dim", "x:one=5"]) == 1
    assert "not a dimension index of input 'x'" in capsys.readouterr().err
    assert main(["run", model, "--dim", "x:0=five"]) == 1
    assert "'five' is not an integer" in capsys.readouterr().err


def test_float64_npy_cast_to_the_declared_float(tmp_path, capsys):
    model = _save(
        tmp_path,
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    np.save(tmp_path / "x.npy", np.array([[1.5, -2.0], [3.0, -4.0]]))
    assert main(["run", model, "--input", f"x={tmp_path / 'x.npy'}"]) == 0
    captured = capsys.readouterr()
    assert "note: --input x: float64 cast to float32 (the declared tensor(float))" in captured.err
    assert "y: float32 [2, 2] min=0 max=3 mean=1.125" in captured.out


def test_warnings_print_without_source_lines():
    code = (
        "import warnings\n"
        "from onnxplug.cli import _plugins_cmd, main\n"
        "_plugins_cmd.run = lambda args: warnings.warn('careful now') or 0\n"
        "raise SystemExit(main(['plugins']))\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, env=os.environ, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "UserWarning: careful now\n"


@pytest.mark.parametrize("item", ["n=-1", "n=abc", "x:=3"])
def test_bad_dim_syntax(tmp_path, capsys, item):
    assert main(["run", _reshaped(tmp_path, [3, 4]), "--dim", item]) == 1
    assert "--dim" in capsys.readouterr().err
