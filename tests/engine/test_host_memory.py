"""Freed host memory goes back to the system while the engine runs, and oneDNN's per-shape caches stay bounded, so a
worker's resident memory follows what it holds rather than the highest its heap or those caches ever reached."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from pipeline.engine.engine import Engine
from pipeline.engine.host_memory import MemoryTrimmer
from pipeline.engine.request import Request
from tests.process_tree import vm_rss_kib
from tests.reference import random_image

ROOT = Path(__file__).resolve().parents[2]
CHUNK, CHUNKS = 4000, 20_000  # 80 MB in chunks under glibc's mmap threshold: they come from the heap
MIB = 1 << 20
TOP = 20 * MIB  # a step's tensors, freed at the top of the heap they came from


def _libc() -> ctypes.CDLL:
    """glibc's malloc and free, typed for whole pointers."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def _rss_kib() -> int:
    return vm_rss_kib(os.getpid())


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_memory_freed_below_a_live_block_goes_back_once_the_interval_has_passed():
    libc = _libc()
    clock = FakeClock()
    trimmer = MemoryTrimmer(interval_s=10, clock=clock)
    chunks = [libc.malloc(CHUNK) for _ in range(CHUNKS)]
    for chunk in chunks:
        ctypes.memset(chunk, 1, CHUNK)
    for chunk in chunks[:-1]:  # the last one keeps the heap's top where it is, so free() cannot give any back
        libc.free(chunk)
    held = _rss_kib()
    trimmer.busy()
    assert trimmer.trims == 0 and _rss_kib() > held - 10_000
    clock.now = 10.0
    trimmer.busy()
    libc.free(chunks[-1])
    assert trimmer.trims == 1
    assert _rss_kib() < held - 60_000, f"{held} KiB before the trim"


def test_while_busy_a_trim_waits_for_the_interval_since_the_last_one():
    clock = FakeClock()
    trimmer = MemoryTrimmer(interval_s=10, clock=clock)
    for now in (5.0, 10.0, 15.0, 19.0, 20.0):
        clock.now = now
        trimmer.busy()
    assert trimmer.trims == 2  # at 10 and at 20


def test_going_idle_trims_once_after_work_and_never_for_nothing():
    trimmer = MemoryTrimmer(interval_s=10, clock=FakeClock())
    trimmer.idle()
    assert trimmer.trims == 0
    trimmer.busy()
    trimmer.idle()
    trimmer.idle()
    assert trimmer.trims == 1


def test_an_idle_engine_trims_once_more_when_its_idleness_has_settled():
    """What the worker's threads free after the last step (a page's images, its results) goes back too."""
    clock = FakeClock()
    trimmer = MemoryTrimmer(interval_s=10, settle_s=1, clock=clock)
    trimmer.busy()
    for now in (0.0, 0.5, 1.0, 1.5, 5.0):
        clock.now = now
        trimmer.idle()
    assert trimmer.trims == 2  # at 0 and at 1


def _touch_and_free(size: int) -> None:
    """A block of `size` bytes written (so resident) and freed, as a step's tensor is."""
    libc = _libc()
    block = libc.malloc(size)
    ctypes.memset(block, 1, size)
    libc.free(block)


def _in(thread: ThreadPoolExecutor, call, *args) -> None:
    thread.submit(call, *args).result()


def _settle(trimmer: MemoryTrimmer, clock: FakeClock) -> None:
    """Work, the idle trim, and the settled one `settle_s` later."""
    trimmer.busy()
    trimmer.idle()
    clock.now += trimmer.settle_s
    trimmer.idle()


def _in_a_fresh_process(scenario: Callable[[], None]) -> None:
    """Runs `scenario`, a function of this module, in a new interpreter. A block freed at its heap's top lands there
    only where the thread has an arena of its own: a long test process has made more threads than glibc has arenas
    (eight per core), so a new thread shares one and its block may come from free chunks below that arena's top (in
    CI, a settled trim gave back 4 MiB of the 20 freed)."""
    _fresh_python(f"from tests.engine.test_host_memory import {scenario.__name__}; {scenario.__name__}()")


def _fresh_python(code: str, *args: str, **env: str) -> str:
    """What `code` prints, run with `args` in a new interpreter (with `env` added to the environment), which must
    succeed."""
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _loop_thread_hands_back_its_heap_top_once_settled() -> None:
    clock = FakeClock()
    trimmer = MemoryTrimmer(clock=clock)
    with ThreadPoolExecutor(1, thread_name_prefix="loop") as loop:
        _in(loop, _touch_and_free, TOP + 4 * MIB)  # mmapped under glibc's dynamic thresholds: raises them above TOP
        _in(loop, _touch_and_free, TOP)
        held = _rss_kib()
        _in(loop, _settle, trimmer, clock)
        assert trimmer.trims == 2
        assert _rss_kib() < held - 15 * 1024, f"{held} KiB before the trims"


def test_a_settled_engine_hands_back_the_free_top_of_its_loop_threads_heap():
    """malloc_trim shrinks only the main heap's top: the loop thread's own arena kept what its last step freed there
    (in a soak, 28-38 MiB across idle readings)."""
    _in_a_fresh_process(_loop_thread_hands_back_its_heap_top_once_settled)


def _a_task_threads_heap_top_stays_while_working_and_goes_back_once_settled() -> None:
    clock = FakeClock()
    trimmer = MemoryTrimmer(clock=clock)
    with ThreadPoolExecutor(1, thread_name_prefix="loop") as loop, ThreadPoolExecutor(1) as task:
        _in(task, _touch_and_free, TOP + 4 * MIB)
        _in(loop, trimmer.busy)
        before = _rss_kib()
        _in(task, _touch_and_free, TOP)
        working = _rss_kib()
        _in(loop, _settle, trimmer, clock)
        _in(task, _touch_and_free, TOP)
        settled = _rss_kib()
    assert working > before - 1024, f"{before} KiB before the block, {working} after it was freed"
    assert settled < working - 15 * 1024, f"{working} KiB while working, {settled} once settled"


def test_while_the_engine_works_a_freed_heap_top_stays_for_the_next_step_and_once_settled_it_goes_back_as_freed():
    _in_a_fresh_process(_a_task_threads_heap_top_stays_while_working_and_goes_back_once_settled)


def _trims_once_they_reach(engine: Engine, count: int, timeout_s: float = 10) -> int:
    deadline = time.monotonic() + timeout_s
    while engine.trimmer.trims < count and time.monotonic() < deadline:
        time.sleep(0.05)
    return engine.trimmer.trims


def test_the_engine_loop_trims_once_its_work_is_done_and_once_more_when_settled(tiny_checkpoint):
    engine = Engine.from_pretrained(tiny_checkpoint)
    settle_s = engine.trimmer.settle_s
    try:
        out = engine.submit(Request(images=[random_image(120, 80)], max_tokens=4)).result(timeout=120)
        done = _trims_once_they_reach(engine, 1)
        time.sleep(settle_s / 2)
        before_settling = engine.trimmer.trims
        settled = _trims_once_they_reach(engine, 2)
        time.sleep(settle_s * 2)
        later = engine.trimmer.trims
    finally:
        engine.close()
    assert out.generated_tokens > 0 and (done, before_settling, settled, later) == (1, 1, 2, 2)


# A fresh process, since oneDNN sizes its caches once, at a process's first primitive: builds the engine as a worker
# does, then multiplies by two of its packed weights rows of every count from 1 to 2 * ROWS (through oneDNN's op
# itself: a PrepackedLinear pads them to a few counts first), and prints the resident memory (MB, after a trim)
# after the first half and after the second. About 10 s of CPU.
ROWS = 400
SHAPES_CHILD = f"""
import ctypes, sys
import torch
from pipeline.engine.ops.prepack import PrepackedLinear
from pipeline.engine.engine import Engine

def rss_mb():
    ctypes.CDLL(None).malloc_trim(0)
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmRSS:")) / 1024

engine = Engine.from_pretrained(sys.argv[1], device="cpu", dtype="float32")
by_shape = {{tuple(m.packed.shape): m for m in engine.model.modules() if isinstance(m, PrepackedLinear)}}
linears = sorted(by_shape.values(), key=lambda m: m.packed.numel())[:2]
torch.set_num_threads(1)  # OpenMP's threads spinning between 1,600 tiny GEMMs cost more than the GEMMs
readings = []
for rows in range(1, 2 * {ROWS} + 1):
    with torch.no_grad():
        for linear in linears:
            torch.ops.mkldnn._linear_pointwise(torch.ones(rows, linear.packed.shape[1]), linear.packed,
                                               linear.bias, "none", [None], "")
    if rows % {ROWS} == 0:
        readings.append(rss_mb())
print(*readings)
"""


@pytest.mark.slow
def test_gemms_over_ever_new_row_counts_keep_a_bounded_cache(tiny_checkpoint):
    """The first 800 (row count, weight) pairs fill the 512-entry caches; at oneDNN's own 1,024 the second 800 added
    69 MB, now about 1."""
    first, second = map(float, _fresh_python(SHAPES_CHILD, str(tiny_checkpoint)).split())
    assert second - first < 30, f"{second - first:.0f} MB more over {2 * ROWS} new (row count, weight) pairs"


# A fresh process with oneDNN's creation log on: an engine serves one request (its first step makes the primitives),
# then batches of crops of random sizes, so every step brings row counts of its own. C's stdout is flushed before the
# mark so that the log's lines fall on the side of it where they were made.
PRIMITIVES_CHILD = """
import ctypes, random, sys
from pipeline.engine.engine import Engine
from pipeline.engine.request import Request
from tests.reference import random_image

engine = Engine.from_pretrained(sys.argv[1])
rng = random.Random(0)

def batch(count):
    sizes = [(rng.randint(28, 700), rng.randint(28, 500)) for _ in range(count)]
    requests = [Request(images=[random_image(*size)], max_tokens=rng.randint(1, 12)) for size in sizes]
    for future in [engine.submit(request) for request in requests]:
        future.result(timeout=300)

batch(1)
ctypes.CDLL(None).fflush(None)
print("FIRST REQUEST DONE", flush=True)
for _ in range(8):
    batch(rng.randint(1, 24))
engine.close()
"""


@pytest.mark.slow
def test_an_engine_makes_every_onednn_primitive_before_its_first_step(tiny_checkpoint):
    """Requests of any size afterwards make none: a primitive first made thousands of requests in (0.55 MB each)
    was a worker's memory rising in a soak, and one made for a standalone GELU of each new shape evicted the GEMMs'."""
    log = _fresh_python(PRIMITIVES_CHILD, str(tiny_checkpoint), ONEDNN_VERBOSE="profile_create")
    before, after = log.split("FIRST REQUEST DONE")
    assert "inner_product" in before
    made_later = [line for line in after.splitlines() if "create:cache_miss" in line]
    assert made_later == [], f"{len(made_later)} primitives made after the first step: {made_later[:3]}"
