"""The hooks an onnxplug plugin may implement.

A plugin is a module registered through an entry point in the ``onnxplug`` group (or in-process
with :meth:`onnxplug.Environment.register`).  It implements any of the hooks below with the
:data:`onnxplug.hookimpl` marker; the names and arguments are checked when it is registered.

Hooks run while an :class:`~onnxplug.Environment` or a session is being built, never per
inference: they hand over objects (factories, registries, schemas), and the objects do the work.
Each hook is called once per plugin, so the core can attribute every result (and every error)
to the distribution that produced it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import onnx.defs

    from .api import Provider, ProviderFactory
    from .kernels import KernelRegistry

PROJECT = "onnxplug"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

__all__ = ["PROJECT", "hookspec", "hookimpl"]


@hookspec
def onnxplug_provider_factories() -> Sequence[ProviderFactory]:
    """Return the execution-provider factories this plugin offers.

    The results of all plugins are collected.  A factory's ``name`` should equal the plugin's
    entry-point name (the contract kit checks it) and must be unique across plugins.

    Implemented by: provider plugins (cpu, openvino, cuda, ...).

    .. versionadded:: 0.1
    """


@hookspec
def onnxplug_kernels(provider: Provider) -> Sequence[KernelRegistry]:
    """Return kernel registries that ``provider`` may use.

    The results of all plugins are collected and merged; two registries defining the same
    ``(domain, op_type, since_version)`` for one provider is an error naming both plugins.
    Return an empty list for providers your kernels do not fit (check ``provider.name``).

    :param provider: the provider being set up for a session.

    Implemented by: kernel providers (cpu) for their own kernels, and op libraries
    (``com.microsoft`` ops, custom domains) that add kernels to a provider.

    .. versionadded:: 0.1
    """


@hookspec
def onnxplug_op_schemas() -> Sequence[onnx.defs.OpSchema]:
    """Return operator schemas for custom domains.

    The results of all plugins are collected and registered with ``onnx.defs`` before kernels
    are validated, so shape inference and the checker know the ops.  Two plugins declaring the
    same ``(domain, name, since_version)`` is an error naming both.

    Implemented by: op libraries.

    .. versionadded:: 0.1
    """


@hookspec
def onnxplug_rewrite_rules(stage: str) -> Sequence[Any]:
    """Return graph rewrite rule sets for an optimizer stage.

    The results of all plugins are collected.  Each rule set names the providers it targets
    (``None`` for portable rules).

    :param stage: the optimizer stage (``"basic"``, ``"extended"``, ``"layout"``).

    Implemented by: providers with fusions of their own, op libraries.

    .. versionadded:: 0.1
    """


@hookspec(firstresult=True)
def onnxplug_select_providers(candidates: Sequence[ProviderFactory], policy: str) -> Sequence[ProviderFactory] | None:
    """Order the available provider factories when the user names none.

    Stops at first non-None result.  The core's default policy (``ProviderFactory.priority``,
    highest first, CPU last) is itself registered as a plugin with ``trylast``, so it answers
    only when no other plugin does.  Return only factories from ``candidates``.

    :param candidates: available factories (with at least one device).
    :param policy: the selection policy name (``"default"``, ``"prefer_gpu"``...).

    Implemented by: policy plugins.

    .. versionadded:: 0.1
    """


@hookspec
def onnxplug_session_created(session: Any) -> None:
    """Notification that an :class:`~onnxplug.InferenceSession` is ready.

    :param session: the new session.

    Implemented by: observers (logging, telemetry, serving).

    .. versionadded:: 0.1
    """
