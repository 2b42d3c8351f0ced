"""``intra_op_num_threads`` for numpy's BLAS, cheap enough to apply on every ``run``, and a
governor that drops to one thread while the machine's cores are taken by someone else.

The CPU provider's threads are numpy's BLAS threads, so a session's ``intra_op_num_threads`` is
honoured by setting the BLAS libraries' thread count while it runs and restoring it afterwards
(other code in the process keeps its own setting).  threadpoolctl finds the libraries; its
``limit`` context re-inspects every loaded library on each entry (tens of microseconds, more than
a small model's whole run), so the libraries are looked up once per session and each run only
reads and, where it differs, sets their counts.

Why the governor: OpenBLAS's threaded products degrade badly when another process competes for
the cores.  Its threads wait for each other by spinning, so a descheduled worker stalls the whole
product for scheduler ticks.  Measured on the 2-core development machine with one busy-looping
process beside it: ResNet-50 at 2 threads 356 ms a run against 99 ms at 1 thread (65 ms
quiet; onnxruntime at 2 threads 98 ms), MobileNetV2 37 against 13.5 ms.  onnxruntime degrades
about 2× there.  So a session's runs are timed:
when the median of the last runs at the full count is well above the best median seen for the
same input shapes, and has been for a quarter of a second, a few runs try one thread, a few more
time the full count again, and one thread is kept while it is clearly faster than those; from
time to time a few runs try the full count again.  On a quiet machine the median
never leaves the best, so nothing is tried and the count is the configured one.  The thread count
does not change results: BLAS splits a product's output, not its sums, and the provider's own
row blocks compute each row the same way on any thread.

Turned off with the session config entry ``onnxplug.adaptive_threads`` = ``"0"`` (or the
environment variable ``ONNXPLUG_ADAPTIVE_THREADS=0``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = [
    "CONFIG_KEY",
    "BlasThreads",
    "ThreadGovernor",
    "adaptive_enabled",
    "controller_for",
    "count_reader",
    "signature",
]

#: Session config entry that turns the governor off (``"0"``).
CONFIG_KEY = "onnxplug.adaptive_threads"


def adaptive_enabled(config_value: str) -> bool:
    """Whether a session governs its thread count (config entry, then environment; on by default)."""
    if config_value:
        return config_value != "0"
    return os.environ.get("ONNXPLUG_ADAPTIVE_THREADS", "1") != "0"


def controller_for(threads: int, adaptive_entry: str) -> BlasThreads | None:
    """What holds a session's BLAS threads at ``threads`` (``intra_op_num_threads``) during
    ``run``, with a governor unless the count is 1, the machine has one core, or the config
    entry ``adaptive_entry`` (or the environment) turns it off; ``None``: the libraries' own
    count, ungoverned."""
    if threads != 1 and (os.cpu_count() or 1) > 1 and adaptive_enabled(adaptive_entry):
        return BlasThreads(threads, ThreadGovernor())
    return BlasThreads(threads) if threads > 0 else None


def _median(values: deque[float]) -> float:
    """The median of a few values (``statistics.median`` costs a microsecond more per run)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


class _Shapes:
    """One input signature's recent run times, per thread count, and where it stands."""

    __slots__ = ("best", "confirming", "fallback", "recent", "since_switch", "slow_seconds", "trial", "trial_left")

    def __init__(self, window: int) -> None:
        self.recent: dict[bool, deque[float]] = {False: deque(maxlen=window), True: deque(maxlen=window)}
        self.best = float("inf")  # the lowest median seen at the full count
        self.fallback = False  # running on one thread
        self.trial = False  # running a trial of the other count
        self.confirming = False  # after a trial: timing the current count afresh
        self.trial_left = 0  # runs left in the trial, then in the confirmation
        self.since_switch = 0  # runs since the last switch or trial
        self.slow_seconds = 0.0  # time run at the full count since its window turned slow


class ThreadGovernor:
    """Chooses, run by run, between the full thread count and one thread (see the module).

    :param window: runs whose median stands for a count.
    :param trial: runs of the other count in a trial.
    :param slow: a median this many times the best at the full count starts a trial of one thread.
    :param better: the other count is kept when its trial median is below this fraction.
    :param recheck: runs between trials (at one thread, of the full count; after a failed trial).
    :param min_seconds: runs shorter than this are not governed (threads barely matter there).
    :param persist: seconds of slow runs at the full count before a trial.  Why: another
        runtime's threads, still spinning after its own run, slowed a 2 ms model's next runs
        2-5× for about 50 ms (onnxruntime's, in the benchmark's interleaved rounds); a trial
        started then compared one thread with a disturbed full count and kept one thread for
        ``recheck`` runs.  A process holding the cores holds them for longer than this.
    """

    #: Input signatures followed per session (a model fed ever new shapes is not governed past these).
    MAX_SIGNATURES = 32

    def __init__(
        self,
        *,
        window: int = 5,
        trial: int = 3,
        slow: float = 1.5,
        better: float = 0.8,
        recheck: int = 30,
        min_seconds: float = 0.002,
        persist: float = 0.25,
    ) -> None:
        self._window, self._trial, self._slow, self._better = window, trial, slow, better
        self._recheck, self.min_seconds, self._persist = recheck, min_seconds, persist
        self._states: dict[Any, _Shapes] = {}
        self._lock = threading.Lock()

    def following(self) -> bool:
        """Whether any input signature is followed yet (until then runs need no key)."""
        return bool(self._states)

    def one_thread(self, key: Any) -> bool:
        """Whether the next run with inputs of signature ``key`` should use one thread."""
        state = self._states.get(key)
        if state is None:
            return False
        return state.fallback != state.trial  # a trial runs the other count

    def record(self, key: Any, one_thread: bool, seconds: float) -> None:
        """Account a finished run of signature ``key`` that used one thread or the full count."""
        with self._lock:
            state = self._states.get(key)
            if state is None:
                if seconds < self.min_seconds or len(self._states) >= self.MAX_SIGNATURES:
                    return
                state = self._states[key] = _Shapes(self._window)
            state.recent[one_thread].append(seconds)
            state.since_switch += 1
            if state.trial:
                # Only runs made with the tried count count (a concurrent run may have started
                # before the trial did).
                if one_thread != state.fallback:
                    state.trial_left -= 1
                    if state.trial_left <= 0:
                        self._confirm(state)
                return
            if state.confirming:
                if one_thread == state.fallback:
                    state.trial_left -= 1
                    if state.trial_left <= 0:
                        self._finish_trial(state)
                return
            current = state.recent[state.fallback]
            if len(current) < self._window:
                return
            median = _median(current)
            if median < self.min_seconds and not state.fallback:
                # Runs this short are not governed (a slow first run got it followed): forget
                # it, so that the session's runs stop computing a key when nothing is followed.
                del self._states[key]
                return
            if not state.fallback:
                state.best = min(state.best, median)
                if median <= self._slow * state.best:
                    state.slow_seconds = 0.0
                    return
                state.slow_seconds += seconds
                if state.since_switch >= self._window and state.slow_seconds >= self._persist:
                    self._start_trial(state)
            elif state.since_switch >= self._recheck:
                self._start_trial(state)

    def _start_trial(self, state: _Shapes) -> None:
        state.trial, state.trial_left, state.slow_seconds = True, self._trial, 0.0
        state.recent[not state.fallback].clear()

    def _confirm(self, state: _Shapes) -> None:
        """After a trial, time the current count again before comparing.  Why: the window that
        started the trial may have been slow for a moment only (another runtime's threads still
        spinning after its own run, say): compared with it, a trial of one thread won and the
        session ran on one thread, 1.7× slower, for the next ``recheck`` runs; compared with
        runs made right after the trial, the full count keeps its place."""
        state.trial, state.confirming, state.trial_left = False, True, self._trial
        state.recent[state.fallback].clear()

    def _finish_trial(self, state: _Shapes) -> None:
        tried = _median(state.recent[not state.fallback])
        kept = _median(state.recent[state.fallback])
        state.confirming = False
        state.since_switch = 0
        if tried < self._better * kept:
            state.fallback = not state.fallback
            state.recent[state.fallback].clear()  # a fresh window for the count now in use
        elif not state.fallback:
            # One thread was no faster: wait before the next trial (``recheck`` runs).
            state.since_switch = -self._recheck + self._window


#: What :meth:`BlasThreads.enter` hands to :meth:`BlasThreads.leave`: each library with its count
#: reader and its count before the run, the inputs, the governor's key, whether the run is on
#: one thread, and its start time.
Token = tuple[list[tuple[Any, Callable[[], Any], Any]], Any, Any, bool, float]


class BlasThreads:
    """Holds the BLAS thread count at ``threads`` between :meth:`enter` and :meth:`leave`, or
    at one thread where the governor says so.

    Concurrent runs each get their own token, so the count is restored by whichever run changed it.

    :param threads: the count (> 0), or 0 to leave the libraries' own count (governed only).
    :param governor: the :class:`ThreadGovernor`, or ``None`` for a fixed count.
    """

    def __init__(self, threads: int, governor: ThreadGovernor | None = None) -> None:
        self._threads = int(threads)
        self._governor = governor
        self._libraries: list[Any] | None = None  # looked up on the first run
        self._readers: list[tuple[Any, Callable[[], int | None]]] = []

    def _find(self) -> list[Any]:
        if self._libraries is None:
            import threadpoolctl

            libraries = list(threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers)
            self._readers = [(library, count_reader(library)) for library in libraries]
            self._libraries = libraries
        return self._libraries

    def enter(self, inputs: list[Any] | None = None) -> Token:
        """Set the count for a run of ``inputs``; returns what :meth:`leave` needs.  The inputs'
        shapes key the governor's records; they are read here only once some run was long enough
        to be governed, so a small model's runs pay no more than a clock read."""
        governor = self._governor
        key = None
        one = False
        if governor is not None and inputs is not None and governor.following():
            key = signature(inputs)
            one = governor.one_thread(key)
        target = 1 if one else self._threads
        if self._libraries is None:
            self._find()
        saved = [(library, read, read()) for library, read in self._readers]  # counts before the run
        if target > 0:
            for library, _, current in saved:
                if current != target:
                    library.set_num_threads(target)
        return saved, inputs, key, one, time.perf_counter()

    def threads_of(self, token: Token) -> int | None:
        """The thread count of the run of ``token``, for ``RunState.threads``: what :meth:`enter`
        chose, or the libraries' own count where the session leaves it to them (``None`` if no
        BLAS library was found)."""
        if token[3]:
            return 1
        if self._threads > 0:
            return self._threads
        counts = [count for _, _, count in token[0] if count]
        return max(counts) if counts else None  # the libraries' own count (intra_op_num_threads=0)

    def leave(self, token: Token, touched: bool = False) -> None:
        """Record the run's time for the governor and restore the counts :meth:`enter` changed,
        and, when ``touched`` (a provider noted in ``RunState.notes`` that it changed them
        during the run), every count that differs from the one before the run."""
        saved, inputs, key, one, start = token
        if self._governor is not None and inputs is not None:
            seconds = time.perf_counter() - start
            if key is not None or seconds >= self._governor.min_seconds:
                self._governor.record(signature(inputs) if key is None else key, one, seconds)
        target = 1 if one else self._threads
        for library, read, count in saved:
            if (target > 0 and count != target) or (touched and read() != count):
                library.set_num_threads(count)


def count_reader(library: Any) -> Callable[[], int | None]:
    """A callable returning threadpoolctl controller ``library``'s thread count, the library's
    own getter called straight through ctypes where its answer needs no translation.

    Why: a run reads every BLAS library's count before it starts (to restore it after), and
    the controller's ``get_num_threads`` looks its symbol up on each call: 0.24 µs against
    0.08 for the bare function, a microsecond a run with two OpenBLAS copies loaded (numpy's
    and scipy's), a tenth of a small model's run.  OpenBLAS built on OpenMP answers through
    ``omp_get_max_threads`` and BLIS answers -1 for its default, so both keep the
    controller's method, as does any library whose getter is not found."""
    getter = library.get_num_threads
    if library.internal_api == "openblas" and getattr(library, "threading_layer", None) != "openmp":
        names: tuple[str, ...] = tuple(library.check_symbols)  # the getter's spellings (prefixes, suffixes)
    elif library.internal_api == "mkl":
        names = ("MKL_Get_Max_Threads",)
    else:
        return getter
    for name in names:
        function = getattr(library.dynlib, name, None)
        if function is not None:
            if function() != getter():  # not the getter threadpoolctl uses: keep its method
                return getter
            return function
    return getter


def signature(inputs: list[Any]) -> tuple[Any, ...]:
    """A run's input shapes (``None`` for values without one): the governor's key."""
    return tuple(getattr(value, "shape", None) for value in inputs)
