"""Write (or check) a kernel package's ``_index.py``: which kernels each module registers.

A provider's kernel registry imports a kernel module only when one of its ops is first looked up
(:meth:`onnxplug.kernels.KernelRegistry.defer_modules`); the index tells it which module that is.
Run this after adding, moving or removing a kernel::

    python scripts/index_kernels.py onnxplug_cpu.kernels onnxplug_ms_ops.kernels
    python scripts/index_kernels.py --check onnxplug_cpu.kernels   # what the plugins' tests run

The package must expose ``MODULES`` (its kernel modules, in import order) and ``registry``.
Each package is indexed in a fresh process, so that every module's import registers its kernels.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import pathlib
import subprocess
import sys

HEADER = '''"""Which kernels each module registers: since versions per domain and op (generated: do not edit).

Regenerate with ``python scripts/index_kernels.py {package}``; the plugin's tests check it.
"""

INDEX = {body}
'''


def render(package: str, index: dict[str, dict[str, dict[str, list[int]]]]) -> str:
    """The index as Python source, laid out as ``ruff format`` leaves it."""
    lines = ["{"]
    for module, by_domain in index.items():
        if not by_domain:
            continue
        lines.append(f"    {json.dumps(module)}: {{")
        for domain, by_op in by_domain.items():
            lines.append(f"        {json.dumps(domain)}: {{")
            for op, versions in by_op.items():
                numbers = ", ".join(str(v) for v in versions) + ("," if len(versions) == 1 else "")
                lines.append(f"            {json.dumps(op)}: ({numbers}),")
            lines.append("        },")
        lines.append("    },")
    lines.append("}")
    return HEADER.format(package=package, body="\n".join(lines))


def index_in_fresh_process(package: str) -> dict[str, dict[str, list[str]]]:
    # The installed plugins' op schemas are registered first (as a session would have them):
    # an op library's kernels are checked against its schemas when they are imported.
    code = (
        "import importlib, json, sys, onnxplug; onnxplug.default_environment(); "
        f"p = importlib.import_module({package!r}); "
        "json.dump(p.registry.index_modules(p.__name__, p.MODULES), sys.stdout)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def index_path(package: str) -> pathlib.Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise SystemExit(f"no package {package}")
    return pathlib.Path(spec.origin).parent / "_index.py"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="+")
    parser.add_argument("--check", action="store_true", help="fail if an index is not up to date")
    args = parser.parse_args(argv)
    stale = []
    for package in args.packages:
        text = render(package, index_in_fresh_process(package))
        path = index_path(package)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"stale kernel index: {', '.join(stale)}; run python scripts/index_kernels.py {' '.join(args.packages)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
