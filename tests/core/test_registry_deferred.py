"""Kernel modules imported on first lookup (KernelRegistry.defer / defer_modules / index_modules)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import onnxplug
from onnxplug import PluginError
from onnxplug.api import KernelLookup
from onnxplug.kernels import KernelKey, KernelRegistry


def _loader(registry: KernelRegistry, calls: list[str]):
    def load():
        calls.append("load")
        if "Relu-14" not in calls:  # idempotent, as an import is
            calls.append("Relu-14")

            @registry.kernel("Relu", since=(13, 14))
            def relu(x):
                return x

    return load


def test_loader_runs_on_first_lookup_of_its_op_only():
    registry = KernelRegistry("t")
    calls: list[str] = []
    registry.defer([KernelKey("", "Relu", 13), KernelKey("", "Relu", 14)], _loader(registry, calls))
    assert registry.lookup("", "Abs", 13) is None  # another op: nothing loaded
    assert calls == []
    assert KernelKey("", "Relu", 14) in registry.keys()  # promised, still not loaded
    assert bool(registry) and calls == []
    assert registry.lookup("ai.onnx", "Relu", 14).fn.__name__ == "relu"
    assert calls == ["load", "Relu-14"]
    assert registry.lookup("", "Relu", 6) is None  # a version it does not register: no reload
    assert calls == ["load", "Relu-14"]


def test_listing_the_registry_loads_everything():
    registry = KernelRegistry("t")
    calls: list[str] = []
    registry.defer([KernelKey("", "Relu", 13), KernelKey("", "Relu", 14)], _loader(registry, calls))
    assert len(registry) == 2
    assert [str(d.key) for d in registry] == ["ai.onnx::Relu-13", "ai.onnx::Relu-14"]
    assert calls == ["load", "Relu-14"]


def test_has_answers_from_promised_keys_without_loading():
    registry = KernelRegistry("t")
    calls: list[str] = []
    registry.defer([KernelKey("", "Relu", 14)], _loader(registry, calls))
    lookup = KernelLookup([registry])
    assert lookup.has("", "Relu", 14)
    assert not lookup.has("", "Relu", 6)
    assert bool(lookup)
    assert calls == []


def test_clash_found_on_promised_keys_without_loading():
    first, second = KernelRegistry("first"), KernelRegistry("second")
    calls: list[str] = []
    first.defer([KernelKey("", "Relu", 14)], _loader(first, calls))
    second.defer([KernelKey("", "Relu", 14)], lambda: calls.append("second"))

    class Plugin:
        def __init__(self, registry):
            self.registry = registry

        @onnxplug.hookimpl
        def onnxplug_kernels(self, provider):
            return [self.registry]

    env = onnxplug.Environment(autoload=False)
    env.register(Plugin(first), name="first")
    env.register(Plugin(second), name="second")
    with pytest.raises(onnxplug.PluginError, match=r"Relu-14 .* defined by both 'first' and 'second'"):
        env.kernel_registries(type("P", (), {"name": "cpu"})())
    assert calls == []


def test_index_modules_names_each_modules_kernels(tmp_path):
    package = tmp_path / "lazy_kernels_pkg"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            from onnxplug.kernels import KernelRegistry
            registry = KernelRegistry("lazy")
            MODULES = ("activation", "shape", "helpers")
            """
        )
    )
    (package / "shape.py").write_text(
        textwrap.dedent(
            """
            from . import registry

            @registry.kernel("Identity", since=(14, 16))
            def identity(x):
                return x
            """
        )
    )
    # activation imports shape: shape's kernel stays shape's, so looking up Identity imports
    # shape alone.
    (package / "activation.py").write_text(
        textwrap.dedent(
            """
            from . import registry, shape

            @registry.kernel("Relu", since=(14,))
            def relu(x):
                return x
            """
        )
    )
    (package / "helpers.py").write_text("X = 1\n")
    code = textwrap.dedent(
        """
        import json, sys
        import lazy_kernels_pkg as p
        index = p.registry.index_modules("lazy_kernels_pkg", p.MODULES)
        json.dump(index, sys.stdout)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert out == '{"activation": {"": {"Relu": [14]}}, "shape": {"": {"Identity": [14, 16]}}, "helpers": {}}'
    deferred = textwrap.dedent(
        """
        import sys
        import lazy_kernels_pkg as p
        index = {"activation": {"": {"Relu": (14,)}}, "shape": {"": {"Identity": (14, 16)}}}
        p.registry.defer_modules("lazy_kernels_pkg", index)
        assert p.registry.lookup("", "Identity", 16) is not None
        assert "lazy_kernels_pkg.shape" in sys.modules and "lazy_kernels_pkg.activation" not in sys.modules
        try:
            p.registry.index_modules("lazy_kernels_pkg", p.MODULES)
        except RuntimeError as error:
            print(error)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", deferred], capture_output=True, text=True, cwd=tmp_path, check=True
    ).stdout
    assert "['shape'] are imported already" in out


def test_a_module_loaded_before_its_schemas_is_checked_by_the_next_validate():
    registry = KernelRegistry("t")

    def load():
        @registry.kernel("Twice", since=(1,), domain="test.deferred.domain")
        def twice(x):
            return x

    registry.defer([KernelKey("test.deferred.domain", "Twice", 1)], load)
    assert registry.lookup("test.deferred.domain", "Twice", 1) is not None  # no schema yet: not checked
    with pytest.raises(PluginError, match=r"test.deferred.domain::Twice-1: onnx has no such schema version"):
        registry.validate()
