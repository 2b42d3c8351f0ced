"""Build the provider's kernel module (``kernels.wasm``) from its C sources, reproducibly.

``python -m onnxplug_wasm.build`` compiles ``csrc/*.c`` with Debian's clang 14 and wasm-ld
(``apt-get install clang lld``) into ``kernels.wasm`` next to this file; ``--check`` rebuilds
into a temporary folder and fails when the result differs from the committed file.  The flags
are pinned here: no libc (the module imports nothing), SIMD on, and memory the host can grow
up to 4 GiB (the host's allocator decides how far, see ``wasm_memory_limit``).  Source paths
are passed relative to ``csrc`` and debug info is off, so the bytes do not depend on where the
checkout is.

The sandboxed example op library (``examples/``) is built by the same function.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "csrc"
OUTPUT = HERE / "kernels.wasm"

#: Every flag that shapes the module's bytes.
FLAGS = (
    "--target=wasm32",
    "-O3",
    "-msimd128",
    "-nostdlib",
    "-ffreestanding",
    "-fno-builtin-memset",
    "-g0",
    "-Wall",
    "-Werror",
    "-Wl,--no-entry",
    "-Wl,--export=__heap_base",
    "-Wl,--initial-memory=1048576",
    "-Wl,--max-memory=4294967296",
    "-Wl,-z,stack-size=65536",
    "-Wl,--strip-debug",
)


def find_clang() -> str:
    """The clang to use: ``$CLANG``, else clang-14 or clang on PATH."""
    for name in (os.environ.get("CLANG"), "clang-14", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise FileNotFoundError("no clang found (apt-get install clang lld, or set CLANG)")


def toolchain_missing() -> str | None:
    """What is missing to build (``None``: clang and wasm-ld are both here)."""
    try:
        find_clang()
    except FileNotFoundError as error:
        return str(error)
    if shutil.which("wasm-ld") is None and shutil.which("wasm-ld-14") is None:
        return "wasm-ld is not installed (apt-get install lld)"
    return None


def build(sources: Path, output: Path, flags: tuple[str, ...] = FLAGS) -> Path:
    """Compile every ``*.c`` in ``sources`` into one module at ``output``."""
    files = sorted(p.name for p in sources.glob("*.c"))
    if not files:
        raise FileNotFoundError(f"no C sources in {sources}")
    command = [find_clang(), *flags, "-o", str(output.resolve()), *files]
    done = subprocess.run(command, cwd=sources, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"clang failed ({done.returncode}):\n{' '.join(command)}\n{done.stderr}")
    return output


def check(sources: Path = SOURCES, committed: Path = OUTPUT) -> bool:
    """Whether rebuilding ``sources`` gives exactly the committed module."""
    with tempfile.TemporaryDirectory() as folder:
        fresh = build(sources, Path(folder) / committed.name)
        return committed.exists() and filecmp.cmp(fresh, committed, shallow=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed kernels.wasm is stale")
    parser.add_argument("--sources", type=Path, default=SOURCES)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    if args.check:
        if check(args.sources, args.output):
            print(f"{args.output} matches its sources")
            return 0
        print(f"{args.output} differs from a fresh build of {args.sources}: run python -m onnxplug_wasm.build")
        return 1
    build(args.sources, args.output)
    print(f"wrote {args.output} ({args.output.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
