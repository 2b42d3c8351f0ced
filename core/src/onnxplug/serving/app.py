"""The HTTP front: a starlette application speaking the Open Inference Protocol v2.

Routes (``{name}`` is the served model's name, ``/versions/{v}`` optional, version ``1``):

- ``GET /v2/health/live``, ``GET /v2/health/ready`` — 200 while serving (ready: not shutting down);
- ``GET /v2`` — server metadata; ``GET /v2/models/{name}`` — model metadata;
- ``GET /v2/models/{name}/ready``; ``GET /v2/models/{name}/config`` — batching settings;
- ``POST /v2/models/{name}/infer`` — JSON or binary tensor data (see :mod:`.protocol`);
- ``GET /metrics`` — Prometheus metrics (:mod:`.metrics`).

Every refusal is a JSON ``{"error": message}`` with a status: 400 for a request that does not fit
the protocol or the model, 404 for an unknown model or version, 413 for a body over the limit,
503 when the queue is full or the server is stopping, 504 past the request's timeout, 500 when
the model itself fails.  Nothing a client sends takes the server down.

Needs the ``serve`` extra (starlette, prometheus_client); uvicorn only to listen
(:mod:`onnxplug.cli._serve`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import zlib
from typing import Any

from .._version import __version__
from ..errors import InvalidArgument
from ._errors import Overloaded, RequestTimeout, SchedulerClosed
from ._scheduler import BatchScheduler
from .metrics import ServingMetrics
from .protocol import HEADER_LENGTH, ProtocolError, encode_infer_response, model_metadata, parse_infer_request

__all__ = ["create_app", "DEFAULT_MAX_BODY_BYTES"]

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
_log = logging.getLogger("onnxplug.serving")


def create_app(
    scheduler: BatchScheduler,
    model_name: str,
    *,
    version: str = "1",
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    metrics: ServingMetrics | None = None,
    shutdown_timeout_s: float | None = 30.0,
    own_scheduler: bool = True,
    cancel_on_disconnect: bool = True,
) -> Any:
    """The starlette application serving ``scheduler``'s session as ``model_name``.

    With ``own_scheduler`` the app shuts the scheduler down when it stops (lifespan shutdown):
    queued requests are finished for up to ``shutdown_timeout_s``, then rejected.  ``metrics``
    defaults to a new :class:`ServingMetrics`, which becomes the scheduler's observer.  With
    ``cancel_on_disconnect`` a client that closes its connection withdraws its request if it is
    still queued (it then never runs); this reads the ASGI ``http.disconnect`` message, which
    uvicorn sends only when the client goes away (servers that send it early should pass False).
    """
    from starlette.applications import Starlette
    from starlette.requests import ClientDisconnect
    from starlette.responses import Response
    from starlette.routing import Route

    if metrics is None:
        metrics = ServingMetrics(model_name, queue_depth=scheduler.queue_depth)
    if scheduler.observer is None:
        scheduler.observer = metrics
    signature = scheduler.signature

    def error(status: int, message: str, kind: str, headers: dict | None = None) -> Response:
        metrics.error(kind)
        body = json.dumps({"error": message}).encode()
        return Response(body, status_code=status, media_type="application/json", headers=headers)

    def ok(document: dict) -> Response:
        return Response(json.dumps(document).encode(), media_type="application/json")

    def check_model(request) -> Response | None:
        name = request.path_params["name"]
        wanted = request.path_params.get("version")
        if name != model_name:
            return error(404, f"unknown model {name!r}; this server serves {model_name!r}", "unknown_model")
        if wanted is not None and wanted != version:
            return error(404, f"model {name!r} has no version {wanted!r}; it has version {version!r}", "unknown_model")
        return None

    async def live(request):
        return Response(status_code=200)

    async def ready(request):
        return Response(status_code=503 if scheduler.closed else 200)

    async def server_metadata(request):
        return ok({"name": "onnxplug", "version": __version__, "extensions": ["binary_tensor_data"]})

    async def metadata(request):
        return check_model(request) or ok(model_metadata(model_name, signature, [version]))

    async def model_ready(request):
        return check_model(request) or Response(status_code=503 if scheduler.closed else 200)

    async def config(request):
        return check_model(request) or ok(
            {
                "name": model_name,
                "platform": "onnxplug",
                "max_batch_size": scheduler.max_batch_size,
                "batching": scheduler.batching,
                "dynamic_batching": {"max_queue_delay_microseconds": int(scheduler.max_queue_delay * 1e6)},
                "max_queue_size": scheduler.max_queue_size,
            }
        )

    async def infer(request):
        refused = check_model(request)
        if refused is not None:
            return refused
        try:
            body = await _read_body(request, max_body_bytes)
            parsed = parse_infer_request(body, request.headers.get(HEADER_LENGTH), signature)
            future = scheduler.submit(parsed.feeds, parsed.outputs, timeout_s=parsed.timeout_s)
        except ClientDisconnect:  # gone while sending its body: nobody to answer
            return error(499, "the client closed the connection while sending the request", "cancelled")
        except ProtocolError as failure:
            return error(failure.status, failure.message, "body_too_large" if failure.status == 413 else "bad_request")
        except InvalidArgument as failure:
            return error(400, failure.message, "bad_request")
        except Overloaded as failure:
            return error(503, failure.message, "overloaded", {"Retry-After": "1"})
        except SchedulerClosed as failure:
            return error(503, failure.message, "unavailable")
        watcher = asyncio.ensure_future(_cancel_on_disconnect(request, future)) if cancel_on_disconnect else None
        try:
            values = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if not future.cancelled():
                raise  # this task itself is being cancelled
            return error(499, "the client closed the connection before the request ran", "cancelled")
        except RequestTimeout as failure:
            return error(504, failure.message, "timeout")
        except SchedulerClosed as failure:
            return error(503, failure.message, "unavailable")
        except InvalidArgument as failure:
            return error(400, failure.message, "bad_request")
        except Exception as failure:  # noqa: BLE001 - the model failed on this request: a 500, not a crash
            _log.exception("inference failed")
            return error(500, getattr(failure, "message", None) or str(failure), "internal")
        finally:
            if watcher is not None:
                watcher.cancel()
        names = parsed.outputs or signature.output_names
        payload, header_length = encode_infer_response(model_name, version, parsed, names, values)
        headers = {} if header_length is None else {HEADER_LENGTH: str(header_length)}
        content_type = "application/json" if header_length is None else "application/octet-stream"
        return Response(payload, media_type=content_type, headers=headers)

    async def prometheus(request):
        body, content_type = metrics.render()
        return Response(body, headers={"Content-Type": content_type})

    @contextlib.asynccontextmanager
    async def lifespan(app):
        yield
        if own_scheduler:
            await asyncio.to_thread(scheduler.shutdown, drain=True, timeout_s=shutdown_timeout_s)

    model_routes = []
    for prefix in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        model_routes += [
            Route(prefix, metadata, methods=["GET"]),
            Route(prefix + "/ready", model_ready, methods=["GET"]),
            Route(prefix + "/config", config, methods=["GET"]),
            Route(prefix + "/infer", infer, methods=["POST"]),
        ]
    routes = [
        Route("/v2/health/live", live, methods=["GET"]),
        Route("/v2/health/ready", ready, methods=["GET"]),
        Route("/v2", server_metadata, methods=["GET"]),
        *model_routes,
        Route("/metrics", prometheus, methods=["GET"]),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.scheduler = scheduler
    app.state.metrics = metrics
    return app


async def _cancel_on_disconnect(request, future) -> None:
    """Wait for the client to go away (the body has been read, so the next ASGI message is the
    disconnect) and withdraw its request; a running request cannot be withdrawn and finishes."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            future.cancel()
            return


async def _read_body(request, limit: int) -> bytes:
    """The request body, refused with 413 past ``limit`` bytes (before reading it all when the
    client announces its length); gzip and deflate bodies (tritonclient's request compression) are
    inflated under the same limit."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ProtocolError(f"the request body has {declared} bytes, over the limit of {limit}", status=413)
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ProtocolError(f"the request body is over the limit of {limit} bytes", status=413)
        chunks.append(chunk)
    body = b"".join(chunks)
    encoding = (request.headers.get("content-encoding") or "identity").lower()
    if encoding == "identity":
        return body
    if encoding not in ("gzip", "deflate"):
        raise ProtocolError(f"unsupported Content-Encoding {encoding!r}; expected gzip, deflate or none", status=415)
    inflater = zlib.decompressobj(zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS)
    try:
        inflated = inflater.decompress(body, limit + 1)
    except zlib.error as failure:
        raise ProtocolError(f"the {encoding} body cannot be inflated: {failure}") from None
    if len(inflated) > limit or inflater.unconsumed_tail:
        raise ProtocolError(f"the inflated request body is over the limit of {limit} bytes", status=413)
    return inflated
