"""Models and session wrappers shared by the serving tests."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onnxplug


def _model(batch_dim) -> bytes:
    """``y = x @ w`` and ``s = sum(x, axis=1)`` over ``x: [batch, L]`` with ``L`` symbolic too, so
    requests of one batch key may differ in rows but never in ``L``."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, "L"])
    scale = helper.make_tensor_value_info("scale", TensorProto.FLOAT, [batch_dim, 1])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, "L"])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, [batch_dim, 1])
    axes = numpy_helper.from_array(np.array([1], np.int64), "axes")
    nodes = [
        helper.make_node("Mul", ["x", "scale"], ["y"]),
        helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1),
    ]
    graph = helper.make_graph(nodes, "serving_test", [x, scale], [y, s], [axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString()


@pytest.fixture(scope="session")
def batch_model() -> bytes:
    return _model("N")


@pytest.fixture(scope="session")
def fixed_batch_model() -> bytes:
    return _model(1)


@pytest.fixture
def batch_session(batch_model):
    return onnxplug.InferenceSession(batch_model, providers=["CPUExecutionProvider"])


def feeds(rows: int, length: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((rows, length)).astype(np.float32),
        "scale": rng.standard_normal((rows, 1)).astype(np.float32),
    }


class Recording:
    """A session seen through onnxruntime's interface that records each run's feed shapes and can
    hold runs at a gate (``gate.clear()``), to fill the queue or keep a request in flight."""

    def __init__(self, session, outputs=None) -> None:
        self.session = session
        self.calls: list[dict[str, tuple]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.started = threading.Event()
        self.fail_when = None  # a predicate over the feeds that makes run raise
        self._outputs = outputs
        self._lock = threading.Lock()

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self._outputs if self._outputs is not None else self.session.get_outputs()

    def run(self, output_names, feeds):
        with self._lock:
            self.calls.append({name: value.shape for name, value in feeds.items()})
        self.started.set()
        assert self.gate.wait(30), "the test never opened the gate"
        if self.fail_when is not None and self.fail_when(feeds):
            raise onnxplug.InvalidArgument("the test's failing request")
        return self.session.run(output_names, feeds)

    def rows_run(self) -> int:
        return sum(call["x"][0] for call in self.calls)


@pytest.fixture(scope="session")
def serving_helpers():
    """``(Recording, feeds)`` for the test modules (conftest is not importable by name under
    ``--import-mode=importlib``)."""
    return Recording, feeds


class LiveServer:
    """The serving app on uvicorn in a thread, on a free port of 127.0.0.1."""

    def __init__(self, app) -> None:
        import socket

        import uvicorn

        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.url = f"127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        """``(status, headers, body)`` of one plain HTTP request."""
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read()
        finally:
            connection.close()

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.socket.close()


@pytest.fixture
def live_server():
    """``start(app) -> LiveServer``; every server started is stopped at the end of the test."""
    pytest.importorskip("uvicorn", reason="the HTTP tests need uvicorn (the serve extra)")
    pytest.importorskip("starlette", reason="the HTTP tests need starlette (the serve extra)")
    started = []

    def start(app):
        server = LiveServer(app)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def pytest_collection_modifyitems(config, items):
    """The Ray tests start a cluster (about 100 s on two cores): they run when selected by marker
    (``pytest -m ray``, ``nox -s ray``, and ``.ci/run`` after the main test line), and skip otherwise."""
    if "ray" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="starts a Ray cluster: run with `pytest -m ray tests/serving` or `nox -s ray`")
    for item in items:
        if "ray" in item.keywords and item.get_closest_marker("ray") is not None:
            item.add_marker(skip)
