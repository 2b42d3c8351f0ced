"""register_custom_ops_library: op libraries given as modules, module names, files or plugin names."""

from __future__ import annotations

import sys
import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.kernels import KernelRegistry
from onnxplug.testing import make_model

DOMAIN = "test.library"


def _schema(name: str = "Double") -> onnx.defs.OpSchema:
    return onnx.defs.OpSchema(
        name,
        DOMAIN,
        1,
        inputs=[onnx.defs.OpSchema.FormalParameter("X", "T")],
        outputs=[onnx.defs.OpSchema.FormalParameter("Y", "T")],
        type_constraints=[("T", ["tensor(float)"], "floats")],
    )


def _library(module_name: str) -> types.ModuleType:
    module = types.ModuleType(module_name)
    registry = KernelRegistry(module_name)

    @registry.kernel("Double", since=(1,), domain=DOMAIN)
    def double(x):
        return x * np.float32(2)

    @onnxplug.hookimpl
    def onnxplug_op_schemas():
        return [_schema()]

    @onnxplug.hookimpl
    def onnxplug_kernels(provider):
        return [registry] if provider.name == "cpu" else []

    module.onnxplug_op_schemas = onnxplug_op_schemas
    module.onnxplug_kernels = onnxplug_kernels
    return module


def _model() -> bytes:
    node = helper.make_node("Double", ["x"], ["y"], domain=DOMAIN)
    return make_model(
        [node], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])], extra_opsets={DOMAIN: 1}
    ).SerializeToString()


def test_without_library_the_error_names_domain_and_remedy():
    with pytest.raises(onnxplug.Fail, match=r"test\.library:Double.*register_custom_ops_library"):
        onnxplug.InferenceSession(_model())


def test_module_object(monkeypatch):
    options = onnxplug.SessionOptions()
    options.register_custom_ops_library(_library("lib_as_object"))
    (y,) = onnxplug.InferenceSession(_model(), options).run(None, {"x": np.array([1, 2], np.float32)})
    np.testing.assert_array_equal(y, [2, 4])


def test_module_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "lib_by_name", _library("lib_by_name"))
    options = onnxplug.SessionOptions()
    options.register_custom_ops_library("lib_by_name")
    (y,) = onnxplug.InferenceSession(_model(), options).run(None, {"x": np.array([3, 4], np.float32)})
    np.testing.assert_array_equal(y, [6, 8])


@pytest.mark.parametrize("form", [str, lambda p: p], ids=["str", "PathLike"])
def test_missing_file_raises_at_the_call_naming_the_path(tmp_path, form):
    """onnxruntime raises Fail in register_custom_ops_library itself, not at session creation."""
    options = onnxplug.SessionOptions()
    with pytest.raises(onnxplug.Fail, match="Failed to load library .*libcustom.so"):
        options.register_custom_ops_library(form(tmp_path / "libcustom.so"))
    assert not options.__dict__.get("_op_libraries")
    ort = pytest.importorskip("onnxruntime", reason="comparing the error class needs onnxruntime")
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail, match="libcustom.so"):
        ort.SessionOptions().register_custom_ops_library(str(tmp_path / "libcustom.so"))


def test_native_library_refused(tmp_path):
    path = tmp_path / "libcustom.so"
    path.write_bytes(b"\x7fELF")
    options = onnxplug.SessionOptions()
    options.register_custom_ops_library(str(path))
    with pytest.raises(onnxplug.Fail, match="not native libraries"):
        onnxplug.InferenceSession(_model(), options)


def test_module_without_hooks_refused():
    options = onnxplug.SessionOptions()
    options.register_custom_ops_library(types.ModuleType("empty_library"))
    with pytest.raises(onnxplug.Fail, match="implements no onnxplug hook"):
        onnxplug.InferenceSession(_model(), options)


def test_unknown_module_name():
    options = onnxplug.SessionOptions()
    options.register_custom_ops_library("no_such_library_module_xyz")
    with pytest.raises(onnxplug.Fail, match="no_such_library_module_xyz"):
        onnxplug.InferenceSession(_model(), options)


def test_conflicting_schemas_name_both_libraries():
    env = onnxplug.Environment()
    env.register(_library("first_library"), name="first_library")
    with pytest.raises(onnxplug.PluginError, match="declared by both 'first_library' and 'second_library'"):
        env.register(_library("second_library"), name="second_library")


def test_conflicting_kernels_name_both_libraries():
    env = onnxplug.Environment()
    env.register(_library("first_library"), name="first_library")
    kernels_only = _library("kernels_only")
    del kernels_only.onnxplug_op_schemas
    env.register(kernels_only, name="kernels_only")
    with pytest.raises(onnxplug.PluginError, match="defined by both 'first_library' and 'kernels_only'"):
        onnxplug.InferenceSession(_model(), environment=env)


def test_library_of_the_domain_without_the_op_says_so():
    # The library declares test.library:Double; a model asking for Double2 in that domain gets an
    # error that the library is there but lacks the op (not that no library provides the domain).
    options = onnxplug.SessionOptions()
    options.register_custom_ops_library(_library("lib_without_op"))
    node = helper.make_node("Double2", ["x"], ["y"], domain=DOMAIN)
    model = make_model(
        [node], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])], extra_opsets={DOMAIN: 1}
    ).SerializeToString()
    with pytest.raises(onnxplug.Fail) as info:
        onnxplug.InferenceSession(model, options)
    message = str(info.value)
    assert "op library for domain 'test.library' is installed, but it does not provide Double2" in message
    assert "similar names: Double" in message
    assert "No installed op library provides" not in message


def test_op_declared_only_from_a_later_version_names_both_versions():
    domain = "test.library.versions"
    module = types.ModuleType("lib_later_version")

    @onnxplug.hookimpl
    def onnxplug_op_schemas():
        schema = onnx.defs.OpSchema(
            "Halve",
            domain,
            2,
            inputs=[onnx.defs.OpSchema.FormalParameter("X", "T")],
            outputs=[onnx.defs.OpSchema.FormalParameter("Y", "T")],
            type_constraints=[("T", ["tensor(float)"], "floats")],
        )
        return [schema]

    module.onnxplug_op_schemas = onnxplug_op_schemas
    options = onnxplug.SessionOptions()
    options.register_custom_ops_library(module)
    node = helper.make_node("Halve", ["x"], ["y"], domain=domain)
    model = make_model(
        [node], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])], extra_opsets={domain: 1}
    ).SerializeToString()
    with pytest.raises(onnxplug.Fail, match=r"declares Halve from version 2 on, and the model imports .* version 1"):
        onnxplug.InferenceSession(model, options)
