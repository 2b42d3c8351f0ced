"""Graph inputs and outputs: NodeArg, ModelMetadata, and feed checking.

Everything a feed is checked against (dtype, rank, fixed dims) is computed once per session;
``check_feeds`` only compares.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ..errors import InvalidArgument
from ..graph import element_name, np_dtype, onnx_element_type, shape_list, type_string

__all__ = ["NodeArg", "ModelMetadata", "InputSpec", "FeedChecker", "check_feeds", "input_specs", "fresh_outputs"]

INT64_MAX = 9223372036854775807
# The symbols onnx shape inference invents for dims it cannot name (``unk__0``...).  onnxruntime
# reports such dims as ``None``; a model declaring a dim of that very name is read the same way.
_INVENTED_DIM = re.compile(r"unk__\d+")


class NodeArg:
    """A graph input or output: ``name``, ``type`` (``tensor(float)``...) and ``shape``."""

    __slots__ = ("name", "type", "shape")

    def __init__(self, name: str, type: str, shape: list) -> None:  # noqa: A002 - onnxruntime's name
        self.name = name
        self.type = type
        self.shape = shape

    def __str__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NodeArg) and (self.name, self.type, self.shape) == (
            other.name,
            other.type,
            other.shape,
        )

    __hash__ = None  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class ModelMetadata:
    """``get_modelmeta()``: onnxruntime's fields (an unset model_version reads INT64_MAX)."""

    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict[str, str]

    @classmethod
    def from_proto(cls, model: onnx.ModelProto) -> ModelMetadata:
        return cls(
            producer_name=model.producer_name,
            graph_name=model.graph.name,
            domain=model.domain,
            description=model.doc_string,
            graph_description=model.graph.doc_string,
            version=model.model_version if model.HasField("model_version") else INT64_MAX,
            custom_metadata_map={p.key: p.value for p in model.metadata_props},
        )


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """What a feed for one input must look like."""

    name: str
    type_string: str
    kind: str  # tensor, sequence, map, optional
    dtype: np.dtype | None  # tensors only
    rank: int | None
    dims: tuple[int | None, ...]  # None for free dims
    optional: bool  # may be omitted (optional type or overridable initializer)

    @functools.cached_property
    def fixed_shape(self) -> tuple[int, ...] | None:
        """The one shape a feed may have when every dim is fixed (the check's fast path)."""
        if self.rank is None or any(d is None for d in self.dims):
            return None
        return tuple(self.dims)

    def node_arg(self, shape: list) -> NodeArg:
        return NodeArg(self.name, self.type_string, shape)


def _spec(
    info: onnx.ValueInfoProto, optional: bool, overrides: Mapping[str, int], denotations: Mapping[str, int]
) -> tuple[InputSpec, list]:
    type_proto = info.type
    kind = {
        "tensor_type": "tensor",
        "sequence_type": "sequence",
        "map_type": "map",
        "optional_type": "optional",
        "sparse_tensor_type": "sparse",
    }.get(type_proto.WhichOneof("value") or "", "tensor")
    shape = shape_list(type_proto)
    shape = [overrides.get(d, d) if isinstance(d, str) else d for d in shape]
    if denotations and type_proto.WhichOneof("value") == "tensor_type":
        for index, dim in enumerate(type_proto.tensor_type.shape.dim):
            if dim.denotation in denotations and not dim.HasField("dim_value"):
                shape[index] = denotations[dim.denotation]
    dtype = rank = None
    dims: tuple[int | None, ...] = ()
    if kind == "tensor":
        tensor = type_proto.tensor_type
        try:
            dtype = np_dtype(tensor.elem_type)
        except ValueError:
            dtype = None
        if tensor.HasField("shape"):
            rank = len(tensor.shape.dim)
            dims = tuple(d if isinstance(d, int) else None for d in shape)
    spec = InputSpec(info.name, type_string(type_proto), kind, dtype, rank, dims, optional or kind == "optional")
    return spec, shape


def input_specs(
    graph: onnx.GraphProto,
    overrides: Mapping[str, int],
    denotations: Mapping[str, int] | None = None,
    overridable_initializers: bool = True,
) -> tuple[list[InputSpec], list[NodeArg], list[NodeArg]]:
    """Specs for every feedable input; NodeArgs for ``get_inputs`` and
    ``get_overridable_initializers`` (inputs that are also initializers).

    :param overrides: free dimension values by ``dim_param`` name.
    :param denotations: free dimension values by denotation (``DATA_BATCH``...).
    :param overridable_initializers: whether initializers listed as inputs can be fed (IR >= 4).
    """
    initializers = {t.name for t in graph.initializer}
    specs, inputs, overridable = [], [], []
    for info in graph.input:
        if info.name in initializers and not overridable_initializers:
            continue
        spec, shape = _spec(info, info.name in initializers, overrides, denotations or {})
        specs.append(spec)
        (overridable if info.name in initializers else inputs).append(spec.node_arg(shape))
    return specs, inputs, overridable


def output_args(graph: onnx.GraphProto, inferred: Mapping[str, onnx.ValueInfoProto]) -> list[NodeArg]:
    """NodeArgs for ``get_outputs``: the inferred type and shape where inference knows more;
    dims inference could not name are ``None``, as onnxruntime reports them."""
    args = []
    for info in graph.output:
        best = info
        declared = info.type.tensor_type
        richer = inferred.get(info.name)
        if richer is not None and info.type.WhichOneof("value") in (None, "tensor_type"):
            if not declared.HasField("shape") or info.type.WhichOneof("value") is None:
                best = richer
        shape = [None if isinstance(d, str) and _INVENTED_DIM.fullmatch(d) else d for d in shape_list(best.type)]
        args.append(NodeArg(info.name, type_string(best.type), shape))
    return args


def _decoded(name: str, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidArgument(f"input '{name}': a string element is not valid UTF-8 ({error})") from None


def _as_strings(spec: InputSpec, value: np.ndarray) -> np.ndarray:
    """A feed for a string input as an object array of ``str``, element by element the way
    onnxruntime reads it:

    * ``U`` arrays: the strings;
    * ``S`` arrays (fixed-width bytes): each item up to its first NUL, decoded as UTF-8;
    * ``V`` arrays (``np.void``, what ML.NET-exported pipelines are fed): each item's bytes,
      NULs included, decoded as UTF-8;
    * object arrays: ``str()`` of each element -- so ``b"a"`` becomes ``"b'a'"`` and ``1``
      becomes ``"1"``, as onnxruntime does.

    Bytes that are not UTF-8 are refused (onnxruntime raises UnicodeDecodeError).
    """
    kind = value.dtype.kind
    if kind == "U":
        return value.astype(object)
    out = np.empty(value.shape, dtype=object)
    flat, items = out.reshape(-1), value.reshape(-1)
    if kind == "S":
        for i, item in enumerate(items.tolist()):
            flat[i] = _decoded(spec.name, item.split(b"\0", 1)[0])
    elif kind == "V":
        for i, item in enumerate(items):
            flat[i] = _decoded(spec.name, item.tobytes())
    else:
        for i, item in enumerate(items.tolist()):
            flat[i] = item if type(item) is str else str(item)
    return out


def _as_array(spec: InputSpec, value: Any) -> Any:
    """A feed converted the way onnxruntime converts it: lists to the expected dtype, string
    feeds to object arrays of ``str`` (:func:`_as_strings`), OrtValues to their array."""
    if hasattr(value, "_onnxplug_value"):
        value = value._onnxplug_value()
    if spec.kind != "tensor":
        return value
    wants_strings = spec.dtype == np.dtype(object)
    if isinstance(value, np.ndarray):
        if wants_strings and (value.dtype.kind in "USV" or value.dtype == object):
            return _as_strings(spec, value)
        if value.dtype.kind in "US":
            return value.astype(object)
        return value
    if isinstance(value, (list, tuple)):
        try:
            array = np.asarray(value, dtype=spec.dtype)
        except (TypeError, ValueError) as error:
            raise InvalidArgument(
                f"input '{spec.name}': cannot convert the list to {spec.type_string}: {error}"
            ) from None
        return _as_strings(spec, array) if wants_strings else array
    if np.isscalar(value) and not isinstance(value, (float, int, bool, str)):
        return np.asarray(value)
    raise InvalidArgument(
        f"input '{spec.name}': unable to handle object of type {type(value)}; expected a numpy array, "
        f"a list or an OrtValue holding {spec.type_string}"
    )


def check_feeds(specs: Sequence[InputSpec], feeds: Any) -> dict[str, Any]:
    """Validate and convert the caller's feeds (in onnxruntime's order of checks); see
    :class:`FeedChecker`, which a session builds once for its inputs."""
    return FeedChecker(specs)(feeds)


class FeedChecker:
    """The feed checks of one set of inputs, with their name index built once (the per-run
    work is then one dict lookup per feed: a small model's ``run()`` costs a few microseconds,
    and rebuilding the index each time was a sixth of it)."""

    __slots__ = ("_by_name", "_required", "_accepted")

    def __init__(self, specs: Sequence[InputSpec]) -> None:
        self._by_name = {s.name: s for s in specs}
        self._required = tuple(s.name for s in specs if not s.optional)
        # Per tensor input, a (dtype, shape) known to pass: an array of exactly that dtype
        # object and shape needs no other test (numpy shares one dtype object per builtin
        # type).  Inputs whose every dim is fixed start with theirs; the others remember the
        # last shape that passed the full checks (a batch of one is fed again and again, and
        # the checks cost a single-row tree model's run a tenth of its time).
        self._accepted = {
            s.name: (s.dtype, s.fixed_shape)
            for s in specs
            if s.kind == "tensor" and s.fixed_shape is not None and s.dtype is not None and s.dtype != object
        }

    def __call__(self, feeds: Any) -> dict[str, Any]:
        """The checked feeds.

        :raises InvalidArgument: missing, unknown, ``None``, wrong dtype, rank or fixed dim; the
            message names the input and what was expected.
        """
        if type(feeds) is not dict and not isinstance(feeds, Mapping):
            raise InvalidArgument(f"input_feed must be a dict of input name to value, not {type(feeds).__name__}")
        by_name = self._by_name
        accepted = self._accepted
        for name in self._required:
            if name not in feeds:
                missing = [n for n in self._required if n not in feeds]
                raise InvalidArgument(f"Required inputs ({missing}) are missing from input feed ({list(feeds)}).")
        checked: dict[str, Any] = {}
        for name, value in feeds.items():
            expected = accepted.get(name)
            if (
                expected is not None
                and type(value) is np.ndarray
                and value.dtype is expected[0]
                and value.shape == expected[1]
            ):
                if value.flags.writeable:
                    value = value.view()
                    value.setflags(write=False)  # kernels may not write into the caller's array
                checked[name] = value
                continue
            spec = by_name.get(name)
            if spec is None:
                raise InvalidArgument(f"Invalid input name: {name} (the model's inputs are {list(by_name)})")
            if value is None:
                if spec.kind == "optional":
                    checked[name] = None
                    continue
                raise InvalidArgument(f"input '{name}' is None; expected {spec.type_string}")
            # An array already of the declared (non-string) dtype needs no conversion: the fast path.
            if (
                type(value) is not np.ndarray
                or spec.kind != "tensor"
                or value.dtype != spec.dtype
                or value.dtype == object
            ):
                value = _as_array(spec, value)
            if spec.kind == "tensor":
                if value.dtype != spec.dtype or value.shape != spec.fixed_shape:
                    _check_tensor(spec, value)
                    if value.dtype is spec.dtype and spec.dtype != object:
                        accepted[name] = (spec.dtype, value.shape)
                if value.flags.writeable:
                    value = value.view()
                    value.setflags(write=False)  # kernels may not write into the caller's array
            checked[name] = value
        return checked


def _check_tensor(spec: InputSpec, value: np.ndarray) -> None:
    check_tensor_type(spec, tuple(value.shape), value.dtype)


def check_tensor_type(spec: InputSpec, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Raise onnxruntime's errors for a tensor feed of ``dtype`` and ``shape`` that ``spec``
    does not accept (a device feed is described by its memory, not read)."""
    if spec.dtype is not None and dtype != spec.dtype:
        actual = element_name(_elem_of(dtype))
        raise InvalidArgument(
            f"Unexpected input data type for input '{spec.name}'. Actual: (tensor({actual})) , "
            f"expected: ({spec.type_string})"
        )
    if spec.rank is None:
        return
    if len(shape) != spec.rank:
        raise InvalidArgument(
            f"Invalid rank for input: {spec.name} Got: {len(shape)} Expected: {spec.rank} "
            f"Please fix either the inputs/outputs or the model."
        )
    bad = [(i, got, want) for i, (got, want) in enumerate(zip(shape, spec.dims)) if want is not None and got != want]
    if bad:
        detail = " ".join(f"index: {i} Got: {got} Expected: {want}" for i, got, want in bad)
        raise InvalidArgument(f"Got invalid dimensions for input: {spec.name} for the following indices {detail}")


def _elem_of(dtype: np.dtype) -> int:
    elem = onnx_element_type(dtype)
    return -1 if elem is None else elem


def fresh_outputs(values: Sequence[Any]) -> list[Any]:
    """Outputs that alias nothing the caller or the session holds, everything writable and
    C-contiguous.

    Feeds reach kernels as read-only views and constants are read-only, so an output that is a
    feed, a constant or a view of either is caught by its flags (or its ``base``) and copied, as
    is an array returned twice; arrays the kernels made fresh are handed over as they are.
    """
    seen: set[int] = set()
    result = []
    for value in values:
        if isinstance(value, np.ndarray):
            flags = value.flags
            if value.base is not None or id(value) in seen or not flags.writeable or not flags.c_contiguous:
                value = np.array(value, copy=True, order="C")
            seen.add(id(value))
        elif isinstance(value, np.generic):
            value = np.asarray(value).copy()
        elif isinstance(value, list):
            value = [np.array(v, copy=True) if isinstance(v, np.ndarray) else v for v in value]
        result.append(value)
    return result
