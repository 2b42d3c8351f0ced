"""The core's compile cache: keys, bounds, one build per key under concurrency, atomic blobs."""

from __future__ import annotations

import os
import threading
import time

import pytest

from onnxplug import CompileCache, default_compile_cache


def test_keys_change_with_everything_that_determines_the_artefact():
    base = {"provider": "p", "content": b"model", "options": {"a": "1"}, "device": "gpu:0"}
    key = CompileCache.key(**base)
    assert key == CompileCache.key(**{**base, "options": {"a": 1}})  # options compare as strings
    for change in ({"provider": "q"}, {"content": b"other"}, {"options": {"a": "2"}}, {"device": "gpu:1"}):
        assert CompileCache.key(**{**base, **change}) != key
    assert CompileCache.key(**base, extra="support") != key


def test_memory_is_bounded_by_entries_and_bytes_least_recently_used_first():
    cache = CompileCache(max_entries=2, max_bytes=100)
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3, 10)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    cache.put("big", 4, 95)
    assert cache.get("big") == 4 and len(cache) == 1


def test_concurrent_callers_build_once():
    cache = CompileCache()
    calls = []

    def make():
        calls.append(1)
        time.sleep(0.05)
        return object()

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get_or_create("k", make))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len({id(r) for r in results}) == 1


def test_blobs_round_trip_atomically_and_keys_cannot_name_paths(tmp_path):
    cache = CompileCache(cache_dir=str(tmp_path / "blobs"))
    key = CompileCache.key(provider="p", content=b"m")
    assert cache.load_bytes(key) is None
    assert cache.store_bytes(key, b"compiled")
    assert cache.load_bytes(key) == b"compiled"
    assert sorted(os.listdir(tmp_path / "blobs")) == [key + ".bin"]  # no temporary file left
    with pytest.raises(ValueError, match="sha256"):
        cache.load_bytes("../../etc/passwd")
    assert CompileCache().store_bytes(key, b"x") is False  # memory-only cache


def test_one_default_cache_per_folder(tmp_path):
    assert default_compile_cache() is default_compile_cache()
    assert default_compile_cache(str(tmp_path)) is default_compile_cache(str(tmp_path / "."))
    assert default_compile_cache(str(tmp_path)) is not default_compile_cache()
