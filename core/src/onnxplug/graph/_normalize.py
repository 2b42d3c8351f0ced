"""Rewrites that make a valid ModelProto representable in onnx-ir without changing its meaning.

onnx-ir (1.1) cannot hold map types, sparse tensors, or a subgraph output that is an outer-scope
value returned as is.  The loader keeps the original proto for type strings and hands onnx-ir a
copy rewritten here:

- value infos with map types lose their type (types are read from the original proto);
- sparse initializers and ``Constant(sparse_value=...)`` become dense tensors;
- a subgraph output naming an outer-scope value gets an ``Identity`` node in between
  (onnxruntime refuses such models; the ONNX spec allows them);
- before IR version 4, initializers listed among the graph inputs (as that IR required) are
  constants, not inputs.
"""

from __future__ import annotations

import copy

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import InvalidGraph

__all__ = ["prepare_for_ir"]


def _has_map_type(type_proto: onnx.TypeProto) -> bool:
    stack = [type_proto]
    while stack:
        current = stack.pop()
        kind = current.WhichOneof("value")
        if kind == "map_type":
            return True
        if kind in ("sequence_type", "optional_type"):
            stack.append(getattr(current, kind).elem_type)
    return False


def _dense(sparse: onnx.SparseTensorProto, where: str) -> onnx.TensorProto:
    """A dense TensorProto holding a sparse tensor's values (indices bounds-checked)."""
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dims = tuple(int(d) for d in sparse.dims)
    size = int(np.prod(dims, dtype=np.int64))
    dense = np.zeros(size, dtype=values.dtype)
    if indices.ndim == 2:  # [NNZ, rank] coordinates
        if indices.shape[1] != len(dims) or np.any(indices < 0) or np.any(indices >= np.array(dims)):
            raise InvalidGraph(f"{where}: sparse indices out of bounds for shape {list(dims)}")
        flat = np.ravel_multi_index(tuple(indices.T), dims) if len(indices) else indices.reshape(0)
    else:  # [NNZ] linear positions
        if np.any(indices < 0) or np.any(indices >= size):
            raise InvalidGraph(f"{where}: sparse indices out of bounds for {size} elements")
        flat = indices
    if len(flat) != values.size:
        raise InvalidGraph(f"{where}: {values.size} sparse values but {len(flat)} indices")
    dense[flat] = values.reshape(-1)
    return numpy_helper.from_array(dense.reshape(dims), sparse.values.name)


def prepare_for_ir(model: onnx.ModelProto, *, in_place: bool = False) -> onnx.ModelProto:
    """A rewritten copy of ``model`` (see the module docstring); ``model`` is left unchanged,
    unless ``in_place`` (the loader's own parse, whose weights should not be copied) asks to
    rewrite and return ``model`` itself."""
    result = model if in_place else copy.deepcopy(model)
    if result.ir_version < 4:
        # Before IR 4 every initializer had to be listed as a graph input too; they are
        # constants, not inputs (onnxruntime does not let callers override them either).
        constant_names = {t.name for t in result.graph.initializer}
        kept = [info for info in result.graph.input if info.name not in constant_names]
        del result.graph.input[:]
        result.graph.input.extend(kept)
    pending: list[tuple[onnx.GraphProto, bool, frozenset[str]]] = [(result.graph, True, frozenset())]
    while pending:
        graph, is_main, outer = pending.pop()
        for infos in (graph.input, graph.output, graph.value_info):
            for info in infos:
                if info.HasField("type") and _has_map_type(info.type):
                    info.ClearField("type")
        for sparse in list(graph.sparse_initializer):
            graph.initializer.append(_dense(sparse, f"sparse initializer '{sparse.values.name}'"))
        graph.ClearField("sparse_initializer")
        defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
        defined |= {name for node in graph.node for name in node.output}
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("sparse_tensor") and node.op_type == "Constant":
                    dense = _dense(attr.sparse_tensor, f"Constant node '{node.name}'")
                    attr.ClearField("sparse_tensor")
                    attr.name, attr.type = "value", onnx.AttributeProto.TENSOR
                    attr.t.CopyFrom(dense)
                if attr.HasField("g"):
                    pending.append((attr.g, False, outer | defined))
                for sub in attr.graphs:
                    pending.append((sub, False, outer | defined))
        if not is_main:
            for output in graph.output:
                if output.name in outer and output.name not in defined:
                    bridged = f"{output.name}__onnxplug_{graph.name or 'subgraph'}_out"
                    graph.node.append(helper.make_node("Identity", [output.name], [bridged]))
                    output.name = bridged
    return result
