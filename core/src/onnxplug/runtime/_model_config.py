"""Session options a model carries in its metadata, applied as onnxruntime applies them.

A model may hold a ``metadata_props`` entry ``ort_config`` whose value is JSON such as
``{"session_options": {"intra_op_num_threads": 2, "execution_mode": 1}}``.  onnxruntime reads it
only when asked, by the environment variable ``ORT_LOAD_CONFIG_FROM_MODEL=1`` or the
``read_config_from_model=1`` keyword of ``InferenceSession``; the values then replace the
caller's.  It honours five keys, each an integer, and ignores the rest; onnxplug does the same.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import onnx

from ..errors import Fail
from .options import ExecutionMode, GraphOptimizationLevel, SessionOptions

__all__ = ["CONFIG_KEY", "ENV_VAR", "apply_model_config"]

CONFIG_KEY = "ort_config"
ENV_VAR = "ORT_LOAD_CONFIG_FROM_MODEL"

_logger = logging.getLogger("onnxplug.session")


def _config_error(message: str) -> Fail:
    # onnxruntime's status is INVALID_ARGUMENT, but it reaches Python as a RuntimeError (the
    # session constructor rethrows it); Fail is onnxplug's RuntimeError, so such handlers work.
    return Fail(f"Could not finalize session options while constructing the inference session. {message}")


def _threads(value: int, key: str) -> int:
    if value < 0:
        raise _config_error(f"Unsupported value for {key}: {value}")
    return value


def _choice(kind: type, value: int, key: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise _config_error(f"Unsupported {key} value in ORT config: {value}") from None


def _profiling(value: int, key: str) -> bool:
    if value not in (0, 1):
        raise _config_error(f"Unsupported value for {key} option: {value}")
    return bool(value)


_SETTERS = {
    "intra_op_num_threads": _threads,
    "inter_op_num_threads": _threads,
    "execution_mode": lambda v, k: _choice(ExecutionMode, v, k),
    "graph_optimization_level": lambda v, k: _choice(GraphOptimizationLevel, v, k),
    "enable_profiling": _profiling,
}


def _requested(flag: Any) -> bool:
    if flag is not None:
        return str(flag) == "1" or flag is True
    return os.environ.get(ENV_VAR) == "1"


def apply_model_config(options: SessionOptions, model: onnx.ModelProto, flag: Any = None) -> None:
    """Copy the session options of ``model``'s ``ort_config`` entry into ``options``.

    :param flag: the ``read_config_from_model`` keyword (``None``: the environment variable decides).
    :raises Fail: JSON that does not parse, or a supported key with a value of the wrong type
        or out of range (onnxruntime's wording; a ``RuntimeError`` as onnxruntime's).
    """
    if not _requested(flag):
        return
    text = next((p.value for p in model.metadata_props if p.key == CONFIG_KEY), None)
    if text is None:
        return
    try:
        config = json.loads(text)
    except ValueError as error:
        raise _config_error(f"Json stored in the `{CONFIG_KEY}` key cannot be parsed. Error message: {error}") from None
    session = config.get("session_options") if isinstance(config, dict) else None
    if not isinstance(session, dict):
        return
    for key, value in session.items():
        setter = _SETTERS.get(key)
        if setter is None:
            _logger.info("Ignoring unsupported session option in ORT config: %s", key)
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            raise _config_error(f"{key} option in the model file must be an integer")
        setattr(options, key, setter(value, key))
