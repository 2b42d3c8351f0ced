"""The optimizer's rule gate, shared by the sessions that would build the same one.

Why: a gate answers, for each rule set, whether the session's first provider runs what the set
produces, looking each op's schema and kernel up; every session asked anew (a six-node model's
creation: ~28 µs of ~730).  Sessions of one Environment whose providers are the same and whose
first provider has the same kernel registries get the same answers, so they share one gate.

The key holds each registry's identity and, for the project's own registries, how many kernel
keys it has, so a registry that gained kernels makes a new gate; the gate keeps its answers with
the rule sets they are about (``RuleGate.why_not`` checks it is the same object), so a rule set
made again after a plugin registered is asked again.  Gates live as long as their Environment.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable

from .._plugins import Environment
from ..api import KernelLookup
from ..optimizer import RuleGate

__all__ = ["shared_gate"]

_GATES: weakref.WeakKeyDictionary[Environment, dict[tuple, RuleGate]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def shared_gate(environment: Environment, providers: Iterable[str], first: KernelLookup) -> RuleGate:
    """The gate of ``environment``'s sessions with ``providers`` (short names) whose first
    provider's kernels are ``first``."""
    registries = tuple((id(r), len(r.keys()) if hasattr(r, "keys") else -1) for r in first.registries)
    key = (frozenset(providers), registries)
    with _LOCK:
        gates = _GATES.setdefault(environment, {})
        gate = gates.get(key)
        if gate is None:
            gate = gates[key] = RuleGate(key[0], first.has)
    return gate
