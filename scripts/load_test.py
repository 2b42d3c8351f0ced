"""Load test of ``onnxplug serve``: throughput and latency with and without dynamic batching.

Starts ``onnxplug serve`` (the real command, in a subprocess on 127.0.0.1, any free port) once per
mode, sends a fixed number of requests from ``--clients`` concurrent tritonclient clients (one
image each, binary tensors), and prints requests per second and p50/p99 latency; the run stops by
itself.  Modes: ``unbatched`` (``--max-batch-size 1``) and ``batched`` (``--max-batch-size N
--max-queue-delay-ms D``).

The default model is the onnx wheel's ``light_resnet50`` (backend/test/data/light).  It is exported
with a fixed batch of 1, which cannot be batched, so the script first writes a copy whose batch
dimension is symbolic (input and output dimension 0 named ``batch``, and its one Reshape's target
``[1, 2048]`` made ``[-1, 2048]``); ``--model`` serves any other model with a symbolic batch.

    python scripts/load_test.py [--clients 64] [--requests 128] [--max-batch-size 8]
        [--max-queue-delay-ms 5] [--providers CPUExecutionProvider] [--modes unbatched,batched]

Timings on a shared machine are noisy: compare the modes of one run (``--modes
unbatched,batched,unbatched,batched`` interleaves them), not absolute figures.  The server's CPU
seconds per request (from /proc) are printed too: they vary much less with other load.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import onnx
from onnx import numpy_helper


def light_resnet50_with_batch(folder: str) -> str:
    """Write light_resnet50 with a symbolic batch dimension into ``folder``; return its path."""
    source = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/light/light_resnet50.onnx")
    model = onnx.load(source)
    for value in (model.graph.input[0], model.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    reshapes = {node.input[1] for node in model.graph.node if node.op_type == "Reshape"}
    for index, initializer in enumerate(model.graph.initializer):
        if initializer.name in reshapes:
            target = numpy_helper.to_array(initializer).copy()
            if target[0] == 1:
                target[0] = -1
                model.graph.initializer[index].CopyFrom(numpy_helper.from_array(target, initializer.name))
    path = os.path.join(folder, "light_resnet50_batch.onnx")
    onnx.save(model, path)
    return path


def start_server(model: str, providers: str, batch: int, delay_ms: float) -> tuple[subprocess.Popen, str]:
    command = [
        sys.executable,
        "-m",
        "onnxplug",
        "serve",
        model,
        "--port",
        "0",
        "--name",
        "model",
        "--max-batch-size",
        str(batch),
        "--max-queue-delay-ms",
        str(delay_ms),
    ]
    if providers:
        command += ["--providers", providers]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    lines = []
    while True:
        line = process.stdout.readline()
        if not line:
            raise SystemExit(f"onnxplug serve exited ({process.wait()}): {''.join(lines)}")
        lines.append(line)
        print("  server:", line.rstrip())
        if line.startswith("batching:"):
            break
    url = re.search(r"http://(\S+)", "".join(lines)).group(1)
    return process, url


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc), or NaN elsewhere."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def measure(url: str, name: str, shape: list[int], clients: int, requests: int, pid: int) -> dict:
    import tritonclient.http as httpclient

    rng = np.random.default_rng(0)
    images = [rng.random(shape, dtype=np.float32) for _ in range(8)]
    warm = httpclient.InferenceServerClient(url)
    deadline = time.monotonic() + 120
    while not _ready(warm):
        if time.monotonic() > deadline:
            raise SystemExit(f"the server at {url} did not become ready")
        time.sleep(0.2)
    warm.infer("model", [_tensor(httpclient, name, images[0])])  # first run outside the clock
    tickets = iter(range(requests))
    lock = threading.Lock()
    latencies: list[float] = []
    errors: list[str] = []

    def client() -> None:
        connection = httpclient.InferenceServerClient(url, network_timeout=600, connection_timeout=600)
        while True:
            with lock:
                ticket = next(tickets, None)
            if ticket is None:
                return
            start = time.perf_counter()
            try:
                connection.infer("model", [_tensor(httpclient, name, images[ticket % len(images)])])
            except Exception as error:  # noqa: BLE001 - counted and reported, the run goes on
                errors.append(str(error))
                continue
            with lock:
                latencies.append(time.perf_counter() - start)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    cpu_before = cpu_seconds(pid)
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    cpu = cpu_seconds(pid) - cpu_before
    return {
        "cpu_per_request": cpu / max(1, len(latencies)),
        "throughput": len(latencies) / elapsed,
        "p50": float(np.percentile(latencies, 50)) if latencies else float("nan"),
        "p99": float(np.percentile(latencies, 99)) if latencies else float("nan"),
        "elapsed": elapsed,
        "ok": len(latencies),
        "errors": errors,
    }


def _ready(client) -> bool:
    try:
        return client.is_server_ready()
    except Exception:  # noqa: BLE001 - not listening yet
        return False


def _tensor(httpclient, name: str, image: np.ndarray):
    tensor = httpclient.InferInput(name, list(image.shape), "FP32")
    tensor.set_data_from_numpy(image, binary_data=True)
    return tensor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", default=None, help="a model with a symbolic batch dimension (default: light_resnet50)"
    )
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--requests", type=int, default=128)
    parser.add_argument("--max-batch-size", type=int, default=8)
    parser.add_argument("--max-queue-delay-ms", type=float, default=5.0)
    parser.add_argument("--providers", default="CPUExecutionProvider")
    parser.add_argument(
        "--modes", default="unbatched,batched", help="comma-separated, run in order; repeat to interleave rounds"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = args.model or light_resnet50_with_batch(folder)
        graph = onnx.load(model, load_external_data=False).graph
        first = graph.input[0]
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in first.type.tensor_type.shape.dim]
        results = {}
        for round_index, mode in enumerate(args.modes.split(",")):
            label = f"{mode} #{round_index + 1}"
            batch = 1 if mode == "unbatched" else args.max_batch_size
            print(f"{mode}: max batch {batch}, {args.clients} clients, {args.requests} requests", flush=True)
            process, url = start_server(model, args.providers, batch, args.max_queue_delay_ms)
            try:
                results[label] = measure(url, first.name, shape, args.clients, args.requests, process.pid)
            finally:
                process.terminate()
                process.wait(60)
            r = results[label]
            print(
                f"  {r['ok']} ok, {len(r['errors'])} errors in {r['elapsed']:.1f} s: {r['throughput']:.2f} req/s, "
                f"p50 {r['p50'] * 1000:.0f} ms, p99 {r['p99'] * 1000:.0f} ms, "
                f"server CPU {r['cpu_per_request']:.2f} s/request",
                flush=True,
            )
            for error in r["errors"][:3]:
                print("  error:", error)
    print(
        "\n| run | max batch | clients | requests | req/s | p50 ms | p99 ms | server CPU s/request |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    for label, r in results.items():
        batch = 1 if label.startswith("unbatched") else args.max_batch_size
        print(
            f"| {label} | {batch} | {args.clients} | {r['ok']} | {r['throughput']:.2f} | "
            f"{r['p50'] * 1000:.0f} | {r['p99'] * 1000:.0f} | {r['cpu_per_request']:.2f} |"
        )
    # Ratios over all rounds of each mode (the modes interleave when --modes repeats them, so the
    # machine's other load weighs on both alike).
    totals = {}
    for label, r in results.items():
        mode = label.split(" ")[0]
        ok, elapsed, cpu = totals.get(mode, (0, 0.0, 0.0))
        totals[mode] = (ok + r["ok"], elapsed + r["elapsed"], cpu + r["cpu_per_request"] * r["ok"])
    if {"batched", "unbatched"} <= set(totals):
        b, u = totals["batched"], totals["unbatched"]
        print(f"\nbatched / unbatched throughput: {(b[0] / b[1]) / (u[0] / u[1]):.2f}x")
        print(f"unbatched / batched server CPU per request: {(u[2] / u[0]) / (b[2] / b[0]):.2f}x")


if __name__ == "__main__":
    main()
