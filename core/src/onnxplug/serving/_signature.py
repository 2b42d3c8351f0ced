"""What a model accepts, and which requests may share a run.

A request is checked here, before it is queued, so that one bad request is refused on its own
instead of failing the batch it would have joined.  Two requests may share a run when they have
the same *batch key*: the same input names, dtypes and shapes apart from the first (batch)
dimension, and the same requested outputs.  A model can be batched at all only when every input
and output has a symbolic first dimension; a model exported with a fixed batch of 1 runs one
request at a time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InvalidArgument

__all__ = ["InputSpec", "ModelSignature", "numpy_dtype"]

# onnxruntime's type strings (NodeArg.type) for the tensor types a request can carry.
_DTYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int8)": np.int8,
    "tensor(int16)": np.int16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(uint8)": np.uint8,
    "tensor(uint16)": np.uint16,
    "tensor(uint32)": np.uint32,
    "tensor(uint64)": np.uint64,
    "tensor(bool)": np.bool_,
    "tensor(string)": np.object_,
}


def numpy_dtype(type_string: str) -> np.dtype | None:
    """The numpy dtype of an onnxruntime type string (``tensor(float)`` → float32), ``None`` when
    the type is not a plain tensor the serving layer can carry (sequences, maps, bfloat16)."""
    dtype = _DTYPES.get(type_string)
    return None if dtype is None else np.dtype(dtype)


class InputSpec:
    """One graph input: name, numpy dtype (``None`` when not servable) and declared shape
    (ints for fixed dimensions, ``None`` or a name for symbolic ones, ``None`` for unknown rank)."""

    __slots__ = ("name", "type", "dtype", "shape")

    def __init__(self, name: str, type_string: str, shape: Sequence[Any] | None) -> None:
        self.name = name
        self.type = type_string
        self.dtype = numpy_dtype(type_string)
        self.shape = None if shape is None else list(shape)

    def check(self, value: np.ndarray) -> None:
        """Raise :class:`InvalidArgument` naming this input when ``value`` does not fit it."""
        if self.dtype is None:
            raise InvalidArgument(f"input {self.name!r} has type {self.type}, which the serving layer cannot carry")
        if value.dtype != self.dtype and not (self.dtype == np.object_ and value.dtype.kind in "USO"):
            raise InvalidArgument(f"input {self.name!r}: expected dtype {self.dtype} ({self.type}), got {value.dtype}")
        if self.shape is None:
            return
        if value.ndim != len(self.shape):
            raise InvalidArgument(
                f"input {self.name!r}: expected rank {len(self.shape)} (shape {_show(self.shape)}), "
                f"got shape {list(value.shape)}"
            )
        for index, (want, got) in enumerate(zip(self.shape, value.shape)):
            if isinstance(want, int) and want >= 0 and want != got:
                raise InvalidArgument(
                    f"input {self.name!r}: dimension {index} must be {want} (shape {_show(self.shape)}), "
                    f"got shape {list(value.shape)}"
                )


def _show(shape: Sequence[Any]) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else (d or "?") for d in shape) + "]"


def _symbolic_first(shape: Sequence[Any] | None) -> bool:
    return shape is not None and len(shape) >= 1 and not (isinstance(shape[0], int) and shape[0] >= 0)


class ModelSignature:
    """The inputs and outputs of a session, and whether its requests can be batched.

    Built from ``session.get_inputs()`` / ``get_outputs()`` (the public NodeArg view), so it works
    for any object with onnxruntime's session interface.
    """

    def __init__(self, session: Any) -> None:
        self.inputs = {arg.name: InputSpec(arg.name, arg.type, arg.shape) for arg in session.get_inputs()}
        self.outputs = {arg.name: InputSpec(arg.name, arg.type, arg.shape) for arg in session.get_outputs()}
        self.output_names = list(self.outputs)
        self.batchable = bool(self.inputs) and all(
            _symbolic_first(spec.shape) for spec in (*self.inputs.values(), *self.outputs.values())
        )

    def why_not_batchable(self) -> str:
        """A sentence saying which input or output keeps requests from being combined ('' if none)."""
        if self.batchable:
            return ""
        for kind, specs in (("input", self.inputs), ("output", self.outputs)):
            for spec in specs.values():
                if not _symbolic_first(spec.shape):
                    shape = _show(spec.shape or [])
                    return f"{kind} {spec.name!r} has shape {shape}: its first dimension is not symbolic"
        return "the model has no inputs"

    def prepare(self, feeds: Mapping[str, Any], output_names: Sequence[str] | None) -> tuple[dict, tuple, tuple, int]:
        """Check a request; return ``(feeds as arrays, output names, batch key, rows)``.

        ``rows`` is the request's size along the batch dimension (1 when the model is not
        batchable: such a request is a unit of its own).  Raises :class:`InvalidArgument` naming
        the culprit: an unknown or missing input, a wrong dtype or shape, an unknown output.
        """
        unknown = sorted(set(feeds) - set(self.inputs))
        if unknown:
            raise InvalidArgument(f"unknown input {unknown[0]!r}; the model's inputs are {sorted(self.inputs)}")
        missing = [name for name in self.inputs if name not in feeds]
        if missing:
            raise InvalidArgument(f"missing input {missing[0]!r}; the model's inputs are {sorted(self.inputs)}")
        outputs = tuple(self.output_names if not output_names else output_names)
        for name in outputs:
            if name not in self.outputs:
                raise InvalidArgument(f"unknown output {name!r}; the model's outputs are {self.output_names}")
        arrays = {}
        for name, spec in self.inputs.items():
            value = np.asarray(feeds[name])
            spec.check(value)
            arrays[name] = value
        if not self.batchable:
            return arrays, outputs, (), 1
        rows = {value.shape[0] for value in arrays.values()}
        if len(rows) != 1:
            sizes = {name: value.shape[0] for name, value in arrays.items()}
            raise InvalidArgument(f"inputs disagree on the batch dimension (dimension 0): {sizes}")
        key = tuple((name, arrays[name].dtype.str, arrays[name].shape[1:]) for name in self.inputs) + (outputs,)
        return arrays, outputs, key, rows.pop()
