"""The CPU provider's kernel registry (the kernel modules decorate into it)."""

from onnxplug.kernels import KernelRegistry

registry = KernelRegistry("cpu")
kernel = registry.kernel
