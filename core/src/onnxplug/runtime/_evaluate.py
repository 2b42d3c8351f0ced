"""Computing one node from constant inputs with the session's host kernels: the evaluator the
optimizer's constant folding is given, so a folded value is exactly what the node would compute
at run time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx_ir as ir

from ..graph import GraphView
from ..partition import ProviderSlot
from ._steps import NONE_SLOT, kernel_step

__all__ = ["KernelEvaluator"]


class KernelEvaluator:
    """Runs a node with the first host provider (no device memory) that has a kernel for it.

    :param slots: the session's providers with their kernels, in priority order.
    """

    def __init__(self, slots: Sequence[ProviderSlot]) -> None:
        self._slots = [slot for slot in slots if slot.provider.transfer() is None and slot.kernels]

    def __call__(
        self, node: ir.Node, opsets: Mapping[str, int], inputs: Sequence[np.ndarray | None]
    ) -> list[Any] | None:
        if node.graph is None:
            return None
        view = GraphView(node.graph, opsets, [node]).node(node.name)
        bindings = view.type_bindings()
        # The first host kernel that accepts the node's types, as capability would choose it
        # (a provider whose kernels take only floats must not fold an integer Div).
        found = next(
            (
                (slot, k)
                for slot in self._slots
                if (k := slot.kernels.resolve(view)) is not None and k.supports_types(bindings)
            ),
            None,
        )
        if found is None:
            return None
        slot, kernel = found
        slot_of = {id(v): i + 2 for i, v in enumerate(node.inputs) if v is not None}
        constants = {id(v): array for v, array in zip(node.inputs, inputs) if v is not None}
        outputs: list[int] = []

        def new_slot(value: ir.Value) -> int:
            outputs.append(len(outputs))
            return len(outputs) - 1

        step = kernel_step(node, kernel, slot.provider, 0, slot_of, new_slot, constants, opsets, _no_subgraphs)
        arguments = [None if i == NONE_SLOT else inputs[i - 2] for i in step.inputs]
        with np.errstate(all="ignore"):  # as during a run (see InferenceSession._execute)
            result = step.call(*arguments)
        return [result] if step.single else list(result)[: len(node.outputs)]


def _no_subgraphs(node: ir.Node, opsets: Mapping[str, int], outer: list[ir.Value]):
    def refuse(attribute: str) -> Any:
        raise ValueError("nodes with subgraphs are not folded")

    return refuse
