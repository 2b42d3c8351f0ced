"""The provider contract: checks every execution provider passes, runnable in a vendor's CI.

A provider's test module needs three lines::

    from onnxplug.testing.contract import ProviderContract

    class TestCpuContract(ProviderContract):
        provider = "cpu"                 # the entry-point name

Capabilities differ between providers, so checks are grouped by :class:`Requirements`, in the
manner of SQLAlchemy's compliance suite: a subclass opens or closes groups (``float16 = False``),
and a closed group's checks are skipped with the requirement's name.  Nothing is skipped by
provider name.  A provider with no device is skipped with the factory's own reason (missing
hardware or library).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from .._plugins import Environment
from ..api import FuseClaim, KernelClaim, KernelLookup, Provider, ProviderFactory, api_version_problem
from ..errors import InvalidArgument
from ..graph import GraphView, NodeView, load_model
from ..partition import partition_of
from ..runtime import InferenceSession, OrtValue
from . import make_model

__all__ = ["ProviderContract", "Requirements"]


class Requirements:
    """What a provider claims to support.  Subclass and set attributes to ``False`` to close a
    group of checks.

    :cvar float32: runs float32 elementwise and matrix ops (Add, Relu, MatMul, Softmax).
    :cvar float16: runs the same ops on float16.
    :cvar float64: runs the same ops on float64.
    :cvar transfer: owns device memory, so ``transfer()`` returns a DataTransfer.
    :cvar fuse: answers with FuseClaims and compiles partitions (closed: never answers with one).
    :cvar capture_options: the provider options that turn on whole-run capture
        (:mod:`onnxplug.capture`; ``{"enable_cuda_graph": "1"}`` for a CUDA provider), or ``None``
        when the provider cannot record runs.
    """

    float32: ClassVar[bool] = True
    float16: ClassVar[bool] = True
    float64: ClassVar[bool] = True
    transfer: ClassVar[bool] = False
    fuse: ClassVar[bool] = False
    capture_options: ClassVar[dict[str, str] | None] = None


def _requires(name: str):
    def check(self: ProviderContract) -> None:
        if not getattr(self.requirements, name):
            pytest.skip(f"requirement '{name}' is closed for provider '{self.provider}'")

    return check


def _graph_model(elem_type: int, batch: int | str = 3) -> onnx.ModelProto:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Add", ["h", "b"], ["s"], name="add"),
        helper.make_node("Relu", ["s"], ["r"], name="relu"),
        helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1),
    ]
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    rng = np.random.default_rng(7)
    return make_model(
        nodes,
        [("x", elem_type, [batch, 4])],
        [("y", elem_type, [batch, 5])],
        {"w": rng.standard_normal((4, 5)).astype(dtype), "b": rng.standard_normal(5).astype(dtype)},
    )


def _reference_values(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of ``model`` (inputs, intermediates, outputs) by onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    names = [out for node in model.graph.node for out in node.output if out]
    results = ReferenceEvaluator(model).run(names, feeds)
    return {**feeds, **dict(zip(names, results))}


def _x(elem_type: int = TensorProto.FLOAT, batch: int = 3) -> np.ndarray:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    return np.random.default_rng(3).standard_normal((batch, 4)).astype(dtype)


class ProviderContract:
    """Checks of the provider contract; subclass with ``provider = "<entry-point name>"``."""

    provider: ClassVar[str] = ""
    requirements: ClassVar[type[Requirements]] = Requirements
    #: Options passed to ``create`` (strings, as onnxruntime passes them).
    provider_options: ClassVar[dict[str, str]] = {}

    # -- fixtures ----------------------------------------------------------------------------

    @pytest.fixture
    def environment(self) -> Environment:
        return Environment()

    @pytest.fixture
    def factory(self, environment: Environment) -> ProviderFactory:
        record = next((r for r in environment.plugins if r.name == self.provider), None)
        if record is None:
            pytest.fail(f"no plugin with entry-point name '{self.provider}' is installed")
        if record.status != "loaded":
            pytest.fail(f"plugin '{self.provider}' did not load: {record.status} {record.error or ''}")
        if not record.factories:
            pytest.fail(f"plugin '{self.provider}' registers no provider factory")
        return record.factories[0]

    @pytest.fixture
    def created(self, factory: ProviderFactory):
        devices = factory.devices()
        if not devices:
            pytest.skip(f"provider '{self.provider}' has no device here: {factory.unavailable_reason()}")
        created = factory.create(devices[0], dict(self.provider_options))
        yield created
        created.close()

    @pytest.fixture
    def kernels(self, environment: Environment, created: Provider) -> KernelLookup:
        return KernelLookup(environment.kernel_registries(created))

    def _session(self, model: onnx.ModelProto, environment: Environment) -> InferenceSession:
        return InferenceSession(
            model.SerializeToString(),
            providers=[(self._ort_name(environment), self.provider_options)],
            environment=environment,
        )

    def _ort_name(self, environment: Environment) -> str:
        return environment.factory(self.provider).ort_name

    # -- identity ----------------------------------------------------------------------------

    def test_factory_name_is_the_entry_point_name(self, factory: ProviderFactory) -> None:
        assert factory.name == self.provider
        assert factory.ort_name, "ort_name (onnxruntime's provider name) must be set"

    def test_api_version(self, factory: ProviderFactory) -> None:
        assert api_version_problem(factory.api_version) is None, api_version_problem(factory.api_version)

    def test_devices_never_raises(self, factory: ProviderFactory) -> None:
        devices = factory.devices()  # called directly: an exception fails the test
        assert isinstance(devices, list)
        if not devices:
            assert factory.unavailable_reason(), "an empty device list needs a reason"

    def test_unknown_option_is_rejected(self, factory: ProviderFactory) -> None:
        devices = factory.devices()
        if not devices:
            pytest.skip(f"provider '{self.provider}' has no device here: {factory.unavailable_reason()}")
        with pytest.raises(InvalidArgument, match="no_such_option"):
            factory.create(devices[0], {"no_such_option": "1"})

    # -- claims ------------------------------------------------------------------------------

    def _claims(
        self, provider: Provider, kernels: KernelLookup, model: onnx.ModelProto
    ) -> tuple[list[Any], dict[str, NodeView]]:
        """The provider's claims on ``model``, and the model's nodes as the provider saw them."""
        loaded = load_model(model.SerializeToString())
        view = GraphView(loaded.model.graph, loaded.opsets)
        view.begin_query(provider.name)
        try:
            return list(provider.capability(view, kernels)), {node.name: node for node in view.nodes}
        finally:
            view.end_query()

    def test_claims_are_valid_and_deterministic(self, created: Provider, kernels: KernelLookup) -> None:
        model = _graph_model(TensorProto.FLOAT)
        first, nodes = self._claims(created, kernels, model)
        second, _ = self._claims(created, kernels, model)
        assert first == second, "capability() must answer the same graph the same way"
        names = {n.name for n in model.graph.node}
        for claim in first:
            assert isinstance(claim, (KernelClaim, FuseClaim)), claim
            claimed = [claim.node] if isinstance(claim, KernelClaim) else list(claim.nodes)
            assert set(claimed) <= names, f"claim {claim} names nodes not in the graph"
            if isinstance(claim, KernelClaim):
                node = nodes[claim.node]
                assert kernels.resolve(node) is not None, f"{claim} has no kernel for {node.key_string()}"

    def test_unsupported_dtype_is_not_claimed(self, created: Provider, kernels: KernelLookup) -> None:
        closed = [
            name
            for name, elem in (("float16", TensorProto.FLOAT16), ("float64", TensorProto.DOUBLE))
            if not getattr(self.requirements, name)
        ]
        if not closed:
            pytest.skip("every dtype group is open")
        for name in closed:
            elem = {"float16": TensorProto.FLOAT16, "float64": TensorProto.DOUBLE}[name]
            claims, _ = self._claims(created, kernels, _graph_model(elem))
            assert claims == [], f"requirement '{name}' is closed but the provider claimed {claims}"

    # -- running -----------------------------------------------------------------------------

    @pytest.mark.parametrize("dtype", ["float32", "float16", "float64"])
    def test_small_graph_matches_reference(
        self, dtype: str, environment: Environment, factory: ProviderFactory
    ) -> None:
        _requires(dtype)(self)
        if not factory.devices():
            pytest.skip(f"provider '{self.provider}' has no device here: {factory.unavailable_reason()}")
        elem = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "float64": TensorProto.DOUBLE}[dtype]
        model = _graph_model(elem)
        x = np.random.default_rng(3).standard_normal((3, 4)).astype(onnx.helper.tensor_dtype_to_np_dtype(elem))
        session = self._session(model, environment)
        counts = session.partition_counts()
        assert counts.get(self._ort_name(environment), 0) > 0, f"the provider ran no node: {counts}"
        (got,) = session.run(None, {"x": x})
        from onnx.reference import ReferenceEvaluator

        (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
        tolerance = 1e-2 if dtype == "float16" else 1e-5
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tolerance, atol=tolerance)

    def test_fuse_claims_follow_the_requirement(
        self, created: Provider, kernels: KernelLookup, environment: Environment
    ) -> None:
        claims, _ = self._claims(created, kernels, _graph_model(TensorProto.FLOAT))
        fused = [claim for claim in claims if isinstance(claim, FuseClaim)]
        if not self.requirements.fuse:
            assert fused == [], f"requirement 'fuse' is closed but the provider answered {fused}"
            return
        assert fused, "requirement 'fuse' is open but the provider answered no FuseClaim on MatMul-Add-Relu-Softmax"
        report = self._session(_graph_model(TensorProto.FLOAT), environment).get_partition_report()
        ours = [node for node in report.nodes if node.provider == self._ort_name(environment)]
        assert ours and all(node.partition for node in ours), f"the provider's nodes did not run fused: {ours}"

    def test_fuse_claims_are_disjoint(self, created: Provider, kernels: KernelLookup) -> None:
        _requires("fuse")(self)
        claims, _ = self._claims(created, kernels, _graph_model(TensorProto.FLOAT))
        seen: dict[str, Any] = {}
        for claim in claims:
            claimed = [claim.node] if isinstance(claim, KernelClaim) else list(claim.nodes)
            assert claimed, f"{claim} claims no node"
            for node in claimed:
                assert node not in seen, f"node '{node}' is claimed twice: by {seen[node]} and by {claim}"
                seen[node] = claim

    def test_compile_matches_reference(self, created: Provider, kernels: KernelLookup) -> None:
        """Each FuseClaim compiled alone (the Partition the core would build) computes what the
        reference evaluator computes for those nodes, with the inputs and outputs in the
        partition's order, on device values when the provider has its own memory."""
        _requires("fuse")(self)
        model = _graph_model(TensorProto.FLOAT)
        claims, _ = self._claims(created, kernels, model)
        fused = [claim for claim in claims if isinstance(claim, FuseClaim)]
        assert fused, "requirement 'fuse' is open but the provider answered no FuseClaim"
        expected = _reference_values(model, {"x": _x()})
        loaded = load_model(model.SerializeToString())
        transfer = created.transfer()
        for index, claim in enumerate(fused):
            partition = partition_of(loaded.model, claim.nodes, f"{self.provider}_partition_{index}")
            compiled = created.compile(partition)
            assert tuple(compiled.inputs) == partition.inputs, f"inputs {compiled.inputs} != {partition.inputs}"
            assert tuple(compiled.outputs) == partition.outputs, f"outputs {compiled.outputs} != {partition.outputs}"
            values = [expected[name] for name in partition.inputs]
            if transfer is not None:
                values = [transfer.to_device(value) for value in values]
            results = list(compiled(*values))
            assert len(results) == len(partition.outputs), f"{len(results)} results for {partition.outputs}"
            created.synchronize()
            for name, result in zip(partition.outputs, results):
                if transfer is not None and transfer.owns(result):
                    result = transfer.to_host(result)
                got = np.asarray(result)
                assert got.shape == expected[name].shape and got.dtype == expected[name].dtype, name
                np.testing.assert_allclose(got, expected[name], rtol=1e-5, atol=1e-5, err_msg=f"output '{name}'")

    def test_dynamic_batch_runs_at_two_sizes(self, environment: Environment, factory: ProviderFactory) -> None:
        """A symbolic batch dimension: the same session at two batch sizes (a compiler that
        specialises on shapes declares ``CompiledPartition.input_shapes`` and is compiled again)."""
        _requires("float32")(self)
        if not factory.devices():
            pytest.skip(f"provider '{self.provider}' has no device here: {factory.unavailable_reason()}")
        model = _graph_model(TensorProto.FLOAT, batch="batch")
        session = self._session(model, environment)
        assert session.partition_counts().get(self._ort_name(environment), 0) > 0, "the provider ran no node"
        for batch in (1, 4, 1):
            x = _x(batch=batch)
            (got,) = session.run(None, {"x": x})
            np.testing.assert_allclose(got, _reference_values(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)

    def test_transfer_describes_device_values(self, created: Provider) -> None:
        _requires("transfer")(self)
        transfer = created.transfer()
        assert transfer is not None, "requirement 'transfer' is open but transfer() returned None"
        assert transfer.device_name, "a DataTransfer needs the device_name OrtValue and IOBinding look up"
        host = np.arange(12, dtype=np.float32).reshape(3, 4)
        value = transfer.to_device(host)
        assert transfer.owns(value) and not transfer.owns(host)
        shape, dtype = transfer.shape_and_type(value)
        assert tuple(shape) == (3, 4) and np.dtype(dtype) == np.float32
        empty = transfer.empty((2, 0, 5), np.dtype(np.int64))
        assert transfer.owns(empty)
        shape, dtype = transfer.shape_and_type(empty)
        assert tuple(shape) == (2, 0, 5) and np.dtype(dtype) == np.int64

    def test_iobinding_keeps_values_on_the_device(self, created: Provider, environment: Environment) -> None:
        """A device input bound as an OrtValue and an output bound to the device's name: the
        output comes back in the device's memory with the reference's values."""
        _requires("transfer")(self)
        transfer = created.transfer()
        model = _graph_model(TensorProto.FLOAT)
        session = self._session(model, environment)
        binding = session.io_binding()
        x = _x()
        binding.bind_ortvalue_input("x", OrtValue(transfer.to_device(x), transfer))
        binding.bind_output("y", transfer.device_name, created.device.id)
        session.run_with_iobinding(binding)
        binding.synchronize_outputs()
        (y,) = binding.get_outputs()
        assert y.device_name() == transfer.device_name, f"output left on '{y.device_name()}'"
        np.testing.assert_allclose(y.numpy(), _reference_values(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)

    def test_recorded_runs_replay_with_new_inputs(self, factory: ProviderFactory, environment: Environment) -> None:
        """With capture on, a binding of preallocated device values runs four times (warm-up,
        recording, two replays), its input refreshed in place each time: every run's output
        matches the reference for that run's input."""
        options = self.requirements.capture_options
        if options is None:
            pytest.skip(f"requirement 'capture_options' is closed for provider '{self.provider}'")
        _requires("transfer")(self)
        devices = factory.devices()
        if not devices:
            pytest.skip(f"provider '{self.provider}' has no device here: {factory.unavailable_reason()}")
        created = factory.create(devices[0], {**self.provider_options, **options})
        try:
            assert created.run_capture() is not None, f"the options {options} did not turn on run_capture()"
            transfer = created.transfer()
        finally:
            created.close()
        model = _graph_model(TensorProto.FLOAT)
        session = InferenceSession(
            model.SerializeToString(),
            providers=[(self._ort_name(environment), {**self.provider_options, **options})],
            environment=environment,
        )
        x = OrtValue(transfer.to_device(_x()), transfer)
        y = OrtValue(transfer.empty((3, 5), np.dtype(np.float32)), transfer)
        binding = session.io_binding()
        binding.bind_ortvalue_input("x", x)
        binding.bind_ortvalue_output("y", y)
        rng = np.random.default_rng(11)
        for _ in range(4):
            fresh = rng.standard_normal((3, 4)).astype(np.float32)
            x.update_inplace(fresh)
            session.run_with_iobinding(binding)
            binding.synchronize_outputs()
            expected = _reference_values(model, {"x": fresh})["y"]
            np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-5)

    def test_transfer_round_trip_is_identity(self, created: Provider) -> None:
        _requires("transfer")(self)
        transfer = created.transfer()
        assert transfer is not None, "requirement 'transfer' is open but transfer() returned None"
        for array in (
            np.arange(12, dtype=np.float32).reshape(3, 4),
            np.array([True, False]),
            np.zeros((0, 2), np.int64),
        ):
            back = transfer.to_host(transfer.to_device(array))
            assert isinstance(back, np.ndarray) and back.dtype == array.dtype and back.shape == array.shape
            np.testing.assert_array_equal(back, array)

    def test_host_provider_has_no_transfer(self, created: Provider) -> None:
        if self.requirements.transfer:
            pytest.skip("requirement 'transfer' is open")
        assert created.transfer() is None

    def test_close_is_idempotent_and_session_close_releases(
        self, factory: ProviderFactory, environment: Environment
    ) -> None:
        devices = factory.devices()
        if not devices:
            pytest.skip(f"provider '{self.provider}' has no device here: {factory.unavailable_reason()}")
        provider = factory.create(devices[0], dict(self.provider_options))
        provider.close()
        provider.close()
        session = self._session(_graph_model(TensorProto.FLOAT), environment)
        session.close()
        assert session.get_providers() == []
