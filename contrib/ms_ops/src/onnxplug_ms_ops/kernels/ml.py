"""The com.microsoft ops of skl2onnx's converters: Tokenizer, CDist and MurmurHash3.

Tokenizer follows onnxruntime's kernel, whose patterns are RE2 expressions matched
leftmost-longest: here they run on the ``regex`` package in POSIX (leftmost-longest) mode,
which accepts RE2's common syntax.  Separators are applied one after another, in list order,
each splitting the pieces the previous ones left; tokens shorter than ``mincharnum``
characters are dropped.  MurmurHash3 is MurmurHash3_x86_32 over each element's bytes
(little-endian numbers, UTF-8 strings), vectorised over elements of one width.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.errors import NotImplemented as NotImplementedError_

from ._registry import kernel

if TYPE_CHECKING:
    import regex

_START, _END = "\x02", "\x03"


@functools.lru_cache(maxsize=64)
def _compile(pattern: str, what: str) -> regex.Pattern:
    import regex  # here: every session loads this registry, few run a Tokenizer (~7 ms to import)

    try:
        compiled = regex.compile(pattern, flags=regex.POSIX)
    except regex.error as error:
        raise InvalidArgument(f"Tokenizer: {what} {pattern!r} is not a valid regular expression: {error}") from None
    if compiled.fullmatch(""):
        raise NotImplementedError_(
            f"Tokenizer: {what} {pattern!r} matches the empty string (only the separators [''] of character mode may)"
        )
    return compiled


def _split(pieces: list[str], separator: regex.Pattern) -> list[str]:
    out: list[str] = []
    for piece in pieces:
        start = 0
        for match in separator.finditer(piece):
            out.append(piece[start : match.start()])
            start = match.end()
        out.append(piece[start:])
    return out


@kernel("Tokenizer", since=(1,))
def tokenizer(x, *, mark, pad_value, mincharnum, separators=None, tokenexp=None):
    op = "Tokenizer"
    if x.dtype != object:
        raise InvalidArgument(f"{op}: X must be a string tensor, got {x.dtype}")
    if x.ndim not in (1, 2):
        raise InvalidArgument(f"{op}: X must have shape [C] or [N, C], got {list(x.shape)}")
    if mincharnum <= 0:
        raise InvalidArgument(f"{op}: mincharnum must be positive, got {mincharnum}")
    if (separators is None) == (tokenexp is None):
        raise InvalidArgument(f"{op}: exactly one of the separators and tokenexp attributes must be set")
    characters = tokenexp == "." or (separators is not None and tuple(separators) == ("",))
    if characters and mincharnum > 1:
        raise InvalidArgument(f"{op}: mincharnum={mincharnum} is too big for character tokenization")
    if x.size == 0:
        return np.empty(x.shape, dtype=object)
    if characters:

        def tokens(text: str) -> list[str]:
            return list(text)
    elif separators is not None:
        compiled = [_compile(s, "separator") for s in separators]

        def tokens(text: str) -> list[str]:
            pieces = [text]
            for separator in compiled:
                pieces = _split(pieces, separator)
            return [p for p in pieces if len(p) >= mincharnum]
    else:
        expression = _compile(tokenexp, "tokenexp")

        def tokens(text: str) -> list[str]:
            return [m.group() for m in expression.finditer(text) if len(m.group()) >= mincharnum]

    rows = [tokens(str(text)) for text in x.reshape(-1)]
    width = max(len(r) for r in rows)
    if width and mark:
        rows = [[_START, *r, _END] for r in rows]
        width += 2
    out = np.full((len(rows), width), pad_value, dtype=object)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out.reshape(x.shape + (width,))


@kernel("CDist", since=(1,))
def cdist(a, b, *, metric):
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise Fail(f"CDist: A and B must be (M, N) and (K, N), got {a.shape} and {b.shape}")
    if metric not in ("sqeuclidean", "euclidean"):
        raise NotImplementedError_(
            f"CDist: metric {metric!r} is not supported (onnxruntime's CPU kernel has sqeuclidean and euclidean only)"
        )
    # Expanded |a|^2 - 2 a.b + |b|^2 (one matmul, as onnxruntime), clamped at 0 against rounding.
    squared = (a * a).sum(axis=1)[:, None] - 2 * (a @ b.T) + (b * b).sum(axis=1)[None, :]
    squared = np.maximum(squared, 0)
    return (np.sqrt(squared) if metric == "euclidean" else squared).astype(a.dtype, copy=False)


_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _fmix(h: np.ndarray) -> np.ndarray:
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


def murmur3_32(data: np.ndarray, length: int, seed: int) -> np.ndarray:
    """MurmurHash3_x86_32 of each row of ``data`` (uint8, shape (n, length))."""
    n = data.shape[0]
    h = np.full(n, seed & 0xFFFFFFFF, dtype=np.uint32)
    blocks = length // 4
    with np.errstate(over="ignore"):
        if blocks:
            words = np.ascontiguousarray(data[:, : blocks * 4]).view("<u4").reshape(n, blocks)
            for i in range(blocks):
                k = words[:, i] * _C1
                k = _rotl(k, 15) * _C2
                h ^= k
                h = _rotl(h, 13) * np.uint32(5) + np.uint32(0xE6546B64)
        tail = length & 3
        if tail:
            k = np.zeros(n, dtype=np.uint32)
            for j in range(tail - 1, -1, -1):
                k ^= data[:, blocks * 4 + j].astype(np.uint32) << np.uint32(8 * j)
            k = _rotl(k * _C1, 15) * _C2
            h ^= k
        h ^= np.uint32(length)
        return _fmix(h)


@kernel("MurmurHash3", since=(1,))
def murmur_hash3(x, *, positive, seed):
    flat = x.reshape(-1)
    if x.dtype == object:
        out = np.empty(flat.size, dtype=np.uint32)
        encoded = [str(s).encode("utf-8") for s in flat]
        # one vectorised pass per distinct byte length
        by_length: dict[int, list[int]] = {}
        for i, e in enumerate(encoded):
            by_length.setdefault(len(e), []).append(i)
        for length, index in by_length.items():
            raw = np.frombuffer(b"".join(encoded[i] for i in index), dtype=np.uint8).reshape(len(index), length)
            out[index] = murmur3_32(raw, length, seed)
    elif x.dtype in (np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64):
        raw = np.ascontiguousarray(flat.astype(flat.dtype.newbyteorder("<"))).view(np.uint8)
        out = murmur3_32(raw.reshape(flat.size, x.dtype.itemsize), x.dtype.itemsize, seed)
    else:
        raise InvalidArgument(f"MurmurHash3: unsupported input type {x.dtype}")
    out = out.reshape(x.shape)
    return out if positive else out.view(np.int32)
