"""Model loading, validation and the read-only graph view handed to providers."""

from ._load import LoadedModel, load_model
from ._types import element_name, np_dtype, onnx_element_type, shape_list, type_string
from ._view import GraphView, NodeView

__all__ = [
    "GraphView",
    "LoadedModel",
    "NodeView",
    "element_name",
    "load_model",
    "np_dtype",
    "onnx_element_type",
    "shape_list",
    "type_string",
]
