"""Developer and CI sessions.

``nox`` runs the CPU-only defaults (lint, tests, conformance); ``nox -s picture`` screenshots the
partition picture in headless Chromium; ``nox -s conformance`` runs every
conformance case, the slow light models included, and prints the (op, since_version) coverage
table; ``nox -s bench -- --providers openvino`` benchmarks a provider against its vendor library
and onnxruntime.  Extra arguments
after ``--`` go to pytest, e.g. ``nox -s tests -- -k partition``.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "tests", "conformance"]
nox.options.reuse_existing_virtualenvs = True

# The distributions of this repository, in install order.
DISTRIBUTIONS = [
    "./core",
    "./plugins/cpu",
    "./plugins/openvino",
    "./plugins/wasm",
    # the target providers (TensorRT's device memory is the CUDA provider's, so cuda comes first)
    "./plugins/cuda",
    "./plugins/tensorrt",
    "./plugins/directml",
    "./plugins/nnapi",
    "./plugins/coreml",
    "./contrib/virtual_device",
    "./contrib/ms_ops",
    "./contrib/example_textops",
    ".",
]


def _install_project(session: nox.Session) -> None:
    """Every distribution of the repository, editable, and the test requirements
    (onnxruntime among them: a test oracle only, never a runtime dependency)."""
    session.install(*[arg for dist in DISTRIBUTIONS for arg in ("-e", dist)], "-r", "requirements-test.txt")


@nox.session  # the interpreter nox runs on; another with `nox -s tests --force-python 3.12`
def tests(session: nox.Session) -> None:
    """Unit, partition, integration and conformance tests."""
    _install_project(session)
    session.run("pytest", *(session.posargs or ["-q", "--tb=short"]))


@nox.session
def conformance(session: nox.Session) -> None:
    """All ONNX conformance cases on the CPU provider, slow ones included, then coverage."""
    _install_project(session)
    session.run("pytest", "tests/conformance", "-m", "conformance", "-q", "--tb=line", *session.posargs)
    session.run("python", "scripts/op_coverage.py", "--missing")


@nox.session
def bench(session: nox.Session) -> None:
    """onnxplug with a provider vs the vendor library directly vs onnxruntime (scripts/bench.py),
    e.g. ``nox -s bench -- --providers openvino --layers 12``; prints a table of median latencies."""
    _install_project(session)
    session.run("python", "scripts/bench.py", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff over the sources and tests (configuration in pyproject.toml)."""
    session.install("ruff")
    session.run("ruff", "check", "core", "plugins", "contrib", "tests", "scripts", *session.posargs)


@nox.session
def picture(session: nox.Session) -> None:
    """The ``onnxplug partition --html`` picture in headless Chromium (screenshots of a light
    model and a BERT-sized graph); needs a ``chromium`` executable (``apt-get install -y chromium``),
    and skips naming it otherwise."""
    _install_project(session)
    session.run("pytest", "tests/cli/test_partition_picture.py", "-q", "-rs", *session.posargs)


@nox.session
def portability(session: nox.Session) -> None:
    """The WASM provider's kernel module replayed in Node and headless Chromium (Debian's
    chromium, npm playwright-core) against wasmtime; needs node, npm and chromium on PATH."""
    _install_project(session)
    session.run("npm", "ci", "--prefix", "plugins/wasm/js", "--no-audit", "--no-fund", external=True)
    session.run("pytest", "plugins/wasm/tests/test_portability.py", "-m", "portability", "-q", *session.posargs)


@nox.session
def ray(session: nox.Session) -> None:
    """The Ray tests (tests/serving/test_ray.py): a local cluster started by the tests, two Ray Serve
    replicas answering v2 requests and a Ray Data job; skipped by a plain ``pytest`` run."""
    _install_project(session)
    session.run("pytest", "tests/serving/test_ray.py", "-m", "ray", "-q", "-rs", *session.posargs)
