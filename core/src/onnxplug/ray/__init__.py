"""onnxplug on Ray: a Ray Serve deployment and a Ray Data predictor (the ``ray`` extra).

- :func:`serve_app` builds a Ray Serve application: ``num_replicas`` replicas, each an onnxplug
  session behind its own :class:`~onnxplug.serving.BatchScheduler`, answering the same Open
  Inference Protocol v2 routes as ``onnxplug serve`` (the same starlette app, as the replica's
  ASGI ingress).  ``serve.run(serve_app("model.onnx"), route_prefix="/")``.
- :class:`OnnxplugPredictor` is a callable class for offline batch inference:
  ``ds.map_batches(OnnxplugPredictor, fn_constructor_kwargs={"model": path}, concurrency=2)``.

Ray is imported only when :func:`serve_app` is called (the predictor itself never imports it), so
``import onnxplug.ray`` is cheap and works where only Ray's workers have Ray's extras.
"""

from ._data import OnnxplugPredictor
from ._serve import OnnxplugReplica, serve_app

__all__ = ["OnnxplugPredictor", "OnnxplugReplica", "serve_app"]
