"""Environment: plugin discovery, blocking, and what the plugins offer.

An :class:`Environment` owns a pluggy ``PluginManager``.  Nothing is loaded at import time:
entry points of the ``onnxplug`` group are loaded when an Environment is built, one by one, and
a plugin that fails to import (or breaks the hook signatures) is recorded with its distribution
and error and skipped, never stopping the others.

Environment variables:

``ONNXPLUG_BLOCK=name,...``
    entry-point names not to load.
``ONNXPLUG_DISABLE_PLUGIN_AUTOLOAD=1`` with ``ONNXPLUG_PLUGINS=name,...``
    load only the named entry points.

(``ONNXPLUG_PROVIDERS=name,...``, the providers a session uses when given none, is read by
:mod:`onnxplug.runtime._providers`.)
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.metadata
import importlib.util
import os
import threading
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

import pluggy

from . import _default_policy, hookspecs
from ._default_policy import CPU_NAME
from ._op_schemas import register_process_wide
from .api import ProviderFactory, api_version_problem
from .errors import Fail, PluginError
from .optimizer.rules import RuleSet

__all__ = ["Environment", "PluginRecord", "default_environment", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "onnxplug"


@dataclasses.dataclass
class PluginRecord:
    """What is known about one plugin: where it came from, and whether it loaded.

    :ivar name: the entry-point (or in-process registration) name.
    :ivar distribution: the distribution that declares it (``None`` for in-process plugins).
    :ivar version: that distribution's version.
    :ivar status: ``"loaded"``, ``"blocked"``, ``"not selected"`` or ``"failed"``.
    :ivar error: the failure, for ``"failed"``.
    :ivar factories: the provider factories it returned.
    """

    name: str
    distribution: str | None = None
    version: str | None = None
    status: str = "loaded"
    error: str | None = None
    factories: list[ProviderFactory] = dataclasses.field(default_factory=list)

    @property
    def source(self) -> str:
        if self.distribution:
            return f"{self.distribution} {self.version or ''}".strip()
        return "registered in-process"


def _env_list(name: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, "").split(",") if item.strip()]


class Environment:
    """The set of plugins a session draws providers, kernels and schemas from.

    :param autoload: load entry points (default: unless ``ONNXPLUG_DISABLE_PLUGIN_AUTOLOAD``).
    :param block: entry-point names to skip (default: ``ONNXPLUG_BLOCK``).
    :param only: load only these entry-point names (default: ``ONNXPLUG_PLUGINS`` when
        autoload is disabled).
    :param entry_points: the entry points to consider (default: the installed ``onnxplug``
        group); tests pass fakes here.
    """

    def __init__(
        self,
        *,
        autoload: bool | None = None,
        block: Iterable[str] | None = None,
        only: Iterable[str] | None = None,
        entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
    ) -> None:
        self._pm = pluggy.PluginManager(hookspecs.PROJECT)
        self._pm.add_hookspecs(hookspecs)
        # Built-in policies are plugins too; trylast lets any installed policy answer first.
        self._pm.register(_default_policy, name=_default_policy.PLUGIN_NAME)
        self._records: dict[str, PluginRecord] = {}
        self._factories: dict[str, ProviderFactory] = {}
        self._factory_owner: dict[str, str] = {}
        self._schema_owners: dict[tuple[str, str, int], str] = {}
        self._lock = threading.RLock()
        if autoload is None:
            autoload = os.environ.get("ONNXPLUG_DISABLE_PLUGIN_AUTOLOAD", "") in ("", "0")
        if only is None and not autoload:
            only = _env_list("ONNXPLUG_PLUGINS")
        blocked = set(_env_list("ONNXPLUG_BLOCK") if block is None else block)
        if entry_points is None:
            entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
        selected = None if only is None else set(only)
        self._entry_points = list(entry_points)
        self._settings = (blocked, selected)
        self._extended: dict[tuple, Environment] = {}
        self._rule_sets: dict[str, tuple[RuleSet, ...]] = {}
        # id(factory) -> (factory, devices, unavailable reason); see devices().
        self._devices: dict[int, tuple[ProviderFactory, list[Any], str]] = {}
        self._memories: list[Any] | None = None  # see memories()
        # Registry sets already checked for clashes, keyed by ((id, size) per registry, ...),
        # holding the registries so no id is reused: a session's providers ask for the same
        # registries every time.
        self._checked_registries: dict[tuple[tuple[int, int], ...], tuple[Any, ...]] = {}
        for entry_point in self._entry_points:
            self._load_entry_point(entry_point, blocked, selected)

    # -- loading ---------------------------------------------------------------------------

    def _load_entry_point(
        self, entry_point: importlib.metadata.EntryPoint, blocked: set[str], selected: set[str] | None
    ) -> None:
        dist = getattr(entry_point, "dist", None)
        # One parse of the distribution's metadata for both (``dist.name`` and ``dist.version``
        # each parse it: ~0.2 ms a plugin of a fresh process's first session).
        metadata = getattr(dist, "metadata", None) or {}
        record = PluginRecord(name=entry_point.name, distribution=metadata.get("Name"), version=metadata.get("Version"))
        if entry_point.name in self._records:
            record.status, record.error = "failed", f"entry point name '{entry_point.name}' is declared twice"
            self._records[f"{entry_point.name} ({record.distribution})"] = record
            return
        self._records[entry_point.name] = record
        if entry_point.name in blocked:
            record.status = "blocked"
            return
        if selected is not None and entry_point.name not in selected:
            record.status = "not selected"
            return
        try:
            plugin = entry_point.load()
        except Exception as error:  # noqa: BLE001 - a broken plugin must not break the others
            record.status, record.error = "failed", f"{type(error).__name__}: {error}"
            return
        self._register(plugin, record)

    def register(self, plugin: ModuleType | object, name: str | None = None) -> PluginRecord:
        """Register an in-process plugin (a module or object with ``@hookimpl`` functions).

        :raises PluginError: the name is taken, or the hooks do not match the hookspecs.
        """
        name = name or getattr(plugin, "__name__", None) or f"plugin-{id(plugin)}"
        with self._lock:
            if name in self._records and self._records[name].status == "loaded":
                raise PluginError(f"a plugin named '{name}' is already registered")
            record = PluginRecord(name=name)
            self._records[name] = record
            self._register(plugin, record)
            if record.status == "failed":
                raise PluginError(f"plugin '{name}' could not be registered: {record.error}")
            return record

    def with_libraries(self, libraries: Iterable[Any]) -> Environment:
        """This environment plus op libraries (``SessionOptions.register_custom_ops_library``).

        Each library is a module (or object) with hookimpls, a module name, the path of a
        ``.py`` file, or the entry-point or distribution name of an installed plugin (even a
        blocked or unselected one).  Environments are cached per set of libraries.

        :raises Fail: a library that cannot be found or loaded, or that implements no hook.
        """
        libraries = list(libraries)
        if not libraries:
            return self
        key = tuple(lib if isinstance(lib, str) else id(lib) for lib in libraries)
        with self._lock:
            cached = self._extended.get(key)
            if cached is not None:
                return cached
            blocked, selected = self._settings
            child = Environment(autoload=True, block=blocked, only=selected, entry_points=self._entry_points)
            for library in libraries:
                child._add_library(library)
            self._extended[key] = child
            return child

    def _add_library(self, library: Any) -> None:
        if not isinstance(library, str):
            name = getattr(library, "__name__", None) or f"library-{id(library)}"
            self._register_library(library, name)
            return
        matching = [
            ep for ep in self._entry_points if library in (ep.name, getattr(getattr(ep, "dist", None), "name", None))
        ]
        for entry_point in matching:
            record = self._records.get(entry_point.name)
            if record is not None and record.status == "loaded":
                continue
            self._records.pop(entry_point.name, None)
            self._load_entry_point(entry_point, set(), None)
            record = self._records[entry_point.name]
            if record.status != "loaded":
                raise Fail(f"Failed to load library {library} with error: {record.error}")
        if not matching:
            module = _import_library(library)
            self._register_library(module, getattr(module, "__name__", library))

    def _register_library(self, module: Any, name: str) -> None:
        if self._pm.is_registered(module):
            return
        try:
            self.register(module, name=name)
        except PluginError as error:
            raise Fail(f"Failed to load library {name} with error: {error}") from error
        if not self._pm.get_hookcallers(module):
            self._pm.unregister(module)
            self._records.pop(name, None)
            raise Fail(f"Failed to load library {name}: it implements no onnxplug hook (see onnxplug.hookspecs)")

    def _register(self, plugin: Any, record: PluginRecord) -> None:
        self._rule_sets.clear()  # a new plugin may contribute rules
        self._checked_registries.clear()  # ... and kernels
        try:
            self._pm.register(plugin, name=record.name)
        except Exception as error:  # noqa: BLE001 - pluggy validation errors, name clashes
            record.status, record.error = "failed", f"{type(error).__name__}: {error}"
            return
        unknown = sorted(c.name for c in self._pm.get_hookcallers(plugin) or () if c.spec is None)
        if unknown:
            self._pm.unregister(plugin)
            record.status = "failed"
            record.error = f"PluginError: implements unknown hooks {unknown} (see onnxplug.hookspecs)"
            return
        try:
            self._register_schemas(record)
            self._collect_factories(record)
        except Exception as error:  # noqa: BLE001 - a plugin whose hooks raise is unregistered
            self._pm.unregister(name=record.name)
            record.status, record.error = "failed", f"{type(error).__name__}: {error}"
            for ort_name in [n for n, owner in self._factory_owner.items() if owner == record.name]:
                self._factories.pop(ort_name, None)
                self._factory_owner.pop(ort_name, None)
            record.factories = []

    def _call_plugin(self, record: PluginRecord, hook_name: str, **kwargs: Any) -> list[Any]:
        hook = getattr(self._pm.hook, hook_name)
        results: list[Any] = []
        for impl in hook.get_hookimpls():
            if impl.plugin_name == record.name:
                results.extend(impl.function(**{k: kwargs[k] for k in impl.argnames}) or ())
        return results

    def _register_schemas(self, record: PluginRecord) -> None:
        owner = record.distribution or record.name
        for schema in self._call_plugin(record, "onnxplug_op_schemas"):
            key = (schema.domain, schema.name, schema.since_version)
            previous = self._schema_owners.get(key)
            if previous is not None and previous != owner:
                raise PluginError(
                    f"op schema {schema.domain}::{schema.name}-{schema.since_version} is declared "
                    f"by both '{previous}' and '{owner}'"
                )
            self._schema_owners[key] = owner
            register_process_wide(schema, {domain for domain, _, _ in self._schema_owners})

    def _collect_factories(self, record: PluginRecord) -> None:
        self._memories = None  # a new plugin may offer memories
        for factory in self._call_plugin(record, "onnxplug_provider_factories"):
            if not isinstance(factory, ProviderFactory):
                raise PluginError(f"onnxplug_provider_factories returned {factory!r}, not a ProviderFactory")
            problem = api_version_problem(factory.api_version)
            if problem is not None:
                raise PluginError(f"provider '{factory.name}' {problem}")
            for key in {factory.name, factory.ort_name}:
                if key in self._factories:
                    raise PluginError(f"provider name '{key}' is already taken by plugin '{self._factory_owner[key]}'")
            for key in {factory.name, factory.ort_name}:
                self._factories[key] = factory
                self._factory_owner[key] = record.name
            record.factories.append(factory)

    # -- queries ---------------------------------------------------------------------------

    @property
    def plugin_manager(self) -> pluggy.PluginManager:
        """The underlying pluggy manager (for hooks the core calls directly)."""
        return self._pm

    @property
    def plugins(self) -> list[PluginRecord]:
        """Every plugin considered, loaded or not, in discovery order."""
        return list(self._records.values())

    def factories(self) -> list[ProviderFactory]:
        """Every registered provider factory, highest priority first, CPU last (as onnxruntime
        lists its providers)."""
        unique = {id(f): f for f in self._factories.values()}.values()
        return sorted(unique, key=lambda f: (f.ort_name == CPU_NAME, -f.priority, f.name))

    def factory(self, name: str) -> ProviderFactory | None:
        """A factory by short name (``cpu``) or onnxruntime name (``CPUExecutionProvider``)."""
        return self._factories.get(name)

    def owner_of(self, factory: ProviderFactory) -> PluginRecord | None:
        owner = self._factory_owner.get(factory.name)
        return None if owner is None else self._records.get(owner)

    def devices(self, factory: ProviderFactory) -> list[Any]:
        """A factory's devices, asked once per Environment and remembered (with the reason when
        there are none): detection can be slow (a vendor library imported, a driver queried),
        and the answer does not change while the process runs.  Never raises.

        .. versionadded:: 0.2
        """
        key = id(factory)
        with self._lock:
            found = self._devices.get(key)
            if found is None or found[0] is not factory:
                devices = _safe_devices(factory)
                found = (factory, devices, "" if devices else _safe_reason(factory))
                self._devices[key] = found
        return list(found[1])

    def unavailable_reason(self, factory: ProviderFactory) -> str:
        """Why :meth:`devices` is empty for ``factory`` (``""`` when it has devices)."""
        self.devices(factory)
        return self._devices[id(factory)][2]

    def memories(self) -> list[Any]:
        """The device memories the factories offer, as ``DeviceMemory`` records (``transfer``,
        ``device_id``, ``factory_name``); each factory's ``memory()`` is asked once.

        .. versionadded:: 0.2
        """
        with self._lock:
            if self._memories is None:
                from .runtime._memories import environment_memories

                self._memories = environment_memories(self)
            return list(self._memories)

    def find_memory(self, device_name: str, device_id: int = 0) -> Any:
        """The :class:`~onnxplug.api.DataTransfer` of the device memory named ``device_name``
        (``"cuda"``, ``"virtual"``) on device ``device_id``.

        :raises InvalidArgument: no installed factory offers it (the message lists those that do).

        .. versionadded:: 0.2
        """
        from .runtime._memories import find_memory

        return find_memory(self, device_name, device_id)

    def available_factories(self, policy: str = "default") -> list[ProviderFactory]:
        """Factories that report at least one device, in the order the
        ``onnxplug_select_providers`` hook gives (by default: priority, CPU last).

        :raises PluginError: a policy returned a factory that is not among the candidates.
        """
        available = [f for f in self.factories() if self.devices(f)]
        chosen = self._pm.hook.onnxplug_select_providers(candidates=available, policy=policy)
        if chosen is None:  # only when the default policy was unregistered
            return available
        chosen = list(chosen)
        strangers = [f for f in chosen if all(f is not c for c in available)]
        if strangers:
            raise PluginError(f"onnxplug_select_providers returned {strangers}, which are not among the candidates")
        return chosen

    def kernel_registries(self, provider: Any) -> list[Any]:
        """The kernel registries every plugin offers ``provider``, checked for conflicts.

        :raises PluginError: two plugins define the same kernel key for this provider.
        """
        offered: list[tuple[str, Any]] = []
        for impl in self._pm.hook.onnxplug_kernels.get_hookimpls():
            record = self._records.get(impl.plugin_name)
            owner = (record.distribution if record else None) or impl.plugin_name
            offered.extend((owner, registry) for registry in impl.function(provider=provider) or ())
        for _, registry in offered:
            registry.validate()
        seen = tuple((id(registry), len(registry.keys())) for _, registry in offered)
        if seen not in self._checked_registries:
            owners: dict[Any, str] = {}
            for owner, registry in offered:
                for key in registry.keys():  # promised keys too: no deferred module is loaded
                    clash = owners.get(key)
                    if clash is not None and clash != owner:
                        raise PluginError(
                            f"kernel {key} for provider '{provider.name}' is defined by both '{clash}' and '{owner}'"
                        )
                    owners[key] = owner
            if len(self._checked_registries) >= 64:  # a plugin making registries per call
                self._checked_registries.clear()
            self._checked_registries[seen] = tuple(registry for _, registry in offered)
        return [registry for _, registry in offered]

    def rewrite_rules(self, stage: str) -> list[RuleSet]:
        """The rule sets every plugin contributes to an optimizer stage (``"basic"``,
        ``"extended"``, ``"layout"``), in plugin registration order; built once per stage.

        :raises PluginError: a plugin returned something that is not a RuleSet, or two plugins
            used the same rule-set name.
        """
        with self._lock:
            cached = self._rule_sets.get(stage)
            if cached is not None:
                return list(cached)
            found: list[RuleSet] = []
            owners: dict[str, str] = {}
            for impl in self._pm.hook.onnxplug_rewrite_rules.get_hookimpls():
                record = self._records.get(impl.plugin_name)
                owner = (record.distribution if record else None) or impl.plugin_name
                for rule_set in impl.function(stage=stage) or ():
                    if not isinstance(rule_set, RuleSet):
                        raise PluginError(
                            f"plugin '{owner}' returned {rule_set!r} from onnxplug_rewrite_rules; "
                            "expected onnxplug.optimizer.RuleSet objects"
                        )
                    clash = owners.get(rule_set.name)
                    if clash is not None:
                        raise PluginError(f"rule set '{rule_set.name}' is contributed by both '{clash}' and '{owner}'")
                    owners[rule_set.name] = owner
                    found.append(rule_set)
            self._rule_sets[stage] = tuple(found)
            return found

    def notify_session_created(self, session: Any) -> None:
        self._pm.hook.onnxplug_session_created(session=session)

    def describe(self) -> list[dict[str, Any]]:
        """One dict per plugin for ``onnxplug plugins``: source, status, providers, devices."""
        rows = []
        for record in self.plugins:
            providers = []
            for factory in record.factories:
                devices = self.devices(factory)
                providers.append(
                    {
                        "name": factory.name,
                        "ort_name": factory.ort_name,
                        "devices": [str(d) for d in devices],
                        "reason": self.unavailable_reason(factory),
                    }
                )
            rows.append(
                {
                    "name": record.name,
                    "source": record.source,
                    "status": record.status,
                    "error": record.error,
                    "providers": providers,
                }
            )
        return rows


def _import_library(spec: str) -> ModuleType:
    """Import an op library given as a module name or the path of a ``.py`` file."""
    if spec.endswith((".py", ".so", ".dll", ".dylib")) or os.sep in spec:
        if not os.path.isfile(spec):
            raise Fail(f"Failed to load library {spec} with error: no such file")
        if not spec.endswith(".py"):
            raise Fail(
                f"Failed to load library {spec}: onnxplug op libraries are Python plugins "
                "(a module with @onnxplug.hookimpl functions), not native libraries"
            )
        module_name = "onnxplug_library_" + os.path.splitext(os.path.basename(spec))[0]
        loader_spec = importlib.util.spec_from_file_location(module_name, spec)
        if loader_spec is None or loader_spec.loader is None:
            raise Fail(f"Failed to load library {spec}: not a loadable Python file")
        module = importlib.util.module_from_spec(loader_spec)
        try:
            loader_spec.loader.exec_module(module)
        except Exception as error:
            raise Fail(f"Failed to load library {spec} with error: {type(error).__name__}: {error}") from error
        return module
    try:
        return importlib.import_module(spec)
    except ImportError as error:
        raise Fail(
            f"Failed to load library {spec} with error: {error} (give an installed op-library plugin's "
            "entry-point or distribution name, a module name, or a .py file)"
        ) from error


def _safe_devices(factory: ProviderFactory) -> list[Any]:
    try:
        return list(factory.devices())
    except Exception:  # noqa: BLE001 - the contract says never raise; enforce it here
        return []


def _safe_reason(factory: ProviderFactory) -> str:
    try:
        return str(factory.unavailable_reason())
    except Exception as error:  # noqa: BLE001
        return f"devices() failed: {error}"


_DEFAULT_LOCK = threading.Lock()


@functools.cache
def _default() -> Environment:
    return Environment()


def default_environment() -> Environment:
    """The environment sessions use when given none: built on first use, then reused."""
    with _DEFAULT_LOCK:
        return _default()


def all_provider_names(environment: Environment) -> list[str]:
    """onnxruntime names of every registered provider, CPU last."""
    return [f.ort_name for f in environment.factories()]


def normalize_options(value: Mapping[str, Any] | None) -> dict[str, str]:
    """Provider options stringified as onnxruntime does (``str(k)``, ``str(v)``)."""
    return {str(k): str(v) for k, v in (value or {}).items()}
