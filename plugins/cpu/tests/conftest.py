"""Fixtures and markers shared by the CPU provider's tests."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from onnxplug_cpu.kernels._jit import compiler


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.numba`` tests check a compiled loop: skipped, with the reason, where the
    provider would not compile it (numba missing, or ``ONNXPLUG_CPU_JIT=0``)."""
    if compiler() is not None:
        return
    skip = pytest.mark.skip(
        reason="the compiled loop needs numba, which is not installed or is disabled by ONNXPLUG_CPU_JIT=0"
    )
    for item in items:
        if item.get_closest_marker("numba"):
            item.add_marker(skip)


@pytest.fixture
def count_calls(monkeypatch):
    """``count_calls(cls, *names)`` wraps those methods of ``cls`` for the test and returns a dict
    of how often each was called: a test that a fast path was taken fails when it is skipped."""

    def install(cls, *names):
        counted = dict.fromkeys(names, 0)
        for name in names:
            original = getattr(cls, name)

            def spy(self, *args, _original=original, _name=name):
                counted[_name] += 1
                return _original(self, *args)

            monkeypatch.setattr(cls, name, spy)
        return counted

    return install


@pytest.fixture
def cache_misses_in_new_processes(tmp_path):
    """``cache_misses_in_new_processes(code)`` runs ``code`` (which prints the compiled loops'
    total ``stats.cache_misses``) in two fresh processes sharing an empty numba cache and returns
    both counts: a loop numba's on-disk cache serves has misses in the first process only.  Why a
    test: a jitted closure calling another jitted closure misses the cache, and was compiled
    again in every process (about 1 s)."""

    def run(code):
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
        counts = []
        for _ in range(2):
            done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            counts.append(int(done.stdout))
        return counts

    return run
