"""The compile cache: compiled partitions (and anything else costly a provider derives from a
model) kept by what determines them, in memory and optionally on disk.

Compiling providers used to keep process-global dictionaries of their own; one cache in the core
gives every provider the same keys, bounds, thread safety and on-disk layout, and lets the user
point all of them at one folder (``SessionOptions.add_session_config_entry("session.compile_cache_dir",
path)``).  A provider receives the session's cache as ``ProviderContext.cache``.

Keys are digests of the partition's content (its model bytes), the provider's name, its options
and the device, plus whatever else the provider says matters (:meth:`CompileCache.key`), so two
sessions over the same model and settings share one compiled artefact and anything that differs
compiles anew.

Memory entries are evicted least-recently-used beyond ``max_entries`` or ``max_bytes`` (sizes as
the provider reports them: an artefact bigger than the budget is still returned, just not kept).
On disk, :meth:`CompileCache.load_bytes` / :meth:`CompileCache.store_bytes` keep opaque blobs as
``<cache_dir>/<key>.bin``: written to a temporary file and renamed (so a reader never sees half a
file), read only by key (hex digests: no path ever comes from a model), and a file that cannot be
read is treated as missing and rewritten.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

__all__ = ["CompileCache", "default_compile_cache", "CONFIG_KEY"]

#: The session config entry naming a folder for compiled blobs.
CONFIG_KEY = "session.compile_cache_dir"

T = TypeVar("T")


class CompileCache:
    """Compiled artefacts by key, in memory (bounded, thread-safe) and optionally on disk.

    :param max_entries: most artefacts kept in memory.
    :param max_bytes: most total reported size kept in memory.
    :param cache_dir: a folder for :meth:`store_bytes` blobs (``None``: memory only).
    """

    def __init__(self, *, max_entries: int = 64, max_bytes: int = 512 << 20, cache_dir: str | None = None) -> None:
        self.max_entries = int(max_entries)
        self.max_bytes = int(max_bytes)
        self.cache_dir = None if cache_dir is None else os.path.abspath(cache_dir)
        self._entries: collections.OrderedDict[str, tuple[Any, int]] = collections.OrderedDict()
        self._lock = threading.Lock()
        self._building: dict[str, threading.Lock] = {}
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(
        *,
        provider: str,
        content: bytes,
        options: Mapping[str, Any] | None = None,
        device: Any = "",
        extra: Any = (),
    ) -> str:
        """A hex digest of everything that determines a compiled artefact."""
        digest = hashlib.sha256()
        header = {
            "provider": provider,
            "options": sorted((str(k), str(v)) for k, v in (options or {}).items()),
            "device": str(device),
            "extra": repr(extra),
        }
        digest.update(json.dumps(header, sort_keys=True).encode())
        digest.update(b"\0")
        digest.update(content)
        return digest.hexdigest()

    def get(self, key: str) -> Any | None:
        """The artefact stored under ``key``, or ``None``."""
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            self._entries.move_to_end(key)
            return found[0]

    def put(self, key: str, value: Any, size: int = 0) -> None:
        """Keep ``value`` (reported as ``size`` bytes) under ``key``, evicting the oldest."""
        with self._lock:
            self._entries[key] = (value, int(size))
            self._entries.move_to_end(key)
            total = sum(s for _, s in self._entries.values())
            while self._entries and (len(self._entries) > self.max_entries or total > self.max_bytes):
                _, (_, evicted) = self._entries.popitem(last=False)
                total -= evicted

    def get_or_create(self, key: str, make: Callable[[], T], size: int = 0) -> T:
        """The artefact under ``key``, made by ``make()`` once when missing (concurrent callers
        for the same key wait for the first instead of compiling twice)."""
        found = self.get(key)
        if found is not None:
            self.hits += 1
            return found
        with self._lock:
            building = self._building.setdefault(key, threading.Lock())
        with building:
            found = self.get(key)
            if found is not None:
                self.hits += 1
                return found
            self.misses += 1
            value = make()
            self.put(key, value, size)
        with self._lock:
            self._building.pop(key, None)
        return value

    def clear(self) -> None:
        """Forget every in-memory artefact (files on disk stay)."""
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    # -- on disk -----------------------------------------------------------------------------

    def _path(self, key: str) -> str | None:
        if self.cache_dir is None:
            return None
        if len(key) != 64 or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"compile cache keys are sha256 hex digests, got {key!r}")
        return os.path.join(self.cache_dir, key + ".bin")

    def load_bytes(self, key: str) -> bytes | None:
        """The blob stored under ``key`` on disk, or ``None`` (no folder, no file, unreadable)."""
        path = self._path(key)
        if path is None:
            return None
        try:
            with open(path, "rb") as handle:
                return handle.read()
        except OSError:
            return None

    def store_bytes(self, key: str, data: bytes) -> bool:
        """Write a blob under ``key`` atomically; ``False`` when there is no folder or it fails."""
        path = self._path(key)
        if path is None:
            return False
        try:
            os.makedirs(self.cache_dir, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.cache_dir, suffix=".part")
            with os.fdopen(handle, "wb") as stream:
                stream.write(data)
            os.replace(temporary, path)
            return True
        except OSError:
            return False


_DEFAULTS: dict[str | None, CompileCache] = {}
_DEFAULTS_LOCK = threading.Lock()


def default_compile_cache(cache_dir: str | None = None) -> CompileCache:
    """The process's cache for ``cache_dir`` (one per folder; ``None``: memory only), shared by
    every session that does not bring its own."""
    key = None if cache_dir is None else os.path.abspath(cache_dir)
    with _DEFAULTS_LOCK:
        cache = _DEFAULTS.get(key)
        if cache is None:
            cache = _DEFAULTS[key] = CompileCache(cache_dir=key)
        return cache
