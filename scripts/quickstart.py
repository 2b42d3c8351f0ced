"""Print a command line of the README's Quick start block: ``demo`` (line 1) or ``test`` (line 2).

CI runs the ``test`` line through ``.ci/run``; keeping the command in one place (the README)
means the documented command is the one that is tested.
"""

from __future__ import annotations

import pathlib
import sys

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def quickstart_lines() -> list[str]:
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index("## Quick start")
    fence = next(i for i in range(start, len(lines)) if lines[i].startswith("```"))
    end = next(i for i in range(fence + 1, len(lines)) if lines[i].startswith("```"))
    commands = [line for line in lines[fence + 1 : end] if line.strip()]
    if len(commands) != 2:
        raise SystemExit(f"README Quick start must hold exactly two command lines, found {len(commands)}")
    return commands


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "test"
    print(quickstart_lines()[{"demo": 0, "test": 1}[which]])
