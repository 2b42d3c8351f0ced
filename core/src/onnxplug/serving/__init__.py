"""Serving onnxplug sessions: dynamic batching, the Open Inference Protocol v2 over HTTP, metrics.

- :class:`BatchScheduler` queues requests to a session and runs compatible ones together
  (``max_batch_size``, ``max_queue_delay_ms``), with futures, per-request timeouts, cancellation,
  a bounded queue (:class:`Overloaded`) and a graceful :meth:`~BatchScheduler.shutdown`.
- :mod:`onnxplug.serving.protocol` speaks the v2 protocol's JSON and binary tensor encodings,
  independent of any web framework (the HTTP server and the Ray deployment share it).
- :func:`onnxplug.serving.app.create_app` is the starlette application behind ``onnxplug serve``;
  it needs the ``serve`` extra (starlette, uvicorn, prometheus_client), imported only there.
"""

from ._errors import Overloaded, RequestTimeout, SchedulerClosed
from ._scheduler import BatchObserver, BatchScheduler
from ._signature import ModelSignature

__all__ = ["BatchScheduler", "BatchObserver", "ModelSignature", "Overloaded", "RequestTimeout", "SchedulerClosed"]
