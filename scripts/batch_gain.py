"""What batching can gain at most: the per-image time of light_resnet50 at batch 1 and batch N.

Dynamic batching raises a server's throughput only as far as one run of N images costs less than
N runs of one.  This prints that ratio for onnxplug's CPU provider and for onnxruntime's CPU
provider (a test-time oracle), interleaved in one process, at the same intra-op thread count:

    python scripts/batch_gain.py [--batch 8] [--rounds 6] [--threads 2] [--settle 0.3]

Each timed run starts after ``--settle`` idle seconds.  Both runtimes leave worker threads
busy-waiting after a run (onnxruntime's intra-op pool spins, OpenBLAS's workers poll for about
2^28 cycles before they sleep); run back to back on 2 cores, those spinning threads take the cores
from the *other* runtime's next run.  Without the pause the batch-1 runs, which follow the other
runtime's batch-N run, came out 2-2.5x slower than alone, and the "gain" mostly measured that
(onnxruntime's 2.56x fell to about 1.05x with the spinning kept out).

It is the ceiling for ``scripts/load_test.py``'s batched/unbatched ratio on the same machine
(the HTTP work and the load generator's own CPU only lower it).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
from load_test import light_resnet50_with_batch

import onnxplug


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--settle", type=float, default=0.3, help="idle seconds before each timed run (0: none)")
    args = parser.parse_args()
    path = light_resnet50_with_batch(tempfile.mkdtemp())
    sessions = {}
    options = onnxplug.SessionOptions()
    options.intra_op_num_threads = args.threads
    sessions["onnxplug"] = onnxplug.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    try:
        import onnxruntime

        ort_options = onnxruntime.SessionOptions()
        ort_options.intra_op_num_threads = args.threads
        ort_options.log_severity_level = 3
        sessions["onnxruntime"] = onnxruntime.InferenceSession(path, ort_options, providers=["CPUExecutionProvider"])
    except ImportError:
        print("onnxruntime is not installed: onnxplug only")
    name = sessions["onnxplug"].get_inputs()[0].name
    rng = np.random.default_rng(0)
    images = {size: rng.random((size, 3, 224, 224), dtype=np.float32) for size in (1, args.batch)}
    per_image: dict[tuple[str, int], list[float]] = {}
    for session in sessions.values():
        for batch in images.values():
            session.run(None, {name: batch})  # warm-up
    for _ in range(args.rounds):
        for runtime, session in sessions.items():
            for size, batch in images.items():
                time.sleep(args.settle)  # the previous run's spinning threads go to sleep
                start = time.perf_counter()
                session.run(None, {name: batch})
                per_image.setdefault((runtime, size), []).append((time.perf_counter() - start) / size)
    medians = {key: statistics.median(values) for key, values in per_image.items()}
    for runtime in sessions:
        one = statistics.median(per_image[(runtime, 1)]) * 1e3
        many = statistics.median(per_image[(runtime, args.batch)]) * 1e3
        print(
            f"{runtime}: {one:.1f} ms per image at batch 1, {many:.1f} ms at batch {args.batch}: "
            f"batching gains at most {one / many:.2f}x"
        )
    if "onnxruntime" in sessions:  # measured in the same minutes: less moved by machine load than either time
        ratios = ", ".join(
            f"batch {size} {medians[('onnxplug', size)] / medians[('onnxruntime', size)]:.2f}x" for size in images
        )
        print(f"onnxplug / onnxruntime per image: {ratios}")


if __name__ == "__main__":
    main()
