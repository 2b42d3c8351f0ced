"""The ONNX → MIL translator: an ONNX partition in, a coremltools MIL program out.

coremltools 9 has no ONNX frontend any more, so this module builds the program itself with the
MIL builder (``coremltools.converters.mil.Builder``), one converter per ONNX op (``_ops.py``,
``_spatial.py``).  It runs on any machine: building, converting and saving ML Programs works on
Linux; only predicting needs macOS.  What it takes care of, as Core ML requires:

* **Static shapes.** Every value has a fixed shape (the capability table asks for static
  shapes; the translator infers the intermediate ones with ONNX shape inference), so Reshape,
  Expand and friends take the inferred output shape instead of a run-time shape tensor.
* **Types.** Core ML computes in fp32, fp16, int32 and bool.  int64 values (indices, shapes)
  become int32 inside the program; int64 and bool inputs and outputs are declared int32 (what an
  ML Program's multi-arrays hold) and the provider converts the arrays at the border
  (:class:`IOSpec` records the ONNX types).  float64 is refused.
* **Layout.** MIL's convolutions and pools are NCHW, as ONNX: no transposes are added.
* **Refusals.** A node MIL cannot express (non-constant Conv bias, a Resize mode without a MIL
  counterpart, dilated pooling...) raises :class:`Untranslatable` naming the node and the reason;
  :func:`declines` asks that of every node, so the provider declines them before partitioning
  and ``onnxplug convert`` lists them all.

With ``constant_inputs`` the partition's inputs become MIL constants: MIL computes many ops'
values for constant inputs in numpy (``value_inference``), which is how the translation is
checked numerically on machines that cannot predict.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from onnxplug import translation

__all__ = ["IOSpec", "Translation", "Untranslatable", "converters", "declines", "node_label", "translate"]

#: (domain, op) → converter(ctx, node); filled by ``_ops`` and ``_spatial`` through :func:`converts`.
_CONVERTERS = translation.ConverterRegistry()

#: ONNX element types → the MIL dtype a value of that type has inside the program.
_MIL_DTYPES = {
    onnx.TensorProto.FLOAT: "fp32",
    onnx.TensorProto.FLOAT16: "fp16",
    onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int32",  # narrowed: Core ML has no int64 arithmetic
    onnx.TensorProto.BOOL: "bool",
}
#: What an ML Program's inputs and outputs may be (multi-arrays): the rest crosses as int32.
_IO_DTYPES = {"fp32", "fp16", "int32"}


class Untranslatable(translation.Untranslatable):
    """A node (or a value) that has no MIL form; the message names it and says why."""

    target = "CoreML"


#: Registers a converter for ops (explicit registry: the module that defines it imports this).
converts = _CONVERTERS.converts


def converters() -> frozenset[tuple[str, str]]:
    """The (domain, op) pairs the translator handles."""
    from . import _ops, _spatial  # noqa: F401 - importing them registers the converters

    return _CONVERTERS.keys()


def mil():
    """``(Builder, Function, Program, target module)`` of coremltools, imported on first use so
    that discovering and planning never import coremltools (0.4 s, and 8 lines on stderr)."""
    import coremltools as ct
    from coremltools.converters.mil import Builder
    from coremltools.converters.mil.mil import Function, Program

    return Builder, Function, Program, ct.target


def attr(node: onnx.NodeProto, name: str, default: Any = None) -> Any:
    """The attribute's Python value (ints, floats, strings decoded, lists), or ``default``."""
    for attribute in node.attribute:
        if attribute.name == name:
            value = onnx.helper.get_attribute_value(attribute)
            if isinstance(value, bytes):
                return value.decode()
            if isinstance(value, list) and value and isinstance(value[0], bytes):
                return [v.decode() for v in value]
            return value
    return default


@dataclasses.dataclass(frozen=True)
class IOSpec:
    """One input or output of a built program: its ONNX name, the MIL name, the ONNX element
    type (``onnx.TensorProto`` code), the dtype it crosses the border in, and its shape."""

    onnx_name: str
    mil_name: str
    onnx_type: int
    io_dtype: str
    shape: tuple[int, ...]

    @property
    def numpy_dtype(self) -> np.dtype:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(self.onnx_type))

    @property
    def io_numpy_dtype(self) -> np.dtype:
        return np.dtype({"fp32": np.float32, "fp16": np.float16, "int32": np.int32}[self.io_dtype])


def _mil_name(name: str, taken: set[str]) -> str:
    """A MIL identifier for an ONNX value name (MIL names are C-like; ``input.1`` is not)."""
    base = re.sub(r"\W", "_", name) or "value"
    if base[0].isdigit():
        base = "v_" + base
    candidate, n = base, 1
    while candidate in taken:
        candidate, n = f"{base}_{n}", n + 1
    taken.add(candidate)
    return candidate


class Context:
    """The translation state: each ONNX value's MIL var, the constants, the inferred types and shapes."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.mb = mil()[0]
        graph = model.graph
        self.opsets = {o.domain or "": o.version for o in model.opset_import}
        overridable = {v.name for v in graph.input}  # an initializer a graph input overrides is not constant
        self.initializers = {
            t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer if t.name not in overridable
        }
        self.infos: dict[str, onnx.ValueInfoProto] = {}
        for info in [*graph.input, *graph.value_info, *graph.output]:
            self.infos.setdefault(info.name, info)
        self.vars: dict[str, Any] = {}
        self.folded: dict[str, np.ndarray] = {}  # Constant nodes' values

    # --- reading ONNX values ----------------------------------------------------------------

    def opset(self, node: onnx.NodeProto) -> int:
        return self.opsets.get("" if node.domain in ("", "ai.onnx") else node.domain, 1)

    def const(self, name: str) -> np.ndarray | None:
        """The value's data when it is a constant (an initializer or a Constant node), else ``None``."""
        if not name:
            return None
        if name in self.folded:
            return self.folded[name]
        return self.initializers.get(name)

    def elem_type(self, name: str, node: Any) -> int:
        const = self.const(name)
        if const is not None:
            return onnx.helper.np_dtype_to_tensor_dtype(const.dtype)
        info = self.infos.get(name)
        if info is None or not info.type.tensor_type.elem_type:
            raise Untranslatable(node, f"the element type of '{name}' is unknown")
        return info.type.tensor_type.elem_type

    def shape(self, name: str, node: Any) -> tuple[int, ...]:
        """The value's static shape (Core ML programs here have fixed shapes)."""
        const = self.const(name)
        if const is not None:
            return tuple(const.shape)
        info = self.infos.get(name)
        if info is None or not info.type.tensor_type.HasField("shape"):
            raise Untranslatable(node, f"the shape of '{name}' is unknown; the CoreML translator needs static shapes")
        dims = info.type.tensor_type.shape.dim
        if any(not d.HasField("dim_value") for d in dims):
            shown = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
            raise Untranslatable(node, f"'{name}' has dynamic dimensions {shown}; fix them first (--dim NAME=VALUE)")
        return tuple(int(d.dim_value) for d in dims)

    def rank(self, name: str, node: Any) -> int:
        return len(self.shape(name, node))

    def mil_dtype(self, name: str, node: Any) -> str:
        elem = self.elem_type(name, node)
        if elem not in _MIL_DTYPES:
            type_name = onnx.TensorProto.DataType.Name(elem).lower()
            raise Untranslatable(node, f"'{name}' is {type_name}, which Core ML has no tensor type for")
        return _MIL_DTYPES[elem]

    def np_type(self, name: str, node: Any) -> type:
        """The numpy type MIL holds the value in (constants next to it must match: MIL does not promote)."""
        return {"fp32": np.float32, "fp16": np.float16, "int32": np.int32, "bool": np.bool_}[self.mil_dtype(name, node)]

    # --- MIL vars -----------------------------------------------------------------------------

    def var(self, name: str, node: Any) -> Any:
        """The MIL var of an ONNX value (constants become ``const`` ops, made once)."""
        if name in self.vars:
            return self.vars[name]
        const = self.const(name)
        if const is None:
            raise Untranslatable(node, f"'{name}' is neither an input, a constant nor computed before it")
        self.mil_dtype(name, node)  # refuses float64 and friends by name
        self.vars[name] = self.mb.const(val=self.narrow(const, node, name))
        return self.vars[name]

    def narrow(self, data: np.ndarray, node: Any, name: str = "") -> np.ndarray:
        """A constant as Core ML holds it: int64 → int32 (refused when it does not fit)."""
        data = np.asarray(data)
        if data.dtype == np.int64:
            big = np.iinfo(np.int32)
            if data.size and (data.max() > big.max or data.min() < big.min):
                raise Untranslatable(node, f"constant '{name}' does not fit int32 (Core ML has no int64)")
            return data.astype(np.int32)
        if data.dtype == np.float64:
            return data.astype(np.float32)
        return data

    def set(self, name: str, var: Any) -> None:
        if name:
            self.vars[name] = var

    def required_const(self, node: onnx.NodeProto, index: int, what: str) -> np.ndarray | None:
        """Input ``index``'s constant value (``None`` when the input is absent); refused when it is computed."""
        name = node.input[index] if index < len(node.input) else ""
        if not name:
            return None
        value = self.const(name)
        if value is None:
            raise Untranslatable(node, f"{what} ('{name}') must be a constant; here it is computed at run time")
        return value


def infer(model: onnx.ModelProto | bytes) -> onnx.ModelProto:
    """The model with ONNX's inferred shapes (and data propagation for shape arithmetic)."""
    if isinstance(model, bytes):
        proto = onnx.load_model_from_string(model)
    else:
        proto = onnx.ModelProto()
        proto.CopyFrom(model)
    if proto.ir_version < 4:
        # Before IR 4 every initializer was listed as a graph input too; they are constants (as
        # the core and onnxruntime treat them), and shape inference needs IR 4 to see them so.
        constant_names = {t.name for t in proto.graph.initializer}
        kept = [info for info in proto.graph.input if info.name not in constant_names]
        del proto.graph.input[:]
        proto.graph.input.extend(kept)
        proto.ir_version = 4
    try:
        proto = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    except Exception:  # noqa: BLE001 - inference is best effort: a missing shape is refused later by name
        pass
    return proto


def prepare(model: onnx.ModelProto | bytes, rounds: int = 8) -> onnx.ModelProto:
    """The model with inferred shapes and its constant subgraphs folded into initializers.

    Exporters compute shapes at run time (``Shape`` → ``Gather`` → ``Range`` → ``Expand``...);
    with static input shapes all of that is constant, but ONNX shape inference does not see
    through every op.  So nodes whose inputs are all constant are computed (by MIL's value
    inference, or from the static shapes) and become initializers, and shapes are inferred
    again, until nothing more folds.
    """
    proto = infer(model)
    for position, node in enumerate(proto.graph.node):
        node.name = node_label(node, position)
    for _ in range(rounds):
        folded = _fold_once(proto)
        if not folded:
            break
        graph = proto.graph
        kept = [node for node in graph.node if not all(not o or o in folded for o in node.output)]
        del graph.node[:]
        graph.node.extend(kept)
        used = {name for node in kept for name in node.input} | {o.name for o in graph.output}
        existing = {t.name for t in graph.initializer}
        for name, value in folded.items():
            if name in used and name not in existing:
                graph.initializer.append(onnx.numpy_helper.from_array(value, name))
        del graph.value_info[:]
        proto = infer(proto)
    return proto


def _fold_once(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Output name → value, for the nodes computable now (all inputs constant), in their ONNX types."""
    mb, Function, _, targets = mil()
    ctx = Context(proto)
    folded: dict[str, np.ndarray] = {}
    with Function({}, opset_version=targets.iOS15):
        for node in proto.graph.node:
            shape_only = node.op_type in ("Shape", "Size") and node.domain in ("", "ai.onnx")
            if not shape_only and not all(not name or ctx.const(name) is not None for name in node.input):
                continue
            try:
                _convert(ctx, node)
            except Exception:  # noqa: BLE001 - not foldable here: the node is translated (or refused) later
                continue
            for name in node.output:
                if name and name in ctx.folded:
                    value = ctx.folded[name]
                    info = ctx.infos.get(name)
                    elem = info.type.tensor_type.elem_type if info is not None else 0
                    if elem:
                        value = value.astype(onnx.helper.tensor_dtype_to_np_dtype(elem))
                    elif value.dtype == np.int32:
                        value = value.astype(np.int64)  # MIL narrows; ONNX's shape tensors are int64
                    folded[name] = value
    return folded


def node_label(node: onnx.NodeProto, position: int) -> str:
    """The node's name, or ``OpType#position`` for an unnamed one (so every refusal names a node)."""
    return node.name or f"{node.op_type}#{position}"


def _convert(ctx: Context, node: onnx.NodeProto) -> None:
    """Add ``node``'s MIL ops; a node whose inputs are all constant becomes constants itself
    (MIL computes its value), so that what depends on it sees constants (Gemm's B, Reshape's shape)."""
    _convert_node(ctx, node)
    if all(not name or ctx.const(name) is not None for name in node.input):
        for name in node.output:
            var = ctx.vars.get(name)
            value = getattr(var, "val", None)
            if name and name not in ctx.folded and value is not None:
                ctx.folded[name] = np.asarray(value)


def _convert_node(ctx: Context, node: onnx.NodeProto) -> None:
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    if node.op_type == "Constant" and domain == "":
        ctx.folded[node.output[0]] = _constant_node_value(node)
        return
    converter = _CONVERTERS.get(domain, node.op_type)
    if converter is None:
        raise Untranslatable(node, "the translator has no MIL form for this op")
    converter(ctx, node)


def _constant_node_value(node: onnx.NodeProto) -> np.ndarray:
    attribute = node.attribute[0]
    if attribute.name == "value":
        return onnx.numpy_helper.to_array(attribute.t)
    value = onnx.helper.get_attribute_value(attribute)
    dtype = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64, "value_ints": np.int64}
    if attribute.name not in dtype:
        raise Untranslatable(node, f"Constant with {attribute.name} has no MIL form")
    return np.asarray(value, dtype[attribute.name])


@dataclasses.dataclass
class Translation:
    """What :func:`translate` built: the MIL program (or, with constant inputs, the outputs' vars)
    and the input/output specs in call order."""

    program: Any
    inputs: tuple[IOSpec, ...]
    outputs: tuple[IOSpec, ...]
    output_vars: tuple[Any, ...] = ()


def translate(
    model: onnx.ModelProto | bytes,
    inputs: Sequence[str] | None = None,
    outputs: Sequence[str] | None = None,
    *,
    target: str = "iOS15",
    constant_inputs: Mapping[str, np.ndarray] | None = None,
) -> Translation:
    """The MIL program computing ``outputs`` from ``inputs`` (default: the graph's) of ``model``.

    :param target: the deployment target whose MIL opset the program uses (``"iOS15"``...).
    :param constant_inputs: feed these values as MIL constants instead of declaring inputs (the
        numeric check on machines without Core ML: the output vars then carry ``.val``).
    :raises Untranslatable: a node with no MIL form, naming it and the reason.
    """
    converters()
    proto = prepare(model)
    graph = proto.graph
    if inputs is None:
        inputs = [v.name for v in graph.input]
    if outputs is None:
        outputs = [v.name for v in graph.output]
    mb, Function, Program, targets = mil()
    opset = getattr(targets, target)
    ctx = Context(proto)
    taken: set[str] = set()
    input_specs: list[IOSpec] = []
    placeholders = {}
    for name in inputs:
        mil_dtype = ctx.mil_dtype(name, name)
        io_dtype = mil_dtype if mil_dtype in _IO_DTYPES else "int32"
        spec = IOSpec(name, _mil_name(name, taken), ctx.elem_type(name, name), io_dtype, ctx.shape(name, name))
        input_specs.append(spec)
        if constant_inputs is None:
            placeholders[spec.mil_name] = mb.placeholder(shape=spec.shape, dtype=_mil_type(io_dtype))
    output_vars: list[Any] = []
    output_specs: list[IOSpec] = []
    with Function(placeholders, opset_version=opset) as function:
        for spec in input_specs:
            if constant_inputs is not None:
                if spec.onnx_name not in constant_inputs:
                    raise Untranslatable(spec.onnx_name, "has no value among the constant inputs")
                data = ctx.narrow(np.asarray(constant_inputs[spec.onnx_name], spec.numpy_dtype), spec.onnx_name)
                ctx.set(spec.onnx_name, mb.const(val=data))
                continue
            var = function.inputs[spec.mil_name]
            if ctx.mil_dtype(spec.onnx_name, spec.onnx_name) != spec.io_dtype:
                var = mb.cast(x=var, dtype=ctx.mil_dtype(spec.onnx_name, spec.onnx_name))
            ctx.set(spec.onnx_name, var)
        for node in graph.node:
            _convert(ctx, node)
        for name in outputs:
            mil_dtype = ctx.mil_dtype(name, name)
            var = ctx.var(name, name)
            io_dtype = mil_dtype if mil_dtype in _IO_DTYPES else "int32"
            if io_dtype != mil_dtype:
                var = mb.cast(x=var, dtype=io_dtype)
            elif constant_inputs is None and (var.op is None or var.op.op_type == "const" or var in output_vars):
                var = mb.identity(x=var)  # an output must be computed by an op of its own
            spec = IOSpec(name, _mil_name(name, taken), ctx.elem_type(name, name), io_dtype, ctx.shape(name, name))
            if constant_inputs is None:
                var.name = spec.mil_name  # the name the ML Program's output gets
            output_vars.append(var)
            output_specs.append(spec)
        if constant_inputs is None:
            function.set_outputs(output_vars)
    program = None
    if constant_inputs is None:
        program = Program()
        program.add_function("main", function)
    return Translation(program, tuple(input_specs), tuple(output_specs), tuple(output_vars))


def _mil_type(io_dtype: str):
    from coremltools.converters.mil.mil import types

    return {"fp32": types.fp32, "fp16": types.fp16, "int32": types.int32, "bool": types.bool}[io_dtype]


def declines(
    model: onnx.ModelProto | bytes, names: Iterable[str] | None = None, *, target: str = "iOS15"
) -> dict[str, str]:
    """Node name → reason, for the nodes (all, or ``names``) the translator cannot express.

    Each node is translated alone, its non-constant inputs taken as placeholders of their
    inferred shapes, so the answer does not depend on how the nodes are later grouped.
    """
    converters()
    proto = prepare(model)
    mb, Function, _, targets = mil()
    opset = getattr(targets, target)
    wanted = None if names is None else set(names)
    refused: dict[str, str] = {}
    for node in proto.graph.node:
        label = node.name  # prepare() named the unnamed ones
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            continue
        if wanted is not None and label not in wanted:
            continue
        ctx = Context(proto)
        try:
            placeholders = {}
            for name in node.input:
                if name and ctx.const(name) is None and name not in placeholders:
                    placeholders[name] = mb.placeholder(
                        shape=ctx.shape(name, node), dtype=_mil_type(ctx.mil_dtype(name, node))
                    )
            mil_names = {name: f"input_{i}" for i, name in enumerate(placeholders)}
            with Function({mil_names[n]: p for n, p in placeholders.items()}, opset_version=opset) as function:
                for name, mil_name in mil_names.items():
                    ctx.set(name, function.inputs[mil_name])
                _convert(ctx, node)
                for name in node.output:
                    if name:
                        ctx.var(name, node)
                        ctx.mil_dtype(name, node)
        except Untranslatable as error:
            refused[label] = error.reason
        except Exception as error:  # noqa: BLE001 - MIL's own type checks: a refusal with its words
            refused[label] = f"the MIL builder refused it: {type(error).__name__}: {error}"
    return refused
