"""Host memory a resident engine keeps: freed memory handed back to the system when the engine goes idle and now
and then while it is busy, and oneDNN's per-shape caches bounded.

A resident engine allocates and frees tensors of new sizes every step (prefill chunks of any length, batches of any
size). glibc keeps freed memory in its arenas for reuse and gives it back to the system only from the top of a
heap, so a GPU worker's resident memory rose in steps its live memory did not take (one of 49 MB between the
6,600th and the 7,200th request of a soak on the tiny checkpoint, kept from then on). `malloc_trim(0)` hands back
every free page of every arena: 2 ms there, and 35-46 MB each time.

The CPU engine's GEMMs are oneDNN primitives (ops/prepack.py, PrepackedLinear), and a primitive is made for each row
count a weight meets: every prefill chunk's token count, every batch size. Two caches keep them, oneDNN's own and
ideep's above it, 1,024 entries each by default, and a primitive in both holds 0.4-0.6 MB of host memory (its
JIT-compiled kernel and buffers). Crops of every size keep bringing row counts not seen before, so a worker's memory
rose until both were full: 600 crops of random sizes through the tiny engine in one process grew it 95 MB from the
300th to the 600th while the (row count, weight) pairs it had met went from 499 to 723; with 256 entries a cache the
same run went from 1,191 to 1,129 MB. Making a primitive again costs about 1 ms, so a smaller cache bounds that
memory at a cost no step notices. Since then a PrepackedLinear runs blocks of rows padded to 13 counts, and an engine
makes all of its primitives before its first step (ops/prepack.warm_primitives): 136 of them, each taking two of
oneDNN's entries (its nested matmul's too), so the caches hold 512; the bound stays for what else runs oneDNN.

glibc's malloc_trim leaves one thing where it is: the free top of a thread's own arena (it madvises free chunks in
every arena's bins, but shrinks only the main heap's top). glibc gives a thread arena's top back only when a free
of 64 KiB or more finds it above the trim threshold, and that threshold rises with its dynamic mmap threshold to
64 MB. The engine's loop thread has its own arena, where every step's tensors come and go, so a soak's idle worker
held 28-38 MiB there across readings and gave them back thousands of requests later: read with gdb, its newest heap
was a 29 MB free top, and with the trim threshold at zero one 128 KiB free in that thread gave 28 MB of it back.
So both thresholds are fixed (mallopt; the mmap threshold at the dynamic one's ceiling, 32 MiB, the trim threshold at
twice that, as the dynamic ones end up), and an engine idle for a second drops the trim threshold to zero and frees
a block of its own: glibc then trims the loop thread's heap and, until work resumes, every other thread's as its
large blocks are freed. Work gets the high threshold back, so a step reuses the heap top the last one left instead
of faulting it in again, and a pause shorter than a second keeps it: trimmed at every pause, rounds of 48 requests
through the tiny engine's loop ran at 0.94 of the old code's speed (median of 9 interleaved pairs), and trimmed only
once settled at 1.02 (median of 4).

Two other glibc settings were measured in soaks and left alone: two arenas (MALLOC_ARENA_MAX) made resident memory
creep 1.7 MB per 1,000 requests where a thread's own arena stays level, and a fixed 128 KiB mmap threshold cost the
service 17 ms of CPU per region in page faults (benchmarks.service_overhead) without removing the step.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable

TRIM_INTERVAL_S = 10.0
SETTLE_S = 1.0  # idle this long after the last trim, the engine trims once more
ONEDNN_CACHE_ENTRIES = 512  # in each of oneDNN's and ideep's caches: at 256 a warmed engine re-made GEMM primitives
# oneDNN's primitive cache and ideep's computation cache, each sized from its variable when first used
ONEDNN_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")
MMAP_THRESHOLD = 32 << 20  # blocks this large are mmapped: the ceiling glibc's dynamic threshold rises to
WORK_TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # free heap top a thread keeps while the engine works, as dynamic glibc does
TRIM_BLOCK = 128 << 10  # freeing a block of at least 64 KiB makes glibc check its arena's top against the threshold
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt's parameters (malloc.h)


class MemoryTrimmer:
    """Hands freed memory back when the engine goes idle after work, once more when it has stayed idle for
    `settle_s`, and while it stays busy at most once per `interval_s`; does nothing on a C library other than glibc.

    Idle is when a worker has the most to give back (a batch's tensors all freed) and nothing to slow down. Going
    idle trims every arena's free chunks and the main heap's top (malloc_trim). The settled trim also trims the
    calling thread's heap top (the module's docstring) and leaves glibc's trim threshold at zero until work resumes;
    it is also for what the worker's task threads free after the last step, a page's images and results: in a soak
    an idle worker held 36 MB of free main-heap top until the next batch's first trim."""

    def __init__(self, interval_s: float = TRIM_INTERVAL_S, settle_s: float = SETTLE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self.settle_s = settle_s
        self.clock = clock
        self.trims = 0
        self._glibc = _Glibc.load()
        self._last = clock()
        self._worked = False
        self._settled = True

    def busy(self) -> None:
        """A step is about to run: give glibc back its working trim threshold, and trim if the interval has passed
        since the last trim."""
        if self._settled and self._glibc is not None:  # a settled trim left the threshold at zero
            self._glibc.set_trim_threshold(WORK_TRIM_THRESHOLD)
        self._worked, self._settled = True, False
        if self.clock() - self._last >= self.interval_s:
            self._run()

    def idle(self) -> None:
        """Nothing is left to run: trim if any step ran since the last trim, and down to the bone once `settle_s` has
        passed since a trim that followed work (a pause between two requests would fault the heap top in again)."""
        if self._worked:
            self._run()
        elif not self._settled and self.clock() - self._last >= self.settle_s:
            self._run(lean=True)
            self._settled = True

    def _run(self, lean: bool = False) -> None:
        if self._glibc is not None:
            if lean:
                self._glibc.set_trim_threshold(0)
                self._glibc.free_a_block()
            self._glibc.trim()
            self.trims += 1
        self._last = self.clock()
        self._worked = False


class _Glibc:
    """The few glibc allocator calls a trimmer makes, from the process's own symbols."""

    def __init__(self, libc: ctypes.CDLL) -> None:
        self._libc = libc
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]
        libc.free.argtypes = [ctypes.c_void_p]
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        self.set_trim_threshold(WORK_TRIM_THRESHOLD)

    @classmethod
    def load(cls) -> _Glibc | None:
        """glibc's allocator with its thresholds fixed, or None (musl, macOS)."""
        try:
            libc = ctypes.CDLL(None)
        except OSError:
            return None
        return cls(libc) if hasattr(libc, "malloc_trim") and hasattr(libc, "mallopt") else None

    def set_trim_threshold(self, size: int) -> None:
        self._libc.mallopt(M_TRIM_THRESHOLD, size)

    def free_a_block(self) -> None:
        """Make glibc trim the calling thread's arena, which malloc_trim leaves alone."""
        self._libc.free(self._libc.malloc(TRIM_BLOCK))

    def trim(self) -> None:
        self._libc.malloc_trim(0)


def bound_onednn_caches(entries: int = ONEDNN_CACHE_ENTRIES) -> None:
    """Size oneDNN's primitive cache and ideep's computation cache to `entries` primitives each.

    Each reads its capacity from the environment once, when the process makes its first oneDNN primitive, and keeps
    it: so this must run before then (a worker calls it at start, before any layout model or engine runs a step; the
    engine calls it again as it is built, which is too late only where something else ran oneDNN first)."""
    for variable in ONEDNN_CACHE_VARIABLES:
        os.environ[variable] = str(entries)
