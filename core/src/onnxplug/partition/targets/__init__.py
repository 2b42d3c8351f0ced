"""Target planning: what TensorRT, DirectML, NNAPI (and CoreML) would run of a model, on any machine.

Each target's plugin publishes a :class:`CapabilityTable` (the vendor's support list as data:
ops, opset ranges or registered versions, element types, and the vendor's conditions as
:class:`Check` objects).  :func:`plan_for_target` runs the real optimizer, partitioner and planner
with that table standing in for the absent runtime's capability answer and returns a
:class:`TargetPlan`: the partitions, the copies and the declined nodes with their reasons.  It is a
plan, not an execution.  ``onnxplug partition MODEL --target T`` prints the same.

A table for a new target is one module of rows::

    from onnxplug.partition.targets import CapabilityTable, ConstantInput, InputRank, OpSupport, types

    TABLE = CapabilityTable(
        target="mytarget", provider="MyTargetExecutionProvider",
        source="vendor docs, version X (URL)",
        rows=[OpSupport("Conv", types=types("FP32"), checks=(InputRank(0, (4,), "2-D only"),
                                                          ConstantInput(1, "weights W")))],
    )

and the plugin's factory returns it from ``capability_table()`` (see :class:`PlannableFactory`).
"""

from ._plan import KNOWN_TARGETS, PlannableFactory, TargetPlan, check_usability, find_table, plan_for_target
from ._table import (
    AnyOf,
    AttributeIn,
    AttributeTest,
    CapabilityTable,
    Check,
    ConstantInput,
    ConstantValue,
    InputAbsent,
    InputRank,
    InputTypes,
    NoOutput,
    OpSupport,
    StaticInput,
    TableContext,
    table_claims,
    types,
)

__all__ = [
    "KNOWN_TARGETS",
    "AnyOf",
    "AttributeIn",
    "AttributeTest",
    "CapabilityTable",
    "Check",
    "ConstantInput",
    "ConstantValue",
    "InputAbsent",
    "InputRank",
    "InputTypes",
    "NoOutput",
    "OpSupport",
    "PlannableFactory",
    "StaticInput",
    "TableContext",
    "TargetPlan",
    "check_usability",
    "find_table",
    "plan_for_target",
    "table_claims",
    "types",
]
