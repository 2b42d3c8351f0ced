"""The kernel indexes say which module registers each kernel, so a session imports only the
kernel modules its model uses (tests/core/test_startup_imports.py checks which)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("onnxplug_cpu.kernels", "onnxplug_ms_ops.kernels")


def test_kernel_indexes_are_current():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "index_kernels.py"), "--check", *PACKAGES],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
