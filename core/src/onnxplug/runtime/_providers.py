"""Turning the user's ``providers=`` argument into providers (onnxruntime's rules, §11).

* names may be onnxruntime's (``CPUExecutionProvider``) or the plugins' short ones (``cpu``);
* entries are names or ``(name, options)`` tuples, or names with ``provider_options``;
* a known provider without a device is dropped with a ``UserWarning``; an unknown name warns and
  is dropped too (onnxruntime falls back the same way, but prints to stdout);
* with fallback disabled both are errors;
* the order is the user's, CPU included where the user put it (appended last when not named),
  as onnxruntime's ``get_providers()`` reports it;
* with no ``providers``, ``ONNXPLUG_PROVIDERS=name,...`` names them, else every available
  provider is used in the order the ``onnxplug_select_providers`` hook gives (the core's
  default policy: ``ProviderFactory.priority``, highest first, CPU last).
"""

from __future__ import annotations

import functools
import inspect
import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from .._default_policy import CPU_NAME
from .._plugins import Environment, normalize_options
from ..api import Provider, ProviderContext, ProviderFactory
from ..errors import InvalidArgument

__all__ = ["ProviderRequest", "parse_providers", "create_providers", "CPU_NAME", "PROVIDERS_ENV"]

#: Environment variable naming the providers of sessions created without ``providers``.
PROVIDERS_ENV = "ONNXPLUG_PROVIDERS"

ProviderRequest = tuple[str, dict[str, str]]


def parse_providers(providers: Any, provider_options: Any) -> list[ProviderRequest]:
    """Normalise the ``providers`` / ``provider_options`` arguments.

    :raises InvalidArgument: a bare string, a malformed entry, or options of the wrong length
        (onnxruntime swallows these and falls back; silently running elsewhere helps nobody).
    """
    if providers is None:
        return []
    if isinstance(providers, (str, bytes)):
        raise InvalidArgument(f"providers must be a list of provider names, not the string {providers!r}")
    if not isinstance(providers, Sequence):
        raise InvalidArgument(f"providers must be a list or tuple, not {type(providers).__name__}")
    requests: list[ProviderRequest] = []
    for entry in providers:
        if isinstance(entry, str):
            requests.append((entry, {}))
        elif (
            isinstance(entry, (tuple, list))
            and len(entry) == 2
            and isinstance(entry[0], str)
            and isinstance(entry[1], Mapping)
        ):
            if provider_options is not None:
                raise InvalidArgument("'provider_options' cannot be given with (name, options) tuples in 'providers'")
            requests.append((entry[0], normalize_options(entry[1])))
        else:
            raise InvalidArgument(f"providers entry {entry!r} is neither a name nor a (name, options dict) tuple")
    if provider_options is not None:
        if not isinstance(provider_options, Sequence) or len(provider_options) != len(requests):
            raise InvalidArgument("'providers' and 'provider_options' must be lists of the same length")
        requests = [(name, normalize_options(opts)) for (name, _), opts in zip(requests, provider_options)]
    return requests


def select_factories(
    environment: Environment, requests: list[ProviderRequest], *, fallback: bool = True
) -> list[tuple[ProviderFactory, dict[str, str]]]:
    """The factories to use, in priority order: the user's (CPU appended when not named), or
    the default one when no provider was requested (providers with a negative priority —
    simulators, test devices — only ever run when named).

    :raises InvalidArgument: an unknown or unavailable provider when ``fallback`` is off.
    """
    if not requests:
        named = [name.strip() for name in os.environ.get(PROVIDERS_ENV, "").split(",") if name.strip()]
        if not named:
            return [
                (factory, {})
                for factory in environment.available_factories()
                if factory.priority >= 0 or factory.ort_name == CPU_NAME
            ]
        requests = [(name, {}) for name in named]
    chosen: list[tuple[ProviderFactory, dict[str, str]]] = []
    seen: set[str] = set()

    def available() -> list[str]:  # only for messages: asking every factory can be slow
        return [f.ort_name for f in environment.available_factories()]

    for name, options in requests:
        factory = environment.factory(name)
        if factory is None:
            message = (
                f"Specified provider '{name}' is not in available provider names. "
                f"Available providers: '{', '.join(available())}'{_install_hint(name)}"
            )
            if not fallback:
                raise InvalidArgument(f"Unknown Provider Type: {name}. {message}")
            warnings.warn(message + "; it is skipped.", UserWarning, stacklevel=4)
            continue
        if factory.ort_name in seen:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", UserWarning, stacklevel=4)
            continue
        if not environment.devices(factory):
            message = (
                f"Specified provider '{name}' is not in available provider names. "
                f"Available providers: '{', '.join(available())}' ({environment.unavailable_reason(factory)})"
            )
            if not fallback:
                raise InvalidArgument(message)
            warnings.warn(message, UserWarning, stacklevel=4)
            continue
        seen.add(factory.ort_name)
        chosen.append((factory, options))
    cpu = environment.factory(CPU_NAME)
    if cpu is not None and cpu.ort_name not in seen:
        chosen.append((cpu, {}))
    return chosen


def create_providers(
    environment: Environment,
    chosen: list[tuple[ProviderFactory, dict[str, str]]],
    context: ProviderContext | None = None,
) -> list[Provider]:
    """Instantiate each factory on its first device, passing ``context`` to factories whose
    ``create`` takes a ``context`` keyword (contract 1.1; older factories get two arguments)."""
    providers = []
    for factory, options in chosen:
        devices = environment.devices(factory)
        if context is not None and _takes_context(type(factory).create):
            provider = factory.create(devices[0], options, context=context)
        else:
            provider = factory.create(devices[0], options)
        provider.options = dict(options)
        providers.append(provider)
    return providers


@functools.cache
def _takes_context(create: Any) -> bool:
    try:
        parameters = inspect.signature(create).parameters
    except (TypeError, ValueError):
        return False
    return "context" in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


#: onnxruntime provider names of this repository's plugins → the extra that installs each.
_EXTRAS = {
    "CUDAExecutionProvider": "cuda13] or onnxplug[cuda12",
    "OpenVINOExecutionProvider": "openvino",
    "TensorrtExecutionProvider": "tensorrt",
    "DmlExecutionProvider": "directml",
    "NnapiExecutionProvider": "nnapi",
    "WasmExecutionProvider": "wasm",
}


def _install_hint(name: str) -> str:
    """`` (pip install onnxplug[X] installs it)`` for a provider whose plugin is not installed."""
    extra = _EXTRAS.get(name)
    return f" (its plugin is not installed: pip install onnxplug[{extra}])" if extra else ""
