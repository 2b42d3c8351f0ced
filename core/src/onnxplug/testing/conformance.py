"""ONNX's own test cases, run through onnxplug's public API: the conformance harness.

A vendor runs the node cases on its provider in three lines::

    from onnxplug.testing.conformance import load_cases, run_case, session_factory
    @pytest.mark.parametrize("case", load_cases(("node",)), ids=lambda c: c.name)
    def test_node_case(case): run_case(case, session_factory=session_factory(["MyExecutionProvider"]))

(``session_factory`` puts the CPU provider behind the named ones, so the nodes a provider does
not claim still run; a case that fails on the CPU provider alone is listed in this repository's
``plugins/cpu/tests/xfail.toml``, which :func:`load_expectations` reads.)  Our own conformance
suite (``tests/conformance``), the OpenVINO and CUDA plugins' suites and the coverage scripts use
this module, so everyone checks with the same logic.

Suites:

``node``
    ``onnx.backend.test.loader.load_model_tests(kind="node")``: the per-operator cases the
    installed onnx generates (in memory on recent onnx, as model folders on old ones).
``simple``, ``pytorch-converted``, ``pytorch-operator``
    model folders shipped in the onnx wheel (``model.onnx`` + ``test_data_set_*``).
``light``
    the "light" versions of the model zoo classics (resnet50, vgg19, ...) shipped in the wheel:
    weights come from ConstantOfShape, inputs are onnx's deterministic dummy data
    (``arange(n) / n``) and the expected output sits beside the model.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import onnx
import onnx.numpy_helper

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


__all__ = [
    "COVERAGE_DOMAINS",
    "Case",
    "Expectation",
    "FOLDER_SUITES",
    "PROVIDER",
    "RANDOM_OPS",
    "SUITES",
    "compare",
    "coverage",
    "function_keys",
    "load_cases",
    "load_expectations",
    "registered_keys",
    "run_case",
    "schema_keys",
    "session_factory",
]

#: Model suites shipped as folders in the onnx wheel.
FOLDER_SUITES = ("simple", "pytorch-converted", "pytorch-operator")
SUITES = ("node", *FOLDER_SUITES, "light")

#: Ops whose values are random: their cases are checked for output dtype and shape only (the
#: distributions are tested statistically in plugins/cpu/tests/test_random.py).
RANDOM_OPS = frozenset(
    {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"}
)

#: Domains whose every schema version counts towards (op, since_version) coverage.
COVERAGE_DOMAINS = ("", "ai.onnx.ml", "ai.onnx.preview.training")

PROVIDER = "CPUExecutionProvider"


@dataclasses.dataclass
class Case:
    """One test case of any suite.

    :ivar suite: one of :data:`SUITES`.
    :ivar name: onnx's case name (``test_abs``); unique within a suite.
    :ivar model: the ModelProto for in-memory cases, else ``None``.
    :ivar path: the model file for on-disk cases, else ``None``.
    :ivar data: in-memory ``[(inputs, outputs), ...]``, or ``None`` to read it from disk.
    :ivar data_dir: the folder holding ``test_data_set_*`` (on-disk cases).
    :ivar expected_files: for ``light`` cases, the expected output files.
    """

    suite: str
    name: str
    rtol: float
    atol: float
    model: onnx.ModelProto | None = None
    path: str | None = None
    data: list[tuple[list[Any], list[Any]]] | None = None
    data_dir: str | None = None
    expected_files: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """The pytest id: the case name, prefixed by its suite outside the node suite."""
        return self.name if self.suite == "node" else f"{self.suite}/{self.name}"

    @property
    def slow(self) -> bool:
        return self.suite == "light"

    def proto(self) -> onnx.ModelProto:
        """The model (read once for on-disk cases; weights are never external here)."""
        if self.model is None:
            self.model = onnx.load(self.path, load_external_data=False)
        return self.model

    def source(self) -> bytes | str:
        """What the session is built from: the file for on-disk cases, else serialized bytes."""
        return self.path if self.path is not None else self.proto().SerializeToString()

    def op_types(self) -> set[str]:
        """Op types anywhere in the model: main graph, subgraphs and local functions."""
        model = self.proto()
        found: set[str] = set()
        graphs: list[onnx.GraphProto] = [model.graph]
        nodes: list[onnx.NodeProto] = [n for f in model.functions for n in f.node]
        while graphs or nodes:
            if graphs:
                nodes.extend(graphs.pop().node)
                continue
            node = nodes.pop()
            found.add(node.op_type)
            for attr in node.attribute:
                if attr.HasField("g"):
                    graphs.append(attr.g)
                graphs.extend(attr.graphs)
        return found

    @property
    def random(self) -> bool:
        return bool(self.op_types() & RANDOM_OPS)

    def data_sets(self) -> list[tuple[list[Any], list[Any]]]:
        """``[(inputs, expected outputs), ...]`` with tensors as numpy arrays."""
        if self.data is not None:
            return [([_normalize(v) for v in ins], [_normalize(v) for v in outs]) for ins, outs in self.data]
        if self.suite == "light":
            return [(_dummy_inputs(self.proto()), [_read_tensor(f) for f in self.expected_files])]
        graph = self.proto().graph
        sets = []
        for folder in sorted(glob.glob(os.path.join(self.data_dir or "", "test_data_set_*"))):
            inputs = _read_values(folder, "input", graph.input)
            outputs = _read_values(folder, "output", graph.output)
            sets.append((inputs, outputs))
        return sets


def _normalize(value: Any) -> Any:
    if isinstance(value, onnx.TensorProto):
        return onnx.numpy_helper.to_array(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items()}
    return value


def _read_tensor(path: str) -> np.ndarray:
    tensor = onnx.TensorProto()
    with open(path, "rb") as handle:
        tensor.ParseFromString(handle.read())
    return onnx.numpy_helper.to_array(tensor)


def _read_values(folder: str, kind: str, infos: Iterable[onnx.ValueInfoProto]) -> list[Any]:
    """``input_<i>.pb`` / ``output_<i>.pb`` read as the i-th declared value's type says."""
    infos = list(infos)
    values = []
    count = len(glob.glob(os.path.join(folder, f"{kind}_*.pb")))
    for index in range(count):
        with open(os.path.join(folder, f"{kind}_{index}.pb"), "rb") as handle:
            data = handle.read()
        type_proto = infos[index].type if index < len(infos) else onnx.TypeProto()
        values.append(_parse_value(data, type_proto))
    return values


def _parse_value(data: bytes, type_proto: onnx.TypeProto) -> Any:
    kind = type_proto.WhichOneof("value")
    if kind == "sequence_type":
        sequence = onnx.SequenceProto()
        sequence.ParseFromString(data)
        return onnx.numpy_helper.to_list(sequence)
    if kind == "optional_type":
        optional = onnx.OptionalProto()
        optional.ParseFromString(data)
        return onnx.numpy_helper.to_optional(optional)
    if kind == "map_type":
        mapping = onnx.MapProto()
        mapping.ParseFromString(data)
        return onnx.numpy_helper.to_dict(mapping)
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    return onnx.numpy_helper.to_array(tensor)


def _dummy_inputs(model: onnx.ModelProto) -> list[np.ndarray]:
    """onnx's deterministic light-model inputs: float32 ``arange(n) / n``, unknown dims as 1."""
    initializers = {i.name for i in model.graph.initializer}
    inputs = []
    for info in model.graph.input:
        if info.name in initializers:
            continue
        dims = info.type.tensor_type.shape.dim
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in dims)
        size = int(np.prod(shape))
        inputs.append((np.arange(size).reshape(shape) / size).astype(np.float32))
    return inputs


# -- collecting cases ----------------------------------------------------------------------


def _onnx_data_dir() -> str:
    from onnx.backend.test import loader

    return loader.DATA_DIR


@functools.cache
def load_cases(suites: tuple[str, ...] = SUITES) -> tuple[Case, ...]:
    """Every case of the given suites, in onnx's order (loaded once per process)."""
    from onnx.backend.test.loader import load_model_tests

    cases: list[Case] = []
    for suite in suites:
        if suite == "light":
            cases.extend(_light_cases())
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the generators overflow on purpose (casts, logs)
            tests = load_model_tests(kind=suite)
        for test in tests:
            if test.model is not None:
                cases.append(Case(suite, test.name, test.rtol, test.atol, model=test.model, data=test.data_sets))
            else:
                model_dir = test.model_dir
                cases.append(
                    Case(
                        suite,
                        test.name,
                        test.rtol,
                        test.atol,
                        path=os.path.join(model_dir, "model.onnx"),
                        data_dir=model_dir,
                    )
                )
    return tuple(cases)


def _light_cases() -> list[Case]:
    from onnx.backend.test.case.model import collect_testcases

    prefix = "onnx/backend/test/data/light/"
    folder = os.path.join(_onnx_data_dir(), "light")
    cases = []
    for test in collect_testcases():
        if not (test.url or "").startswith(prefix):
            continue
        path = os.path.join(folder, os.path.basename(test.url))
        stem = os.path.splitext(path)[0]
        expected = tuple(sorted(glob.glob(f"{stem}_output_*.pb")))
        if os.path.exists(path) and expected:
            cases.append(Case("light", test.name, test.rtol, test.atol, path=path, expected_files=expected))
    return cases


# -- expectations (xfail.toml) -------------------------------------------------------------

_ENTRY_KEYS = frozenset({"reason", "rtol", "atol"})


@dataclasses.dataclass(frozen=True)
class Expectation:
    """A case's entry in xfail.toml: an expected failure (``reason``) and/or tolerances."""

    reason: str | None = None
    rtol: float | None = None
    atol: float | None = None


def load_expectations(path: str) -> dict[tuple[str, str], Expectation]:
    """Read ``xfail.toml``: node cases as top-level tables (``[test_abs]``), other suites as
    tables inside their suite's table (``["pytorch-converted".test_PReLU_2d]``).

    :raises ValueError: an entry with unknown keys, or a non-string reason.
    """
    if not os.path.exists(path):
        return {}
    with open(path, "rb") as handle:
        document = tomllib.load(handle)
    found: dict[tuple[str, str], Expectation] = {}
    for key, table in document.items():
        if key in SUITES and key != "node":
            entries = [(key, name, entry) for name, entry in table.items()]
        else:
            entries = [("node", key, table)]
        for suite, name, entry in entries:
            if not isinstance(entry, dict) or set(entry) - _ENTRY_KEYS:
                raise ValueError(f"{path}: entry [{name}] must be a table with keys among {sorted(_ENTRY_KEYS)}")
            reason = entry.get("reason")
            if reason is not None and not isinstance(reason, str):
                raise ValueError(f"{path}: [{name}] reason must be a string")
            found[(suite, name)] = Expectation(reason, entry.get("rtol"), entry.get("atol"))
    return found


# -- running and comparing -----------------------------------------------------------------


def run_case(case: Case, expectation: Expectation | None = None, *, session_factory: Any = None) -> None:
    """Build one session for the case and check every data set.

    :raises AssertionError: an output differs (the message names the output and how).
    Errors raised by the session itself propagate unchanged.
    """
    import onnxplug

    rtol = case.rtol if expectation is None or expectation.rtol is None else expectation.rtol
    atol = case.atol if expectation is None or expectation.atol is None else expectation.atol
    factory = session_factory or onnxplug.InferenceSession
    session = factory(case.source(), providers=[PROVIDER], enable_fallback=0)
    names = [arg.name for arg in session.get_inputs()]
    output_names = [arg.name for arg in session.get_outputs()]
    shape_only = case.random
    for index, (inputs, expected) in enumerate(case.data_sets()):
        feeds = dict(zip(names, inputs))
        got = session.run(None, feeds)
        if len(got) != len(expected):
            raise AssertionError(f"data set {index}: {len(got)} outputs, expected {len(expected)}")
        for position, (value, reference) in enumerate(zip(got, expected)):
            name = output_names[position] if position < len(output_names) else str(position)
            compare(value, reference, rtol, atol, where=f"output {position} ('{name}')", shape_only=shape_only)


_ML_FLOATS = ("bfloat16", "float8", "float4")
_ML_INTS = ("int4", "uint4", "int2", "uint2")


def compare(got: Any, expected: Any, rtol: float, atol: float, *, where: str, shape_only: bool = False) -> None:
    """Compare one output: sequences element-wise, ``None`` for an empty optional, dtype and
    shape always, values with tolerances for floats and exactly otherwise."""
    if expected is None:
        if got is not None:
            raise AssertionError(f"{where}: expected an empty optional (None), got {type(got).__name__}")
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)):
            raise AssertionError(f"{where}: expected a sequence, got {type(got).__name__}")
        if len(got) != len(expected):
            raise AssertionError(f"{where}: sequence of {len(got)} elements, expected {len(expected)}")
        for i, (g, e) in enumerate(zip(got, expected)):
            compare(g, e, rtol, atol, where=f"{where}[{i}]", shape_only=shape_only)
        return
    if isinstance(expected, Mapping):
        if not isinstance(got, Mapping):
            raise AssertionError(f"{where}: expected a map, got {type(got).__name__}")
        if sorted(got) != sorted(expected):
            raise AssertionError(f"{where}: map keys {sorted(got)}, expected {sorted(expected)}")
        for key in expected:
            compare(
                np.asarray(got[key]),
                np.asarray(expected[key]),
                rtol,
                atol,
                where=f"{where}[{key!r}]",
                shape_only=shape_only,
            )
        return
    expected = np.asarray(expected)
    if not isinstance(got, np.ndarray):
        raise AssertionError(f"{where}: expected a numpy array, got {type(got).__name__}")
    if got.dtype != expected.dtype:
        raise AssertionError(f"{where}: dtype {got.dtype}, expected {expected.dtype}")
    if got.shape != expected.shape:
        raise AssertionError(f"{where}: shape {got.shape}, expected {expected.shape}")
    if shape_only:
        return
    _compare_values(got, expected, rtol, atol, where)


def _compare_values(got: np.ndarray, expected: np.ndarray, rtol: float, atol: float, where: str) -> None:
    dtype_name = expected.dtype.name
    if expected.dtype == object:
        g = [v.decode("utf-8") if isinstance(v, bytes) else v for v in got.ravel().tolist()]
        e = [v.decode("utf-8") if isinstance(v, bytes) else v for v in expected.ravel().tolist()]
        mismatched = [i for i, (a, b) in enumerate(zip(g, e)) if a != b]
        if mismatched:
            i = mismatched[0]
            raise AssertionError(
                f"{where}: {len(mismatched)} of {len(e)} strings differ (first at flat index {i}: "
                f"{g[i]!r} vs expected {e[i]!r})"
            )
        return
    if dtype_name.startswith(_ML_INTS):
        got, expected = got.astype(np.int64), expected.astype(np.int64)
    elif dtype_name.startswith(_ML_FLOATS):
        if dtype_name == "bfloat16":
            rtol = max(rtol, 2**-6)  # two bfloat16 ulps, as onnx's own runner allows
        got, expected = got.astype(np.float32), expected.astype(np.float32)
    if expected.dtype.kind in "fc":
        try:
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as error:
            detail = " ".join(line.strip() for line in str(error).splitlines() if line.strip().startswith("Max"))
            raise AssertionError(f"{where}: values differ beyond rtol={rtol}, atol={atol}: {detail}") from None
        return
    if not np.array_equal(got, expected):
        bad = np.flatnonzero(got.ravel() != expected.ravel())
        i = int(bad[0])
        raise AssertionError(
            f"{where}: {bad.size} of {expected.size} values differ (first at flat index {i}: "
            f"{got.ravel()[i]!r} vs expected {expected.ravel()[i]!r})"
        )


# -- (op, since_version) coverage ----------------------------------------------------------


def schema_keys(domains: Iterable[str] = COVERAGE_DOMAINS) -> set[tuple[str, str, int]]:
    """``(domain, op, since_version)`` of every schema version onnx itself defines in ``domains``.

    Op-library plugins may register schemas into these domains at run time (the com.microsoft
    library adds ``LayerNormalization-1`` to the default domain, as onnxruntime does); those are
    told apart by having no source file and are not counted.
    """
    wanted = set(domains)
    schemas = [s for s in onnx.defs.get_all_schemas_with_history() if s.domain in wanted]
    builtin = [s for s in schemas if s.file not in ("", "unknown")]
    return {(s.domain, s.name, s.since_version) for s in (builtin or schemas)}


def registered_keys(provider_name: str = "cpu") -> set[tuple[str, str, int]]:
    """The kernel keys a provider's registries hold, found through the public plugin API."""
    import onnxplug

    environment = onnxplug.default_environment()
    factory = environment.factory(provider_name)
    if factory is None:
        return set()
    provider = factory.create(factory.devices()[0], {})
    try:
        keys = set()
        for registry in environment.kernel_registries(provider):
            for definition in registry:
                key = definition.key
                keys.add((key.domain, key.op_type, key.since_version))
        return keys
    finally:
        provider.close()


def function_keys(keys: Iterable[tuple[str, str, int]]) -> set[tuple[str, str, int]]:
    """Those schema keys that have a function body (they run by inlining without a kernel)."""
    found = set()
    for domain, op, version in keys:
        schema = onnx.defs.get_schema(op, version, domain)
        if schema.since_version == version and (schema.has_function or schema.has_context_dependent_function):
            found.add((domain, op, version))
    return found


def coverage() -> tuple[int, int]:
    """``(covered, total)`` schema versions for the CPU provider."""
    schemas = schema_keys()
    return len(schemas & registered_keys()), len(schemas)


def session_factory(providers: list[str], *, environment: Any = None) -> Any:
    """A ``session_factory`` for :func:`run_case` that runs every case with ``providers`` first
    and the CPU provider behind them."""
    import onnxplug

    chosen = [*providers, *([] if "CPUExecutionProvider" in providers else ["CPUExecutionProvider"])]

    def factory(source: Any, providers: Any = None, enable_fallback: int = 1) -> Any:
        return onnxplug.InferenceSession(source, providers=chosen, environment=environment)

    return factory
