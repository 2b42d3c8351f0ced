"""Generated documentation stays in step with the code."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_operator_table_is_current():
    # A separate process: other tests register schemas of their own into onnx.defs.
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "op_table.py"), "--check"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr


def test_every_cpu_kernel_module_is_listed():
    kernels = ROOT / "plugins" / "cpu" / "src" / "onnxplug_cpu" / "kernels"
    source = (kernels / "__init__.py").read_text()
    for module in kernels.glob("*.py"):
        if module.name.startswith("_"):
            continue
        assert f'"{module.stem}"' in source, f"{module.name} is not listed in MODULES"
