"""Every hookspec is documented in docs/hooks.md and exercised by a test."""

from __future__ import annotations

import inspect
import pathlib

from onnxplug import hookspecs

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _hookspecs():
    return [(n, f) for n, f in vars(hookspecs).items() if n.startswith("onnxplug_") and callable(f)]


def test_every_hook_is_in_docs():
    text = (ROOT / "docs" / "hooks.md").read_text()
    for name, fn in _hookspecs():
        params = ", ".join(inspect.signature(fn).parameters)
        assert f"`{name}({params})`" in text, f"{name}({params}) missing from docs/hooks.md"


def test_every_hookspec_has_a_docstring_with_versionadded():
    for name, fn in _hookspecs():
        assert fn.__doc__ and ".. versionadded::" in fn.__doc__, name
