"""Where a session's model comes from, and what of the loaded model it keeps between builds.

Why a separate holder: the session builds from the loaded model at creation and again on each
``set_providers``, but keeping that model for the session's life costs memory wherever the
optimizer replaced weights (a convolution with its normalization folded in: ResNet-50 with its
weights in the file held 188 MiB, 99 without the loaded copy).  So:

* a model from a path is read again for each build, as onnxruntime reads its path again, so a
  build may take the loaded model for its own (the optimizer then edits it rather than a copy:
  :meth:`ModelSource.taken`); where the build did not take it, it is let go after the build, its
  tensors detached at once with ``graph.release_tensors``, not left to the cycle collector;
* a model from bytes has nothing to be read again from but the bytes.  Small ones (under
  :data:`KEEP_BYTES_UNDER`) are kept as bytes, the caller's own immutable object, and read again
  as a path is: keeping them costs at most their size, and the build then takes the loaded model
  without the optimizer's copy (a six-node model: ~0.1 ms of a ~1 ms creation).  Larger ones keep
  their loaded form rather than the bytes (onnxruntime keeps the bytes): the weights the
  optimizer did not replace are shared with the optimized model, so it costs at most the
  replaced ones (BERT-base from bytes: 417 MiB held, onnxruntime 831).  Its tensors are detached
  when the source is collected.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import onnx

from ..graph import LoadedModel, load_model, release_tensors
from ._session_info import in_memory_data
from .options import SessionOptions

__all__ = ["KEEP_BYTES_UNDER", "ModelSource"]

#: A model given as bytes shorter than this is kept as bytes and read again for each build.
KEEP_BYTES_UNDER = 16 << 20


class ModelSource:
    """A session's model: loaded at once (load errors surface at creation), handed to each
    build with :meth:`loaded`, and let go after it with :meth:`built`.

    :ivar path: the model's path, ``None`` for bytes.
    :ivar kept_bytes: the model's bytes where they are read again (see :data:`KEEP_BYTES_UNDER`).
    :ivar proto: the model's description (:attr:`LoadedModel.proto`: no weight data), kept.
    """

    def __init__(self, path_or_bytes: Any, options: SessionOptions) -> None:
        self._options = options
        self.path = os.fspath(path_or_bytes) if isinstance(path_or_bytes, (str, os.PathLike)) else None
        small = isinstance(path_or_bytes, bytes) and len(path_or_bytes) < KEEP_BYTES_UNDER
        self.kept_bytes: bytes | None = path_or_bytes if small else None
        self._loaded: LoadedModel | None = self._load(path_or_bytes)
        self.proto: onnx.ModelProto = self._loaded.proto
        if not self.reads_again:
            weakref.finalize(self, release_tensors, self._loaded.model)

    def _load(self, path_or_bytes: Any) -> LoadedModel:
        external_dir = self._options._entries().get("session.model_external_data_dir")
        return load_model(path_or_bytes, external_data_dir=external_dir, in_memory=in_memory_data(self._options))

    def loaded(self) -> LoadedModel:
        """The loaded model for a build: the one kept, or the path (or kept bytes) read again."""
        if self._loaded is None:
            self._loaded = self._load(self.path if self.kept_bytes is None else self.kept_bytes)
            self.proto = self._loaded.proto
        return self._loaded

    @property
    def reads_again(self) -> bool:
        """Whether the next build reads the model again (a path's, or small bytes'): a build may
        then take the loaded model for its own (:meth:`taken`), the optimizer editing it instead
        of a copy."""
        return self.path is not None or self.kept_bytes is not None

    def taken(self) -> None:
        """The build took the loaded model for its own (only where :attr:`reads_again`): it is
        forgotten here, its tensors left to its new owner."""
        if self.reads_again:
            self._loaded = None

    def built(self) -> None:
        """A build is over (done or failed): a loaded model read again goes until the next one."""
        if self.reads_again and self._loaded is not None:
            release_tensors(self._loaded.model)
            self._loaded = None
