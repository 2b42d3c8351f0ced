"""The provider contract kit on the CUDA provider: on the GPU where there is one (skipped with
the factory's reason elsewhere), and on the array API standard's reference arrays, which run the
same kernels and memory contract on any machine."""

from __future__ import annotations

import pytest

from onnxplug.testing.contract import ProviderContract, Requirements
from onnxplug_cuda.testing import environment_for


class CudaRequirements(Requirements):
    transfer = True
    capture_options = {"enable_cuda_graph": "1"}  # CUDA graphs: CuPy's stream capture


class TestCudaContract(ProviderContract):
    """The installed plugin as users get it: needs an NVIDIA GPU, a driver and CuPy."""

    provider = "cuda"
    requirements = CudaRequirements


class ArrayApiStrictRequirements(CudaRequirements):
    float16 = False  # the standard's reference arrays have no float16 (CuPy has it)
    capture_options = None  # no streams to capture off a GPU


class TestCudaContractOnArrayApiStrict(ProviderContract):
    provider = "cuda"
    requirements = ArrayApiStrictRequirements

    @pytest.fixture
    def environment(self):
        return environment_for("array_api_strict")
