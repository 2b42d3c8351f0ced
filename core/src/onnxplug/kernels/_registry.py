"""KernelRegistry and the ``@kernel`` decorator.

A registry is an object owned by a plugin; the decorator writes into it, nothing is found by
introspection.  Kernels are keyed by ``(domain, op_type, since_version)`` and matched exactly
against the schema that the model's opset selects, so one function registered with
``since=(6, 13, 14)`` serves exactly those three schema versions and nothing in between is guessed.

Two kinds of kernel:

* a plain kernel is called on every run with the node's inputs as positional arrays and its
  attributes as keyword arguments (schema defaults filled in)::

      registry = KernelRegistry("cpu")

      @registry.kernel("Relu", since=(6, 13, 14))
      def relu(x):
          return np.maximum(x, x.dtype.type(0))

* a kernel factory (``factory=True``) is called once per node when the session is created, with a
  :class:`NodeContext` and the attributes, and returns the callable used on every run.  That is
  where attribute-only work, weight prepacking and subgraph compilation belong::

      @registry.kernel("Conv", since=(11,), factory=True)
      def conv(ctx, *, auto_pad, dilations, group, kernel_shape, pads, strides):
          weights = ctx.constant(1)          # prepack when the weights are constant
          return lambda x, w, b=None: ...

Both are checked against ``onnx.defs`` when they are registered: the since versions must exist,
and every keyword-only parameter must be an attribute of the schema (and every attribute a
parameter, unless the kernel takes ``**attrs``), so a typo fails at import, naming the kernel.

A registry spread over many modules need not import them all before the first session: a plugin
that declares which ops each module registers (:meth:`KernelRegistry.defer_modules`) has a
module imported the first time one of its ops is looked up.  Importing every kernel module of
the CPU provider took about 30 ms of a fresh process's first session, while a model usually
needs a handful of them.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import onnx

from ..errors import PluginError
from ._schema import (
    STANDARD_DOMAINS,
    attribute_defaults,
    find_schema,
    normalize_domain,
    schema_versions,
)

__all__ = ["KernelKey", "KernelDef", "KernelRegistry", "NodeContext"]


class KernelKey(NamedTuple):
    """``(domain, op_type, since_version)`` with the default domain spelled ``""``.

    A named tuple: hashed and compared in C (a frozen dataclass's hash is a Python call, and
    each session's creation looks up keys a few hundred times)."""

    domain: str
    op_type: str
    since_version: int

    def __str__(self) -> str:
        return f"{self.domain or 'ai.onnx'}::{self.op_type}-{self.since_version}"


class NodeContext:
    """What a kernel factory may know about its node when the session is created.

    :param name: the node's (unique) name.
    :param op_type: the op type.
    :param domain: the op's domain (``""`` for the default one).
    :param since_version: the schema version the model's opset selected.
    :param opsets: the model's opset imports, ``{domain: version}``.
    :param num_inputs: how many formal inputs the node has (missing optional ones included).
    :param num_outputs: how many outputs the node declares.
    :param outputs_used: for each output, whether anything consumes it.
    :param input_types: per input, ``(elem_type, shape)`` when known (shape: tuple of ints,
        strings or ``None``; ``None`` for an unranked input), else ``None``.
    :param constants: per input, the value when it is a constant initializer, else ``None``.
    :param compile_subgraph: the runtime's callback that turns a graph attribute into a
        :class:`~onnxplug.runtime.SubgraphRunner`.
    :param num_outer_inputs: values from enclosing scopes that the node's subgraphs read;
        the built callable receives them after the formal inputs.
    """

    def __init__(
        self,
        *,
        name: str,
        op_type: str,
        domain: str,
        since_version: int,
        opsets: dict[str, int],
        num_inputs: int,
        num_outputs: int,
        outputs_used: Sequence[bool] = (),
        input_types: Sequence[tuple[int, tuple | None] | None] = (),
        constants: Sequence[Any] = (),
        compile_subgraph: Callable[[str], Any] | None = None,
        num_outer_inputs: int = 0,
    ) -> None:
        self.name = name
        self.op_type = op_type
        self.domain = domain
        self.since_version = since_version
        self.opsets = dict(opsets)
        self.num_inputs = num_inputs
        self.num_outputs = num_outputs
        self.outputs_used = tuple(outputs_used) or (True,) * num_outputs
        self.input_types = tuple(input_types)
        self._constants = tuple(constants)
        self._compile_subgraph = compile_subgraph
        self.num_outer_inputs = num_outer_inputs

    def constant(self, index: int) -> Any:
        """The value of input ``index`` if it is a constant (an initializer that cannot be
        overridden by a feed), else ``None``."""
        if 0 <= index < len(self._constants):
            return self._constants[index]
        return None

    def subgraph(self, attribute: str) -> Any:
        """The compiled runner of a graph attribute (If branches, Loop/Scan bodies)."""
        if self._compile_subgraph is None:
            raise PluginError(f"node '{self.name}' ({self.op_type}) has no subgraph compiler")
        return self._compile_subgraph(attribute)

    def describe(self) -> str:
        """``"node 'name' (OpType)"``, for error messages."""
        return f"node '{self.name}' ({self.op_type})"


@dataclasses.dataclass(frozen=True)
class KernelDef:
    """One registered kernel: its key, function and how to call it."""

    key: KernelKey
    fn: Callable[..., Any]
    factory: bool
    host_inputs: tuple[int, ...]
    types: dict[str, frozenset[str]] | None
    registry: str
    accepts_any_attribute: bool
    attribute_names: frozenset[str]

    def build(self, ctx: NodeContext, attributes: dict[str, Any]) -> Callable[..., Any]:
        """The per-run callable for one node.

        :param ctx: the node's context.
        :param attributes: the node's own attribute values (schema defaults are added here).
        """
        values = dict(attribute_defaults(self.key.op_type, self.key.since_version, self.key.domain))
        values.update(attributes)
        if not self.accepts_any_attribute:
            values = {k: v for k, v in values.items() if k in self.attribute_names}
        if self.factory:
            return self.fn(ctx, **values)
        if not values:
            return self.fn
        fn = self.fn

        def call(*inputs: Any) -> Any:
            return fn(*inputs, **values)

        return call

    def supports_types(self, bindings: dict[str, str]) -> bool:
        """Whether the kernel accepts the given type-constraint bindings
        (``{"T": "tensor(float)"}``); kernels that declare no ``types`` accept the schema's."""
        if self.types is None:
            return True
        return all(t in self.types.get(param, frozenset((t,))) for param, t in bindings.items())


class KernelRegistry:
    """A plugin's table of kernels, keyed by ``(domain, op_type, since_version)``.

    :param name: the registry's name, used in error messages (usually the plugin's).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._kernels: dict[KernelKey, KernelDef] = {}
        self._deferred: list[KernelDef] = []
        # (domain, op_type) -> the loader that registers its kernels, until it has run.
        self._pending: dict[tuple[str, str], Callable[[], object]] = {}
        # Every key registered or promised by a deferred loader; see keys().
        self._keys: set[KernelKey] = set()
        self._keys_view: frozenset[KernelKey] | None = None
        self._load_lock = threading.RLock()

    def kernel(
        self,
        op_type: str,
        *,
        since: Iterable[int],
        domain: str = "",
        factory: bool = False,
        host_inputs: Iterable[int] = (),
        types: dict[str, Iterable[str]] | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator registering ``fn`` for ``op_type`` at each schema version in ``since``.

        :param op_type: the ONNX op type.
        :param since: the exact ``since_version`` values this function implements.
        :param domain: the op's domain (``""`` or ``"ai.onnx"`` for the default).
        :param factory: ``fn(ctx, **attrs)`` returns the per-run callable (see module doc).
        :param host_inputs: input indices that must stay in host memory (shape tensors).
        :param types: optional narrowing of type constraints, ``{"T": ["tensor(float)"]}``.
        :raises PluginError: a version that does not exist, a duplicate, or a signature that
            does not match the schema.
        """
        domain = normalize_domain(domain)
        versions = tuple(sorted(set(since)))
        if not versions:
            raise PluginError(f"{self.name}: kernel for {op_type} names no since versions")
        narrowed = None if types is None else {k: frozenset(v) for k, v in types.items()}

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            signature = inspect.signature(fn)
            params = list(signature.parameters.values())
            keyword_only = frozenset(p.name for p in params if p.kind is p.KEYWORD_ONLY)
            var_keyword = any(p.kind is p.VAR_KEYWORD for p in params)
            for version in versions:
                definition = KernelDef(
                    key=KernelKey(domain, op_type, version),
                    fn=fn,
                    factory=factory,
                    host_inputs=tuple(host_inputs),
                    types=narrowed,
                    registry=self.name,
                    accepts_any_attribute=var_keyword,
                    attribute_names=keyword_only,
                )
                if definition.key in self._kernels:
                    raise PluginError(
                        f"{self.name}: {definition.key} registered twice "
                        f"({self._kernels[definition.key].fn.__qualname__} and {fn.__qualname__})"
                    )
                if find_schema(op_type, version, domain) is None and domain not in STANDARD_DOMAINS:
                    self._deferred.append(definition)  # its schema comes from an op library
                else:
                    _check_against_schema(self.name, definition, params)
                self._kernels[definition.key] = definition
                self._add_key(definition.key)
            return fn

        return register

    def validate(self) -> None:
        """Check the kernels whose schemas were not known when they were registered.

        The Environment calls this after op-library schemas are registered.
        """
        self._validate(only_known=False)

    def _validate(self, *, only_known: bool) -> None:
        pending, self._deferred = self._deferred, []
        for definition in pending:
            key = definition.key
            if only_known and find_schema(key.op_type, key.since_version, key.domain) is None:
                self._deferred.append(definition)  # still waiting for its op library's schema
                continue
            params = list(inspect.signature(definition.fn).parameters.values())
            _check_against_schema(self.name, definition, params)

    def defer(self, keys: Iterable[KernelKey], load: Callable[[], object]) -> None:
        """Promise the kernels ``keys`` that calling ``load`` registers; ``load`` runs the first
        time one of their ops is looked up, or when the whole registry is listed.

        :param keys: every kernel ``load`` registers (one it registers without being promised
            stays unknown until something else triggers ``load``).
        :param load: registers the kernels, usually by importing a module.  It runs once
            (again only after it raised), but its module may have been imported by other code
            first, so it must be idempotent (imports are).
        """
        with self._load_lock:
            for key in keys:
                self._pending.setdefault((key.domain, key.op_type), load)
                self._add_key(key)

    def defer_modules(self, package: str, index: Mapping[str, Mapping[str, Mapping[str, Iterable[int]]]]) -> None:
        """:meth:`defer` for kernel modules: ``index`` maps each module of ``package`` to the
        since versions it registers per domain and op type,
        ``{"activation": {"": {"Relu": (6, 13, 14), ...}}}``.

        Keep the index true with :meth:`index_modules` (a plugin's tests compare the two).
        """
        for module, by_domain in index.items():
            keys = [
                KernelKey(normalize_domain(domain), op_type, version)
                for domain, by_op in by_domain.items()
                for op_type, versions in by_op.items()
                for version in versions
            ]
            self.defer(keys, functools.partial(importlib.import_module, f"{package}.{module}"))

    def _add_key(self, key: KernelKey) -> None:
        if key not in self._keys:  # a deferred module registering what it promised changes nothing
            self._keys.add(key)
            self._keys_view = None

    def index_modules(self, package: str, modules: Iterable[str]) -> dict[str, dict[str, dict[str, tuple[int, ...]]]]:
        """Import ``modules`` of ``package`` in order and say which kernels each one registered
        (since versions per domain and op type): the index :meth:`defer_modules` takes.  Run it in a process
        that has imported none of them (a plugin's test does, in a subprocess).

        :raises RuntimeError: one of the modules is imported already.
        """
        modules = list(modules)
        imported = sorted(m for m in modules if f"{package}.{m}" in sys.modules)
        if imported:
            raise RuntimeError(f"{package}: {imported} are imported already: index the modules in a fresh process")
        found: dict[str, dict[str, dict[str, list[int]]]] = {module: {} for module in modules}
        for module in modules:
            before = set(self._kernels)
            loaded = set(sys.modules)
            importlib.import_module(f"{package}.{module}")
            # Listed modules that this import pulled in keep the kernels defined in them, so
            # that a lookup imports no more than the op's own module.
            pulled_in = {m for m in modules if f"{package}.{m}" in sys.modules and f"{package}.{m}" not in loaded}
            for key in sorted(set(self._kernels) - before):
                home = self._kernels[key].fn.__module__.rpartition(".")[2]
                owner = home if home in pulled_in else module
                found[owner].setdefault(key.domain, {}).setdefault(key.op_type, []).append(key.since_version)
        index = {
            module: {
                domain: {op: tuple(versions) for op, versions in sorted(by_op.items())}
                for domain, by_op in sorted(by_domain.items())
            }
            for module, by_domain in found.items()
        }
        return index

    def _load(self, op: tuple[str, str]) -> None:
        if op not in self._pending:
            return
        with self._load_lock:
            load = self._pending.get(op)
            if load is None:
                return
            # Taken out first, so that a loader looking kernels up does not run itself again.
            ops = [key for key, pending in self._pending.items() if pending is load]
            for key in ops:
                del self._pending[key]
            try:
                load()
            except BaseException:
                for key in ops:
                    self._pending.setdefault(key, load)
                raise
            # What the module registered before its op library's schemas were known is checked
            # now where they are, and otherwise by the Environment's next validate().
            self._validate(only_known=True)

    def load_all(self) -> None:
        """Run every deferred loader (listing the registry does this)."""
        while self._pending:
            self._load(next(iter(self._pending)))

    def keys(self) -> frozenset[KernelKey]:
        """Every kernel key registered or promised by a deferred loader; nothing is loaded (the
        Environment compares plugins' keys for clashes with it)."""
        view = self._keys_view
        if view is None:
            view = self._keys_view = frozenset(self._keys)
        return view

    def lookup(self, domain: str, op_type: str, since_version: int) -> KernelDef | None:
        """The kernel for an exact schema version, or ``None`` (a deferred loader for the op
        runs first)."""
        key = KernelKey(normalize_domain(domain), op_type, since_version)
        found = self._kernels.get(key)
        if found is None and self._pending:
            self._load((key.domain, op_type))
            found = self._kernels.get(key)
        return found

    def __iter__(self) -> Iterator[KernelDef]:
        self.load_all()
        return iter(sorted(self._kernels.values(), key=lambda d: d.key))

    def __len__(self) -> int:
        self.load_all()
        return len(self._kernels)

    def __bool__(self) -> bool:
        return bool(self._keys)

    def __contains__(self, key: object) -> bool:
        self.load_all()
        return key in self._kernels

    def __repr__(self) -> str:
        return f"KernelRegistry({self.name!r}, {len(self._kernels)} kernels loaded, {len(self._keys)} known)"


def _check_against_schema(registry: str, definition: KernelDef, params: list[inspect.Parameter]) -> None:
    key = definition.key
    where = f"{registry}: kernel {definition.fn.__qualname__} for {key}"
    schema = find_schema(key.op_type, key.since_version, key.domain)
    if schema is None or schema.since_version != key.since_version:
        known = schema_versions(key.op_type, key.domain)
        raise PluginError(
            f"{where}: onnx has no such schema version; versions of {key.op_type} are {known or 'none (unknown op)'}"
        )
    attributes = set(schema.attributes)
    keyword_only = {p.name: p for p in params if p.kind is p.KEYWORD_ONLY}
    unknown = sorted(set(keyword_only) - attributes)
    if unknown:
        raise PluginError(
            f"{where}: keyword-only parameters {unknown} are not attributes of the schema; "
            f"its attributes are {sorted(attributes)}"
        )
    if not definition.accepts_any_attribute:
        missing = sorted(attributes - set(keyword_only))
        if missing:
            raise PluginError(
                f"{where}: the schema's attributes {missing} are not keyword-only parameters "
                "(accept them, or take **attrs to ignore them deliberately)"
            )
    defaults = attribute_defaults(key.op_type, key.since_version, key.domain)
    for name, param in keyword_only.items():
        if param.default is param.empty or name not in defaults:
            continue
        if not _same_default(param.default, defaults[name]):
            raise PluginError(
                f"{where}: attribute {name!r} defaults to {param.default!r} in Python but to "
                f"{defaults[name]!r} in the schema"
            )
    if definition.factory:
        return
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
    last = schema.inputs[-1] if schema.inputs else None
    schema_variadic = last is not None and last.option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    if schema_variadic and not variadic:
        raise PluginError(f"{where}: the op's last input is variadic; the kernel needs *inputs")
    if not schema_variadic and not variadic and len(positional) < len(schema.inputs):
        raise PluginError(
            f"{where}: the schema has {len(schema.inputs)} inputs "
            f"({[i.name for i in schema.inputs]}), the kernel takes {len(positional)}"
        )
    required = sum(1 for p in positional if p.default is p.empty)
    if required > schema.min_input:
        raise PluginError(
            f"{where}: {required} positional inputs have no default but only "
            f"{schema.min_input} are required by the schema (give optional inputs a default)"
        )


def _same_default(python_value: Any, schema_value: Any) -> bool:
    if isinstance(schema_value, tuple):
        return tuple(python_value) == schema_value if isinstance(python_value, (list, tuple)) else False
    if isinstance(schema_value, float) and isinstance(python_value, (int, float)):
        return abs(float(python_value) - schema_value) <= 1e-7 * max(1.0, abs(schema_value))
    try:
        return bool(python_value == schema_value)
    except (TypeError, ValueError):
        return False
