"""The compact spelling of the op tables (:mod:`.schemas`, :mod:`._quant_ops`, :mod:`._ml_ops`).

An op is ``name -> (inputs, outputs, type constraints, attributes, inference, doc[, domain])``.
Inputs and outputs are ``"name:T"`` (required), ``"name:T?"`` (optional) or ``"name:T*"``
(variadic).  An attribute value is its schema default, or :func:`req` (the node must set it) or
:func:`opt` (no default: the kernel decides what absence means).
"""

from __future__ import annotations

from typing import Any

import onnx.defs

_AttrType = onnx.defs.OpSchema.AttrType

INT, FLOAT, STRING = _AttrType.INT, _AttrType.FLOAT, _AttrType.STRING
INTS, FLOATS, STRINGS = _AttrType.INTS, _AttrType.FLOATS, _AttrType.STRINGS

FLOATS3 = ["tensor(float)", "tensor(float16)", "tensor(bfloat16)"]
FLOATS4 = ["tensor(float16)", "tensor(float)", "tensor(double)", "tensor(bfloat16)"]
INT8 = ["tensor(uint8)", "tensor(int8)"]


class Required:
    """An attribute the node must set."""

    def __init__(self, kind: Any) -> None:
        self.kind = kind


class Optional:
    """An attribute with no schema default (the kernel decides what absence means)."""

    def __init__(self, kind: Any) -> None:
        self.kind = kind


def req(kind: Any) -> Required:
    return Required(kind)


def opt(kind: Any) -> Optional:
    return Optional(kind)
