"""docs/writing-an-op-library.md shows this library's files whole: keep them in sync, and keep
its usage snippets runnable."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "writing-an-op-library.md"
FILE_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", re.S)
PYTHON_BLOCK = re.compile(r"(?<!-->\n)```python\n(.*?)```", re.S)


def test_every_file_shown_matches_the_repository():
    shown = FILE_BLOCK.findall(DOC.read_text(encoding="utf-8"))
    assert len(shown) >= 5
    for path, body in shown:
        assert (ROOT / path).read_text(encoding="utf-8") == body, f"{path} differs from the tutorial's copy"


def test_usage_snippets_run(capsys):
    pytest.importorskip("numpy")
    text = FILE_BLOCK.sub("", DOC.read_text(encoding="utf-8"))
    namespace: dict = {}
    snippets = PYTHON_BLOCK.findall(text)
    assert len(snippets) >= 3
    for snippet in snippets:
        exec(compile(snippet, str(DOC), "exec"), namespace)
    assert "[2 3]" in capsys.readouterr().out
