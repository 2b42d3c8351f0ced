"""What compiling providers share when they translate a partition into a vendor's graph format.

A provider that compiles partitions into another representation (CoreML's MIL, NNAPI's operand
program, DirectML's graph description, ...) keeps a table of converters, one per op, and refuses
a node it cannot express with an error naming the node and the reason. Both pieces are the same
in every such provider, so they live here:

- :class:`Untranslatable`, an :class:`~onnxplug.errors.EPFail` whose message names the node;
  subclass it and set :attr:`~Untranslatable.target` to the runtime's name.
- :class:`ConverterRegistry`, the ``(domain, op_type) -> converter`` table with a ``converts``
  decorator, filled by the translator modules that define the converters.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import EPFail

__all__ = ["ConverterRegistry", "Untranslatable"]


class Untranslatable(EPFail):
    """A node (or a value) with no form in the target's representation.

    :ivar node: the node's name (or the value's, as given).
    :ivar reason: why it cannot be translated.
    """

    #: The target's name as messages give it ("CoreML", "NNAPI", ...).
    target = "the target"

    def __init__(self, node: Any, reason: str) -> None:
        self.node = getattr(node, "name", str(node))
        self.reason = reason
        where = f"node '{node.name}' ({node.op_type})" if hasattr(node, "op_type") else f"'{node}'"
        super().__init__(f"{self.target} cannot run {where}: {reason}")


class ConverterRegistry:
    """Converters by ``(domain, op_type)``; the default domain is ``""`` (``"ai.onnx"`` is
    normalised to it). Registration is explicit: a translator module registers with
    :meth:`converts` when it is imported."""

    def __init__(self) -> None:
        self._converters: dict[tuple[str, str], Callable[..., Any]] = {}

    def converts(self, *ops: str, domain: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering the function as the converter of ``ops`` in ``domain``."""
        key_domain = "" if domain == "ai.onnx" else domain

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            for op in ops:
                self._converters[(key_domain, op)] = fn
            return fn

        return register

    def get(self, domain: str, op_type: str) -> Callable[..., Any] | None:
        """The converter of ``op_type`` in ``domain``, or ``None``."""
        return self._converters.get(("" if domain == "ai.onnx" else domain, op_type))

    def keys(self) -> frozenset[tuple[str, str]]:
        """Every registered ``(domain, op_type)``."""
        return frozenset(self._converters)
