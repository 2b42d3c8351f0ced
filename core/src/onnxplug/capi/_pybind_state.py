"""onnxruntime's ``onnxruntime.capi._pybind_state``: a re-export of
:mod:`onnxplug.capi.onnxruntime_pybind11_state`, as onnxruntime's is of its compiled module."""

from .onnxruntime_pybind11_state import *  # noqa: F403 - the whole module, by design
from .onnxruntime_pybind11_state import __all__  # noqa: F401 - same names
