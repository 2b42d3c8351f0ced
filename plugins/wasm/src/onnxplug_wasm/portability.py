"""The portability check: the provider's kernel calls, recorded under wasmtime, replayed in
Node and in headless Chromium on the same module, must leave the same bytes.

:func:`record_cases` runs a set of kernel calls (every kernel of ``dispatch.c``, most unary
codes, broadcasting, padding, groups) under wasmtime and records, for each call, the used heap
right before ``dispatch()`` and the digest of the same range after it.  ``js/node_check.mjs``
and ``js/browser_check.mjs`` (a source checkout's ``plugins/wasm/js``) replay them with V8.
WebAssembly arithmetic is deterministic here (no relaxed SIMD, no NaN-payload-sensitive
output in the cases), so the digests must be equal byte for byte.

``python -m onnxplug_wasm.portability [--node] [--chromium]`` runs the check and prints a table.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from .memory import KERNELS, LinearMemory

__all__ = ["JS", "record_cases", "run_engine"]

#: The replay scripts (present in a source checkout).
JS = Path(__file__).resolve().parents[2] / "js"


class _Recorder:
    """Wraps one memory's ``dispatch`` to record each call's heap before and its digest after."""

    def __init__(self, memory: LinearMemory) -> None:
        self.memory = memory
        self.cases: list[dict[str, Any]] = []
        self.name = ""
        self._dispatch = memory._dispatch
        memory._dispatch = self

    def _heap(self) -> tuple[int, bytes]:
        memory = self.memory
        top = memory._bytes
        if memory._starts and memory._starts[-1] + memory._sizes[-1] == top:
            top = memory._starts[-1]
        start = memory._params_offset
        return start, memory._view(start, top - start, np.uint8).tobytes()

    def __call__(self, store: Any) -> int:
        offset, before = self._heap()
        args = self.memory._args.tolist()
        status = self._dispatch(store)
        after = self.memory._view(offset, len(before), np.uint8).tobytes()
        self.cases.append(
            {
                "name": f"{self.name}#{len(self.cases)}",
                "offset": offset,
                "args": args,
                "before": base64.b64encode(before).decode(),
                "status": status,
                "sha256": hashlib.sha256(after).hexdigest(),
            }
        )
        return status


def record_cases(seed: int = 0) -> list[dict[str, Any]]:
    """Kernel calls under wasmtime, with the digests the replays must reproduce."""
    from . import kernels_elementwise as ew
    from . import kernels_nn as nn

    memory = LinearMemory(64 << 20)
    recorder = _Recorder(memory)
    rng = np.random.default_rng(seed)

    def t(*shape, scale=1.0):
        return memory.to_device((rng.standard_normal(shape) * scale).astype(np.float32))

    def named(name, fn, *args, **kwargs):
        recorder.name = name
        return fn(*args, **kwargs)

    named("matmul_batched", nn.matmul, t(3, 17, 33), t(33, 21))
    named("gemm_transb_few_rows", nn.gemm, t(3, 37), t(10, 37), None, alpha=1.0, beta=1.0, transA=0, transB=1)
    named("gemm_transb_bias", nn.gemm, t(19, 40), t(12, 40), t(12), alpha=0.5, beta=2.0, transA=0, transB=1)
    named(
        "conv_grouped_padded_strided",
        nn.conv,
        t(2, 4, 11, 9),
        t(6, 2, 3, 3),
        t(6),
        auto_pad="NOTSET",
        dilations=[1, 2],
        group=2,
        kernel_shape=[3, 3],
        pads=[1, 2, 1, 0],
        strides=[2, 1],
    )
    named("conv_1x1", nn.conv, t(1, 8, 5, 5), t(16, 8, 1, 1), None, auto_pad="NOTSET", group=1)
    named("conv_1d_same", nn.conv, t(1, 3, 20), t(4, 3, 5), None, auto_pad="SAME_UPPER", group=1)
    named(
        "maxpool_ceil",
        nn.max_pool,
        t(1, 3, 10, 10),
        kernel_shape=[3, 3],
        auto_pad="NOTSET",
        pads=[1, 1, 1, 1],
        strides=[2, 2],
        ceil_mode=1,
    )
    named(
        "avgpool_include_pad",
        nn.average_pool,
        t(2, 2, 7, 7),
        kernel_shape=[3, 3],
        auto_pad="NOTSET",
        pads=[1, 1, 1, 1],
        strides=[2, 2],
        count_include_pad=1,
    )
    named("global_average_pool", nn.global_average_pool, t(2, 5, 6, 6))
    named(
        "batchnorm",
        nn.batchnorm_9,
        t(2, 4, 3, 3),
        t(4),
        t(4),
        t(4),
        memory.to_device(rng.uniform(0.5, 2, 4).astype(np.float32)),
        epsilon=1e-5,
        momentum=0.9,
    )
    for op, code in (
        ("add", ew.ADD),
        ("sub", ew.SUB),
        ("mul", ew.MUL),
        ("div", ew.DIV),
        ("max", ew.MAX),
        ("prelu", ew.PRELU),
    ):
        named(f"binary_{op}_broadcast", ew.binary, op, code, t(4, 1, 6), t(3, 1))
    positive = memory.to_device(rng.uniform(0.1, 5, 300).astype(np.float32))
    wide = t(300, scale=6.0)
    for code in range(ew.AFFINE + 1):
        named(f"unary_{code}", ew.unary, "unary", code, positive if code in (ew.LOG, ew.SQRT) else wide, 0.3, 0.7)
    named("softmax_axis1", ew.softmax_rows, "Softmax", t(3, 7, 5), 3, 7, 5, False)
    named("logsoftmax_rows", ew.softmax_rows, "LogSoftmax", t(3, 7, 5), 3, 35, 1, True)
    named("layernorm", ew.layer_normalization, t(4, 6, 8), t(6, 8), t(8), axis=1, epsilon=1e-5, stash_type=1)
    named("transpose", ew.transpose, t(2, 3, 4, 5), perm=[0, 2, 3, 1])
    named("concat", ew.concat, t(2, 3, 4), t(2, 5, 4), t(2, 1, 4), axis=1)
    return recorder.cases


def run_engine(engine: str, cases: list[dict[str, Any]], module: Path = KERNELS) -> dict[str, Any]:
    """Replay ``cases`` with ``engine`` (``"node"`` or ``"chromium"``); its JSON report."""
    script = {"node": "node_check.mjs", "chromium": "browser_check.mjs"}[engine]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "cases.json"
        path.write_text(json.dumps([{k: c[k] for k in ("name", "offset", "args", "before")} for c in cases]))
        done = subprocess.run(
            ["node", str(JS / script), str(module), str(path)], capture_output=True, text=True, timeout=300
        )
    if done.returncode:
        raise RuntimeError(f"{script} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def mismatches(cases: list[dict[str, Any]], report: dict[str, Any]) -> list[str]:
    """The cases whose replay left other bytes (or another status) than wasmtime did."""
    got = {r["name"]: r for r in report["results"]}
    bad = []
    for case in cases:
        result = got.get(case["name"])
        if result is None or result["status"] != case["status"] or result["sha256"] != case["sha256"]:
            bad.append(case["name"])
    return bad


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", action="store_true")
    parser.add_argument("--chromium", action="store_true")
    args = parser.parse_args(argv)
    engines = [e for e in ("node", "chromium") if getattr(args, e)] or ["node", "chromium"]
    if shutil.which("node") is None:
        print("node is not on PATH", file=sys.stderr)
        return 2
    cases = record_cases()
    failed = False
    for engine in engines:
        report = run_engine(engine, cases)
        bad = mismatches(cases, report)
        failed |= bool(bad)
        print(
            f"{report['engine']}: {len(cases) - len(bad)}/{len(cases)} kernel calls identical to wasmtime"
            + (f"; differ: {', '.join(bad)}" if bad else "")
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
