"""Fixtures and markers shared by the CPU provider's tests."""

from __future__ import annotations

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
