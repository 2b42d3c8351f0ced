from onnxplug.testing.contract import ProviderContract


class TestCpuContract(ProviderContract):
    provider = "cpu"
