"""``intra_op_num_threads`` for numpy's BLAS, cheap enough to apply on every ``run``.

The CPU provider's threads are numpy's BLAS threads, so a session's ``intra_op_num_threads`` is
honoured by setting the BLAS libraries' thread count while it runs and restoring it afterwards
(other code in the process keeps its own setting).  threadpoolctl finds the libraries; its
``limit`` context re-inspects every loaded library on each entry (tens of microseconds, more than
a small model's whole run), so the libraries are looked up once per session and each run only
reads and, where it differs, sets their counts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BlasThreads"]


class BlasThreads:
    """Holds the BLAS thread count at ``threads`` between :meth:`enter` and :meth:`leave`.

    Concurrent runs each get their own token, so the count is restored by whichever run changed it.

    :param threads: the count (> 0).
    """

    def __init__(self, threads: int) -> None:
        import threadpoolctl

        self._threads = int(threads)
        self._libraries: list[Any] = list(threadpoolctl.ThreadpoolController().select(user_api="blas").lib_controllers)

    def enter(self) -> list[tuple[Any, int]]:
        """Set the count; returns what :meth:`leave` restores."""
        saved = []
        for library in self._libraries:
            current = library.get_num_threads()
            if current != self._threads:
                library.set_num_threads(self._threads)
                saved.append((library, current))
        return saved

    def leave(self, saved: list[tuple[Any, int]]) -> None:
        for library, count in saved:
            library.set_num_threads(count)
