"""Ray Serve: replicas of an onnxplug session behind the Open Inference Protocol v2.

Each replica holds a session and a :class:`~onnxplug.serving.BatchScheduler`, and its HTTP ingress
is :func:`onnxplug.serving.app.create_app`'s starlette app, so batching, the v2 routes, errors and
metrics are those of ``onnxplug serve``; Ray adds the replicas, the proxy that spreads requests
over them, and the cluster.  Responses carry an ``X-Onnxplug-Replica`` header naming the replica.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["OnnxplugReplica", "serve_app"]


class OnnxplugReplica:
    """One replica: a session, its scheduler and the v2 app (Ray builds the app through
    ``__serve_build_asgi_app__`` after ``__init__``, on the replica's own process)."""

    def __init__(
        self,
        model: bytes,
        name: str,
        providers: Sequence[str] | None = None,
        scheduler_options: Mapping[str, Any] | None = None,
        max_body_bytes: int | None = None,
    ) -> None:
        from .. import InferenceSession
        from ..serving import BatchScheduler

        self.name = name
        self.session = InferenceSession(model, providers=list(providers) if providers else None)
        self.scheduler = BatchScheduler(self.session, **dict(scheduler_options or {}))
        self.max_body_bytes = max_body_bytes

    def __serve_build_asgi_app__(self) -> Any:
        from ray import serve

        from ..serving.app import DEFAULT_MAX_BODY_BYTES, create_app

        # Ray's proxy, not uvicorn, feeds this app its ASGI messages: withdrawing requests on
        # http.disconnect relies on uvicorn's timing, so it is left off here.
        app = create_app(
            self.scheduler,
            self.name,
            max_body_bytes=self.max_body_bytes or DEFAULT_MAX_BODY_BYTES,
            cancel_on_disconnect=False,
        )
        try:
            replica = serve.get_replica_context().replica_id.unique_id
        except Exception:  # noqa: BLE001 - outside a replica (tests): no name to report
            replica = f"pid-{os.getpid()}"
        return _ReplicaHeader(app, replica)

    def __del__(self) -> None:
        scheduler = getattr(self, "scheduler", None)
        if scheduler is not None and not scheduler.closed:
            scheduler.shutdown(drain=True, timeout_s=10)


class _ReplicaHeader:
    """ASGI middleware adding ``X-Onnxplug-Replica`` to every HTTP response."""

    def __init__(self, app: Any, replica: str) -> None:
        self.app = app
        self.header = (b"x-onnxplug-replica", replica.encode())

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def tagged(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        return await self.app(scope, receive, tagged)


def serve_app(
    model: str | bytes | os.PathLike,
    *,
    name: str | None = None,
    num_replicas: int = 2,
    providers: Sequence[str] | None = None,
    max_batch_size: int = 8,
    max_queue_delay_ms: float = 5.0,
    max_queue_size: int = 1024,
    workers: int = 1,
    timeout_s: float | None = None,
    max_body_bytes: int | None = None,
    ray_actor_options: Mapping[str, Any] | None = None,
    max_ongoing_requests: int = 256,
) -> Any:
    """A Ray Serve application (``serve.run(app, route_prefix="/")``) serving ``model``.

    A path is read here, on the driver, and its bytes shipped to the replicas, so they need not
    share a file system.  ``ray_actor_options`` defaults to one CPU per replica.
    ``max_ongoing_requests`` must be well above ``max_batch_size`` so that a replica receives
    enough concurrent requests to fill its batches.
    """
    from ray import serve

    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        with open(path, "rb") as file:
            data = file.read()
        name = name or os.path.splitext(os.path.basename(path))[0]
    else:
        data = bytes(model)
        name = name or "model"
    scheduler_options = {
        "max_batch_size": max_batch_size,
        "max_queue_delay_ms": max_queue_delay_ms,
        "max_queue_size": max_queue_size,
        "workers": workers,
        "timeout_s": timeout_s,
    }
    ingress = serve.ingress()(OnnxplugReplica)
    deployment = serve.deployment(
        ingress,
        name=f"onnxplug-{name}",
        num_replicas=num_replicas,
        ray_actor_options=dict(ray_actor_options or {"num_cpus": 1}),
        max_ongoing_requests=max_ongoing_requests,
    )
    return deployment.bind(data, name, list(providers) if providers else None, scheduler_options, max_body_bytes)
