"""The thread governor (``onnxplug.runtime._blas_threads``): one thread while the full count is
measurably slower than it was (another process holding the cores), the full count again when it
is not, nothing tried on a steady machine; and a session that turns it off keeps its count."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxplug
from onnxplug.runtime._blas_threads import BlasThreads, ThreadGovernor, count_reader, signature
from onnxplug.testing import make_model

KEY = ((1, 3, 224, 224),)


def feed(governor, times_by_count, runs, key=KEY):
    """Record ``runs`` runs whose duration is ``times_by_count[one_thread]``; returns the counts used."""
    used = []
    for _ in range(runs):
        one = governor.one_thread(key)
        used.append(one)
        governor.record(key, one, times_by_count[one])
    return used


def test_a_steady_machine_keeps_the_full_count():
    governor = ThreadGovernor()
    assert not any(feed(governor, {False: 0.050, True: 0.090}, 500))


def test_contention_moves_to_one_thread_and_back():
    governor = ThreadGovernor(recheck=50)
    feed(governor, {False: 0.050, True: 0.090}, 20)  # quiet: 50 ms at the full count
    contended = feed(governor, {False: 0.300, True: 0.095}, 55)  # the full count stalls
    # a trial of one thread, the full count timed again (still slow), then one thread kept
    assert contended[-1] and sum(contended) >= 45
    assert not all(contended[:5])  # the slowdown had to show in a window first
    quiet = feed(governor, {False: 0.050, True: 0.090}, 80)
    assert not quiet[-1] and quiet.index(False) <= 50  # a recheck of the full count brought it back


def test_a_moment_of_slow_runs_does_not_move_to_one_thread():
    """A few slow runs at the full count (another runtime's threads still spinning after its own
    run) start a trial; the full count, timed again after it, is faster than one thread, so it
    stays (compared with the slow window, one thread won and was kept for ``recheck`` runs)."""
    governor = ThreadGovernor(recheck=50)
    feed(governor, {False: 0.050, True: 0.090}, 20)
    feed(governor, {False: 0.300, True: 0.300}, 5)  # the moment
    after = feed(governor, {False: 0.050, True: 0.090}, 60)
    assert 1 <= sum(after) <= 3  # the trial's runs, no more
    assert not any(after[10:])


def test_a_short_slow_spell_starts_no_trial():
    """Slow runs adding up to less than ``persist`` seconds (50 ms of another runtime's spinning
    threads after its run) are not a reason to try one thread."""
    governor = ThreadGovernor()
    feed(governor, {False: 0.003, True: 0.005}, 20)
    assert not any(feed(governor, {False: 0.008, True: 0.005}, 10))  # 80 ms of slow runs
    assert not any(feed(governor, {False: 0.003, True: 0.005}, 40))
    assert any(feed(governor, {False: 0.008, True: 0.005}, 40))  # 320 ms: a trial


def test_a_failed_trial_waits_before_trying_again():
    governor = ThreadGovernor(recheck=50)
    feed(governor, {False: 0.050, True: 0.090}, 20)
    # Slower for a reason one thread does not help with (a larger input's work, say).
    used = feed(governor, {False: 0.200, True: 0.400}, 100)
    trials = sum(used)
    assert 3 <= trials <= 6  # at most two trials of three runs in 100 runs
    assert not used[-1]


def test_short_runs_and_too_many_signatures_are_not_followed():
    governor = ThreadGovernor()
    feed(governor, {False: 0.0001, True: 0.0001}, 20)
    assert not governor.following()
    for size in range(ThreadGovernor.MAX_SIGNATURES + 5):
        governor.record(((size,),), False, 0.01)
    assert len(governor._states) == ThreadGovernor.MAX_SIGNATURES


def test_signature_is_the_input_shapes():
    assert signature([np.zeros((2, 3)), [np.zeros(1)], None]) == ((2, 3), None, None)


def test_blas_threads_uses_one_thread_when_the_governor_says_so():
    threadpoolctl = pytest.importorskip("threadpoolctl", reason="BLAS threads are set through it")
    blas = [c for c in threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers]
    if not blas:
        pytest.skip("numpy has no BLAS library threadpoolctl can control")

    class Always(ThreadGovernor):
        def following(self):
            return True

        def one_thread(self, key):
            return True

    inputs = [np.zeros((1, 3))]
    threads = BlasThreads(2, Always())
    token = threads.enter(inputs)
    try:
        assert {c.get_num_threads() for c in blas} == {1}
    finally:
        threads.leave(token)


@pytest.mark.parametrize("entry, governed", [(None, True), ("0", False), ("1", True)])
def test_session_config_entry_turns_the_governor_off(entry, governed, monkeypatch):
    monkeypatch.delenv("ONNXPLUG_ADAPTIVE_THREADS", raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])]
    )
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = 2
    if entry is not None:
        options.add_session_config_entry("onnxplug.adaptive_threads", entry)
    session = onnxplug.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    assert (session._threads._governor is not None) == governed
    np.testing.assert_array_equal(session.run(None, {"x": np.array([-1, 2], np.float32)})[0], [0, 2])


def test_environment_turns_the_governor_off(monkeypatch):
    monkeypatch.setenv("ONNXPLUG_ADAPTIVE_THREADS", "0")
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])]
    )
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = 2
    session = onnxplug.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    assert session._threads._governor is None


def test_a_signature_whose_runs_turn_out_short_is_forgotten():
    """A first run slowed by warm-up gets a small model followed; its short runs then drop it."""
    governor = ThreadGovernor()
    governor.record(KEY, False, 0.5)
    assert governor.following()
    feed(governor, {False: 0.0001, True: 0.0001}, 10)
    assert not governor.following()


def test_runs_of_the_other_count_during_a_trial_do_not_end_it():
    """Concurrent runs that started before a trial report the count they used; the trial waits
    for its own runs (ending it with none of them crashed on an empty window)."""
    governor = ThreadGovernor()
    feed(governor, {False: 0.050, True: 0.090}, 20)
    feed(governor, {False: 0.300, True: 0.095}, 5)  # slow: a trial of one thread starts
    assert governor.one_thread(KEY)
    for _ in range(10):
        governor.record(KEY, False, 0.300)  # runs begun before the trial
    assert governor.one_thread(KEY)  # still in the trial
    feed(governor, {False: 0.300, True: 0.095}, 3)
    assert not governor.one_thread(KEY)  # the trial ended: the full count is timed again
    for _ in range(10):
        governor.record(KEY, True, 0.095)  # runs begun during the trial
    assert not governor.one_thread(KEY)  # still confirming
    feed(governor, {False: 0.300, True: 0.095}, 3)
    assert governor.one_thread(KEY)  # the full count was still slow: one thread kept


def test_count_reader_answers_as_the_controller_does():
    threadpoolctl = pytest.importorskip("threadpoolctl", reason="BLAS threads are set through it")
    blas = threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers
    if not blas:
        pytest.skip("numpy has no BLAS library threadpoolctl can control")
    for controller in blas:
        read = count_reader(controller)
        before = controller.get_num_threads()
        try:
            for count in (1, 2):
                controller.set_num_threads(count)
                assert read() == controller.get_num_threads()
        finally:
            controller.set_num_threads(before)
        if controller.internal_api == "openblas" and controller.threading_layer != "openmp":
            assert read is not controller.get_num_threads  # the bare getter, not the method


def test_count_reader_keeps_the_method_where_the_answer_needs_translating():
    class Blis:  # BLIS answers -1 for its default count; threadpoolctl's method maps it to 1
        internal_api = "blis"

        def get_num_threads(self):
            return 1

    library = Blis()
    assert count_reader(library) == library.get_num_threads
