"""A progress bar for long commands (calibration, validation over samples, benchmarks): tqdm (a
core dependency) when stderr is a terminal, otherwise nothing — output piped to a file stays clean."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def progress(total: int | None, description: str, unit: str = "sample") -> Iterator[Callable[[int], None]]:
    """Yields ``update(done)``: the number of items (``unit``) finished so far."""
    bar = None
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm
        except ImportError:  # tqdm is optional: no bar then
            tqdm = None
        if tqdm is not None:
            bar = tqdm(total=total, desc=description, unit=unit, leave=False, file=sys.stderr)

    def update(done: int) -> None:
        if bar is not None:
            bar.update(done - bar.n)

    try:
        yield update
    finally:
        if bar is not None:
            bar.close()
