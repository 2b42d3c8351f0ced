"""The provider and its factory: node-by-node kernels, fused partitions, copies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import onnxplug
from onnxplug.api import CompiledPartition, Device, FuseClaim, KernelClaim, Provider, ProviderFactory

from .memory import DeviceArray, VirtualTransfer, copies, device_data

# One memory per device, shared by the factory's memory() and every provider on that device, so a
# value made before a session (OrtValue.ortvalue_from_numpy(x, "virtual", 0)) is owned by it.
MEMORY = VirtualTransfer()

DEFAULT_OPS = "Relu,Add,Mul,Sigmoid"
FLOAT_TYPES = frozenset({"tensor(float)", "tensor(double)", "tensor(float16)"})


def _op_set(text: str) -> frozenset[str]:
    return frozenset(op.strip() for op in text.split(",") if op.strip())


class VirtualDeviceProvider(Provider):
    """Claims the ops named in its options; fuses connected runs of the ``fuse`` ops."""

    def __init__(
        self,
        factory: ProviderFactory,
        device: Device,
        ops: frozenset[str],
        fuse: frozenset[str],
        specialize: bool = False,
    ):
        super().__init__(factory, device)
        self.kernel_ops = ops
        self.fuse_ops = fuse
        self.specialize = specialize
        self._transfer = MEMORY
        self._compiled: list[Any] = []

    def capability(self, graph, kernels):
        claims: list[KernelClaim | FuseClaim] = []
        fusable = []
        for node in graph.nodes:
            floats = all(t is None or t in FLOAT_TYPES for t in node.input_types if t is not None)
            if not floats:
                graph.decline(node, "only float tensors live on the virtual device")
            elif node.op_type in self.fuse_ops:
                fusable.append(node)
            elif node.op_type in self.kernel_ops and kernels.resolve(node) is not None:
                claims.append(KernelClaim(node.name))
            else:
                graph.decline(node, f"{node.op_type} is not in this provider's 'ops' or 'fuse' options")
        # The core offers the grouping: connected, convex runs of the chosen nodes.
        claims.extend(FuseClaim(group) for group in graph.fusion_groups(n.name for n in fusable))
        return claims

    def compile(self, partition) -> CompiledPartition:
        # The partition runs as a standalone ONNX model through onnxplug's public API on the CPU
        # provider, which is how a real compiler would receive it (as a model to compile).
        copies.compiles += 1
        session = onnxplug.InferenceSession(partition.model_bytes(), providers=["CPUExecutionProvider"])
        self._compiled.append(session)
        names = list(partition.inputs)
        shapes = _specialized_shapes(partition) if self.specialize else None

        def run(*values: Any) -> list[DeviceArray]:
            feeds = {
                name: device_data(value, f"partition {partition.name} input '{name}'")
                for name, value in zip(names, values)
            }
            if shapes is not None:  # like an engine built for fixed dimensions: nothing else fits
                for name, shape in zip(names, shapes):
                    if feeds[name].shape != shape:
                        raise RuntimeError(f"compiled for {name} of shape {shape}, given {feeds[name].shape}")
            return [DeviceArray(np.asarray(out)) for out in session.run(list(partition.outputs), feeds)]

        return CompiledPartition(partition.inputs, partition.outputs, run, input_shapes=shapes)

    def transfer(self) -> VirtualTransfer:
        return self._transfer

    def synchronize(self) -> None:
        # Kernels here finish before returning; counted so tests see where the core waits.
        copies.synchronized += 1

    def close(self) -> None:
        for session in self._compiled:
            session.close()
        self._compiled.clear()


def _specialized_shapes(partition) -> tuple[tuple[int, ...], ...]:
    """The shapes a shape-specialising compiler builds for: those the core asked for, else the
    model's declared input shapes with every symbolic dimension taken as 1."""
    if partition.input_shapes is not None:
        return partition.input_shapes
    declared = {value.name: value.type.tensor_type.shape for value in partition.model.graph.input}
    return tuple(
        tuple(dim.dim_value if dim.HasField("dim_value") else 1 for dim in declared[name].dim)
        for name in partition.inputs
    )


class VirtualDeviceFactory(ProviderFactory):
    name = "virtual_device"
    ort_name = "VirtualDeviceExecutionProvider"
    priority = -1  # a simulator: used only when a session asks for it by name
    option_names = frozenset({"ops", "fuse", "specialize"})

    def devices(self) -> list[Device]:
        return [Device("virtual", 0, vendor="onnxplug", name="virtual device (CPU-simulated)")]

    def memory(self, device: Device) -> VirtualTransfer:
        return MEMORY

    def create(self, device: Device, options: Mapping[str, str]) -> VirtualDeviceProvider:
        self.check_options(options)
        return VirtualDeviceProvider(
            self,
            device,
            _op_set(options.get("ops", DEFAULT_OPS)),
            _op_set(options.get("fuse", "")),
            specialize=options.get("specialize", "0") == "1",
        )
