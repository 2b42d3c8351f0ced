"""The CPU provider's heap arena (``onnxplug_cpu.heap``) off and on: run time, minor page faults
and system time per run, in alternating fresh processes (the malloc setting is process-wide).

    python scripts/bench_arena.py                                   # the four transformers
    python scripts/bench_arena.py --models resnet50,yolo --rounds 3

Each round starts one process with ``ONNXPLUG_CPU_ARENA=0`` and one with ``1`` (order alternating
by round); each process imports only numpy and onnxplug (the model and its feeds are written to a
temporary folder first: importing torch to build them would itself move glibc's dynamic mmap
threshold, and with it the faults measured), creates a session at ``--threads``, runs it three
times untimed, then times ``--runs`` runs and reads ``getrusage`` around them.  Prints one line per process and the
median of each setting's medians.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

import numpy as np

_CHILD = r"""
import json, resource, statistics, sys, time
import numpy as np
import onnxplug
model, inputs, threads, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with np.load(inputs) as saved:
    feeds = {name: saved[name] for name in saved.files}
data = model
options = onnxplug.SessionOptions()
options.intra_op_num_threads = threads
session = onnxplug.InferenceSession(data, options, providers=["CPUExecutionProvider"])
for _ in range(3):
    session.run(None, feeds)
before = resource.getrusage(resource.RUSAGE_SELF)
times = []
for _ in range(runs):
    start = time.perf_counter()
    session.run(None, feeds)
    times.append(time.perf_counter() - start)
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"ms": statistics.median(times) * 1e3, "faults": (after.ru_minflt - before.ru_minflt) / runs,
                  "sys_ms": (after.ru_stime - before.ru_stime) / runs * 1e3}))
"""

_FAMILIES = {"resnet50": "cnn", "densenet121": "cnn", "mobilenetv2": "cnn", "yolo": "cnn", "unet": "cnn"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert-base,gpt2-small,vit-base,minilm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from bench_families import load_family

    folder = tempfile.TemporaryDirectory()
    for name in args.models.split(","):
        family = _FAMILIES.get(name, "transformers")
        data, feeds = {m.name: m for m in load_family(family)}[name].build()
        model, inputs = pathlib.Path(folder.name, f"{name}.onnx"), pathlib.Path(folder.name, f"{name}.npz")
        model.write_bytes(data)
        np.savez(inputs, **feeds)
        medians: dict[str, list[float]] = {"0": [], "1": []}
        for round_ in range(args.rounds):
            for arena in ("0", "1") if round_ % 2 == 0 else ("1", "0"):
                env = {**os.environ, "ONNXPLUG_CPU_ARENA": arena}
                command = [sys.executable, "-c", _CHILD, str(model), str(inputs), str(args.threads), str(args.runs)]
                done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
                result = json.loads(done.stdout.strip().splitlines()[-1])
                medians[arena].append(result["ms"])
                print(
                    f"{name:<12} arena={arena}  {result['ms']:8.2f} ms  {result['faults']:9.1f} minor faults/run"
                    f"  {result['sys_ms']:6.2f} ms system/run",
                    flush=True,
                )
        off, on = statistics.median(medians["0"]), statistics.median(medians["1"])
        print(f"{name:<12} median of medians: off {off:.2f} ms, on {on:.2f} ms, on/off {on / off:.2f}", flush=True)


if __name__ == "__main__":
    main()
