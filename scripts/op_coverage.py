"""Print the CPU provider's (op, since_version) coverage of the ONNX schemas.

Every schema version onnx defines in the default, ``ai.onnx.ml`` and ``ai.onnx.preview.training``
domains is one key; a key is covered when the CPU provider registers a kernel for it.  Keys with
a function body still run without a kernel (the core inlines them) and are counted apart.

Usage::

    python scripts/op_coverage.py            # the per-domain table
    python scripts/op_coverage.py --missing  # also list every unregistered schema version
"""

from __future__ import annotations

import argparse
import sys

from _conformance import load_harness


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--missing", action="store_true", help="list the unregistered schema versions")
    parser.add_argument("--provider", default="cpu", help="provider short name (default: cpu)")
    args = parser.parse_args(argv)

    harness = load_harness()
    schemas = harness.schema_keys()
    registered = harness.registered_keys(args.provider)
    missing = schemas - registered
    by_function = harness.function_keys(missing)

    rows = [("domain", "schema versions", "with kernel", "function body only", "neither")]
    for domain in harness.COVERAGE_DOMAINS:
        mine = {k for k in schemas if k[0] == domain}
        rows.append(
            (
                domain or "ai.onnx",
                str(len(mine)),
                str(len(mine & registered)),
                str(len(mine & by_function)),
                str(len(mine & (missing - by_function))),
            )
        )
    rows.append(
        (
            "total",
            str(len(schemas)),
            str(len(schemas & registered)),
            str(len(by_function)),
            str(len(missing - by_function)),
        )
    )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
        if index == 0 or index == len(rows) - 2:
            print("  ".join("-" * width for width in widths))
    share = 100.0 * len(schemas & registered) / max(len(schemas), 1)
    print(f"\n(op, since_version) coverage: {len(schemas & registered)} of {len(schemas)} ({share:.1f}%)")
    extra = sorted(registered - schemas)
    if extra:
        print(f"kernels for keys outside these domains: {len(extra)}")

    if args.missing:
        print("\nunregistered schema versions (* = has a function body, runs by inlining):")
        current = None
        for domain, op, version in sorted(missing):
            if domain != current:
                current = domain
                print(f"  [{domain or 'ai.onnx'}]")
            mark = "*" if (domain, op, version) in by_function else " "
            print(f"   {mark} {op}-{version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
