"""Random inputs for ``onnxplug run``: symbolic dimensions, ``--dim`` and given ``.npy`` files.

A symbolic dimension takes, in this order: ``--dim INPUT:INDEX=V`` (one input's dimension by
position, the only way to set an unnamed one), ``--dim NAME=V`` (every dimension called NAME, in
every input), a value inferred from the model, or 1.  Inference is deliberately small: a graph
input reshaped by a constant target whose dimensions are all positive fixes the product of the
input's dimensions, so a single unknown among them is solved.  Dimensions sharing a name share
the value, so inputs that must agree do.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import InvalidArgument

__all__ = ["cast_given", "infer_dims", "parse_dims", "resolve_shapes"]


def parse_dims(items: Sequence[str], input_names: Sequence[str]) -> tuple[dict[str, int], dict[tuple[str, int], int]]:
    """``--dim`` values: ``NAME=V`` by dimension name, ``INPUT:INDEX=V`` by input and position."""
    named: dict[str, int] = {}
    positional: dict[tuple[str, int], int] = {}
    for item in items:
        key, sep, text = item.rpartition("=")
        if not sep or not key:
            raise InvalidArgument(f"--dim expects NAME=V or INPUT:INDEX=V, got {item!r}")
        try:
            value = int(text)
        except ValueError:
            raise InvalidArgument(f"--dim {item}: {text!r} is not an integer") from None
        if value < 0:
            raise InvalidArgument(f"--dim {item}: a dimension cannot be negative")
        name, colon, index = key.rpartition(":")
        if colon and name in input_names:
            if not index.isdigit():
                raise InvalidArgument(f"--dim {item}: {index!r} is not a dimension index of input {name!r}")
            positional[(name, int(index))] = value
        else:
            named[key] = value
    return named, positional


def infer_dims(model_path: Any, inputs: Sequence[Any]) -> dict[tuple[str, int], int]:
    """(input, index) → value for symbolic dims a constant Reshape target pins down."""
    if not isinstance(model_path, (str, os.PathLike)):
        return {}
    try:  # the session already loaded this file; only the graph's small constants are read here
        graph = onnx.load(os.fspath(model_path), load_external_data=False).graph
    except OSError:
        return {}
    constants = {t.name: t for t in graph.initializer if not t.external_data}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = node.attribute[0].t
    shapes = {arg.name: list(arg.shape) for arg in inputs}
    inferred: dict[tuple[str, int], int] = {}
    for node in graph.node:
        if node.op_type != "Reshape" or len(node.input) < 2 or node.input[0] not in shapes:
            continue
        target = constants.get(node.input[1])
        if target is None:
            continue
        dims = [int(d) for d in numpy_helper.to_array(target).ravel()]
        if not dims or any(d <= 0 for d in dims):  # 0 copies and -1 infers: the product is not fixed
            continue
        shape = shapes[node.input[0]]
        unknown = [i for i, d in enumerate(shape) if not isinstance(d, int)]
        known = math.prod(d for d in shape if isinstance(d, int))
        total = math.prod(dims)
        if len(unknown) == 1 and known and total % known == 0:
            inferred[(node.input[0], unknown[0])] = total // known
    return inferred


def resolve_shapes(
    inputs: Sequence[Any],
    named: dict[str, int],
    positional: dict[tuple[str, int], int],
    inferred: dict[tuple[str, int], int],
) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """Each input's concrete shape, and a note per symbolic dim that fell back to 1."""
    by_name = dict(named)
    for (input_name, index), value in inferred.items():  # an inferred dim fixes its name everywhere
        dim = _dims(inputs)[input_name][index]
        if isinstance(dim, str) and dim not in named:
            by_name.setdefault(dim, value)
    shapes: dict[str, tuple[int, ...]] = {}
    defaulted: list[str] = []
    for arg in inputs:
        shape = []
        for index, dim in enumerate(arg.shape):
            if isinstance(dim, int):
                shape.append(dim)
            elif (arg.name, index) in positional:
                shape.append(positional[(arg.name, index)])
            elif isinstance(dim, str) and dim in by_name:
                shape.append(by_name[dim])
            elif (arg.name, index) in inferred:
                shape.append(inferred[(arg.name, index)])
            else:
                shape.append(1)
                defaulted.append(f"{arg.name}:{index}" + (f" ({dim})" if isinstance(dim, str) else ""))
        shapes[arg.name] = tuple(shape)
    return shapes, defaulted


def _dims(inputs: Sequence[Any]) -> dict[str, list[Any]]:
    return {arg.name: list(arg.shape) for arg in inputs}


def cast_given(name: str, array: np.ndarray, type_string: str, dtype_of: Any) -> tuple[np.ndarray, str | None]:
    """A given array cast to the input's declared float type (with a note saying so); other
    arrays unchanged, for the session to check."""
    declared = dtype_of(type_string)
    if declared is None or array.dtype == declared or array.dtype.kind != "f" or declared.kind != "f":
        return array, None
    note = f"note: --input {name}: {array.dtype} cast to {declared} (the declared {type_string})"
    return array.astype(declared), note
