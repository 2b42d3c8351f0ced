"""An op library whose kernels are a wasm module run in onnxplug's sandbox.

Register it like any op-library plugin: ``SessionOptions.register_custom_ops_library(path of
this file)``, or an ``onnxplug`` entry point naming it.  Its kernels cannot touch the host's
memory, and each call is bounded by the manifest's memory and fuel limits.
"""

from __future__ import annotations

from pathlib import Path

import onnxplug
from onnxplug_wasm.sandbox import SandboxLibrary

library = SandboxLibrary.load(Path(__file__).with_name("manifest.json"))


@onnxplug.hookimpl
def onnxplug_op_schemas():
    return library.op_schemas()


@onnxplug.hookimpl
def onnxplug_kernels(provider):
    return library.kernels(provider)
