"""Model loading, validation, the read-only graph view handed to providers, and the graph
helpers the later stages share (scopes and order, convexity, extraction of nodes as a model)."""

from ._convex import connected_parts, convex_parts, successor_map
from ._external_memory import InMemoryData
from ._extract import extract_model
from ._load import LoadedModel, load_model
from ._own_data import release_tensors
from ._scopes import (
    all_nodes,
    attribute_table,
    execution_order,
    graphs_of,
    node_reads,
    order_units,
    outer_references,
    subgraphs,
)
from ._types import ELEMENT_NAMES, element_name, np_dtype, onnx_element_type, shape_list, static_shape, type_string
from ._view import GraphView, NodeView

__all__ = [
    "ELEMENT_NAMES",
    "GraphView",
    "InMemoryData",
    "LoadedModel",
    "NodeView",
    "all_nodes",
    "attribute_table",
    "connected_parts",
    "convex_parts",
    "element_name",
    "execution_order",
    "extract_model",
    "graphs_of",
    "load_model",
    "node_reads",
    "np_dtype",
    "onnx_element_type",
    "order_units",
    "outer_references",
    "release_tensors",
    "shape_list",
    "static_shape",
    "subgraphs",
    "successor_map",
    "type_string",
]
