"""The HTTP server with a client nobody here wrote (tritonclient), and plain HTTP for the errors."""

from __future__ import annotations

import gzip
import json
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.serving import BatchScheduler

httpclient = pytest.importorskip("tritonclient.http", reason="the HTTP tests need tritonclient[http]")
pytest.importorskip("prometheus_client", reason="the HTTP tests need prometheus_client (the serve extra)")
from onnxplug.serving.app import create_app  # noqa: E402 - after the skips naming what is missing

Recording = feeds = None


@pytest.fixture(autouse=True)
def _helpers(serving_helpers):
    global Recording, feeds
    Recording, feeds = serving_helpers


@pytest.fixture
def server(live_server, batch_session):
    scheduler = BatchScheduler(batch_session, max_batch_size=8, max_queue_delay_ms=5)
    return live_server(create_app(scheduler, "scaler"))


def _inputs(request, binary=True):
    inputs = []
    for name, value in request.items():
        tensor = httpclient.InferInput(name, list(value.shape), "FP32")
        tensor.set_data_from_numpy(value, binary_data=binary)
        inputs.append(tensor)
    return inputs


def test_tritonclient_health_metadata_and_infer(server, batch_session):
    client = httpclient.InferenceServerClient(server.url)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("scaler")
    assert not client.is_model_ready("other")
    metadata = client.get_model_metadata("scaler")
    assert metadata["name"] == "scaler"
    assert metadata["inputs"] == [
        {"name": "x", "datatype": "FP32", "shape": [-1, -1]},
        {"name": "scale", "datatype": "FP32", "shape": [-1, 1]},
    ]
    assert [o["name"] for o in metadata["outputs"]] == ["y", "s"]
    assert client.get_server_metadata()["extensions"] == ["binary_tensor_data"]

    request = feeds(3, 4, seed=1)
    want_y, want_s = batch_session.run(None, request)
    result = client.infer("scaler", _inputs(request))  # binary in, binary out (tritonclient's default)
    np.testing.assert_array_equal(result.as_numpy("y"), want_y)
    np.testing.assert_array_equal(result.as_numpy("s"), want_s)
    # JSON in, JSON out for one output; binary for the other.
    outputs = [httpclient.InferRequestedOutput("s", binary_data=False), httpclient.InferRequestedOutput("y")]
    result = client.infer("scaler", _inputs(request, binary=False), outputs=outputs, request_id="r-1")
    assert result.get_response()["id"] == "r-1"
    np.testing.assert_allclose(result.as_numpy("s"), want_s, rtol=1e-6)
    np.testing.assert_array_equal(result.as_numpy("y"), want_y)
    # gzip-compressed request bodies, and versioned URLs.
    result = client.infer("scaler", _inputs(request), model_version="1", request_compression_algorithm="gzip")
    np.testing.assert_array_equal(result.as_numpy("y"), want_y)


def test_tritonclient_concurrent_requests_are_batched_and_correct(live_server, batch_session):
    recording = Recording(batch_session)
    scheduler = BatchScheduler(recording, max_batch_size=8, max_queue_delay_ms=30)
    server = live_server(create_app(scheduler, "scaler"))
    client = httpclient.InferenceServerClient(server.url, concurrency=16)
    requests = [feeds(1, 4, seed=i) for i in range(32)]
    pending = [client.async_infer("scaler", _inputs(r)) for r in requests]
    for request, handle in zip(requests, pending):
        np.testing.assert_array_equal(handle.get_result().as_numpy("y"), batch_session.run(["y"], request)[0])
    assert len(recording.calls) < len(requests)  # some requests shared a run
    assert recording.rows_run() == len(requests)
    status, _, body = server.request("GET", "/metrics")
    text = body.decode()
    assert status == 200
    assert 'onnxplug_requests_total{model="scaler",outcome="ok"} 32.0' in text
    assert f'onnxplug_batch_size_count{{model="scaler"}} {float(len(recording.calls))}' in text
    assert 'onnxplug_batch_size_sum{model="scaler"} 32.0' in text
    assert "onnxplug_queue_seconds_bucket" in text and "onnxplug_compute_seconds_bucket" in text


def _json_infer(inputs, outputs=None, **extra):
    document = {"inputs": inputs, **extra}
    if outputs is not None:
        document["outputs"] = outputs
    return json.dumps(document).encode()


_GOOD_X = {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1.0, 2.0]}
_GOOD_SCALE = {"name": "scale", "shape": [1, 1], "datatype": "FP32", "data": [3.0]}


@pytest.mark.parametrize(
    ("body", "headers", "status", "message"),
    [
        (_json_infer([_GOOD_X, _GOOD_SCALE, {**_GOOD_X, "name": "z"}]), {}, 400, "unknown input 'z'"),
        (_json_infer([_GOOD_X]), {}, 400, "missing input 'scale'"),
        (_json_infer([{**_GOOD_X, "datatype": "INT64"}, _GOOD_SCALE]), {}, 400, "expected datatype FP32"),
        (_json_infer([{**_GOOD_X, "datatype": "FLOAT"}, _GOOD_SCALE]), {}, 400, "unknown datatype 'FLOAT'"),
        (_json_infer([{**_GOOD_X, "shape": [2]}, _GOOD_SCALE]), {}, 400, "expected rank 2"),
        (_json_infer([{**_GOOD_X, "shape": [1, 3]}, _GOOD_SCALE]), {}, 400, "holds 3 elements"),
        (_json_infer([_GOOD_X, {**_GOOD_SCALE, "shape": [1, 2], "data": [1.0, 2.0]}]), {}, 400, "must be 1"),
        (_json_infer([{**_GOOD_X, "data": ["a", "b"]}, _GOOD_SCALE]), {}, 400, "does not fit FP32"),
        (_json_infer([_GOOD_X, _GOOD_SCALE], [{"name": "nope"}]), {}, 400, "unknown output 'nope'"),
        (b"{not json", {}, 400, "not valid JSON"),
        (b"[]", {}, 400, "'inputs' list"),
        (
            _json_infer(
                [{"name": "x", "shape": [1, 2], "datatype": "FP32", "parameters": {"binary_data_size": 8}}, _GOOD_SCALE]
            )
            + b"\0" * 4,
            "header",
            400,
            "overruns",
        ),
        (_json_infer([_GOOD_X, _GOOD_SCALE]), {"Inference-Header-Content-Length": "99999"}, 400, "body has"),
        (_json_infer([_GOOD_X, _GOOD_SCALE]), {"Content-Encoding": "br"}, 415, "unsupported Content-Encoding"),
        (b"x" * 5000, {}, 413, "over the limit"),
        (gzip.compress(b" " * 5000), {"Content-Encoding": "gzip"}, 413, "inflated request body"),
    ],
)
def test_bad_requests_get_structured_errors(live_server, batch_session, body, headers, status, message):
    scheduler = BatchScheduler(batch_session)
    server = live_server(create_app(scheduler, "scaler", max_body_bytes=4096))
    if headers == "header":
        headers = {"Inference-Header-Content-Length": str(len(body) - 4)}
    got, response_headers, payload = server.request("POST", "/v2/models/scaler/infer", body, headers)
    assert got == status, payload
    assert response_headers["content-type"] == "application/json"
    assert message in json.loads(payload)["error"]
    # The server is still up and answers a good request.
    status, _, payload = server.request("POST", "/v2/models/scaler/infer", _json_infer([_GOOD_X, _GOOD_SCALE]))
    assert status == 200
    assert json.loads(payload)["outputs"][0]["data"] == [3.0, 6.0]
    _, _, metrics = server.request("GET", "/metrics")
    assert b"onnxplug_request_errors_total" in metrics


def test_unknown_models_and_versions_are_404(server):
    for path in ("/v2/models/other", "/v2/models/other/ready", "/v2/models/scaler/versions/2"):
        status, _, body = server.request("GET", path)
        assert status == 404 and "error" in json.loads(body)
    status, _, body = server.request("POST", "/v2/models/other/infer", _json_infer([_GOOD_X, _GOOD_SCALE]))
    assert status == 404 and "this server serves 'scaler'" in json.loads(body)["error"]
    assert server.request("GET", "/v2/models/scaler/versions/1/ready")[0] == 200


def test_overload_is_503_and_timeouts_504(live_server, batch_session):
    recording = Recording(batch_session)
    recording.gate.clear()
    scheduler = BatchScheduler(recording, max_batch_size=1, max_queue_size=1)
    server = live_server(create_app(scheduler, "scaler"))
    body = _json_infer([_GOOD_X, _GOOD_SCALE])
    answers = []
    first = threading.Thread(target=lambda: answers.append(server.request("POST", "/v2/models/scaler/infer", body)))
    first.start()
    assert recording.started.wait(10)
    # One request runs (held at the gate); one waits with a 200 ms timeout; the next finds the queue full.
    timed = _json_infer([_GOOD_X, _GOOD_SCALE], parameters={"timeout": 200_000})
    second = threading.Thread(target=lambda: answers.append(server.request("POST", "/v2/models/scaler/infer", timed)))
    second.start()
    while scheduler.queue_depth() < 1:
        threading.Event().wait(0.01)
    status, headers, payload = server.request("POST", "/v2/models/scaler/infer", body)
    assert status == 503 and headers["retry-after"] == "1"
    assert "queue is full" in json.loads(payload)["error"]
    second.join(10)
    assert answers[0][0] == 504 and "timed out" in json.loads(answers[0][2])["error"]
    recording.gate.set()
    first.join(10)
    assert answers[1][0] == 200
    _, _, metrics = server.request("GET", "/metrics")
    assert b'onnxplug_request_errors_total{kind="overloaded",model="scaler"} 1.0' in metrics
    assert b'onnxplug_request_errors_total{kind="timeout",model="scaler"} 1.0' in metrics


def test_model_failures_are_500_and_the_server_survives(live_server, batch_session):
    recording = Recording(batch_session)
    recording.fail_when = lambda f: bool((f["scale"] == 0).any())

    class Broken(Recording):
        def run(self, output_names, feeds):
            if (feeds["scale"] == 7).any():
                raise RuntimeError("kernel exploded")
            return super().run(output_names, feeds)

    scheduler = BatchScheduler(Broken(batch_session), max_batch_size=1)
    server = live_server(create_app(scheduler, "scaler"))
    status, _, payload = server.request(
        "POST", "/v2/models/scaler/infer", _json_infer([_GOOD_X, {**_GOOD_SCALE, "data": [7.0]}])
    )
    assert status == 500 and "kernel exploded" in json.loads(payload)["error"]
    assert server.request("POST", "/v2/models/scaler/infer", _json_infer([_GOOD_X, _GOOD_SCALE]))[0] == 200


def test_bytes_tensors_round_trip(live_server):
    x = helper.make_tensor_value_info("text", TensorProto.STRING, ["N"])
    y = helper.make_tensor_value_info("same", TensorProto.STRING, ["N"])
    graph = helper.make_graph([helper.make_node("Identity", ["text"], ["same"])], "strings", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()
    session = onnxplug.InferenceSession(model, providers=["CPUExecutionProvider"])
    server = live_server(create_app(BatchScheduler(session), "strings"))
    client = httpclient.InferenceServerClient(server.url)
    words = np.array(["héllo", "", "wörld"], dtype=object)
    for binary in (True, False):
        tensor = httpclient.InferInput("text", [3], "BYTES")
        tensor.set_data_from_numpy(words, binary_data=binary)
        out = httpclient.InferRequestedOutput("same", binary_data=binary)
        result = client.infer("strings", [tensor], outputs=[out]).as_numpy("same")
        assert [v.decode() if isinstance(v, bytes) else v for v in result] == list(words)


def test_shutdown_drains_queued_http_requests(live_server, batch_session):
    recording = Recording(batch_session)
    recording.gate.clear()
    scheduler = BatchScheduler(recording, max_batch_size=1)
    server = live_server(create_app(scheduler, "scaler"))
    body = _json_infer([_GOOD_X, _GOOD_SCALE])
    answers = []
    clients = [
        threading.Thread(target=lambda: answers.append(server.request("POST", "/v2/models/scaler/infer", body)))
        for _ in range(3)
    ]
    for client in clients:
        client.start()
    while len(recording.calls) < 1 or scheduler.queue_depth() < 2:
        threading.Event().wait(0.01)
    server.server.should_exit = True  # what SIGINT does: stop accepting, then lifespan shutdown drains
    threading.Timer(0.3, recording.gate.set).start()
    for client in clients:
        client.join(30)
    assert [a[0] for a in answers] == [200, 200, 200]
    server.thread.join(30)  # uvicorn waits for the open requests, then its lifespan shuts the scheduler
    assert scheduler.closed


def test_a_client_that_goes_away_withdraws_its_queued_request(live_server, batch_session):
    import socket
    import time

    recording = Recording(batch_session)
    recording.gate.clear()
    scheduler = BatchScheduler(recording, max_batch_size=1)
    server = live_server(create_app(scheduler, "scaler"))
    body = _json_infer([_GOOD_X, _GOOD_SCALE])
    first = threading.Thread(target=server.request, args=("POST", "/v2/models/scaler/infer", body))
    first.start()
    assert recording.started.wait(10)
    leaving = socket.create_connection(("127.0.0.1", server.port))
    leaving.sendall(
        b"POST /v2/models/scaler/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    deadline = time.monotonic() + 10
    while scheduler.queue_depth() < 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    leaving.close()
    while scheduler.queue_depth() > 0:  # withdrawn on the disconnect, not at the gate
        assert time.monotonic() < deadline, "the request of the client that left stayed queued"
        time.sleep(0.01)
    recording.gate.set()
    first.join(10)
    assert len(recording.calls) == 1
    _, _, metrics = server.request("GET", "/metrics")
    assert b'onnxplug_requests_total{model="scaler",outcome="cancelled"} 1.0' in metrics
