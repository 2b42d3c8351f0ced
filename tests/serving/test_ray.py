"""onnxplug on a local Ray cluster started by the test: two Serve replicas answering v2 requests
(tritonclient), and a Ray Data job equal to a direct session."""

from __future__ import annotations

import concurrent.futures
import json
import socket

import numpy as np
import pytest

import onnxplug

ray = pytest.importorskip("ray", reason="the Ray tests need ray[serve,data] (the ray extra)")
serve = pytest.importorskip("ray.serve", reason="the Ray tests need ray[serve]")
httpclient = pytest.importorskip("tritonclient.http", reason="the Ray tests need tritonclient[http]")
pytest.importorskip("starlette", reason="the Ray Serve test needs starlette (the serve extra)")

from onnxplug.ray import OnnxplugPredictor, serve_app  # noqa: E402 - after the skips naming what is missing


@pytest.fixture(scope="module")
def cluster():
    """A one-node cluster on this machine with a small object store; torn down after the module."""
    ray.init(
        num_cpus=2,
        object_store_memory=80 * 1024 * 1024,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        namespace="onnxplug-tests",
    )
    yield
    try:
        serve.shutdown()
    finally:
        ray.shutdown()


def _features(batch: dict) -> dict:
    ids = batch["id"].astype(np.int64)
    x = np.stack([np.sin(ids * (k + 1)) for k in range(4)], axis=1).astype(np.float32)
    return {"id": ids, "x": x, "scale": (ids % 7).astype(np.float32).reshape(-1, 1)}


@pytest.mark.ray
def test_ray_data_map_batches_equals_a_direct_session(cluster, batch_model):
    rows = 3000
    ds = ray.data.range(rows).map_batches(_features, batch_format="numpy")
    predicted = ds.map_batches(
        OnnxplugPredictor,
        fn_constructor_kwargs={
            "model": batch_model,
            "providers": ["CPUExecutionProvider"],
            "outputs": {"y": "scaled", "s": "total"},
            "keep_columns": ["id"],
        },
        batch_size=256,
        batch_format="numpy",
        concurrency=2,
        num_cpus=0.5,
    )
    table = predicted.take_all()
    assert len(table) == rows
    table.sort(key=lambda row: row["id"])
    ids = np.array([row["id"] for row in table])
    np.testing.assert_array_equal(ids, np.arange(rows))
    direct = onnxplug.InferenceSession(batch_model, providers=["CPUExecutionProvider"])
    features = _features({"id": np.arange(rows)})
    want_y, want_s = direct.run(None, {"x": features["x"], "scale": features["scale"]})
    np.testing.assert_array_equal(np.stack([row["scaled"] for row in table]), want_y)
    np.testing.assert_array_equal(np.stack([row["total"] for row in table]), want_s)


def test_predictor_names_missing_columns(batch_model):
    predictor = OnnxplugPredictor(batch_model, providers=["CPUExecutionProvider"])
    with pytest.raises(onnxplug.InvalidArgument, match="no column 'scale'"):
        predictor({"x": np.zeros((2, 3), np.float32)})
    with pytest.raises(onnxplug.InvalidArgument, match="unknown input 'nope'"):
        OnnxplugPredictor(batch_model, inputs={"col": "nope"})


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.ray
def test_two_serve_replicas_answer_v2_requests(cluster, batch_model, serving_helpers):
    _, feeds = serving_helpers
    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    app = serve_app(
        batch_model,
        name="scaler",
        num_replicas=2,
        providers=["CPUExecutionProvider"],
        max_batch_size=4,
        max_queue_delay_ms=5,
        ray_actor_options={"num_cpus": 0.25},
    )
    serve.run(app, name="onnxplug", route_prefix="/")
    status = serve.status().applications["onnxplug"]
    (deployment,) = status.deployments.values()
    assert deployment.replica_states.get("RUNNING") == 2

    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}", concurrency=8)
    assert client.is_server_live() and client.is_model_ready("scaler")
    assert client.get_model_metadata("scaler")["inputs"][0]["name"] == "x"
    direct = onnxplug.InferenceSession(batch_model, providers=["CPUExecutionProvider"])
    requests = [feeds(1 + i % 2, 3, seed=i) for i in range(24)]
    handles = []
    for request in requests:
        inputs = []
        for input_name, value in request.items():
            tensor = httpclient.InferInput(input_name, list(value.shape), "FP32")
            tensor.set_data_from_numpy(value)
            inputs.append(tensor)
        handles.append(client.async_infer("scaler", inputs))
    for request, handle in zip(requests, handles):
        result = handle.get_result()
        want_y, want_s = direct.run(None, request)
        np.testing.assert_array_equal(result.as_numpy("y"), want_y)
        np.testing.assert_array_equal(result.as_numpy("s"), want_s)

    # Both replicas answer: each response names its replica.
    import http.client

    body = json.dumps(
        {
            "inputs": [
                {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]},
                {"name": "scale", "shape": [1, 1], "datatype": "FP32", "data": [2.0]},
            ]
        }
    )

    def replica_of_one_request(_):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.request("POST", "/v2/models/scaler/infer", body=body)
            response = connection.getresponse()
            assert response.status == 200
            assert json.loads(response.read())["outputs"][0]["data"] == [2.0, 4.0]
            return response.getheader("x-onnxplug-replica")
        finally:
            connection.close()

    # Requests in flight together: one at a time, Ray's router may keep choosing the same idle
    # replica (a CI run saw 60 sequential requests all answered by one).
    replicas = set()
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        for _ in range(10):
            replicas.update(pool.map(replica_of_one_request, range(16)))
            if len(replicas) >= 2:
                break
    assert len(replicas) == 2 and None not in replicas
    # Errors keep the v2 shape behind Ray's proxy too.
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    connection.request("POST", "/v2/models/scaler/infer", body=b'{"inputs": [{"name": "z"}]}')
    response = connection.getresponse()
    assert response.status == 400 and "unknown input 'z'" in json.loads(response.read())["error"]
    serve.delete("onnxplug")
