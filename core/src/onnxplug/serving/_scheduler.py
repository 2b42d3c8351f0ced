"""Dynamic batching in front of a session: queue, combine, run once, split back.

Requests wait in one FIFO queue.  A worker thread takes the oldest request and collects later
requests with the same batch key (see :mod:`._signature`) until their rows reach
``max_batch_size`` or the oldest has waited ``max_queue_delay_ms``; it concatenates their inputs
along dimension 0, runs the session once, and hands each request its own slice of the outputs.
Requests with other shapes or dtypes stay queued for a batch of their own.

Every request ends exactly once, through its :class:`concurrent.futures.Future`: a result, the
error its own run raised, :class:`RequestTimeout`, cancellation by the caller, or
:class:`SchedulerClosed` at shutdown.  A full queue refuses new requests at once
(:class:`Overloaded`) instead of growing without bound.

Plain threads and a condition variable do the work (no event loop): a session's ``run`` releases
the GIL in its kernels, and each worker runs one batch at a time.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, InvalidStateError
from typing import Any, Protocol

import numpy as np

from ..errors import InvalidArgument
from ._errors import Overloaded, RequestTimeout, SchedulerClosed
from ._signature import ModelSignature

__all__ = ["BatchScheduler", "BatchObserver"]

_log = logging.getLogger("onnxplug.serving")


class BatchObserver(Protocol):
    """What the scheduler reports, e.g. to Prometheus metrics (:mod:`onnxplug.serving.metrics`).

    Called from worker threads; implementations must be thread-safe and quick.
    """

    def on_batch(self, requests: int, rows: int, queue_seconds: Sequence[float], compute_seconds: float) -> None: ...

    def on_request_done(self, outcome: str) -> None: ...


class _Request:
    __slots__ = ("feeds", "outputs", "key", "rows", "future", "enqueued", "deadline")

    def __init__(self, feeds, outputs, key, rows, deadline):
        self.feeds = feeds
        self.outputs = outputs
        self.key = key
        self.rows = rows
        self.future: Future = Future()
        self.enqueued = time.monotonic()
        self.deadline = deadline


class BatchScheduler:
    """Batch concurrent requests to ``session`` (anything with onnxruntime's ``run`` and
    ``get_inputs``/``get_outputs``).

    ``max_batch_size`` bounds the rows of one run (1 turns batching off); ``max_queue_delay_ms``
    is how long the oldest request may wait for others to join it; ``max_queue_size`` bounds the
    requests waiting (not yet running); ``workers`` threads each run one batch at a time;
    ``timeout_s`` is the default per-request deadline (``None``: none).  A model whose inputs or
    outputs have a fixed first dimension cannot be batched: its requests run one at a time and
    :attr:`batching` says why.
    """

    def __init__(
        self,
        session: Any,
        *,
        max_batch_size: int = 8,
        max_queue_delay_ms: float = 5.0,
        max_queue_size: int = 1024,
        workers: int = 1,
        timeout_s: float | None = None,
        observer: BatchObserver | None = None,
    ) -> None:
        if max_batch_size < 1:
            raise InvalidArgument(f"max_batch_size must be at least 1, got {max_batch_size}")
        if max_queue_delay_ms < 0:
            raise InvalidArgument(f"max_queue_delay_ms must not be negative, got {max_queue_delay_ms}")
        if max_queue_size < 1:
            raise InvalidArgument(f"max_queue_size must be at least 1, got {max_queue_size}")
        if workers < 1:
            raise InvalidArgument(f"workers must be at least 1, got {workers}")
        self.session = session
        self.signature = ModelSignature(session)
        self.max_batch_size = max_batch_size if self.signature.batchable else 1
        self.max_queue_delay = max_queue_delay_ms / 1000.0
        self.max_queue_size = max_queue_size
        self.timeout_s = timeout_s
        self.observer = observer
        self._pending: collections.deque[_Request] = collections.deque()
        self._cond = threading.Condition(threading.RLock())
        self._closed = False  # no new requests
        self._forming = False  # one worker at a time collects a batch; the others wait their turn
        self._running: set[_Request] = set()
        self._threads = [
            threading.Thread(target=self._work, name=f"onnxplug-serving-{i}", daemon=True) for i in range(workers)
        ]
        self._reaper = threading.Thread(target=self._reap, name="onnxplug-serving-deadlines", daemon=True)
        for thread in (*self._threads, self._reaper):
            thread.start()
        if max_batch_size > 1 and not self.signature.batchable:
            _log.warning("requests run one at a time: %s", self.signature.why_not_batchable())

    # -- the caller's side ---------------------------------------------------------------------

    @property
    def batching(self) -> str:
        """``"on"``, or why requests are not combined (batch size 1, or the model's shapes)."""
        if self.max_batch_size > 1:
            return "on"
        return self.signature.why_not_batchable() or "max_batch_size is 1"

    @property
    def closed(self) -> bool:
        return self._closed

    def queue_depth(self) -> int:
        """Requests waiting to run (running ones not counted)."""
        with self._cond:
            return len(self._pending)

    def submit(
        self,
        feeds: Mapping[str, Any],
        output_names: Sequence[str] | None = None,
        *,
        timeout_s: float | None = None,
    ) -> Future:
        """Queue one request; its future's result is the list of outputs (``output_names`` order,
        all outputs by default) exactly as ``session.run`` would return them for these feeds.

        Raises at once: :class:`InvalidArgument` for feeds that do not fit the model,
        :class:`Overloaded` when the queue is full, :class:`SchedulerClosed` after shutdown.
        ``future.cancel()`` withdraws a request that has not started running.
        """
        arrays, outputs, key, rows = self.signature.prepare(feeds, output_names)
        timeout = self.timeout_s if timeout_s is None else timeout_s
        deadline = None if timeout is None else time.monotonic() + timeout
        request = _Request(arrays, outputs, key, rows, deadline)
        with self._cond:
            if self._closed:
                raise SchedulerClosed("the scheduler is shut down: request refused")
            if len(self._pending) >= self.max_queue_size:
                if self.observer is not None:
                    self.observer.on_request_done("overloaded")
                raise Overloaded(
                    f"the request queue is full ({self.max_queue_size} waiting): retry later or raise max_queue_size"
                )
            self._pending.append(request)
            self._cond.notify_all()
        request.future.add_done_callback(lambda future, request=request: self._on_done(request, future))
        return request.future

    def run(
        self, output_names: Sequence[str] | None, feeds: Mapping[str, Any], *, timeout_s: float | None = None
    ) -> list:
        """``session.run``'s signature, through the queue: blocks until this request's outputs."""
        return self.submit(feeds, output_names, timeout_s=timeout_s).result()

    def shutdown(self, *, drain: bool = True, timeout_s: float | None = None) -> None:
        """Stop taking requests, then finish (``drain=True``) or reject every queued request.

        With ``drain`` the queue is worked off; whatever is still queued after ``timeout_s``
        is rejected with :class:`SchedulerClosed`.  Running batches always finish.  Returns when
        the worker threads have ended; no request is left without an answer.
        """
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if not drain:
            self._reject_pending("the scheduler shut down before this request ran")
        end = None if timeout_s is None else time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(None if end is None else max(0.0, end - time.monotonic()))
        self._reject_pending("the scheduler shut down before this request ran (drain timed out)")
        for thread in (*self._threads, self._reaper):
            thread.join()

    def __enter__(self) -> BatchScheduler:
        return self

    def __exit__(self, *exc_info) -> None:
        self.shutdown()

    # -- internals ---------------------------------------------------------------------------------

    def _on_done(self, request: _Request, future: Future) -> None:
        """A request ended: take a cancelled one out of the queue (it may never be run)."""
        if future.cancelled():
            with self._cond:
                try:
                    self._pending.remove(request)
                except ValueError:
                    pass
        if self.observer is not None:
            self.observer.on_request_done(_outcome(future))

    def _reject_pending(self, message: str) -> None:
        with self._cond:
            rejected = list(self._pending)
            self._pending.clear()
            self._cond.notify_all()
        for request in rejected:
            _settle(request, error=SchedulerClosed(message))

    def _expire(self, now: float) -> list[_Request]:
        """Under the lock: remove queued requests past their deadline (returned, to be failed
        outside the lock, where future callbacks may run freely)."""
        expired = [r for r in self._pending if r.deadline is not None and r.deadline <= now]
        for request in expired:
            self._pending.remove(request)
        expired += [r for r in self._running if r.deadline is not None and r.deadline <= now and not r.future.done()]
        return expired

    def _fail_expired(self, expired: list[_Request]) -> None:
        for request in expired:
            waited = time.monotonic() - request.enqueued
            _settle(request, error=RequestTimeout(f"the request timed out after {waited:.3f} s"))

    def _reap(self) -> None:
        """Fail requests whose deadline passed, also while every worker is busy running."""
        while True:
            with self._cond:
                if (
                    self._closed
                    and not self._pending
                    and not self._running
                    and not any(t.is_alive() for t in self._threads)
                ):
                    return
                now = time.monotonic()
                expired = self._expire(now)
                if not expired:
                    deadlines = [
                        r.deadline
                        for r in (*self._pending, *self._running)
                        if r.deadline is not None and not r.future.done()
                    ]
                    wait = min(deadlines) - now if deadlines else 0.5
                    self._cond.wait(max(0.0, min(wait, 0.5)))
                    continue
            self._fail_expired(expired)

    def _work(self) -> None:
        while True:
            batch = self._next_batch()
            if batch is None:
                return
            if batch:
                self._run_batch(batch)

    def _next_batch(self) -> list[_Request] | None:
        """Wait for a batch; ``None`` when the scheduler is closed and the queue is empty."""
        with self._cond:
            while self._forming or not self._pending:
                if self._closed and not self._pending:
                    self._cond.notify_all()
                    return None
                self._cond.wait(0.5)
            self._forming = True
            try:
                first = self._pending[0]
                flush_at = first.enqueued + self.max_queue_delay
                while not self._closed and self._pending and self._pending[0] is first:
                    if self._rows_for(first.key) >= self.max_batch_size:
                        break
                    remaining = flush_at - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                if not self._pending:
                    return []
                batch = self._take(self._pending[0].key)
                self._running.update(batch)
                return batch
            finally:
                self._forming = False
                self._cond.notify_all()

    def _rows_for(self, key: tuple) -> int:
        return sum(r.rows for r in self._pending if r.key == key)

    def _take(self, key: tuple) -> list[_Request]:
        """Under the lock: the oldest requests with ``key``, up to ``max_batch_size`` rows (a
        larger request alone), removed from the queue and marked running."""
        batch: list[_Request] = []
        rows = 0
        for request in list(self._pending):
            if request.key != key or (batch and rows + request.rows > self.max_batch_size):
                continue
            self._pending.remove(request)
            if not request.future.set_running_or_notify_cancel():
                continue  # cancelled while queued
            batch.append(request)
            rows += request.rows
            if rows >= self.max_batch_size or not key:
                break
        return batch

    def _run_batch(self, batch: list[_Request]) -> None:
        started = time.monotonic()
        queue_seconds = [started - r.enqueued for r in batch]
        try:
            if len(batch) == 1:
                results = [self._run_one(batch[0])]
            else:
                results = self._run_combined(batch)
        finally:
            compute = time.monotonic() - started
            with self._cond:
                self._running.difference_update(batch)
        if self.observer is not None:
            self.observer.on_batch(len(batch), sum(r.rows for r in batch), queue_seconds, compute)
        for request, (outputs, error) in zip(batch, results):
            _settle(request, outputs, error)

    def _run_one(self, request: _Request) -> tuple[list | None, BaseException | None]:
        try:
            return list(self.session.run(list(request.outputs), request.feeds)), None
        except Exception as error:  # noqa: BLE001 - the request's own error, handed to its caller
            return None, error

    def _run_combined(self, batch: list[_Request]) -> list[tuple[list | None, BaseException | None]]:
        first = batch[0]
        feeds = {name: np.concatenate([r.feeds[name] for r in batch], axis=0) for name in first.feeds}
        total = sum(r.rows for r in batch)
        try:
            outputs = self.session.run(list(first.outputs), feeds)
        except Exception:  # noqa: BLE001 - run each request alone: each gets its own result or error
            _log.info("a batch of %d requests failed; running them one at a time", len(batch), exc_info=True)
            return [self._run_one(r) for r in batch]
        for name, value in zip(first.outputs, outputs):
            if np.ndim(value) < 1 or np.shape(value)[0] != total:
                _log.warning(
                    "output %r has shape %s for a batch of %d rows: it is not batch-major, so these requests "
                    "run one at a time",
                    name,
                    list(np.shape(value)),
                    total,
                )
                return [self._run_one(r) for r in batch]
        results = []
        offset = 0
        for request in batch:
            results.append(([value[offset : offset + request.rows] for value in outputs], None))
            offset += request.rows
        return results


def _settle(request: _Request, outputs: list | None = None, error: BaseException | None = None) -> None:
    """End a request's future once; a second answer (its deadline passed meanwhile) is dropped."""
    try:
        if error is not None:
            request.future.set_exception(error)
        else:
            request.future.set_result(outputs)
    except InvalidStateError:
        pass


def _outcome(future: Future) -> str:
    if future.cancelled():
        return "cancelled"
    error = future.exception()
    if error is None:
        return "ok"
    if isinstance(error, RequestTimeout):
        return "timeout"
    if isinstance(error, SchedulerClosed):
        return "rejected"
    if isinstance(error, InvalidArgument):
        return "invalid"
    return "error"
