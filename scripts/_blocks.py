"""Timing several runtimes fairly in one process (the quantization benchmarks share it)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence


def time_in_blocks(
    runners: Sequence[tuple[str, Callable[[], object]]], runs: int, block: int, settle: float
) -> dict[str, list[float]]:
    """Seconds per call of each ``(name, run)``: blocks of ``block`` timed calls, each block after
    a pause of ``settle`` seconds and two untimed calls, the order reversed every round.

    Why: a call right after another runtime's pays for that runtime's worker threads still
    polling (OpenBLAS's keep a core busy for about a tenth of a second after a threaded call);
    the pause lets them sleep, and the alternating order spreads what is left over both."""
    times: dict[str, list[float]] = {name: [] for name, _ in runners}
    for round_index in range(-(-runs // block)):
        for name, run in runners if round_index % 2 == 0 else runners[::-1]:
            time.sleep(settle)
            for _ in range(2):
                run()
            for _ in range(block):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    return times


def print_ratio(times: dict[str, list[float]], numerator: str, denominator: str) -> None:
    """Each runtime's median in ms, then ``numerator / denominator`` of the medians."""
    medians = {name: statistics.median(values) for name, values in times.items()}
    width = max(len(name) for name in medians)
    for name, value in medians.items():
        print(f"{name:>{width}}: median {value * 1000:.1f} ms over {len(times[name])} runs")
    print(f"{numerator} / {denominator}: {medians[numerator] / medians[denominator]:.2f}")
