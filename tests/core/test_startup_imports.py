"""What the first session of a fresh process imports: start-up cost is mostly imports.

Each check runs in a fresh interpreter, since this one has imported everything already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from onnx import TensorProto, helper

from onnxplug.testing import make_model


def _fresh(code: str, *args: str, env: dict | None = None) -> dict:
    environment = None if env is None else {**os.environ, **env}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=environment
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


_SESSION = """
import json, sys
import onnxplug
session = onnxplug.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
print(json.dumps({name: name in sys.modules for name in sys.argv[2:]}))
"""


def _elementwise_model(tmp_path) -> str:
    """Relu, Add, Sigmoid, Sub: a Sigmoid (QuickGelu's anchor) that feeds no Mul."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Add", ["a", "x"], ["b"]),
        helper.make_node("Sigmoid", ["b"], ["c"]),
        helper.make_node("Sub", ["c", "a"], ["y"]),
    ]
    model = make_model(nodes, [("x", TensorProto.FLOAT, [1, 4])], [("y", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "small.onnx"
    path.write_bytes(model.SerializeToString())
    return str(path)


#: Imported by nothing a small CPU session needs: onnx-ir's sympy, onnxscript's rewriter (no
#: rule set can match), the Tokenizer's regex, the CUDA kernels, the planning tables of the
#: providers that are discovered but not asked, and the kernel modules of ops the model lacks
#: (convolutions and their numerics, recurrent layers, com.microsoft's fused ops).
_NOT_NEEDED = (
    "sympy",
    "onnxscript",
    "regex",
    "onnxplug_cuda.kernels",
    "onnxplug.partition.targets",
    "onnxplug_cpu.kernels.nn",
    "onnxplug_cpu.numerics",
    "onnxplug_cpu.kernels.rnn",
    "onnxplug_ms_ops.kernels.fused",
)
#: The kernel modules of the model's own ops, imported on their first lookup.
_NEEDED = ("onnx_ir", "onnxplug_cpu", "onnxplug_cpu.kernels.activation", "onnxplug_cpu.kernels.elementwise")


def test_a_small_session_imports_only_what_it_needs(tmp_path):
    loaded = _fresh(_SESSION, _elementwise_model(tmp_path), *_NEEDED, *_NOT_NEEDED)
    assert loaded == {**dict.fromkeys(_NEEDED, True), **dict.fromkeys(_NOT_NEEDED, False)}


_SYMBOLIC = """
import json, sys
import onnxplug
import onnx_ir as ir
before = "sympy" in sys.modules
parsed = ir._symbolic_shapes.parse_symbolic_expression("N + 1")  # the package attribute works
total = ir.SymbolicDim("N") * 2 + 1          # onnx-ir's arithmetic loads sympy on first use
import sympy.core                           # and an ordinary import afterwards gets the real package
import sympy
print(json.dumps({"before": before, "dim": str(total), "parsed": str(parsed),
                  "same": sympy.core is sys.modules["sympy.core"],
                  "expr": isinstance(total._expr, sympy.Expr), "symbol": str(sympy.Symbol("x") + 1)}))
"""


def test_symbolic_dimensions_still_compute_with_sympy_loaded_on_use():
    result = _fresh(_SYMBOLIC)
    expected = {"before": False, "dim": "2*N + 1", "parsed": "N + 1", "same": True, "expr": True, "symbol": "x + 1"}
    assert result == expected


def test_sympy_imported_before_onnxplug_is_used_as_it_is():
    code = "import json, sympy, onnxplug, onnx_ir as ir; print(json.dumps(ir._core.sympy is sympy))"
    assert _fresh(code) is True


_REFERENCE_AFTER = """
import json, sys
import numpy as np
import onnxplug
session = onnxplug.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
imported = "onnx.reference" in sys.modules
from onnx.reference import ReferenceEvaluator
y = ReferenceEvaluator(sys.argv[1]).run(None, {"x": np.ones((1, 4), np.float32)})[0]
print(json.dumps({"imported": imported, "y": y.tolist()}))
"""


def test_onnx_reference_is_imported_only_where_a_plugin_schema_shares_an_op_name(tmp_path):
    """onnx's reference evaluator refuses, when first imported, an op name present in two
    domains, so a plugin declaring com.microsoft's Gelu has it imported first (~14 ms); the CPU
    provider alone declares no such schema and spares a fresh process that import."""
    model = _elementwise_model(tmp_path)
    expected = [[1.0 / (1.0 + np.exp(-2.0)) - 1.0] * 4]  # sigmoid(relu(1) + 1) - relu(1)
    for plugins, imported in (("cpu", False), ("cpu,ms_ops", True)):
        env = {"ONNXPLUG_DISABLE_PLUGIN_AUTOLOAD": "1", "ONNXPLUG_PLUGINS": plugins}
        result = _fresh(_REFERENCE_AFTER, model, env=env)
        assert result["imported"] is imported, plugins
        np.testing.assert_allclose(result["y"], expected, rtol=1e-6)
