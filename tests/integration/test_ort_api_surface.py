"""onnxruntime names that existing code imports, each doing what onnxruntime's does.

Where onnxruntime is installed it is the oracle: the same calls are made on both and the
results (or error classes) compared.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.testing import make_model

ort = pytest.importorskip("onnxruntime", reason="the API parity suite needs onnxruntime as an oracle")

F = TensorProto.FLOAT
RUNTIMES = {"onnxruntime": ort, "onnxplug": onnxplug}


def _relu_model() -> bytes:
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [("x", F, [2])], [("y", F, [2])])
    return model.SerializeToString()


def _add_model(external: bytes | None = None):
    """y = x + w; with ``external``, ``w``'s data lives in the file ``weights.bin`` (not written)."""
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [("x", F, [2])],
        [("y", F, [2])],
        {"w": np.array([10, 20], np.float32)},
    )
    if external is not None:
        tensor = model.graph.initializer[0]
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        for key, value in {"location": "weights.bin", "offset": "0", "length": str(len(external))}.items():
            tensor.external_data.add(key=key, value=value)
    return model


# -- module-level names --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "SparseTensor",
        "OrtSparseFormat",
        "OrtMemoryInfo",
        "OrtArenaCfg",
        "OrtAllocatorType",
        "OrtMemType",
        "OrtDeviceVendorId",
        "OrtEpAssignedSubgraph",
        "OrtEpAssignedNode",
        "SessionIOBinding",
        "LoraAdapter",
        "AdapterFormat",
        "get_build_info",
        "set_global_thread_pool_sizes",
        "disable_telemetry_events",
        "enable_telemetry_events",
    ],
)
def test_module_exports_onnxruntimes_name(name):
    assert hasattr(ort, name), f"onnxruntime itself has no {name}"
    assert hasattr(onnxplug, name)


def test_capi_modules_export_what_onnxruntimes_do():
    ours = importlib.import_module("onnxplug.capi._pybind_state")
    real = importlib.import_module("onnxplug.capi.onnxruntime_pybind11_state")
    assert ours.Fail is real.Fail and ours.OrtDevice is real.OrtDevice
    theirs = importlib.import_module("onnxruntime.capi._pybind_state")
    for name in real.__all__:
        assert hasattr(theirs, name), f"onnxruntime's _pybind_state has no {name}"
    for name in ("OrtDevice", "OrtValueVector", "SessionIOBinding", "OrtMemoryInfo", "SparseTensor", "InvalidGraph"):
        assert hasattr(ours, name)
    collection = importlib.import_module("onnxplug.capi.onnxruntime_inference_collection")
    for name in ("InferenceSession", "Session", "IOBinding", "OrtValue", "OrtDevice", "SparseTensor", "AdapterFormat"):
        assert hasattr(collection, name)
        assert hasattr(importlib.import_module("onnxruntime.capi.onnxruntime_inference_collection"), name)
    assert isinstance(onnxplug.InferenceSession(_relu_model(), providers=["CPUExecutionProvider"]), collection.Session)
    assert collection.get_ort_device_type("cuda") == 1
    with pytest.raises(Exception, match="Unsupported device type: bogus"):
        collection.get_ort_device_type("bogus")


def test_build_info_form():
    assert ort.get_build_info().startswith("ORT Build Info: ")
    assert onnxplug.get_build_info().startswith("ORT Build Info: onnxplug=")


# -- OrtDevice -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "device_id", "vendor"), [("cpu", 0, -1), ("cuda", 1, -1), ("gpu", 0, 0x8086), ("dml", 0, -1)]
)
def test_ort_device_make_matches(name, device_id, vendor):
    ours, theirs = onnxplug.OrtDevice.make(name, device_id, vendor), ort.OrtDevice.make(name, device_id, vendor)
    for method in ("device_type", "device_id", "device_vendor_id", "device_mem_type"):
        assert getattr(ours, method)() == getattr(theirs, method)(), method


def test_ort_device_type_codes_match():
    from onnxruntime.capi import _pybind_state as C

    for name in ("cpu", "cuda", "gpu", "npu", "dml", "cann", "webgpu", "fpga", "default_memory"):
        assert getattr(onnxplug.OrtDevice, name)() == getattr(C.OrtDevice, name)(), name
    with pytest.raises(Exception, match="Unsupported device type: bogus"):
        onnxplug.OrtDevice.make("bogus", 0)


def test_cuda_value_without_a_cuda_provider_raises_like_onnxruntime():
    for rt in RUNTIMES.values():
        with pytest.raises(RuntimeError, match="Can't allocate memory on the device"):
            rt.OrtValue.ortvalue_from_numpy(np.ones(2, np.float32), "cuda", 0)


# -- memory infos and arena config ---------------------------------------------------------


def test_memory_infos_match_onnxruntime():
    results = {}
    for key, rt in RUNTIMES.items():
        session = rt.InferenceSession(_relu_model(), providers=["CPUExecutionProvider"])
        infos = session.get_input_memory_infos() + session.get_output_memory_infos()
        results[key] = [(i.name, i.device_id, i.mem_type.name, i.allocator_type.name) for i in infos]
    assert results["onnxplug"] == results["onnxruntime"]
    assert results["onnxplug"] == [("Cpu", 0, "DEFAULT", "ORT_ARENA_ALLOCATOR")] * 2


def test_memory_info_and_arena_cfg_construction():
    for rt in RUNTIMES.values():
        info = rt.OrtMemoryInfo("Cpu", rt.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, rt.OrtMemType.DEFAULT)
        assert (info.name, info.device_id) == ("Cpu", 0)
        cfg = rt.OrtArenaCfg(0, -1, -1, -1)
        assert (cfg.max_mem, cfg.arena_extend_strategy, cfg.initial_chunk_size_bytes) == (0, -1, -1)
        assert rt.OrtArenaCfg({"max_mem": 16}).max_mem == 16
        with pytest.raises(RuntimeError, match="Invalid OrtArenaCfg option: bogus"):
            rt.OrtArenaCfg({"bogus": 1})


# -- sparse tensors ------------------------------------------------------------------------


def test_sparse_coo_round_trip_matches():
    values = np.array([1.0, 2.0], np.float32)
    for rt in RUNTIMES.values():
        sparse = rt.SparseTensor.sparse_coo_from_numpy(
            np.array([2, 3]), values, np.array([0, 4]), rt.OrtDevice.make("cpu", 0)
        )
        assert sparse.format() == rt.OrtSparseFormat.ORT_SPARSE_COO
        assert list(sparse.dense_shape()) == [2, 3]
        assert sparse.values().tolist() == [1.0, 2.0]
        assert sparse.as_coo_view().indices().tolist() == [0, 4]
        assert (sparse.data_type(), sparse.device_name()) == ("sparse_tensor(float)", "cpu")
        with pytest.raises(RuntimeError, match="does not contain CSR"):
            sparse.as_csrc_view()
        value = rt.OrtValue.ort_value_from_sparse_tensor(sparse)
        assert value.is_sparse_tensor() and not value.is_tensor()
        assert value.data_type() == "sparse_tensor(float)"
        assert value.as_sparse_tensor().values().tolist() == [1.0, 2.0]
        with pytest.raises(RuntimeError, match="does not contain SparseTensor"):
            rt.OrtValue.ortvalue_from_numpy(values).as_sparse_tensor()


def test_sparse_csr_and_bad_indices():
    values = np.array([1.0, 2.0], np.float32)
    device = onnxplug.OrtDevice.make("cpu", 0)
    csr = onnxplug.SparseTensor.sparse_csr_from_numpy(
        np.array([2, 3]), values, np.array([0, 1]), np.array([0, 1, 2]), device
    )
    theirs = ort.SparseTensor.sparse_csr_from_numpy(
        np.array([2, 3]), values, np.array([0, 1]), np.array([0, 1, 2]), ort.OrtDevice.make("cpu", 0)
    )
    assert csr.format() == onnxplug.OrtSparseFormat.ORT_SPARSE_CSRC
    assert csr.as_csrc_view().inner().tolist() == theirs.as_csrc_view().inner().tolist()
    assert csr.as_csrc_view().outer().tolist() == theirs.as_csrc_view().outer().tolist()
    np.testing.assert_array_equal(csr.to_dense(), [[1, 0, 0], [0, 2, 0]])
    with pytest.raises(RuntimeError, match="COO indices for 2 values"):
        onnxplug.SparseTensor.sparse_coo_from_numpy(np.array([2, 3]), values, np.array([0]), device)
    with pytest.raises(RuntimeError, match="outside"):
        onnxplug.SparseTensor.sparse_coo_from_numpy(np.array([2, 3]), values, np.array([0, 9]), device)


# -- OrtValueVector and SessionIOBinding ---------------------------------------------------


def test_ortvalue_vector():
    vector = onnxplug.OrtValueVector()
    vector.push_back(onnxplug.OrtValue.ortvalue_from_numpy(np.ones(2, np.float32)))
    assert len(vector) == 1 and vector.element_type_at(0) == TensorProto.FLOAT
    with pytest.raises(TypeError):
        vector.push_back(np.ones(2))


def test_session_iobinding_runs():
    session = onnxplug.InferenceSession(_relu_model(), providers=["CPUExecutionProvider"])
    binding = onnxplug.SessionIOBinding(session)
    binding.bind_cpu_input("x", np.array([-1.0, 2.0], np.float32))
    binding.bind_output("y")
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], [0, 2])
    outputs = binding.get_outputs_as_ortvaluevector()
    assert len(outputs) == 1 and outputs[0].numpy().tolist() == [0, 2]


# -- graph assignment info ------------------------------------------------------------------


def test_graph_assignment_info_matches_onnxruntime():
    results = {}
    for key, rt in RUNTIMES.items():
        plain = rt.InferenceSession(_relu_model(), providers=["CPUExecutionProvider"])
        with pytest.raises(Exception, match="record_ep_graph_assignment_info") as info:
            plain.get_provider_graph_assignment_info()
        assert type(info.value).__name__ == "Fail"
        options = rt.SessionOptions()
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        session = rt.InferenceSession(_relu_model(), options, providers=["CPUExecutionProvider"])
        results[key] = [
            (sub.ep_name, [(n.name, n.op_type, n.domain) for n in sub.get_nodes()])
            for sub in session.get_provider_graph_assignment_info()
        ]
    assert results["onnxplug"] == results["onnxruntime"]


def test_graph_assignment_info_with_two_providers():
    from onnxplug.api import KernelClaim
    from onnxplug.testing.fakes import FakeFactory, fake_plugin

    env = onnxplug.Environment(only=["cpu"])
    env.register(
        fake_plugin(FakeFactory("fake", lambda g, k: [KernelClaim(n.name) for n in g.nodes if n.op_type == "Relu"]))
    )
    nodes = [helper.make_node("Relu", ["x"], ["h"], name="relu"), helper.make_node("Tanh", ["h"], ["y"], name="tanh")]
    model = make_model(nodes, [("x", F, [2])], [("y", F, [2])]).SerializeToString()
    options = onnxplug.SessionOptions()
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    session = onnxplug.InferenceSession(model, options, providers=["fake"], environment=env)
    info = [(s.ep_name, [n.name for n in s.get_nodes()]) for s in session.get_provider_graph_assignment_info()]
    assert info == [("FakeExecutionProvider", ["relu"]), ("CPUExecutionProvider", ["tanh"])]


# -- external initializers ------------------------------------------------------------------


def test_add_external_initializers_supplies_external_data():
    data = _add_model(external=np.zeros(2, np.float32).tobytes()).SerializeToString()
    x = np.array([1.0, 2.0], np.float32)
    results = {}
    for key, rt in RUNTIMES.items():
        options = rt.SessionOptions()
        options.add_external_initializers(["w"], [rt.OrtValue.ortvalue_from_numpy(np.array([100, 200], np.float32))])
        results[key] = rt.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(results["onnxplug"], results["onnxruntime"])
    np.testing.assert_array_equal(results["onnxplug"], [101, 202])


def test_add_external_initializers_refusals():
    external = _add_model(external=np.zeros(2, np.float32).tobytes()).SerializeToString()

    def session(data, name, array):
        options = onnxplug.SessionOptions()
        options.add_external_initializers([name], [onnxplug.OrtValue.ortvalue_from_numpy(array)])
        return onnxplug.InferenceSession(data, options, providers=["CPUExecutionProvider"])

    with pytest.raises(onnxplug.InvalidArgument, match=r"initializer 'w' is float\[2\] in the model"):
        session(external, "w", np.ones(3, np.float32))
    with pytest.raises(onnxplug.InvalidArgument, match="no initializer named 'q'"):
        session(external, "q", np.ones(2, np.float32))
    embedded = _add_model().SerializeToString()
    with pytest.raises(onnxplug.Fail, match="non-external initializer"):
        session(embedded, "w", np.ones(2, np.float32))
    options = ort.SessionOptions()
    options.add_external_initializers(["w"], [ort.OrtValue.ortvalue_from_numpy(np.ones(2, np.float32))])
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail, match="non-external initializer"):
        ort.InferenceSession(embedded, options, providers=["CPUExecutionProvider"])


def test_external_data_file_given_in_memory():
    weights = np.array([5, 6], np.float32).tobytes()
    data = _add_model(external=weights).SerializeToString()
    x = np.array([1.0, 2.0], np.float32)
    results = {}
    for key, rt in RUNTIMES.items():
        options = rt.SessionOptions()
        options.add_external_initializers_from_files_in_memory(
            ["weights.bin"], [np.frombuffer(weights, np.uint8)], [len(weights)]
        )
        results[key] = rt.InferenceSession(data, options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(results["onnxplug"], results["onnxruntime"])
    np.testing.assert_array_equal(results["onnxplug"], [6, 8])
    with pytest.raises(onnxplug.InvalidGraph, match="loaded from bytes"):
        onnxplug.InferenceSession(data, providers=["CPUExecutionProvider"])


# -- global thread pools --------------------------------------------------------------------


def test_global_thread_pool_sizes_apply_to_opted_in_sessions(monkeypatch):
    from onnxplug.runtime import _global_threads

    monkeypatch.setattr(_global_threads, "_SIZES", None)  # the process-wide state, fresh for this test
    onnxplug.set_global_thread_pool_sizes(3, 2)
    with pytest.raises(onnxplug.Fail, match="Global thread pools have already been created"):
        onnxplug.set_global_thread_pool_sizes(1, 1)
    shared = onnxplug.SessionOptions()
    shared.use_per_session_threads = False
    by_config = onnxplug.SessionOptions()
    by_config.add_session_config_entry("session.use_global_thread_pool", "1")
    own = onnxplug.SessionOptions()
    own.intra_op_num_threads = 1
    for options, expected in ((shared, (3, 2)), (by_config, (3, 2)), (own, (1, 0))):
        session = onnxplug.InferenceSession(_relu_model(), options, providers=["CPUExecutionProvider"])
        effective = session.get_session_options()
        assert (effective.intra_op_num_threads, effective.inter_op_num_threads) == expected


def test_telemetry_switches_are_accepted():
    for rt in RUNTIMES.values():
        assert rt.disable_telemetry_events() is None
        assert rt.enable_telemetry_events() is None


# -- LoRA adapters ---------------------------------------------------------------------------


def _adapter_model() -> bytes:
    """y = x + delta, where ``delta`` is an input with a default (an overridable initializer)."""
    model = make_model(
        [helper.make_node("Add", ["x", "delta"], ["y"])],
        [("x", F, [2]), ("delta", F, [2])],
        [("y", F, [2])],
        {"delta": np.zeros(2, np.float32)},
    )
    return model.SerializeToString()


def test_adapter_written_by_onnxruntime_applies_here(tmp_path):
    pytest.importorskip("flatbuffers", reason="adapter files need the flatbuffers package")
    path = tmp_path / "a.onnx_adapter"
    writer = ort.AdapterFormat()
    writer.set_adapter_version(2)
    writer.set_model_version(3)
    writer.set_parameters({"delta": ort.OrtValue.ortvalue_from_numpy(np.array([10, 20], np.float32))})
    writer.export_adapter(str(path))
    read = onnxplug.AdapterFormat.read_adapter(str(path))
    assert (read.get_format_version(), read.get_adapter_version(), read.get_model_version()) == (1, 2, 3)
    x = np.array([1.0, 2.0], np.float32)
    results = {}
    for key, rt in RUNTIMES.items():
        adapter = rt.LoraAdapter()
        adapter.Load(str(path))
        run_options = rt.RunOptions()
        run_options.add_active_adapter(adapter)
        session = rt.InferenceSession(_adapter_model(), providers=["CPUExecutionProvider"])
        results[key] = (session.run(None, {"x": x}, run_options)[0], session.run(None, {"x": x})[0])
    for ours, theirs in zip(results["onnxplug"], results["onnxruntime"]):
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(results["onnxplug"][0], [11, 22])
    np.testing.assert_array_equal(results["onnxplug"][1], [1, 2])


def test_adapter_written_here_reads_in_onnxruntime(tmp_path):
    pytest.importorskip("flatbuffers", reason="adapter files need the flatbuffers package")
    path = tmp_path / "b.onnx_adapter"
    writer = onnxplug.AdapterFormat()
    writer.set_adapter_version(7)
    params = {"delta": np.array([1, 2], np.float32), "ids": np.arange(6, dtype=np.int64).reshape(2, 3)}
    writer.set_parameters({k: onnxplug.OrtValue.ortvalue_from_numpy(v) for k, v in params.items()})
    writer.export_adapter(str(path))
    read = ort.AdapterFormat.read_adapter(str(path))
    assert read.get_adapter_version() == 7
    got = {k: v.numpy() for k, v in read.get_parameters().items()}
    assert sorted(got) == sorted(params)
    for name, array in params.items():
        np.testing.assert_array_equal(got[name], array)
        assert got[name].dtype == array.dtype


def test_adapter_file_errors(tmp_path):
    bogus = tmp_path / "bogus.onnx_adapter"
    bogus.write_bytes(b"not an adapter at all")
    with pytest.raises(onnxplug.InvalidArgument, match="not an onnxruntime adapter file"):
        onnxplug.AdapterFormat.read_adapter(str(bogus))
    with pytest.raises(onnxplug.Fail, match="no such file"):
        onnxplug.LoraAdapter().Load(str(tmp_path / "missing.onnx_adapter"))
    with pytest.raises(TypeError, match="LoraAdapter"):
        onnxplug.RunOptions().add_active_adapter(object())
