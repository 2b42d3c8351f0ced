from onnxplug.testing.contract import ProviderContract, Requirements


class VirtualDeviceRequirements(Requirements):
    transfer = True


class TestVirtualDeviceContract(ProviderContract):
    provider = "virtual_device"
    requirements = VirtualDeviceRequirements


class FusingVirtualDeviceRequirements(Requirements):
    transfer = True
    fuse = True


class TestFusingVirtualDeviceContract(ProviderContract):
    """The virtual device compiling MatMul-Add-Relu-Softmax as one partition."""

    provider = "virtual_device"
    requirements = FusingVirtualDeviceRequirements
    provider_options = {"ops": "", "fuse": "MatMul,Add,Relu,Softmax"}


class TestSpecializingVirtualDeviceContract(TestFusingVirtualDeviceContract):
    """The same, with compilations that accept only the shapes they were built for."""

    provider_options = {"ops": "", "fuse": "MatMul,Add,Relu,Softmax", "specialize": "1"}
