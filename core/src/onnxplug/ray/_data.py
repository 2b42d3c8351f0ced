"""Ray Data: an onnxplug session as a ``map_batches`` callable class."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from ..serving import ModelSignature

__all__ = ["OnnxplugPredictor"]


class OnnxplugPredictor:
    """Runs a model over a dataset's batches (``batch_format="numpy"``: a dict of column arrays).

    Ray constructs one per actor (``concurrency``) and calls it with each batch, so the session is
    built once per actor.  ``model`` is a path or the model's bytes; ``inputs`` maps columns to
    the model's input names (default: columns named after the inputs); the outputs become columns
    named after them (``outputs`` selects and renames: ``{"output name": "column"}``), and the
    columns in ``keep_columns`` pass through.  A model with a fixed batch dimension is run row by
    row.  Columns must already have the inputs' dtypes: nothing is cast behind your back.
    """

    def __init__(
        self,
        model: str | bytes,
        *,
        providers: Sequence[str] | None = None,
        inputs: Mapping[str, str] | None = None,
        outputs: Mapping[str, str] | None = None,
        keep_columns: Sequence[str] = (),
        sess_options: Any = None,
    ) -> None:
        from .. import InferenceSession

        self.session = InferenceSession(model, sess_options=sess_options, providers=providers)
        self.signature = ModelSignature(self.session)
        self.inputs = dict(inputs) if inputs else {name: name for name in self.signature.inputs}
        unknown = sorted(set(self.inputs.values()) - set(self.signature.inputs))
        if unknown:
            known = sorted(self.signature.inputs)
            raise InvalidArgument(f"unknown input {unknown[0]!r}; the model's inputs are {known}")
        self.outputs = dict(outputs) if outputs else {name: name for name in self.signature.output_names}
        self.keep_columns = tuple(keep_columns)

    def __call__(self, batch: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        missing = [column for column in (*self.inputs, *self.keep_columns) if column not in batch]
        if missing:
            raise InvalidArgument(f"the batch has no column {missing[0]!r}; its columns are {sorted(batch)}")
        feeds = {name: np.asarray(batch[column]) for column, name in self.inputs.items()}
        names = list(self.outputs)
        arrays, names_checked, _, _ = self.signature.prepare(feeds, names)
        if self.signature.batchable:
            values = self.session.run(list(names_checked), arrays)
        else:
            rows = len(next(iter(arrays.values())))
            per_row = [self.session.run(names, {k: v[i : i + 1] for k, v in arrays.items()}) for i in range(rows)]
            values = [np.concatenate([row[j] for row in per_row]) for j in range(len(names))]
        result = {self.outputs[name]: np.asarray(value) for name, value in zip(names, values)}
        for column in self.keep_columns:
            result[column] = np.asarray(batch[column])
        return result
