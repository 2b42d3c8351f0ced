"""What rule checks ask of a value: its constant contents, its shape, a free initializer name.

Public so that op libraries built on the CPU provider (onnxplug-contrib-ms-ops) check values the
same way in their rules."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

__all__ = [
    "FreshNames",
    "constant_array",
    "fresh_initializer_name",
    "fresh_initializer_names",
    "static_shape",
    "trailing_reduce_axis",
]


def constant_array(value: ir.Value | None) -> np.ndarray | None:
    """The value's contents when it is a true constant (an initializer that is not also a graph
    input a caller may override, or a ``Constant`` node's output), else ``None``."""
    if value is None or value.is_graph_input():
        return None
    tensor = value.const_value
    node = value.producer()
    if tensor is None and node is not None and node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
        attr = node.attributes.get("value")
        tensor = attr.as_tensor() if attr is not None and attr.type == ir.AttributeType.TENSOR else None
    if tensor is None:
        return None
    try:
        return tensor.numpy()
    except (FileNotFoundError, OSError, ValueError):  # external data that is not there
        return None


def static_shape(value: ir.Value | None, *, symbolic: bool = True) -> tuple | None:
    """The value's dimensions: ints, symbolic names (equal only to the same name), or for an
    unnamed dimension an object equal to nothing else.  ``None`` when the rank is unknown, or,
    with ``symbolic=False``, when any dimension is not a number."""
    if value is None or value.shape is None:
        return None
    dims = []
    for dim in value.shape:
        if isinstance(dim, int):
            dims.append(dim)
        elif not symbolic:
            return None
        else:
            dims.append(dim.value if dim.value is not None else object())
    return tuple(dims)


def fresh_initializer_name(graph: ir.Graph | ir.Function, base: str) -> str:
    """``base``, or ``base_<n>``: a name no initializer or value of ``graph`` uses yet."""
    return fresh_initializer_names(graph, base)[0]


def fresh_initializer_names(graph: ir.Graph | ir.Function, *bases: str) -> tuple[str, ...]:
    """:func:`fresh_initializer_name` of each base, from one walk over ``graph``'s values: a
    fusion's check names its weights and bias, and walking a ResNet-50 once per name was a
    tenth of its session's creation (two walks per fused Conv)."""
    return _pick(_names_of(graph), graph, bases)


class FreshNames:
    """:func:`fresh_initializer_names` for one rule object's pass over a model (a rule set's rules
    are made anew for each model): each graph's names are read once, then the names handed out
    are added, and the graph's current initializers are checked too (another rule's new weights).
    Where every fused Conv walked the whole graph, ResNet-50's 53 BatchNormalization folds read
    its ~230 nodes 53 times."""

    __slots__ = ("_taken",)

    def __init__(self) -> None:
        self._taken: dict[int, set[str]] = {}

    def __call__(self, graph: ir.Graph | ir.Function, *bases: str) -> tuple[str, ...]:
        taken = self._taken.get(id(graph))
        if taken is None:
            taken = self._taken[id(graph)] = _names_of(graph)
        return _pick(taken, graph, bases)


def _names_of(graph: ir.Graph | ir.Function) -> set[str]:
    taken = set(getattr(graph, "initializers", {}) or {})
    taken.update(v.name for v in graph.inputs if v.name)
    taken.update(v.name for node in graph for v in node.outputs if v.name)
    return taken


def _pick(taken: set[str], graph: ir.Graph | ir.Function, bases: tuple[str, ...]) -> tuple[str, ...]:
    """A name per base not in ``taken`` nor among ``graph``'s initializers, each added to ``taken``."""
    initializers = getattr(graph, "initializers", {}) or {}
    names = []
    for base in bases:
        name, n = base, 0
        while name in taken or name in initializers:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)  # the next base's name must differ from this one too
        names.append(name)
    return tuple(names)


def trailing_reduce_axis(node: ir.Node, rank: int) -> int | None:
    """For a Reduce* node with keepdims=1 over trailing axes, the first of them as a negative axis
    (what LayerNormalization's ``axis`` means); ``None`` otherwise or when the axes are unknown.

    The axes are an attribute before opset 18 and a constant input from opset 18 on."""
    if node.attributes.get_int("keepdims", 1) != 1:
        return None
    if len(node.inputs) > 1 and node.inputs[1] is not None:
        array = constant_array(node.inputs[1])
        axes = None if array is None else array.reshape(-1).tolist()
    else:
        axes = node.attributes.get_ints("axes", None)
    if not axes or any(not -rank <= a < rank for a in axes):
        return None
    axes = sorted(a % rank for a in axes)
    return axes[0] - rank if axes == list(range(axes[0], rank)) else None
