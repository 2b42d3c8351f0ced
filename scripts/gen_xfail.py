"""Regenerate plugins/cpu/tests/xfail.toml from a run of the conformance suite.

Runs ``tests/conformance`` in-process with every expectation ignored
(``ONNXPLUG_CONFORMANCE_IGNORE_XFAIL=1``), then writes one entry per failing case.  The reason of
a case that already had an entry is kept (people edit them into something actionable); a new
failure gets the first line of its error.  Tolerance-only entries are kept.  Cases that pass lose
their entry.

Usage::

    python scripts/gen_xfail.py                 # every suite
    python scripts/gen_xfail.py -k "not slow"   # leave the light models out
    python scripts/gen_xfail.py --dry-run -k Conv
    python scripts/gen_xfail.py --fresh         # replace kept reasons by the current errors
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import pytest
from _conformance import REPO, XFAIL_FILE, load_harness

_STATUS_PREFIX = re.compile(r"\[ONNXPlugError\] : \d+ : \w+ : ")
_MAX_REASON = 240


class _Collector:
    """A pytest plugin recording each conformance case's outcome and first error line."""

    def __init__(self) -> None:
        self.outcomes: dict[tuple[str, str], str] = {}
        self.errors: dict[tuple[str, str], str] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        suite = next((v for k, v in report.user_properties if k == "conformance_suite"), None)
        if suite is None or not (report.when == "call" or report.failed):
            return
        name = report.nodeid.rsplit("[", 1)[-1].rstrip("]").split("/", 1)[-1]
        key = (suite, name)
        if report.failed:
            self.outcomes[key] = "failed"
            self.errors.setdefault(key, _first_line(report))
        else:
            self.outcomes.setdefault(key, report.outcome)


def _first_line(report: pytest.TestReport) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "failed")
    exc, sep, message = line.partition(": ")
    if sep and re.fullmatch(r"[\w.]+", exc):
        line = f"{exc.rsplit('.', 1)[-1]}: {_STATUS_PREFIX.sub('', message)}"
    return line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 3] + "..."


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def render(entries: dict[tuple[str, str], dict], header: str) -> str:
    """The xfail.toml text: the header comment, node cases, then one section per model suite."""
    lines = [header.rstrip("\n"), ""]

    def table(path: str, entry: dict) -> None:
        lines.append(f"[{path}]")
        for key in ("reason", "rtol", "atol"):
            if entry.get(key) is not None:
                value = entry[key]
                lines.append(f"{key} = {_toml_string(value) if isinstance(value, str) else repr(value)}")
        lines.append("")

    harness = load_harness()
    for suite in harness.SUITES:
        for (entry_suite, name), entry in sorted(entries.items()):
            if entry_suite != suite:
                continue
            table(name if suite == "node" else f"{_toml_string(suite)}.{name}", entry)
    return "\n".join(lines).rstrip("\n") + "\n"


def _header(path: str) -> str:
    if not os.path.exists(path):
        return "# Expected failures of the CPU provider in the conformance suite (see tests/conformance).\n"
    header = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.startswith("#") and line.strip():
                break
            header.append(line)
    return "".join(header)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fresh", action="store_true", help="do not keep existing reasons")
    parser.add_argument("--dry-run", action="store_true", help="print the file instead of writing it")
    parser.add_argument("-k", dest="keyword", help="only cases matching this pytest -k expression")
    parser.add_argument("--output", default=str(XFAIL_FILE), help="file to write (default: %(default)s)")
    args = parser.parse_args(argv)

    harness = load_harness()
    previous = harness.load_expectations(str(XFAIL_FILE))
    os.environ["ONNXPLUG_CONFORMANCE_IGNORE_XFAIL"] = "1"
    collector = _Collector()
    pytest_args = [
        str(REPO / "tests" / "conformance"),
        "-q",
        "--tb=no",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(REPO),
        "-m",
        "conformance",
        "-rN",
        "--no-header",
    ]
    if args.keyword:
        pytest_args += ["-k", args.keyword]
    pytest.main(pytest_args, plugins=[collector])

    entries: dict[tuple[str, str], dict] = {}
    for key, expectation in previous.items():
        outcome = collector.outcomes.get(key)
        entry = {"reason": expectation.reason, "rtol": expectation.rtol, "atol": expectation.atol}
        if outcome is None:  # not run this time (deselected, slow): keep as it was
            entries[key] = entry
        elif outcome == "failed":
            if args.fresh or not entry["reason"]:
                entry["reason"] = collector.errors[key]
            entries[key] = entry
        elif expectation.rtol is not None or expectation.atol is not None:
            entries[key] = {"rtol": expectation.rtol, "atol": expectation.atol}
    for key, outcome in collector.outcomes.items():
        if outcome == "failed" and key not in entries:
            entries[key] = {"reason": collector.errors[key]}
    text = render(entries, _header(str(XFAIL_FILE)))
    failed = sum(1 for o in collector.outcomes.values() if o == "failed")
    print(f"gen_xfail: {len(collector.outcomes)} cases ran, {failed} failing; {len(entries)} entries", file=sys.stderr)
    if args.dry_run:
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text)
        print(f"gen_xfail: wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
