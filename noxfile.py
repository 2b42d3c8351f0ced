"""Developer and CI sessions.

``nox`` runs the CPU-only defaults (lint, tests, conformance); ``nox -s conformance`` runs every
conformance case, the slow light models included, and prints the (op, since_version) coverage
table.  Extra arguments
after ``--`` go to pytest, e.g. ``nox -s tests -- -k partition``.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests", "conformance"]
nox.options.reuse_existing_virtualenvs = True

# onnxruntime is a test oracle only, never a runtime dependency.
TEST_DEPS = ["pytest>=8", "onnxruntime", "tomli; python_version < '3.11'"]


def _install_project(session: nox.Session) -> None:
    """The core, the CPU provider and the umbrella distribution, editable."""
    session.install("-e", "./core", "-e", "./plugins/cpu", "-e", ".")


@nox.session  # the interpreter nox runs on; another with `nox -s tests --force-python 3.12`
def tests(session: nox.Session) -> None:
    """Unit, partition, integration and conformance tests."""
    _install_project(session)
    session.install(*TEST_DEPS)
    session.run("pytest", *(session.posargs or ["-q", "--tb=short"]))


@nox.session
def conformance(session: nox.Session) -> None:
    """All ONNX conformance cases on the CPU provider, slow ones included, then coverage."""
    _install_project(session)
    session.install(*TEST_DEPS)
    session.run("pytest", "tests/conformance", "-m", "conformance", "-q", "--tb=line", *session.posargs)
    session.run("python", "scripts/op_coverage.py", "--missing")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the sources and tests (configuration in pyproject.toml)."""
    session.install("ruff")
    session.run("ruff", "check", "core", "plugins", "tests", *session.posargs)
