"""Fake providers for partition tests: claims decided by a function, kernels counted.

::

    from onnxplug.testing.fakes import FakeFactory, fake_plugin

    relus = FakeFactory("fake_a", lambda graph, kernels: [KernelClaim(n.name) for n in graph.nodes
                                                          if n.op_type == "Relu"])
    env = onnxplug.Environment()
    env.register(fake_plugin(relus), name="fake_a")
    session = onnxplug.InferenceSession(model, providers=["fake_a"], environment=env)

Fake kernels (Relu, Neg, Add, Mul, Sigmoid) count their calls in ``FakeFactory.calls`` so a test
can see that a provider really ran, also inside If/Loop bodies.  A factory created with
``device_memory=True`` keeps values in a separate memory (see ``contrib/virtual_device`` for the
full simulation); fused claims are compiled by running the partition on the CPU provider.
"""

from __future__ import annotations

import collections
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..api import CompiledPartition, DataTransfer, Device, Provider, ProviderFactory
from ..hookspecs import hookimpl
from ..kernels import KernelRegistry

__all__ = ["FakeFactory", "FakeProvider", "fake_plugin", "wrong_kernel_plugin", "Boxed"]

Claimer = Callable[[Any, Any], list]


class Boxed:
    """A value in a fake provider's device memory; numpy refuses to compute with it."""

    __slots__ = ("data",)
    __array_ufunc__ = None

    def __init__(self, data: np.ndarray) -> None:
        self.data = data

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("a Boxed value is in fake device memory: a copy to the host is missing")

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self.data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        return self.data.__dlpack_device__()


class _BoxTransfer(DataTransfer):
    def __init__(self, dlpack: bool) -> None:
        self.accepts_dlpack = dlpack
        self.dlpack_imports = 0

    def from_dlpack(self, value: Any) -> Boxed:
        self.dlpack_imports += 1
        return Boxed(np.array(np.from_dlpack(value), copy=True))

    def to_device(self, value: Any) -> Boxed:
        assert not isinstance(value, Boxed), "to_device given a device value"
        return Boxed(np.array(value, copy=True))

    def to_host(self, value: Any) -> np.ndarray:
        assert isinstance(value, Boxed), f"to_host given {type(value).__name__}, not a device value"
        return np.array(value.data, copy=True)


class FakeProvider(Provider):
    def __init__(self, factory: FakeFactory, device: Device) -> None:
        super().__init__(factory, device)
        self.fake = factory
        self.closed = False

    def capability(self, graph: Any, kernels: Any) -> list:
        return list(self.fake.claim(graph, kernels))

    def compile(self, partition: Any) -> CompiledPartition:
        from ..runtime import InferenceSession

        session = InferenceSession(partition.model_bytes(), providers=["CPUExecutionProvider"])
        inputs, outputs, boxed = list(partition.inputs), list(partition.outputs), self.fake.device_memory

        def run(*values: Any) -> list[Any]:
            self.fake.calls["partition"] += 1
            feeds = {n: (v.data if boxed else v) for n, v in zip(inputs, values)}
            results = session.run(outputs, feeds)
            return [Boxed(r) for r in results] if boxed else results

        return CompiledPartition(inputs, outputs, run)

    def transfer(self) -> DataTransfer | None:
        return self.fake.transfer if self.fake.device_memory else None

    def close(self) -> None:
        self.closed = True


class FakeFactory(ProviderFactory):
    """A provider factory whose provider claims what ``claim(graph, kernels)`` returns.

    :param name: short name; the onnxruntime name is ``<Name>ExecutionProvider``.
    :param claim: the capability function.
    :param device_memory: keep values in (fake) device memory, so copies are inserted.
    :param dlpack: with ``device_memory``, accept other devices' values through DLPack.
    """

    def __init__(
        self, name: str, claim: Claimer, *, priority: int = 50, device_memory: bool = False, dlpack: bool = False
    ) -> None:
        self.name = name
        self.ort_name = name.title().replace("_", "") + "ExecutionProvider"
        self.priority = priority
        self.claim = claim
        self.device_memory = device_memory
        self.transfer = _BoxTransfer(dlpack)
        self.calls: collections.Counter[str] = collections.Counter()

    def devices(self) -> list[Device]:
        return [Device("virtual" if self.device_memory else "cpu", name=f"fake {self.name}")]

    def create(self, device: Device, options: Mapping[str, str]) -> FakeProvider:
        self.check_options(options)
        return FakeProvider(self, device)


def _kernels(factory: FakeFactory) -> KernelRegistry:
    registry = KernelRegistry(f"fake-{factory.name}")

    def unary(op: str, fn: Callable[[np.ndarray], np.ndarray], since: tuple[int, ...]) -> None:
        def run(x):
            factory.calls[op] += 1
            data = x.data if factory.device_memory else x
            result = fn(data).astype(data.dtype)
            return Boxed(result) if factory.device_memory else result

        registry.kernel(op, since=since)(run)

    def binary(op: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> None:
        def run(a, b):
            factory.calls[op] += 1
            if factory.device_memory:
                return Boxed(fn(a.data, b.data))
            return fn(a, b)

        registry.kernel(op, since=(7, 13, 14))(run)

    unary("Relu", lambda x: np.maximum(x, 0), (6, 13, 14))
    unary("Neg", np.negative, (6, 13))
    unary("Sigmoid", lambda x: 1 / (1 + np.exp(-x)), (6, 13))
    binary("Add", np.add)
    binary("Mul", np.multiply)
    return registry


def fake_plugin(*factories: FakeFactory) -> types.SimpleNamespace:
    """A plugin object (for ``Environment.register``) offering ``factories`` and their kernels."""
    registries = {factory.name: _kernels(factory) for factory in factories}

    @hookimpl
    def onnxplug_provider_factories():
        return list(factories)

    @hookimpl
    def onnxplug_kernels(provider):
        registry = registries.get(provider.name)
        return [registry] if registry is not None else []

    return types.SimpleNamespace(
        onnxplug_provider_factories=onnxplug_provider_factories, onnxplug_kernels=onnxplug_kernels
    )


# --- a provider with a planted bug, for divergence finders (``onnxplug validate``) -------------

_CORRECT_UNARY = {
    "Relu": (lambda x: np.maximum(x, 0), (6, 13, 14)),
    "Neg": (np.negative, (6, 13)),
    "Sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (6, 13)),
}


def wrong_kernel_plugin(op: str = "Relu", name: str = "wrong", error: float = 1.0) -> types.SimpleNamespace:
    """A plugin whose provider ``name`` claims every ``op`` node (Relu, Neg or Sigmoid) and computes
    it with ``error`` added to every element — a deliberately wrong kernel, so a tool that compares
    providers can be shown to find the node.  Register it with ``Environment.register``."""
    from ..api import KernelClaim

    if op not in _CORRECT_UNARY:
        raise ValueError(f"wrong_kernel_plugin supports {sorted(_CORRECT_UNARY)}, not {op!r}")
    correct, since = _CORRECT_UNARY[op]
    factory = FakeFactory(name, lambda graph, kernels: [KernelClaim(n.name) for n in graph.nodes if n.op_type == op])
    registry = KernelRegistry(f"fake-{name}")

    def run(x):
        factory.calls[op] += 1
        return (correct(x) + error).astype(x.dtype)

    registry.kernel(op, since=since)(run)

    @hookimpl
    def onnxplug_provider_factories():
        return [factory]

    @hookimpl
    def onnxplug_kernels(provider):
        return [registry] if provider.name == name else []

    return types.SimpleNamespace(
        factory=factory,
        onnxplug_provider_factories=onnxplug_provider_factories,
        onnxplug_kernels=onnxplug_kernels,
    )
