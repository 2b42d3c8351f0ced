"""Turning assigned nodes into executable steps: kernels built once, fused partitions compiled."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from ..api import CompiledPartition, Provider
from ..errors import EPFail, Fail, OnnxplugError
from ..graph import attribute_table, outer_references, subgraphs
from ..kernels import KernelDef, NodeContext, find_schema
from ..partition import node_opsets
from ._recompile import ShapeSpecializedPartition

__all__ = ["Step", "tensor_value", "kernel_step", "fused_step", "NONE_SLOT", "DROP_SLOT"]

#: Slot 0 always holds ``None`` (missing optional inputs read it); slot 1 swallows unused outputs.
NONE_SLOT = 0
DROP_SLOT = 1


class Step:
    """One unit to call: a callable, where its inputs come from and its outputs go.

    :ivar host_inputs: input positions that must be host arrays even on a device provider.
    :ivar device: the provider whose memory the step reads and writes (``None``: host).
    :ivar outer_inputs: input positions holding outer-scope values handed to a subgraph; placement
        leaves them where they are.
    """

    __slots__ = (
        "call",
        "inputs",
        "outputs",
        "free",
        "single",
        "name",
        "op_type",
        "provider",
        "node_index",
        "host_inputs",
        "device",
        "outer_inputs",
    )

    def __init__(
        self,
        call: Callable[..., Any],
        inputs: tuple[int, ...],
        outputs: tuple[int, ...],
        single: bool,
        name: str,
        op_type: str,
        provider: str,
        node_index: int,
        host_inputs: tuple[int, ...] = (),
        device: Provider | None = None,
    ) -> None:
        self.call = call
        self.inputs = inputs
        self.outputs = outputs
        self.free: tuple[int, ...] = ()
        self.single = single
        self.name = name
        self.op_type = op_type
        self.provider = provider
        self.node_index = node_index
        self.host_inputs = host_inputs
        self.device = device
        self.outer_inputs: tuple[int, ...] = ()


def tensor_value(tensor: ir.TensorProtocol) -> np.ndarray:
    """A read-only numpy array for an initializer or attribute tensor (strings as ``str``)."""
    array = tensor.numpy()
    if array.dtype.kind in "SO":
        array = (
            np.vectorize(lambda s: s.decode("utf-8") if isinstance(s, bytes) else s, otypes=[object])(array)
            if array.size
            else array.astype(object)
        )
    if array.flags.writeable:
        array.flags.writeable = False
    return array


def _device_of(provider: Provider) -> Provider | None:
    return provider if provider.transfer() is not None else None


def kernel_step(
    node: ir.Node,
    kernel: KernelDef,
    provider: Provider,
    index: int,
    slot_of: Mapping[int, int],
    new_slot: Callable[[ir.Value], int],
    constants: Mapping[int, Any],
    opsets: Mapping[str, int],
    compile_subgraph: Callable[[ir.Node, Mapping[str, int], list[ir.Value]], Callable[[str], Any]],
) -> Step:
    """A step running ``node`` with ``kernel`` (factories are called here, once)."""
    outer_values = outer_references(node) if subgraphs(node) else []
    formal = [NONE_SLOT if v is None else slot_of[id(v)] for v in node.inputs]
    implicit = [slot_of[id(v)] for v in outer_values]
    outputs = tuple(new_slot(v) if v.name else DROP_SLOT for v in node.outputs)
    own_opsets = node_opsets(node, opsets)
    context = NodeContext(
        name=node.name,
        op_type=node.op_type,
        domain=kernel.key.domain,
        since_version=kernel.key.since_version,
        opsets=own_opsets,
        num_inputs=len(node.inputs),
        num_outputs=len(node.outputs),
        outputs_used=[bool(v.name) and (bool(v.uses()) or v.is_graph_output()) for v in node.outputs],
        input_types=[_type_of(v) for v in node.inputs],
        constants=[None if v is None else constants.get(id(v)) for v in node.inputs],
        compile_subgraph=compile_subgraph(node, own_opsets, outer_values),
        num_outer_inputs=len(outer_values),
    )
    attributes = {name: _attribute_value(attr) for name, attr in attribute_table(node).items()}
    try:
        call = kernel.build(context, attributes)
    except OnnxplugError:
        raise
    except Exception as error:
        raise Fail(f"{context.describe()}: cannot be prepared: {type(error).__name__}: {error}") from error
    schema = find_schema(kernel.key.op_type, kernel.key.since_version, kernel.key.domain)
    single = len(node.outputs) == 1 and (schema is None or schema.max_output == 1)
    step = Step(
        call,
        tuple(formal + implicit),
        outputs,
        single,
        node.name,
        node.op_type,
        provider.ort_name,
        index,
        tuple(kernel.host_inputs),
        _device_of(provider),
    )
    # Outer-scope values reach the subgraph in whatever memory holds them: the subgraph's own
    # plan copies them to where its readers are (see _placement), so a Loop body reading a
    # device value does not copy it on every iteration.
    step.outer_inputs = tuple(range(len(formal), len(formal) + len(implicit)))
    return step


def fused_step(
    name: str,
    provider: Provider,
    partition: Any,
    input_values: Sequence[ir.Value],
    output_values: Sequence[ir.Value],
    index: int,
    slot_of: Mapping[int, int],
    new_slot: Callable[[ir.Value], int],
) -> Step:
    """A step running a fused partition compiled by its provider.

    :raises EPFail: the provider failed to compile it (naming the partition's nodes).
    """
    try:
        compiled = provider.compile(partition)
    except OnnxplugError:
        raise
    except Exception as error:
        nodes = ", ".join(partition.nodes[:8]) + (" ..." if len(partition.nodes) > 8 else "")
        raise EPFail(
            f"provider '{provider.name}' failed to compile partition {name} ({nodes}): {type(error).__name__}: {error}"
        ) from error
    if getattr(compiled, "input_shapes", None) is not None:
        compiled = ShapeSpecializedPartition(provider, partition, compiled, lambda: f"partition {name}")
    inputs = tuple(slot_of[id(v)] for v in input_values)
    outputs = tuple(new_slot(v) for v in output_values)
    # The step calls the provider's function itself where the partition is a plain
    # CompiledPartition (whose call only forwards to it): one Python frame less a run.
    call = compiled.fn if type(compiled).__call__ is CompiledPartition.__call__ else compiled
    device = _device_of(provider)
    return Step(call, inputs, outputs, False, name, "FusedPartition", provider.ort_name, index, (), device)


def _type_of(value: ir.Value | None) -> tuple[int, tuple | None] | None:
    if value is None or not isinstance(value.type, ir.TensorType):
        return None
    shape = None
    if value.shape is not None:
        shape = tuple(d if isinstance(d, int) else d.value for d in value.shape)
    return int(value.type.dtype), shape


def _attribute_value(attr: ir.Attr) -> Any:
    kind = attr.type
    value = attr.value
    if kind in (ir.AttributeType.INTS, ir.AttributeType.FLOATS, ir.AttributeType.STRINGS):
        return tuple(value)
    if kind is ir.AttributeType.TENSOR:
        return tensor_value(value)
    if kind is ir.AttributeType.TENSORS:
        return tuple(tensor_value(t) for t in value)
    if kind is ir.AttributeType.FLOAT:
        return float(value)
    if kind is ir.AttributeType.INT:
        return int(value)
    return value
