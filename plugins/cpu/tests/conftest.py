"""Fixtures shared by the CPU provider's tests."""

from __future__ import annotations

import pytest


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
