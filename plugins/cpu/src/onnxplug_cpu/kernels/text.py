"""Text: StringNormalizer, RegexFullMatch, StringConcat, StringSplit and TfIdfVectorizer.

Strings are ``object`` arrays of Python ``str``.  numpy has no vectorised string primitives for
object arrays, so per-string work goes through ``np.frompyfunc`` (one C-level loop calling a
Python function); everything numeric (n-gram matching, counting) is plain numpy.
"""

from __future__ import annotations

import re

import numpy as np

from onnxplug.errors import Fail, InvalidArgument

from ._registry import kernel


def _strings(x, what="X"):
    if x.dtype != object:
        raise InvalidArgument(f"{what} must be a string tensor, got {x.dtype}")
    return x


def _map(fn, x, otype=object):
    """Apply ``fn`` to every string, keeping the shape."""
    out = np.empty(x.shape, object)
    if x.ndim == 0:
        out[()] = fn(x[()])
    elif x.size:
        out[...] = np.frompyfunc(fn, 1, 1)(x)
    return out if otype is object else out.astype(otype)


@kernel("StringNormalizer", since=(10,))
def string_normalizer(x, *, case_change_action, is_case_sensitive, locale=None, stopwords=None):
    """Drop stopwords, then change case.  ``locale`` is accepted but ignored: Python's Unicode
    case mapping is used rather than the system's locale tables, so results never depend on the
    host."""
    _strings(x)
    if x.ndim == 2 and x.shape[0] == 1:
        flat, two_d = x[0], True
    elif x.ndim == 1:
        flat, two_d = x, False
    else:
        raise InvalidArgument(f"StringNormalizer input must be [C] or [1, C], got shape {x.shape}")
    if case_change_action not in ("NONE", "LOWER", "UPPER"):
        raise InvalidArgument(f"unknown case_change_action {case_change_action!r}")
    if stopwords:
        if is_case_sensitive:
            stop = set(stopwords)
            keep = _map(lambda s: s not in stop, flat, bool)
        else:
            stop = {w.casefold() for w in stopwords}
            keep = _map(lambda s: s.casefold() not in stop, flat, bool)
        flat = flat[keep]
    if case_change_action == "LOWER":
        flat = _map(str.lower, flat)
    elif case_change_action == "UPPER":
        flat = _map(str.upper, flat)
    if flat.size == 0:  # ONNX keeps one empty string rather than an empty tensor
        flat = np.array([""], dtype=object)
    return flat.reshape(1, -1) if two_d else flat.copy()


@kernel("RegexFullMatch", since=(20,))
def regex_full_match(x, *, pattern=None):
    if pattern is None:
        raise Fail("RegexFullMatch needs a pattern")
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise InvalidArgument(f"invalid pattern {pattern!r}: {err}") from None
    _strings(x)
    return _map(lambda s: compiled.fullmatch(s) is not None, x, bool)


@kernel("StringConcat", since=(20,))
def string_concat(x, y):
    _strings(x)
    _strings(y, "Y")
    try:
        joined = np.add(x, y, dtype=object)
    except (ValueError, TypeError) as err:
        raise InvalidArgument(f"cannot concatenate shapes {x.shape} and {y.shape}: {err}") from None
    out = np.empty(np.shape(joined), object)  # 0-d inputs give a bare str
    out[...] = joined
    return out


@kernel("StringSplit", since=(20,))
def string_split(x, *, delimiter=None, maxsplit=None):
    """Python's ``str.split`` semantics: no or empty delimiter splits on runs of whitespace."""
    _strings(x)
    sep = delimiter or None
    limit = -1 if maxsplit is None else int(maxsplit)
    parts = _map(lambda s: s.split(sep, limit), x)
    counts = _map(len, parts, np.int64) if x.size else np.zeros(x.shape, np.int64)
    width = int(counts.max()) if counts.size else 0
    out = np.full(x.shape + (width,), "", dtype=object)
    if x.size and width:
        flat_parts = parts.reshape(-1)
        flat_counts = counts.reshape(-1)
        rows = np.repeat(np.arange(flat_parts.size), flat_counts)
        cols = np.arange(rows.size) - np.repeat(np.cumsum(flat_counts) - flat_counts, flat_counts)
        values = np.empty(rows.size, dtype=object)
        values[:] = [s for p in flat_parts for s in p]
        out.reshape(-1, width)[rows, cols] = values
    return out, counts


# --- TfIdfVectorizer -------------------------------------------------------------------------


@kernel("TfIdfVectorizer", since=(9,), factory=True)
def tfidf_vectorizer(
    ctx,
    *,
    max_gram_length,
    max_skip_count,
    min_gram_length,
    mode,
    ngram_counts,
    ngram_indexes,
    pool_int64s=None,
    pool_strings=None,
    weights=None,
):
    """Counts the pool's n-grams (optionally with ``skip`` tokens between items) per row.

    The pool is split once into per-length blocks of rows; at run time every candidate n-gram of
    the input is matched against them with ``np.unique`` over rows, so there is no per-token loop.
    """
    if mode not in ("TF", "IDF", "TFIDF"):
        raise Fail(f"TfIdfVectorizer mode must be TF, IDF or TFIDF, got {mode!r}")
    if (pool_int64s is None) == (pool_strings is None):
        raise Fail("TfIdfVectorizer needs exactly one of pool_int64s and pool_strings")
    if not 1 <= min_gram_length <= max_gram_length or max_skip_count < 0:
        raise Fail(f"bad n-gram range [{min_gram_length}, {max_gram_length}] or skip {max_skip_count}")
    pool = np.array(pool_strings, dtype=object) if pool_strings is not None else np.asarray(pool_int64s, np.int64)
    # Tokens are matched through ids into the pool's vocabulary; unknown tokens get id len(vocab).
    vocab, pool_ids = np.unique(pool.astype(str) if pool.dtype == object else pool, return_inverse=True)
    starts = list(ngram_counts) + [len(pool)]
    indexes = np.asarray(ngram_indexes, np.int64)
    if indexes.size and indexes.min() < 0:
        raise Fail(f"ngram_indexes must be non-negative, got {int(indexes.min())}")
    width = int(indexes.max()) + 1 if indexes.size else 0
    blocks = {}  # n -> (rows of token ids [k, n], output column of each row)
    taken = 0
    for level, (begin, end) in enumerate(zip(starts[:-1], starts[1:])):
        n = level + 1
        if end < begin or (end - begin) % n:
            raise Fail(f"ngram_counts {tuple(ngram_counts)} do not split the pool into {n}-grams")
        rows = pool_ids[begin:end].reshape(-1, n)
        blocks[n] = (rows, indexes[taken : taken + len(rows)])
        taken += len(rows)
    if taken != len(indexes):
        raise Fail(f"ngram_indexes has {len(indexes)} entries but the pool holds {taken} n-grams")
    weight = np.ones(width) if weights is None else np.asarray(weights, np.float64)
    if weight.shape[0] < width:
        raise Fail(f"weights has {weight.shape[0]} entries, fewer than the {width} outputs")

    def run(x):
        if x.ndim not in (1, 2):
            raise InvalidArgument(f"TfIdfVectorizer input must be [C] or [N, C], got shape {x.shape}")
        batch = x.reshape(1, -1) if x.ndim == 1 else x
        if pool.dtype == object:
            flat = batch.reshape(-1).astype(str) if batch.size else np.empty(0, str)
        else:
            flat = batch.reshape(-1).astype(np.int64)
        pos = np.searchsorted(vocab, flat) if vocab.size else np.zeros(flat.shape, np.int64)
        pos = np.minimum(pos, max(len(vocab) - 1, 0))
        found = vocab.size > 0
        ids = np.where((vocab[pos] == flat) if found else False, pos, len(vocab)).reshape(batch.shape)
        counts = np.zeros((batch.shape[0], width), np.float64)
        length = batch.shape[1]
        for n in range(min_gram_length, max_gram_length + 1):
            rows, columns = blocks.get(n, (None, None))
            if rows is None or len(rows) == 0:
                continue
            for skip in range(max_skip_count + 1 if n > 1 else 1):
                span = (n - 1) * (skip + 1)
                if span >= length:
                    break
                offsets = np.arange(n) * (skip + 1)
                grams = ids[:, np.arange(length - span)[:, None] + offsets]  # [N, M, n]
                candidates = grams.reshape(-1, n)
                combined = np.concatenate([rows, candidates])
                _, inverse = np.unique(combined, axis=0, return_inverse=True)
                inverse = inverse.reshape(-1)
                column_of = np.full(inverse.max() + 1, -1, np.int64)
                column_of[inverse[: len(rows)]] = columns
                hit = column_of[inverse[len(rows) :]]
                batch_of = np.repeat(np.arange(batch.shape[0]), grams.shape[1])
                matched = hit >= 0
                np.add.at(counts, (batch_of[matched], hit[matched]), 1.0)
        if mode == "IDF":
            counts = np.where(counts > 0, 1.0, 0.0) * weight[:width]
        elif mode == "TFIDF":
            counts = counts * weight[:width]
        out = counts.astype(np.float32)
        return out.reshape(width) if x.ndim == 1 else out

    return run
