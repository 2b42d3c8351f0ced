"""BatchScheduler: every request answered once with its own unbatched result, batches bounded and
kept apart by shape, deadlines, cancellation, overload and shutdown."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import numpy as np
import pytest

import onnxplug
from onnxplug.serving import BatchScheduler, Overloaded, RequestTimeout, SchedulerClosed

Recording = feeds = None


@pytest.fixture(autouse=True)
def _helpers(serving_helpers):
    global Recording, feeds
    Recording, feeds = serving_helpers


def _expected(session, request):
    return session.run(None, request)


def test_concurrent_requests_get_their_own_unbatched_results(batch_session):
    recording = Recording(batch_session)
    recording.gate.clear()  # the first run waits, so the others pile up and must be batched
    requests = [feeds(rows=1 + i % 3, length=3 if i % 2 else 5, seed=i) for i in range(48)]
    results: dict[int, list] = {}

    with BatchScheduler(recording, max_batch_size=6, max_queue_delay_ms=50, workers=2) as scheduler:

        def client(indices):
            for i in indices:
                results[i] = scheduler.submit(requests[i]).result(timeout=60)

        threads = [threading.Thread(target=client, args=(range(k, 48, 8),)) for k in range(8)]
        for thread in threads:
            thread.start()
        assert recording.started.wait(10)
        time.sleep(0.2)
        recording.gate.set()
        for thread in threads:
            thread.join(60)

    assert sorted(results) == list(range(48))
    for i, request in enumerate(requests):
        for got, want in zip(results[i], _expected(batch_session, request)):
            np.testing.assert_array_equal(got, want)
    # Every row ran exactly once, batches stayed within max_batch_size, some held several requests,
    # and no batch mixed the two lengths (the concatenation would have failed).
    assert recording.rows_run() == sum(r["x"].shape[0] for r in requests)
    assert all(call["x"][0] <= 6 for call in recording.calls)
    assert len(recording.calls) < len(requests)
    assert {call["x"][1] for call in recording.calls} == {3, 5}


def test_mixed_shapes_are_never_merged(batch_session):
    recording = Recording(batch_session)
    recording.gate.clear()
    with BatchScheduler(recording, max_batch_size=16, max_queue_delay_ms=200) as scheduler:
        blocker = scheduler.submit(feeds(1, 2, seed=0))
        assert recording.started.wait(10)
        short = [scheduler.submit(feeds(1, 3, seed=i)) for i in range(4)]
        long = [scheduler.submit(feeds(1, 7, seed=10 + i)) for i in range(4)]
        recording.gate.set()
        for future in [blocker, *short, *long]:
            future.result(timeout=30)
    shapes = [call["x"] for call in recording.calls]
    assert shapes == [(1, 2), (4, 3), (4, 7)]


def test_a_full_batch_runs_without_waiting_for_the_delay(batch_session):
    with BatchScheduler(batch_session, max_batch_size=4, max_queue_delay_ms=60_000) as scheduler:
        futures = [scheduler.submit(feeds(1, 3, seed=i)) for i in range(4)]
        for future in futures:
            future.result(timeout=20)  # a 60 s delay would time this out: the full batch went at once


def test_requests_larger_than_max_batch_size_run_alone(batch_session):
    recording = Recording(batch_session)
    with BatchScheduler(recording, max_batch_size=2, max_queue_delay_ms=1) as scheduler:
        request = feeds(5, 3, seed=1)
        got = scheduler.submit(request).result(timeout=20)
    np.testing.assert_array_equal(got[0], _expected(batch_session, request)[0])
    assert [call["x"] for call in recording.calls] == [(5, 3)]


def test_fixed_batch_model_runs_requests_one_at_a_time(fixed_batch_model):
    session = onnxplug.InferenceSession(fixed_batch_model, providers=["CPUExecutionProvider"])
    recording = Recording(session)
    with BatchScheduler(recording, max_batch_size=8, max_queue_delay_ms=20) as scheduler:
        assert "first dimension is not symbolic" in scheduler.batching
        requests = [feeds(1, 4, seed=i) for i in range(5)]
        results = [scheduler.submit(r) for r in requests]
        for request, future in zip(requests, results):
            np.testing.assert_array_equal(future.result(timeout=20)[1], session.run(None, request)[1])
    assert [call["x"] for call in recording.calls] == [(1, 4)] * 5


def test_output_names_select_and_order_outputs(batch_session):
    request = feeds(2, 3, seed=3)
    with BatchScheduler(batch_session) as scheduler:
        s, y = scheduler.run(["s", "y"], request)
    want_y, want_s = batch_session.run(None, request)
    np.testing.assert_array_equal(s, want_s)
    np.testing.assert_array_equal(y, want_y)


@pytest.mark.parametrize(
    ("request_feeds", "names", "message"),
    [
        ({"x": np.zeros((1, 3), np.float32), "scale": np.ones((1, 1), np.float32), "z": 1}, None, "unknown input 'z'"),
        ({"x": np.zeros((1, 3), np.float32)}, None, "missing input 'scale'"),
        ({"x": np.zeros((1, 3), np.float64), "scale": np.ones((1, 1), np.float32)}, None, "expected dtype float32"),
        ({"x": np.zeros((3,), np.float32), "scale": np.ones((1, 1), np.float32)}, None, "expected rank 2"),
        ({"x": np.zeros((1, 3), np.float32), "scale": np.ones((1, 2), np.float32)}, None, "dimension 1 must be 1"),
        ({"x": np.zeros((2, 3), np.float32), "scale": np.ones((1, 1), np.float32)}, None, "disagree on the batch"),
        ({"x": np.zeros((1, 3), np.float32), "scale": np.ones((1, 1), np.float32)}, ["nope"], "unknown output 'nope'"),
    ],
)
def test_bad_requests_are_refused_at_submit(batch_session, request_feeds, names, message):
    with BatchScheduler(batch_session) as scheduler:
        with pytest.raises(onnxplug.InvalidArgument, match=message):
            scheduler.submit(request_feeds, names)
        assert scheduler.queue_depth() == 0


def test_a_failing_batch_is_rerun_request_by_request(batch_session):
    recording = Recording(batch_session)
    recording.fail_when = lambda f: bool((f["scale"] == 0).any())
    recording.gate.clear()
    with BatchScheduler(recording, max_batch_size=8, max_queue_delay_ms=100) as scheduler:
        blocker = scheduler.submit(feeds(1, 3, seed=0))
        assert recording.started.wait(10)
        good = [scheduler.submit(feeds(1, 3, seed=i)) for i in range(1, 4)]
        bad_feeds = feeds(1, 3, seed=9)
        bad_feeds["scale"][:] = 0
        bad = scheduler.submit(bad_feeds)
        recording.gate.set()
        blocker.result(timeout=20)
        for i, future in enumerate(good, start=1):
            want = _expected(batch_session, feeds(1, 3, seed=i))[0]
            np.testing.assert_array_equal(future.result(timeout=20)[0], want)
        with pytest.raises(onnxplug.InvalidArgument, match="failing request"):
            bad.result(timeout=20)
    assert [call["x"][0] for call in recording.calls] == [1, 4, 1, 1, 1, 1]


def test_outputs_that_are_not_batch_major_fall_back_to_single_runs(batch_session):
    class Summing(Recording):
        """Claims a batch-major output but returns one row whatever the batch (a lying model)."""

        def run(self, output_names, feeds):
            outputs = super().run(output_names, feeds)
            return [value.sum(axis=0, keepdims=True) for value in outputs]

    recording = Summing(batch_session)
    recording.gate.clear()
    with BatchScheduler(recording, max_batch_size=8, max_queue_delay_ms=100) as scheduler:
        first = scheduler.submit(feeds(1, 3, seed=0))
        assert recording.started.wait(10)
        rest = [scheduler.submit(feeds(1, 3, seed=i)) for i in range(1, 4)]
        recording.gate.set()
        for future in [first, *rest]:
            assert future.result(timeout=20)[0].shape == (1, 3)
    assert [call["x"][0] for call in recording.calls] == [1, 3, 1, 1, 1]


def test_timeout_while_queued_and_while_running(batch_session):
    recording = Recording(batch_session)
    recording.gate.clear()
    with BatchScheduler(recording, max_batch_size=1) as scheduler:
        running = scheduler.submit(feeds(1, 3, seed=0), timeout_s=0.3)
        assert recording.started.wait(10)
        queued = scheduler.submit(feeds(1, 3, seed=1), timeout_s=0.3)
        patient = scheduler.submit(feeds(1, 3, seed=2))
        for future in (running, queued):
            with pytest.raises(RequestTimeout, match="timed out"):
                future.result(timeout=10)  # answered by the deadline, though the worker is still stuck
        recording.gate.set()
        patient.result(timeout=20)
    # The queued request expired without running; the running one ran but was answered once, by its
    # deadline (its late result was dropped).
    assert len(recording.calls) == 2
    assert isinstance(running.exception(), RequestTimeout)


def test_cancelled_requests_never_run(batch_session):
    recording = Recording(batch_session)
    recording.gate.clear()
    with BatchScheduler(recording, max_batch_size=1) as scheduler:
        first = scheduler.submit(feeds(1, 3, seed=0))
        assert recording.started.wait(10)
        doomed = scheduler.submit(feeds(1, 3, seed=1))
        kept = scheduler.submit(feeds(1, 3, seed=2))
        assert doomed.cancel()
        assert scheduler.queue_depth() == 1
        assert not first.cancel()  # already running
        recording.gate.set()
        first.result(timeout=20)
        kept.result(timeout=20)
    assert doomed.cancelled()
    assert len(recording.calls) == 2


def test_a_full_queue_refuses_with_overloaded(batch_session):
    recording = Recording(batch_session)
    recording.gate.clear()
    with BatchScheduler(recording, max_batch_size=1, max_queue_size=2) as scheduler:
        running = scheduler.submit(feeds(1, 3, seed=0))
        assert recording.started.wait(10)
        queued = [scheduler.submit(feeds(1, 3, seed=i)) for i in (1, 2)]
        with pytest.raises(Overloaded, match="queue is full"):
            scheduler.submit(feeds(1, 3, seed=3))
        recording.gate.set()
        for future in [running, *queued]:
            future.result(timeout=20)
        scheduler.submit(feeds(1, 3, seed=4)).result(timeout=20)  # room again


def test_shutdown_drains_every_request_in_flight(batch_session):
    recording = Recording(batch_session)
    recording.gate.clear()
    scheduler = BatchScheduler(recording, max_batch_size=4, max_queue_delay_ms=10)
    requests = [feeds(1, 3, seed=i) for i in range(10)]
    futures = [scheduler.submit(r) for r in requests]
    assert recording.started.wait(10)
    closer = threading.Thread(target=scheduler.shutdown)
    closer.start()
    time.sleep(0.1)
    with pytest.raises(SchedulerClosed):
        scheduler.submit(requests[0])
    recording.gate.set()
    closer.join(30)
    assert not closer.is_alive()
    for request, future in zip(requests, futures):
        np.testing.assert_array_equal(future.result(timeout=0)[0], _expected(batch_session, request)[0])
    assert recording.rows_run() == 10


def test_shutdown_without_drain_rejects_the_queue_and_finishes_the_running(batch_session):
    recording = Recording(batch_session)
    recording.gate.clear()
    scheduler = BatchScheduler(recording, max_batch_size=1)
    running = scheduler.submit(feeds(1, 3, seed=0))
    assert recording.started.wait(10)
    queued = [scheduler.submit(feeds(1, 3, seed=i)) for i in range(1, 5)]
    closer = threading.Thread(target=scheduler.shutdown, kwargs={"drain": False})
    closer.start()
    for future in queued:
        with pytest.raises(SchedulerClosed, match="shut down before this request ran"):
            future.result(timeout=10)
    recording.gate.set()
    closer.join(30)
    running.result(timeout=0)
    assert len(recording.calls) == 1


def test_drain_timeout_rejects_what_is_left(batch_session):
    recording = Recording(batch_session)
    recording.gate.clear()
    scheduler = BatchScheduler(recording, max_batch_size=1)
    futures = [scheduler.submit(feeds(1, 3, seed=i)) for i in range(3)]
    assert recording.started.wait(10)
    threading.Timer(1.0, recording.gate.set).start()
    scheduler.shutdown(timeout_s=0.2)
    outcomes = []
    for future in futures:
        try:
            future.result(timeout=0)
            outcomes.append("ok")
        except SchedulerClosed:
            outcomes.append("rejected")
    assert outcomes == ["ok", "rejected", "rejected"]


def test_each_request_is_answered_exactly_once_under_load(batch_session):
    answers = []
    lock = threading.Lock()

    def count(future):
        with lock:
            answers.append(future)

    with BatchScheduler(batch_session, max_batch_size=8, max_queue_delay_ms=2, workers=2) as scheduler:
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            submitted = list(pool.map(lambda i: scheduler.submit(feeds(1, 4, seed=i), timeout_s=30), range(200)))
        for future in submitted:
            future.add_done_callback(count)
        concurrent.futures.wait(submitted, timeout=60)
    assert len(answers) == 200 and len({id(f) for f in answers}) == 200
    assert all(f.exception() is None for f in submitted)


def test_bad_settings_are_refused(batch_session):
    for kwargs, message in (
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"max_queue_delay_ms": -1}, "max_queue_delay_ms"),
        ({"max_queue_size": 0}, "max_queue_size"),
        ({"workers": 0}, "workers"),
    ):
        with pytest.raises(onnxplug.InvalidArgument, match=message):
            BatchScheduler(batch_session, **kwargs)
