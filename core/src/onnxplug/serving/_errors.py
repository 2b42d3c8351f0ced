"""The serving layer's exceptions.

They derive from onnxplug's :class:`~onnxplug.errors.Fail` (a ``RuntimeError``) so code that already
catches onnxplug's errors keeps working, and each has its own class so the HTTP front can map it to
a status code (503, 504) without reading messages.
"""

from __future__ import annotations

from ..errors import Fail

__all__ = ["Overloaded", "RequestTimeout", "SchedulerClosed"]


class Overloaded(Fail):
    """The scheduler's queue is full: the request was refused at once instead of queued.

    Raised by :meth:`BatchScheduler.submit` itself (never through the future), so a caller can
    back off or shed load before anything was allocated for the request.
    """


class RequestTimeout(Fail, TimeoutError):
    """A request's deadline passed before its result was ready (queued or running)."""


class SchedulerClosed(Fail):
    """The scheduler is shutting down or shut down: the request was not (or will not be) run."""
