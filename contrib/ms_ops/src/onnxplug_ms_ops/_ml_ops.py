"""Schemas of the com.microsoft ops skl2onnx's converters write (see :mod:`._spec`).

Tokenizer (text vectorizers), CDist (nearest neighbours, Gaussian processes) and MurmurHash3
(feature hashing), as onnxruntime registers them.
"""

from __future__ import annotations

from . import _inference as inf
from ._spec import INT, STRING, STRINGS, opt, req

__all__ = ["ML_OPS"]

ML_OPS: dict[str, tuple] = {
    "Tokenizer": (
        ["X:T"],
        ["Y:T"],
        {"T": ["tensor(string)"]},
        {
            "mark": req(INT),
            "pad_value": req(STRING),
            "mincharnum": req(INT),
            "separators": opt(STRINGS),
            "tokenexp": opt(STRING),
        },
        inf.tokenizer,
        "Splits each string into tokens along a new last axis (by separator regexes, or by "
        "matches of tokenexp), padded with pad_value; mark adds start/end markers.",
    ),
    "CDist": (
        ["A:T", "B:T"],
        ["C:T"],
        {"T": ["tensor(float)", "tensor(double)"]},
        {"metric": "sqeuclidean"},
        inf.cdist,
        "Pairwise distances between the rows of A (M, N) and B (K, N): C is (M, K).",
    ),
    "MurmurHash3": (
        ["X:T1"],
        ["Y:T2"],
        {
            "T1": [
                "tensor(uint32)",
                "tensor(int32)",
                "tensor(uint64)",
                "tensor(int64)",
                "tensor(float)",
                "tensor(double)",
                "tensor(string)",
            ],
            "T2": ["tensor(uint32)", "tensor(int32)"],
        },
        {"positive": 1, "seed": 0},
        inf.murmur,
        "MurmurHash3_x86_32 of every element (the bytes of numbers, the UTF-8 of strings).",
    ),
}
