"""Freed host memory handed back to the system when the engine goes idle and now and then while it is busy.

A resident engine allocates and frees tensors of new sizes every step (prefill chunks of any length, batches of any
size). glibc keeps freed memory in its arenas for reuse and gives it back to the system only from the top of a
heap, so a GPU worker's resident memory rose in steps its live memory did not take (one of 49 MB between the
6,600th and the 7,200th request of a soak on the tiny checkpoint, kept from then on). `malloc_trim(0)` hands back
every free page of every arena: 2 ms there, and 35-46 MB each time.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable

TRIM_INTERVAL_S = 10.0


class MemoryTrimmer:
    """Calls glibc's malloc_trim when the engine goes idle after work, and while it stays busy at most once per
    `interval_s`; does nothing on a C library without it. Idle is when a worker has the most to give back (a batch's
    tensors all freed) and nothing to slow down."""

    def __init__(self, interval_s: float = TRIM_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.clock = clock
        self.trims = 0
        self._trim = _malloc_trim()
        self._last = clock()
        self._worked = False

    def busy(self) -> None:
        """A step is about to run: trim if the interval has passed since the last trim."""
        self._worked = True
        if self.clock() - self._last >= self.interval_s:
            self._run()

    def idle(self) -> None:
        """Nothing is left to run: trim if any step ran since the last trim."""
        if self._worked:
            self._run()

    def _run(self) -> None:
        if self._trim is not None:
            self._trim(0)
            self.trims += 1
        self._last = self.clock()
        self._worked = False


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim from the process's own symbols, or None (musl, macOS)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
