"""docs/writing-a-provider.md shows this plugin's files whole: keep them in sync, and keep its
usage snippet runnable."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "writing-a-provider.md"
FILE_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```\w*\n(.*?)```", re.S)
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def test_every_file_of_the_plugin_is_shown_as_it_is():
    shown = dict(FILE_BLOCK.findall(DOC.read_text(encoding="utf-8")))
    plugin_files = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "contrib" / "virtual_device" / "src").rglob("*.py")
        if p.name != "__init__.py"
    }
    assert plugin_files <= set(shown), f"files missing from the tutorial: {plugin_files - set(shown)}"
    for path, body in shown.items():
        assert (ROOT / path).read_text(encoding="utf-8") == body, f"{path} differs from the tutorial's copy"


def test_usage_snippet_runs(capsys):
    text = FILE_BLOCK.sub("", DOC.read_text(encoding="utf-8"))
    snippets = PYTHON_BLOCK.findall(text)
    assert snippets
    for snippet in snippets:
        exec(compile(snippet, str(DOC), "exec"), {})
    out = capsys.readouterr().out
    assert "'VirtualDeviceExecutionProvider': 1" in out
    assert "[[0.212 0.212 0.576]]" in out
