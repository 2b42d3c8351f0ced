"""SessionOptions and RunOptions with onnxruntime's attribute names and defaults.

Which options are honoured, and which are accepted and ignored (with the reason), is listed in
``docs/api.md``.
"""

from __future__ import annotations

import copy
import enum
import os
from collections.abc import Sequence
from typing import Any

from ..errors import Fail, InvalidArgument

__all__ = ["GraphOptimizationLevel", "ExecutionMode", "ExecutionOrder", "SessionOptions", "RunOptions"]


class GraphOptimizationLevel(enum.IntEnum):
    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


_LIBRARY_SUFFIXES = (".py", ".so", ".dll", ".dylib")


def _looks_like_path(text: str) -> bool:
    return text.endswith(_LIBRARY_SUFFIXES) or os.sep in text or (os.altsep is not None and os.altsep in text)


def _typed(name: str, kind: type | tuple[type, ...], default: Any, doc: str) -> property:
    """A checked attribute: assigning the wrong type raises TypeError like onnxruntime's pybind."""
    key = "_" + name

    def getter(self: Any) -> Any:
        return self.__dict__.get(key, default)

    def setter(self: Any, value: Any) -> None:
        if isinstance(value, bool) and kind is int:
            value = int(value)
        if not isinstance(value, kind):
            raise TypeError(f"{name}: incompatible value {value!r} (expected {getattr(kind, '__name__', kind)})")
        self.__dict__[key] = value

    return property(getter, setter, doc=doc)


class _ConfigEntries:
    """add_*_config_entry / get_*_config_entry with onnxruntime's missing-key error."""

    _config_kind = "SessionOptions"

    def _entries(self) -> dict[str, str]:
        return self.__dict__.setdefault("_config", {})

    def _add(self, key: str, value: str) -> None:
        self._entries()[str(key)] = str(value)

    def _get(self, key: str) -> str:
        try:
            return self._entries()[key]
        except KeyError:
            raise RuntimeError(f"{self._config_kind} does not have configuration with key: {key}") from None


class SessionOptions(_ConfigEntries):
    """Options for :class:`~onnxplug.InferenceSession`; reusable for several sessions."""

    intra_op_num_threads = _typed("intra_op_num_threads", int, 0, "threads for a node's kernels (0: default)")
    inter_op_num_threads = _typed("inter_op_num_threads", int, 0, "threads running independent nodes")
    execution_mode = _typed("execution_mode", ExecutionMode, ExecutionMode.ORT_SEQUENTIAL, "")
    execution_order = _typed("execution_order", ExecutionOrder, ExecutionOrder.DEFAULT, "")
    graph_optimization_level = _typed(
        "graph_optimization_level", GraphOptimizationLevel, GraphOptimizationLevel.ORT_ENABLE_ALL, ""
    )
    optimized_model_filepath = _typed("optimized_model_filepath", str, "", "")
    enable_profiling = _typed("enable_profiling", bool, False, "")
    profile_file_prefix = _typed("profile_file_prefix", str, "onnxruntime_profile_", "")
    log_severity_level = _typed("log_severity_level", int, -1, "")
    log_verbosity_level = _typed("log_verbosity_level", int, 0, "")
    logid = _typed("logid", str, "", "")
    enable_cpu_mem_arena = _typed("enable_cpu_mem_arena", bool, True, "")
    enable_mem_pattern = _typed("enable_mem_pattern", bool, True, "")
    enable_mem_reuse = _typed("enable_mem_reuse", bool, True, "")
    use_deterministic_compute = _typed("use_deterministic_compute", bool, False, "")
    use_per_session_threads = _typed("use_per_session_threads", bool, True, "")

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._add(key, value)

    def get_session_config_entry(self, key: str) -> str:
        return self._get(key)

    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        self.__dict__.setdefault("_dim_overrides", {})[str(name)] = int(value)

    def add_free_dimension_override_by_denotation(self, denotation: str, value: int) -> None:
        self.__dict__.setdefault("_denotation_overrides", {})[str(denotation)] = int(value)

    def add_initializer(self, name: str, value: Any) -> None:
        if not hasattr(value, "numpy") or not hasattr(value, "data_type"):
            raise RuntimeError(f"add_initializer: the value for '{name}' must be an OrtValue")
        self.__dict__.setdefault("_initializers", {})[str(name)] = value

    def add_external_initializers(self, names: Sequence[str], ortvalues: Sequence[Any]) -> None:
        """Supply initializers by name (typically those a model keeps as external data); each
        replaces the model's tensor of that name, which must have the same type and shape.

        :raises InvalidArgument: lists of different lengths, or a value that is not an OrtValue
            holding a tensor.
        """
        names, ortvalues = list(names), list(ortvalues)
        if len(names) != len(ortvalues):
            raise InvalidArgument(f"add_external_initializers: {len(names)} names for {len(ortvalues)} values")
        store = self.__dict__.setdefault("_external_initializers", {})
        for name, value in zip(names, ortvalues):
            if not hasattr(value, "is_tensor") or not value.is_tensor():
                raise InvalidArgument(f"add_external_initializers: the value for '{name}' must be an OrtValue tensor")
            store[str(name)] = value.numpy()

    def add_external_initializers_from_files_in_memory(
        self, file_names: Sequence[str], buffer_array: Sequence[Any], file_lengths: Sequence[int]
    ) -> None:
        """Supply the contents of external-data files (by the location the model names them
        with), so a model loaded from bytes finds its weights without touching the disk.

        :raises InvalidArgument: lists of different lengths, or a length larger than its buffer.
        """
        file_names, buffer_array, file_lengths = list(file_names), list(buffer_array), list(file_lengths)
        if not len(file_names) == len(buffer_array) == len(file_lengths):
            raise InvalidArgument(
                "add_external_initializers_from_files_in_memory: file_names, buffer_array and file_lengths "
                f"have {len(file_names)}, {len(buffer_array)} and {len(file_lengths)} entries"
            )
        store = self.__dict__.setdefault("_external_files", {})
        for name, buffer, length in zip(file_names, buffer_array, file_lengths):
            view = memoryview(buffer).cast("B")
            if int(length) > len(view):
                raise InvalidArgument(
                    f"add_external_initializers_from_files_in_memory: '{name}' has {len(view)} bytes, "
                    f"fewer than the length {length} given"
                )
            store[str(name)] = view[: int(length)]

    def register_custom_ops_library(self, library: Any) -> None:
        """Add an op library: a plugin's entry-point or distribution name, a module (or its
        name), or the path of a ``.py`` file.

        :raises Fail: a path (``os.PathLike``, or a string with a folder separator or a library
            suffix) that does not exist, at the call as onnxruntime does, naming the path.
        """
        if isinstance(library, os.PathLike):
            library = os.fspath(library)
        if isinstance(library, str) and _looks_like_path(library) and not os.path.isfile(library):
            raise Fail(f"Failed to load library {library} with error: {library}: no such file")
        self.__dict__.setdefault("_op_libraries", []).append(library)

    def __copy__(self) -> SessionOptions:
        """A copy whose containers (config entries, overrides, libraries) are independent; the
        values in them (OrtValues, library modules) are shared, as the caller keeps them alive."""
        clone = SessionOptions()
        for key, value in self.__dict__.items():
            clone.__dict__[key] = copy.copy(value) if isinstance(value, (dict, list)) else value
        return clone


class RunOptions(_ConfigEntries):
    """Options for one ``run`` call.  Setting ``terminate`` from another thread stops the run."""

    _config_kind = "RunOptions"

    logid = _typed("logid", str, "", "")
    log_severity_level = _typed("log_severity_level", int, -1, "")
    log_verbosity_level = _typed("log_verbosity_level", int, 0, "")
    only_execute_path_to_fetches = _typed("only_execute_path_to_fetches", bool, False, "")

    def __init__(self) -> None:
        # A plain attribute: the executor reads it between nodes, so it must be cheap.
        self.terminate = False

    @property
    def run_log_id(self) -> str:
        """Alias of ``logid`` (the name onnxruntime's C API uses)."""
        return self.logid

    @run_log_id.setter
    def run_log_id(self, value: str) -> None:
        self.logid = value

    def add_active_adapter(self, adapter: Any) -> None:
        """Apply a :class:`~onnxplug.LoraAdapter`'s parameters in runs with these options: each
        parameter is fed to the model input of its name, unless the feed gives that input.

        :raises TypeError: not a LoraAdapter.
        """
        if not hasattr(adapter, "_onnxplug_parameters"):
            raise TypeError(f"add_active_adapter needs a LoraAdapter, not {type(adapter).__name__}")
        self.__dict__.setdefault("_adapters", []).append(adapter)

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._add(key, value)

    def get_run_config_entry(self, key: str) -> str:
        return self._get(key)
