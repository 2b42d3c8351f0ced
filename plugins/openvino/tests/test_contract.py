from onnxplug.testing.contract import ProviderContract, Requirements


class OpenVINORequirements(Requirements):
    fuse = True


class TestOpenVINOContract(ProviderContract):
    provider = "openvino"
    requirements = OpenVINORequirements
