"""pytest wiring of the conformance suite: parametrization, expected failures, the summary.

Cases come from ``_harness.py`` (on pytest's ``pythonpath``: this folder is not a package).  Expected
failures live in ``plugins/cpu/tests/xfail.toml`` and are strict: a listed case that passes
fails the run, so the list cannot go stale.  The light models are marked ``slow`` (the whole nine
take about ten seconds today), so ``-m "not slow"`` leaves them out of a quick run.

``ONNXPLUG_CONFORMANCE_IGNORE_XFAIL=1`` runs every case as if xfail.toml were empty
(``scripts/gen_xfail.py`` uses it to regenerate the list).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import _harness as harness
import pytest

XFAIL_FILE = harness.XFAIL_FILE

# Which argument of a test function receives which suites' cases.
_ARGUMENTS = {
    "node_case": ("node",),
    "model_case": harness.FOLDER_SUITES,
    "light_case": ("light",),
}


def _expectations() -> dict:
    if os.environ.get("ONNXPLUG_CONFORMANCE_IGNORE_XFAIL", "") not in ("", "0"):
        return {}
    return _read_expectations(str(XFAIL_FILE))


@functools.cache
def _read_expectations(path: str) -> dict:
    return harness.load_expectations(path)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for argument, suites in _ARGUMENTS.items():
        if argument not in metafunc.fixturenames:
            continue
        expectations = _expectations()
        params = []
        for case in harness.load_cases():
            if case.suite not in suites:
                continue
            marks = [pytest.mark.conformance]
            if case.slow:
                marks.append(pytest.mark.slow)
            expectation = expectations.get((case.suite, case.name))
            if expectation is not None and expectation.reason is not None:
                marks.append(pytest.mark.xfail(strict=True, reason=expectation.reason))
            params.append(pytest.param(case, id=case.id, marks=marks))
        metafunc.parametrize(argument, params)


@pytest.fixture
def expectation(request: pytest.FixtureRequest):
    """The case's xfail.toml entry (tolerance overrides), or ``None``."""
    for argument in _ARGUMENTS:
        if argument in request.fixturenames:
            case = request.getfixturevalue(argument)
            return _expectations().get((case.suite, case.name))
    return None


@pytest.fixture(scope="session")
def conformance_harness():
    return harness


@pytest.fixture(scope="session")
def xfail_file() -> Path:
    return XFAIL_FILE


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tag each case's reports with its suite, for the summary line and scripts/gen_xfail.py."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is None:
            continue
        for argument in _ARGUMENTS:
            case = callspec.params.get(argument)
            if case is not None:
                item.user_properties.append(("conformance_suite", case.suite))


# -- the summary line ----------------------------------------------------------------------

_OUTCOMES: dict[str, dict[str, str]] = {}


def _suite_of(report: pytest.TestReport) -> str | None:
    for key, value in report.user_properties:
        if key == "conformance_suite":
            return value
    return None


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    suite = _suite_of(report)
    if suite is None:
        return
    outcomes = _OUTCOMES.setdefault(suite, {})
    if report.when == "call" or (report.when == "setup" and not report.passed):
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "failed"
        elif report.skipped:
            outcome = "skipped"
        else:
            outcome = report.outcome
        outcomes[report.nodeid] = outcome


def _counts(outcomes: dict[str, str]) -> dict[str, int]:
    counts = {"passed": 0, "xfailed": 0, "failed": 0, "skipped": 0}
    for outcome in outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def pytest_terminal_summary(terminalreporter) -> None:
    if not _OUTCOMES:
        return
    write = terminalreporter.write_line
    try:
        covered, total = harness.coverage()
        coverage = f"{covered} of {total}"
    except Exception as error:  # noqa: BLE001 - the summary must not hide the test results
        coverage = f"unavailable ({type(error).__name__}: {error})"
    node = _counts(_OUTCOMES.get("node", {}))
    ran = sum(node.values())
    write(
        f"conformance: {node['passed']} passed, {node['xfailed']} xfailed, {node['failed']} failed of {ran} "
        f"node cases; (op, since_version) coverage: {coverage}"
    )
    for suite in harness.SUITES[1:]:
        if suite in _OUTCOMES:
            c = _counts(_OUTCOMES[suite])
            write(
                f"conformance ({suite}): {c['passed']} passed, {c['xfailed']} xfailed, {c['failed']} failed, "
                f"{c['skipped']} skipped of {sum(c.values())} cases"
            )
