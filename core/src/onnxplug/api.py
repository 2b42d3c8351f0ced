"""The contract every execution provider implements.

A provider plugin is a module with hook implementations (see :mod:`onnxplug.hookspecs`) and an
entry point in the ``onnxplug`` group.  Its ``onnxplug_provider_factories`` hook returns
:class:`ProviderFactory` objects; a session asks the factory for devices, creates a
:class:`Provider` on one of them, and asks the provider which nodes it claims.

A complete minimal plugin that runs ``Relu`` with numpy::

    # my_provider/plugin.py  (entry point:  [project.entry-points.onnxplug] mine = "my_provider.plugin")
    import numpy as np
    import onnxplug
    from onnxplug.api import Device, KernelProvider, ProviderFactory
    from onnxplug.kernels import KernelRegistry

    kernels = KernelRegistry("mine")

    @kernels.kernel("Relu", since=(14,))
    def relu(x):
        return np.maximum(x, x.dtype.type(0))

    class MineFactory(ProviderFactory):
        name = "mine"
        ort_name = "MineExecutionProvider"
        priority = 50

        def devices(self):
            return [Device("cpu")]

        def create(self, device, options):
            self.check_options(options)
            return KernelProvider(self, device)

    @onnxplug.hookimpl
    def onnxplug_provider_factories():
        return [MineFactory()]

    @onnxplug.hookimpl
    def onnxplug_kernels(provider):
        return [kernels] if provider.name == "mine" else []

Vendor libraries (cupy, openvino, tensorrt...) are imported inside ``devices()`` and
``create()``, never at module import, so that discovery cannot fail because one is missing.

.. versionadded:: 0.1
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import onnx

from .errors import InvalidArgument
from .kernels import KernelKey, normalize_domain

if TYPE_CHECKING:
    from .capture import RunCapture
    from .graph import GraphView, NodeView
    from .kernels import KernelDef

__all__ = [
    "API_VERSION",
    "api_version_problem",
    "Device",
    "KernelClaim",
    "FuseClaim",
    "Partition",
    "CompiledPartition",
    "DataTransfer",
    "ProviderContext",
    "ProviderFactory",
    "Provider",
    "KernelProvider",
    "KernelLookup",
]

#: The version of this contract, ``(major, minor)``.  A minor version only adds (methods with
#: defaults, optional arguments), so a factory built for ``(1, 0)`` (or the plain ``1`` of
#: onnxplug 0.1) keeps working with a ``(1, 1)`` core; a factory declaring a newer minor, or
#: another major, is refused with the reason in ``onnxplug plugins``.  1.1 added device memory
#: (DataTransfer's memory methods, ProviderFactory.memory, Provider.synchronize) and ProviderContext;
#: 1.2 added Provider.run_capture (whole-run capture, :mod:`onnxplug.capture`).
API_VERSION = (1, 2)


def api_version_problem(declared: Any) -> str | None:
    """Why a factory declaring contract version ``declared`` cannot be used, or ``None``.

    ``declared`` is ``(major, minor)``, or an int meaning ``(major, 0)``.
    """
    if isinstance(declared, int) and not isinstance(declared, bool):
        declared = (declared, 0)
    if not (isinstance(declared, tuple) and len(declared) == 2 and all(isinstance(v, int) for v in declared)):
        return f"api_version must be (major, minor) or an int, got {declared!r}"
    major, minor = declared
    if major != API_VERSION[0]:
        return f"implements provider API {major}.{minor}; this onnxplug speaks {API_VERSION[0]}.x"
    if minor > API_VERSION[1]:
        return (
            f"implements provider API {major}.{minor}, newer than this onnxplug's "
            f"{API_VERSION[0]}.{API_VERSION[1]} (upgrade onnxplug-core)"
        )
    return None


@dataclasses.dataclass(frozen=True)
class Device:
    """A device a provider can run on.

    :param kind: ``"cpu"``, ``"gpu"`` or ``"npu"`` (onnxruntime's OrtDevice types), or another word for
        simulated or exotic devices (``"virtual"``).
    :param id: index among devices of that kind.
    :param vendor: free text, e.g. ``"Intel"``.
    :param name: free text shown by ``onnxplug plugins``.
    """

    kind: str = "cpu"
    id: int = 0
    vendor: str = ""
    name: str = ""

    def __str__(self) -> str:
        label = f"{self.kind}:{self.id}"
        return f"{label} ({self.name})" if self.name else label


@dataclasses.dataclass(frozen=True)
class KernelClaim:
    """ "I run this node with a kernel from my registry." ``node`` is the node's name."""

    node: str


@dataclasses.dataclass(frozen=True)
class FuseClaim:
    """ "I compile these nodes together into one partition" (nodes by name).

    The core checks that the set is convex (no path leaves it and re-enters it) before it
    calls :meth:`Provider.compile`.
    """

    nodes: tuple[str, ...]
    name: str = ""


@dataclasses.dataclass(frozen=True)
class Partition:
    """A fused set of nodes, as :meth:`~onnxplug.api.Provider.compile` receives it.

    :ivar name: a unique name (``<provider>_partition_<n>``).
    :ivar nodes: the node names, in execution order.
    :ivar inputs: values the partition reads from outside, in call order (constants are embedded
        in the model as initializers, not inputs).
    :ivar outputs: values it produces that are used outside or are graph outputs, in return order.
    :ivar input_shapes: ``None`` when the partition is compiled for every shape its model
        allows; the concrete input shapes when the core asks for a compilation specialised to
        them (see :attr:`CompiledPartition.input_shapes`).
    """

    name: str
    nodes: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    model: onnx.ModelProto
    input_shapes: tuple[tuple[int, ...], ...] | None = None

    def model_proto(self) -> onnx.ModelProto:
        """The partition as a standalone ONNX model (a copy: compilers may edit it)."""
        copy = onnx.ModelProto()
        copy.CopyFrom(self.model)
        return copy

    def model_bytes(self) -> bytes:
        return self.model.SerializeToString()

    def with_input_shapes(self, shapes: Sequence[Sequence[int]]) -> Partition:
        """The same partition with its inputs' shapes fixed to ``shapes`` (one per input, in
        call order), as the core hands it to :meth:`Provider.compile` when a compiled partition
        that declared :attr:`CompiledPartition.input_shapes` meets other shapes.

        Only the graph inputs' declared shapes change (intermediate and output shapes are
        left for the compiler to infer); constants and nodes are the same.

        .. versionadded:: 0.2
        """
        shapes = tuple(tuple(int(d) for d in shape) for shape in shapes)
        if len(shapes) != len(self.inputs):
            raise ValueError(f"partition {self.name} has {len(self.inputs)} inputs, got {len(shapes)} shapes")
        model = self.model_proto()
        by_name = {value.name: value for value in model.graph.input}
        for name, shape in zip(self.inputs, shapes):
            tensor_type = by_name[name].type.tensor_type
            tensor_type.shape.Clear()
            for dim in shape:
                tensor_type.shape.dim.add().dim_value = dim
        return dataclasses.replace(self, model=model, input_shapes=shapes)


class CompiledPartition:
    """What :meth:`Provider.compile` returns: a callable over the partition's inputs.

    :param inputs: names of the values the partition reads, in call order.
    :param outputs: names of the values it produces, in return order.
    :param fn: ``fn(*inputs) -> sequence of outputs``.
    :param input_shapes: for compilers that specialise on shapes (an engine built for fixed
        dimensions): the shapes ``fn`` accepts, one per input, ``None`` in a dimension that may
        vary.  When a call brings other shapes, the core compiles the partition again for them
        (:meth:`Partition.with_input_shapes`), keeps the eight most recently used such
        compilations per partition and reuses them; ``None`` (the default) means ``fn`` takes
        any shape the model allows.

        .. versionadded:: 0.2
    """

    def __init__(
        self,
        inputs: Sequence[str],
        outputs: Sequence[str],
        fn: Callable[..., Sequence[Any]],
        *,
        input_shapes: Sequence[Sequence[int | None]] | None = None,
    ):
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.fn = fn
        self.input_shapes = None if input_shapes is None else tuple(tuple(shape) for shape in input_shapes)
        if self.input_shapes is not None and len(self.input_shapes) != len(self.inputs):
            raise ValueError(f"input_shapes has {len(self.input_shapes)} entries for {len(self.inputs)} inputs")

    def __call__(self, *values: Any) -> Sequence[Any]:
        return self.fn(*values)


@dataclasses.dataclass(frozen=True)
class ProviderContext:
    """What a provider learns about the session it is created for.

    The core passes it as ``create(device, options, context=...)`` to factories whose
    ``create`` accepts a ``context`` keyword (older factories are called without it).

    :ivar intra_op_num_threads: the session's ``intra_op_num_threads`` (0: the provider decides).
    :ivar inter_op_num_threads: the session's ``inter_op_num_threads``.
    :ivar optimization_level: the session's graph optimization level name (``"disable"``,
        ``"basic"``, ``"extended"``, ``"layout"``, ``"all"``).
    :ivar enable_profiling: whether the session profiles.
    :ivar config: the session's config entries (``add_session_config_entry``).
    :ivar cache: the core's compile cache (:class:`onnxplug.CompileCache`) that compiling providers
        store their compiled artefacts in, instead of globals of their own; ``None`` when the
        caller turned caching off.

    .. versionadded:: 0.2
    """

    intra_op_num_threads: int = 0
    inter_op_num_threads: int = 0
    optimization_level: str = "all"
    enable_profiling: bool = False
    config: Mapping[str, str] = dataclasses.field(default_factory=dict)
    cache: Any = None


class DataTransfer:
    """A device's memory: copies between host memory (numpy) and device arrays, allocation,
    and the views OrtValue and IOBinding hand to users (pointer, DLPack).

    Host providers have none (:meth:`Provider.transfer` returns ``None``).  One object per
    device; the factory hands it out through :meth:`ProviderFactory.memory` (so
    ``OrtValue.ortvalue_from_numpy(x, "cuda", 0)`` works without a session) and the provider
    through :meth:`Provider.transfer`.

    A device value is whatever array type the provider computes with (a CuPy array, say); the
    core never looks inside one, it only asks this object about it.  A transfer that sets
    ``accepts_dlpack`` takes values from another device directly through :meth:`from_dlpack`
    (the DLPack protocol, ``__dlpack__``), so a value moving between two devices skips the hop
    through host memory.

    .. versionchanged:: 0.2
       ``device_name``, ``empty``, ``owns``, ``shape_and_type``, ``data_ptr``, ``to_dlpack`` and
       ``synchronize`` (the accelerator contract, API 1.1); ``from_pointer`` and ``copy_into``
       (optional: raw-pointer binding and preallocated outputs).
    """

    #: Whether :meth:`from_dlpack` can import another provider's values.
    accepts_dlpack: bool = False
    #: onnxruntime's name for this memory (``"cuda"``, ``"dml"``...; ``"virtual"`` for the
    #: simulated device): what ``OrtValue.device_name()`` reports and what
    #: ``ortvalue_from_numpy(x, device_name, device_id)`` and ``bind_output(name, device_name)``
    #: look up.
    device_name: str = ""

    def to_device(self, value: Any) -> Any:
        """A device copy of a host (numpy) array."""
        raise NotImplementedError

    def to_host(self, value: Any) -> Any:
        """A host (numpy) copy of a device value."""
        raise NotImplementedError

    def from_dlpack(self, value: Any) -> Any:
        """A device value made from another device's value that implements ``__dlpack__``."""
        raise NotImplementedError

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        """An uninitialised device array (``dtype`` is a numpy dtype)."""
        raise NotImplementedError(f"{type(self).__name__} cannot allocate")

    def owns(self, value: Any) -> bool:
        """Whether ``value`` is an array in this memory (so the core must not copy it here)."""
        return False

    def shape_and_type(self, value: Any) -> tuple[tuple[int, ...], Any]:
        """The shape and numpy dtype of a device value, read without a copy."""
        import numpy as np

        return tuple(int(d) for d in value.shape), np.dtype(value.dtype)

    def data_ptr(self, value: Any) -> int:
        """The device address of a value's first element (``OrtValue.data_ptr()``)."""
        raise NotImplementedError(f"{type(self).__name__} does not expose device addresses")

    def to_dlpack(self, value: Any) -> Any:
        """An object implementing ``__dlpack__``/``__dlpack_device__`` that shares ``value``'s memory."""
        raise NotImplementedError(f"{type(self).__name__} does not export DLPack")

    def from_pointer(self, pointer: int, shape: Sequence[int], dtype: Any) -> Any:
        """A device value viewing memory at a raw device address, without a copy
        (``IOBinding.bind_input(name, "cuda", 0, dtype, shape, ptr)``; the caller keeps it alive).

        .. versionadded:: 0.2
        """
        raise NotImplementedError(f"{type(self).__name__} cannot wrap raw device pointers")

    def copy_into(self, target: Any, value: Any) -> None:
        """Copy device value ``value`` into the preallocated device array ``target`` (same size and
        dtype): how outputs bound with ``bind_ortvalue_output`` are filled in place.

        .. versionadded:: 0.2
        """
        raise NotImplementedError(f"{type(self).__name__} cannot copy into preallocated device arrays")

    def synchronize(self) -> None:
        """Wait until work queued on this memory (copies, kernels on its streams) has finished."""


class KernelLookup:
    """The kernels a provider may use: its own registries merged with op libraries'.

    Passed to :meth:`Provider.capability`; ``resolve`` answers for one node.
    """

    def __init__(self, registries: Sequence[Any] = ()) -> None:
        self._registries = tuple(registries)

    @property
    def registries(self) -> tuple[Any, ...]:
        return self._registries

    def lookup(self, domain: str, op_type: str, since_version: int) -> KernelDef | None:
        for registry in self._registries:
            found = registry.lookup(domain, op_type, since_version)
            if found is not None:
                return found
        return None

    def has(self, domain: str, op_type: str, since_version: int) -> bool:
        """Whether a kernel for this exact schema version is registered or promised, without
        importing a deferred kernel module (the optimizer asks this of every fused op it might
        produce)."""
        key = KernelKey(normalize_domain(domain), op_type, since_version)
        for registry in self._registries:
            keys = getattr(registry, "keys", None)
            if keys is not None:
                found = key in keys()
            else:  # a registry of another kind: ask it the usual way
                found = registry.lookup(domain, op_type, since_version) is not None
            if found:
                return True
        return False

    def resolve(self, node: NodeView) -> KernelDef | None:
        """The kernel for a node's exact schema version, or ``None``."""
        if node.since_version is None:
            return None
        return self.lookup(node.domain, node.op_type, node.since_version)

    def __bool__(self) -> bool:
        return any(bool(r) for r in self._registries)  # without loading deferred kernel modules


class ProviderFactory:
    """Creates providers; one per plugin-provided execution provider.

    Subclasses set ``name`` (the short name, equal to the entry-point name), ``ort_name``
    (onnxruntime's name, used in ``providers=[...]``), ``priority`` (higher is asked first
    when the user gives no order; below 0, the provider is used only when asked for by name —
    simulators and test devices) and ``option_names`` (the provider options ``create``
    accepts).
    """

    name: str = ""
    ort_name: str = ""
    #: The contract version the factory was written for (see :data:`API_VERSION`).
    api_version: tuple[int, int] | int = API_VERSION
    priority: int = 0
    option_names: frozenset[str] = frozenset()

    def devices(self) -> list[Device]:
        """The devices available now; empty when unavailable.  Must never raise."""
        return []

    def unavailable_reason(self) -> str:
        """Why ``devices()`` is empty (missing library, no hardware...)."""
        return "no device found"

    def create(self, device: Device, options: Mapping[str, str]) -> Provider:
        """A provider on ``device`` with string options (validate them: see ``check_options``)."""
        raise NotImplementedError

    def memory(self, device: Device) -> DataTransfer | None:
        """The memory of one of this factory's devices, usable without a session (``None``: host
        memory).  ``OrtValue.ortvalue_from_numpy(x, "cuda", 0)`` asks the factory whose memory's
        ``device_name`` is ``"cuda"`` for device id 0.

        .. versionadded:: 0.2
        """
        return None

    def check_options(self, options: Mapping[str, str]) -> None:
        """Raise :class:`~onnxplug.InvalidArgument` naming unknown option keys."""
        unknown = sorted(set(options) - set(self.option_names))
        if unknown:
            valid = ", ".join(sorted(self.option_names)) or "none"
            raise InvalidArgument(
                f"{self.ort_name or self.name}: unknown provider option(s) {unknown}; valid options: {valid}"
            )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ({self.ort_name})>"


class Provider:
    """A provider bound to one device, created per session.

    :param factory: the factory that made it (gives ``name`` and ``ort_name``).
    :param device: the device it runs on.
    """

    def __init__(self, factory: ProviderFactory, device: Device) -> None:
        self.factory = factory
        self.device = device
        self.options: dict[str, str] = {}

    @property
    def name(self) -> str:
        return self.factory.name

    @property
    def ort_name(self) -> str:
        return self.factory.ort_name

    def capability(self, graph: GraphView, kernels: KernelLookup) -> list[KernelClaim | FuseClaim]:
        """The nodes this provider can run.  ``graph`` is read-only and valid only during the call.

        A provider may also record why it declines a node with ``graph.decline(node, reason)``;
        the reasons appear in ``onnxplug partition`` and in NotImplemented errors.
        """
        return []

    def compile(self, partition: Any) -> CompiledPartition:
        """Compile a fused partition (compiling providers only)."""
        raise NotImplementedError(f"{self.name} does not compile partitions")

    def transfer(self) -> DataTransfer | None:
        """Copies between host and this provider's memory; ``None`` for host memory."""
        return None

    def synchronize(self) -> None:
        """Wait for work this provider queued asynchronously (its streams).

        The core calls it where another provider, or the caller, is about to read this
        provider's outputs: at partition borders and at the end of ``run``.  Host providers
        compute synchronously and keep the default (nothing to wait for).

        .. versionadded:: 0.2
        """

    def run_capture(self) -> RunCapture | None:
        """A recorder of whole runs (:mod:`onnxplug.capture`), or ``None`` (the default): asked
        once per session; a provider returns one when its options ask for it
        (``enable_cuda_graph``).

        .. versionadded:: 0.3 (API 1.2)
        """
        return None

    def close(self) -> None:
        """Release device resources.  Called when the session is closed or collected."""


class KernelProvider(Provider):
    """A provider that runs nodes one by one with registry kernels on host arrays.

    ``capability`` claims every node whose exact schema version has a kernel that accepts the
    node's input types; other nodes are declined with the reason.
    """

    def capability(self, graph: GraphView, kernels: KernelLookup) -> list[KernelClaim | FuseClaim]:
        claims: list[KernelClaim | FuseClaim] = []
        for node in graph.nodes:
            if node.since_version is None:
                graph.decline(node, "no schema for this op at the model's opset")
                continue
            kernel = kernels.resolve(node)
            if kernel is None:
                graph.decline(node, f"no kernel for {node.key_string()}")
            elif not kernel.supports_types(node.type_bindings()):
                graph.decline(node, f"kernel does not accept types {node.type_bindings()}")
            else:
                claims.append(KernelClaim(node.name))
        return claims
