from onnxplug.testing.contract import ProviderContract, Requirements


class VirtualDeviceRequirements(Requirements):
    transfer = True


class TestVirtualDeviceContract(ProviderContract):
    provider = "virtual_device"
    requirements = VirtualDeviceRequirements
