"""QDQ activation chains fused with the float op that produces them.

Why: in a QDQ model every float operator's output goes through ``QuantizeLinear →
DequantizeLinear`` (onnxruntime's quantizer drops the Relu after a Conv: the quantization's
saturation does its work), and a residual ``Sum`` is followed by ``Q → DQ → Relu → Q → DQ``.
Run node by node, each stage is another pass over the tensor and another allocation, which is
where a QDQ ResNet-50 spent its time beyond the float model's.  Fused, the producer (``Conv``,
``Sum`` or ``Add``) writes a fresh float32 array and every stage (a Relu and a Q→DQ pair,
``kernels._qdq.fake_quantize_into``: one branch-free compiled pass) works in place on it, with
the bits of the separate kernels.
The Conv keeps the float model's paths (Winograd included: a QDQ Conv is a float convolution of
dequantized values, whose weights constant folding has already dequantized).

Chains are claimed only among the nodes the CPU provider runs, with every intermediate value
read by the next node only (and not a graph output), so nothing outside needs it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from onnxplug.api import CompiledPartition, Partition
from onnxplug.graph import GraphView

from ..numerics import PackedConv, convolve
from ._qdq import _NP_RANGES, _is_scalar, fake_quantize_into, qdq_pairs
from ._readers import value_readers

__all__ = ["compile_qdq_chain", "qdq_chains"]

_HEADS = {"Conv", "Sum", "Add"}
_FLOAT = "tensor(float)"


def qdq_chains(graph: GraphView, claimed: set[str]) -> list[tuple[str, ...]]:
    """Node names to fuse: ``[Conv | Sum | Add] → Q → DQ (→ Relu → Q → DQ)*``, or a lone
    ``Q → DQ`` pair, each Q→DQ pair as :func:`kernels._qdq.qdq_pairs` admits it."""
    pairs = qdq_pairs(graph, claimed)
    nodes = {node.name: node for node in graph.nodes}
    producer = {value: node for node in graph.nodes for value in node.outputs if value}
    readers = value_readers(graph)
    outputs = set(graph.outputs)

    def only_reader(value: str) -> bool:
        return value not in outputs and len(readers.get(value, ())) == 1

    def ours(node) -> bool:
        return node is not None and node.name in claimed and node.domain == ""

    pair_by_dq = {dq: (q, dq) for q, dq in pairs}
    heads: dict[tuple, str] = {}
    links: dict[tuple, tuple] = {}  # pair -> (relu, next pair)
    for pair in pairs:
        source = nodes[pair[0]].inputs[0]
        before = producer.get(source)
        if not ours(before) or not only_reader(source) or before.output_types[0] != _FLOAT:
            continue
        if before.op_type == "Relu":
            earlier = producer.get(before.inputs[0])
            if earlier is not None and earlier.name in pair_by_dq and only_reader(before.inputs[0]):
                links[pair_by_dq[earlier.name]] = (before.name, pair)
        elif before.op_type in _HEADS and len(before.outputs) == 1:
            if before.op_type != "Conv" and len(before.inputs) != 2:
                continue
            if all(t == _FLOAT for t in before.input_types[:2]):
                heads[pair] = before.name
    followers = {link[1] for link in links.values()}
    chains = []
    for pair in pairs:
        if pair in followers:
            continue
        chain = ([heads[pair]] if pair in heads else []) + list(pair)
        step = pair
        while step in links:
            relu, step = links[step]
            chain += [relu, *step]
        chains.append(tuple(chain))
    return chains


def compile_qdq_chain(partition: Partition, fallback) -> CompiledPartition:
    """A partition of one chain as one call.  ``fallback(x, s, z, s2, z2, q_attrs, dq_attrs)``
    runs a stage's two kernels when run-time values leave the fused path's domain."""
    model = partition.model
    constants = {init.name: numpy_helper.to_array(init) for init in model.graph.initializer}
    positions = {name: index for index, name in enumerate(partition.inputs)}
    ordered = _in_order(model.graph.node)
    head = ordered[0] if ordered[0].op_type in _HEADS else None
    stages = []  # (relu first, Q input names, DQ input names, Q attributes, DQ attributes)
    relu = False
    rest = ordered[1:] if head is not None else ordered
    index = 0
    while index < len(rest):
        node = rest[index]
        if node.op_type == "Relu":
            relu = True
            index += 1
            continue
        q_node, dq_node = node, rest[index + 1]
        attrs = tuple({a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in (q_node, dq_node))
        stages.append((relu, list(q_node.input[1:3]) + list(dq_node.input[1:3]), *attrs))
        relu = False
        index += 2
    run_head = _head_runner(head, constants) if head is not None else None
    source = head.input if head is not None else [ordered[0].input[0]]

    def fetch(values: Sequence[np.ndarray], name: str):
        return values[positions[name]] if name in positions else constants[name]

    def run(*values):
        if run_head is not None:
            y, owned = run_head([fetch(values, name) if name else None for name in source]), True
        else:
            y, owned = fetch(values, source[0]), False
        params = [[fetch(values, name) for name in names] for _, names, _, _ in stages]
        fused = _fits(y, params)
        for (relu_first, _, q_attrs, dq_attrs), (s, z, s2, z2) in zip(stages, params):
            if fused:  # in place on an array this call made: no allocation
                y = np.ascontiguousarray(y)
                out = y if owned and y.flags.writeable else np.empty(y.shape, np.float32)
                y, owned = fake_quantize_into(y, out, s, z, s2, z2, relu=relu_first), True
                continue
            if relu_first:
                y = np.maximum(y, y.dtype.type(0)) if y.dtype.kind == "f" else np.maximum(y, 0)
            y = fallback(y, s, z, s2, z2, q_attrs, dq_attrs)
        return [y]

    return CompiledPartition(partition.inputs, partition.outputs, run)


def _in_order(nodes) -> list:
    """The chain's nodes from its first to its last (each reads the previous one's output)."""
    by_input = {}
    made = {out for node in nodes for out in node.output}
    for node in nodes:
        for name in node.input:
            if name in made:
                by_input[name] = node
    first = next(node for node in nodes if not any(name in made for name in node.input))
    ordered = [first]
    while ordered[-1].output[0] in by_input:
        ordered.append(by_input[ordered[-1].output[0]])
    return ordered


def _head_runner(node, constants):
    """``f(inputs) -> fresh array`` for the chain's Conv, Sum or Add."""
    if node.op_type != "Conv":
        return lambda inputs: np.add(inputs[0], inputs[1])
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    geometry = dict(
        group=int(attrs.get("group", 1)),
        kernel_shape=attrs.get("kernel_shape"),
        strides=attrs.get("strides"),
        dilations=attrs.get("dilations"),
        pads=attrs.get("pads"),
        auto_pad=auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad,
    )
    weights = constants.get(node.input[1])
    packed = None if weights is None else PackedConv(weights, geometry["group"])

    def conv(inputs):
        x, w, *bias = inputs
        return convolve(x, w, bias[0] if bias else None, packed=packed if w is weights else None, **geometry)

    return conv


def _fits(y, params) -> bool:
    """Whether every stage takes ``fake_quantize`` (float32 values, per-tensor float32 scales,
    8/16-bit zero points of one type)."""
    if y.dtype != np.float32:
        return False
    for s, z, s2, z2 in params:
        if not all(_is_scalar(p) for p in (s, z, s2, z2)) or s.dtype != np.float32 or s2.dtype != np.float32:
            return False
        if z.dtype not in _NP_RANGES or z2.dtype != z.dtype:
            return False
    return True
