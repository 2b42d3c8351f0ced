"""Sequence ops: sequences are Python lists of arrays, and every op returns a new list (an input
list may be shared with another consumer or be the caller's feed, so it is never modified)."""

from __future__ import annotations

import numpy as np

from onnxplug.errors import Fail, InvalidArgument
from onnxplug.kernels import check_terminate

from ._registry import kernel


def _sequence(value, what):
    if not isinstance(value, list):
        raise InvalidArgument(f"{what} must be a sequence, got {type(value).__name__}")
    return value


def _position(position, length, *, inclusive_end, what):
    """The non-negative index for ``position`` in ``[-length, length)`` (``length`` itself
    allowed when inserting)."""
    array = np.asarray(position)
    if array.size != 1 or array.dtype.kind not in "iu":
        raise InvalidArgument(f"{what} position must be a single integer, got {array.dtype} shape {list(array.shape)}")
    index = int(array.reshape(-1)[0])
    upper = length if inclusive_end else length - 1
    if not -length <= index <= upper:
        raise InvalidArgument(f"{what} position {index} is out of range for a sequence of length {length}")
    return index + length if index < 0 else index


def _same_dtype(values, what):
    dtypes = {v.dtype for v in values}
    if len(dtypes) > 1:
        raise InvalidArgument(f"{what}: tensors of different types {sorted(map(str, dtypes))}")


@kernel("SequenceEmpty", since=(11,))
def sequence_empty(*, dtype=None):
    return []


@kernel("SequenceConstruct", since=(11,))
def sequence_construct(*inputs):
    _same_dtype(inputs, "SequenceConstruct")
    return list(inputs)


@kernel("SequenceInsert", since=(11,))
def sequence_insert(input_sequence, tensor, position=None):
    sequence = _sequence(input_sequence, "SequenceInsert input_sequence")
    if sequence and sequence[0].dtype != tensor.dtype:
        raise InvalidArgument(f"SequenceInsert: tensor of type {tensor.dtype} into a sequence of {sequence[0].dtype}")
    index = (
        len(sequence)
        if position is None
        else _position(position, len(sequence), inclusive_end=True, what="SequenceInsert")
    )
    return [*sequence[:index], tensor, *sequence[index:]]


@kernel("SequenceAt", since=(11,))
def sequence_at(input_sequence, position):
    sequence = _sequence(input_sequence, "SequenceAt input_sequence")
    return sequence[_position(position, len(sequence), inclusive_end=False, what="SequenceAt")]


@kernel("SequenceErase", since=(11,))
def sequence_erase(input_sequence, position=None):
    sequence = _sequence(input_sequence, "SequenceErase input_sequence")
    if position is None:
        if not sequence:
            raise InvalidArgument("SequenceErase: cannot erase from an empty sequence")
        return sequence[:-1]
    index = _position(position, len(sequence), inclusive_end=False, what="SequenceErase")
    return [*sequence[:index], *sequence[index + 1 :]]


@kernel("SequenceLength", since=(11,))
def sequence_length(input_sequence):
    return np.array(len(_sequence(input_sequence, "SequenceLength input")), dtype=np.int64)


def _normalise_axis(axis, rank, what):
    if not -rank <= axis < rank:
        raise InvalidArgument(f"{what}: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


@kernel("SplitToSequence", since=(11, 24))
def split_to_sequence(input, split=None, *, axis, keepdims):  # noqa: A002 - the schema's name
    axis = _normalise_axis(axis, input.ndim, "SplitToSequence")
    length = input.shape[axis]
    if split is None:
        parts = [np.take(input, i, axis=axis) for i in range(length)]
        if keepdims:
            parts = [np.expand_dims(p, axis) for p in parts]
        return parts
    split = np.asarray(split)
    if split.dtype.kind not in "iu" or split.ndim > 1:
        raise InvalidArgument(
            f"SplitToSequence: split must be an integer scalar or 1-D tensor, got "
            f"{split.dtype} shape {list(split.shape)}"
        )
    if split.ndim == 0:
        size = int(split)
        if size <= 0:
            raise InvalidArgument(f"SplitToSequence: split {size} must be positive")
        sizes = [size] * (length // size) + ([length % size] if length % size else [])
    else:
        sizes = [int(s) for s in split]
        if any(s < 0 for s in sizes) or sum(sizes) != length:
            raise InvalidArgument(
                f"SplitToSequence: split {sizes} does not add up to dimension {length} of axis {axis}"
            )
    bounds = np.cumsum(sizes)[:-1]
    return list(np.split(input, bounds, axis=axis))


@kernel("ConcatFromSequence", since=(11,))
def concat_from_sequence(input_sequence, *, axis, new_axis):
    sequence = _sequence(input_sequence, "ConcatFromSequence input")
    if not sequence:
        raise InvalidArgument("ConcatFromSequence: the input sequence is empty")
    rank = sequence[0].ndim
    _same_dtype(sequence, "ConcatFromSequence")
    try:
        if new_axis:
            return np.stack(sequence, axis=_normalise_axis(axis, rank + 1, "ConcatFromSequence"))
        return np.concatenate(sequence, axis=_normalise_axis(axis, rank, "ConcatFromSequence"))
    except ValueError as error:
        shapes = [list(t.shape) for t in sequence]
        raise InvalidArgument(f"ConcatFromSequence: cannot join shapes {shapes} on axis {axis}: {error}") from None


@kernel("SequenceMap", since=(17,), factory=True)
def sequence_map(ctx, *, body):
    """The body runs once per element of ``input_sequence``; each additional input is either a
    sequence of the same length (its i-th element is passed) or a tensor (passed every time)."""
    runner = ctx.subgraph("body")
    formal = ctx.num_inputs
    if len(runner.input_names) != formal:
        raise Fail(f"{ctx.describe()}: the body takes {len(runner.input_names)} inputs, the node has {formal}")
    if len(runner.output_names) != ctx.num_outputs:
        raise Fail(f"{ctx.describe()}: the body has {len(runner.output_names)} outputs, the node has {ctx.num_outputs}")

    def run(input_sequence, *args):
        sequence = _sequence(input_sequence, "SequenceMap input_sequence")
        extra, outer = args[: formal - 1], args[formal - 1 :]
        for value in extra:
            if isinstance(value, list) and len(value) != len(sequence):
                raise InvalidArgument(
                    f"SequenceMap: additional sequence of length {len(value)} does not "
                    f"match input_sequence of length {len(sequence)}"
                )
        results = [[] for _ in runner.output_names]
        for i, element in enumerate(sequence):
            check_terminate()
            inputs = [element, *(v[i] if isinstance(v, list) else v for v in extra)]
            for bucket, value in zip(results, runner(inputs, outer)):
                bucket.append(np.asarray(value) if isinstance(value, np.generic) else value)
        return tuple(results)

    return run
