"""OpenMP threads sized to the cores this process may use and bound one per core (the binding is the CPU
extension's), and serial torch for a thread that builds an engine but will not step it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path

import torch

from .extension import extension_module


def configure_cpu_threads(threads: int | None = None) -> list[tuple[int, int]]:
    """Size torch's OpenMP pool to the cores this process may use and bind its threads one per core, as vLLM does.

    torch counts the machine's cores, not those a container or taskset leaves to the process, so a worker allowed 4
    of 64 would run 64 threads on 4. The count is `threads`, else OMP_NUM_THREADS, else one per allowed physical core.
    OpenMP keeps a thread count and a team per thread that starts parallel work, so this sizes and binds those of the
    calling thread: call it from the thread that runs the model. The caller itself stays unbound, as threads it
    starts later inherit its mask. Returns (thread id, CPU) for each thread bound; none without the extension.
    """
    cores = allowed_cores()
    count = threads or omp_num_threads() or len(cores)
    torch.set_num_threads(count)
    module = extension_module()
    if module is None or count > len(cores):
        return []
    own = os.sched_getaffinity(0)
    try:
        tids = module.bind_omp_threads(cores[:count])
    finally:
        os.sched_setaffinity(0, own)
    return [(tid, cpu) for tid, cpu in zip(tids[1:], cores[1:count], strict=True) if tid >= 0]


@contextlib.contextmanager
def serial_torch() -> Iterator[None]:
    """Torch's parallel work off in the calling thread for the block: for building an engine in a thread that will
    not run its steps.

    A thread's first parallel op gives it an OpenMP pool of its own, which lives as long as the thread. Once the
    threads of all pools outnumber the cores, libgomp stops spinning between parallel regions, and every step then
    ran 35-55 % slower here: loading in the main thread and stepping in the engine's loop thread did exactly that.
    Built serially, the loop thread's pool is the process's one.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def allowed_cores() -> list[int]:
    """One CPU per physical core this process may run on: SMT siblings share a core's vector units, so a second
    GEMM thread there only contends for them."""
    return one_per_core(sorted(os.sched_getaffinity(0)), core_of)


def one_per_core(cpus: list[int], core: Callable[[int], Hashable]) -> list[int]:
    """The first CPU of each core, in order: `core` names the core a CPU belongs to."""
    first: dict[Hashable, int] = {}
    for cpu in cpus:
        first.setdefault(core(cpu), cpu)
    return list(first.values())


def core_of(cpu: int) -> Hashable:
    """(package, core) from sysfs; the CPU itself where the topology is not exposed (each counts as a core)."""
    topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
    try:
        return (topology / "physical_package_id").read_text().strip(), (topology / "core_id").read_text().strip()
    except OSError:
        return cpu


def omp_num_threads() -> int | None:
    """The first level of OMP_NUM_THREADS (it may list one count per nesting level), when it is a positive count."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(first) if first.isdigit() and int(first) > 0 else None
