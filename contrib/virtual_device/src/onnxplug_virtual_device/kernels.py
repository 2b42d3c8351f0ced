"""The virtual device's own kernels: host numpy math on unwrapped device arrays.

Every kernel checks that its inputs are device values and wraps its result, so the border between
this provider and the CPU must be crossed through copies.
"""

from __future__ import annotations

import numpy as np

from onnxplug.kernels import KernelRegistry

from .memory import DeviceArray, device_data

registry = KernelRegistry("virtual_device")


@registry.kernel("Relu", since=(6, 13, 14))
def relu(x):
    data = device_data(x, "Relu")
    return DeviceArray(np.maximum(data, data.dtype.type(0)))


@registry.kernel("Sigmoid", since=(6, 13))
def sigmoid(x):
    data = device_data(x, "Sigmoid")
    return DeviceArray((1 / (1 + np.exp(-data.astype(np.float64)))).astype(data.dtype))


@registry.kernel("Add", since=(7, 13, 14))
def add(a, b):
    return DeviceArray(np.add(device_data(a, "Add"), device_data(b, "Add")))


@registry.kernel("Mul", since=(7, 13, 14))
def mul(a, b):
    return DeviceArray(np.multiply(device_data(a, "Mul"), device_data(b, "Mul")))
