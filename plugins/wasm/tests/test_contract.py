import pytest

from onnxplug.testing.contract import ProviderContract, Requirements

pytest.importorskip("wasmtime", reason="wasmtime is not installed (pip install onnxplug[wasm])")


class WasmRequirements(Requirements):
    float16 = False
    float64 = False
    transfer = True


class TestWasmContract(ProviderContract):
    provider = "wasm"
    requirements = WasmRequirements

    @pytest.fixture
    def environment(self):
        from onnxplug_wasm.testing import environment

        return environment()
