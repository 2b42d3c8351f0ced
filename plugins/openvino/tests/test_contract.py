from onnxplug.testing.contract import ProviderContract, Requirements


class OpenVINORequirements(Requirements):
    fuse = True
    float64 = False  # declined: OpenVINO's CPU plugin computes float64 in float32


class TestOpenVINOContract(ProviderContract):
    provider = "openvino"
    requirements = OpenVINORequirements
