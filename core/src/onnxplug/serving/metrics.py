"""Prometheus metrics for a served model (needs ``prometheus_client``: the ``serve`` extra).

One :class:`ServingMetrics` per model, in its own registry (so two apps in one process, as in
tests, do not collide in the global one).  It is the scheduler's :class:`BatchObserver`:

- ``onnxplug_requests_total{model, outcome}`` — every request that reached the scheduler, by how
  it ended: ok, error, invalid, timeout, cancelled, rejected (shutdown), overloaded;
- ``onnxplug_request_errors_total{model, kind}`` — requests refused or failed, by kind
  (``bad_request``, ``body_too_large``, ``unknown_model``, ``overloaded``, ``timeout``, ``cancelled``,
  ``unavailable``, ``internal``), including those refused before queuing;
- ``onnxplug_batch_size`` (rows per session run), ``onnxplug_batch_requests`` (requests per run);
- ``onnxplug_queue_seconds`` (enqueue to run start, per request), ``onnxplug_compute_seconds``
  (per session run), and the gauge ``onnxplug_queue_depth``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["ServingMetrics"]

_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_TIME_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServingMetrics:
    """The metrics of one model; ``queue_depth`` is read when Prometheus scrapes."""

    def __init__(self, model: str, queue_depth: Callable[[], int] | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.model = model
        self.registry = CollectorRegistry()
        reg = {"registry": self.registry}
        self.requests = Counter("onnxplug_requests", "Requests by outcome", ["model", "outcome"], **reg)
        self.errors = Counter("onnxplug_request_errors", "Refused or failed requests by kind", ["model", "kind"], **reg)
        self.batch_size = Histogram(
            "onnxplug_batch_size", "Rows per session run", ["model"], buckets=_SIZE_BUCKETS, **reg
        )
        self.batch_requests = Histogram(
            "onnxplug_batch_requests", "Requests per session run", ["model"], buckets=_SIZE_BUCKETS, **reg
        )
        self.queue_seconds = Histogram(
            "onnxplug_queue_seconds", "Time from enqueue to run start", ["model"], buckets=_TIME_BUCKETS, **reg
        )
        self.compute_seconds = Histogram(
            "onnxplug_compute_seconds", "Time of one session run", ["model"], buckets=_TIME_BUCKETS, **reg
        )
        self.queue_depth = Gauge("onnxplug_queue_depth", "Requests waiting to run", ["model"], **reg)
        if queue_depth is not None:
            self.queue_depth.labels(model).set_function(queue_depth)

    # BatchObserver
    def on_batch(self, requests: int, rows: int, queue_seconds: Sequence[float], compute_seconds: float) -> None:
        self.batch_size.labels(self.model).observe(rows)
        self.batch_requests.labels(self.model).observe(requests)
        for seconds in queue_seconds:
            self.queue_seconds.labels(self.model).observe(seconds)
        self.compute_seconds.labels(self.model).observe(compute_seconds)

    def on_request_done(self, outcome: str) -> None:
        self.requests.labels(self.model, outcome).inc()

    def error(self, kind: str) -> None:
        self.errors.labels(self.model, kind).inc()

    def render(self) -> tuple[bytes, str]:
        """The text exposition format and its content type, for ``GET /metrics``."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
