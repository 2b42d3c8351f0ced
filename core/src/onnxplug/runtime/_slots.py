"""Value slots: every value of a graph gets an integer index into the list a run works on.

Slot 0 always holds ``None`` (a missing optional input reads it) and slot 1 is where unused
outputs are dropped.  Constants (initializers that no feed can replace) live in the template the
run list is copied from, so a run starts with them in place.
"""

from __future__ import annotations

from typing import Any

import onnx_ir as ir

from ._steps import DROP_SLOT, NONE_SLOT, tensor_value

__all__ = ["SlotTable"]


class SlotTable:
    """The slots of one graph plan.

    :ivar template: initial slot values (constants, defaults of overridable initializers).
    :ivar constants: ``id(value)`` → array, for kernels' ``NodeContext.constant()``.
    :ivar constant_values: ``id(value)`` → the initializer value (embedded in fused partitions).
    :ivar constant_slots: slot → array, for slots holding constants (placement copies them).
    :ivar names: slot → value name, for reports.
    """

    def __init__(self) -> None:
        self.template: list[Any] = [None, None]
        self._slot_of: dict[int, int] = {}
        self.names: dict[int, str] = {NONE_SLOT: "", DROP_SLOT: ""}
        self.constants: dict[int, Any] = {}
        self.constant_values: dict[int, ir.Value] = {}
        self.constant_slots: dict[int, Any] = {}

    def add(self, value: ir.Value) -> int:
        """A new slot for ``value``."""
        slot = len(self.template)
        self._slot_of[id(value)] = slot
        self.names[slot] = value.name or ""
        self.template.append(None)
        return slot

    def add_internal(self, name: str) -> int:
        """A new slot for a value of the plan's own (no graph value), named ``name`` in reports."""
        slot = len(self.template)
        self.names[slot] = name
        self.template.append(None)
        return slot

    def slot(self, value: ir.Value) -> int:
        return self._slot_of[id(value)]

    @property
    def slot_of(self) -> dict[int, int]:
        """``id(value)`` → slot (what step builders index by)."""
        return self._slot_of

    def add_initializers(self, graph: ir.Graph) -> None:
        """Slots for ``graph``'s initializers: defaults for those that are also inputs (a feed
        replaces them), constants for the others.  Inputs must have their slots already."""
        for value in graph.initializers.values():
            array = tensor_value(value.const_value)
            if id(value) in self._slot_of:
                self.template[self._slot_of[id(value)]] = array
                continue
            slot = self.add(value)
            self.template[slot] = array
            self.constants[id(value)] = array
            self.constant_values[id(value)] = value
            self.constant_slots[slot] = array
