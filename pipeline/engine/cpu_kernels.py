"""The engine's CPU fast paths: kernels compiled once per machine from csrc/, prepacked GEMM weights, and OpenMP
threads sized to the cores this process may use and bound one per core.

Building needs a C++ compiler and ninja; where either is missing the engine keeps its torch path, so a
kernel is always an optimisation, never a requirement. Set QUIRE_CPU_KERNELS=0 to use the torch path.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import time
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from .model.paddleocr_vl import StackedLinear
from .model.vision_layout import VisionLayout

log = logging.getLogger(__name__)
CSRC = Path(__file__).with_name("csrc")
SOURCES = sorted(CSRC.glob("*.cpp"))
CFLAGS = ["-O3", "-march=native", "-fopenmp"]
LDFLAGS = ["-fopenmp"]
STALE_LOCK_S = 600  # a build takes well under a minute; a lock this old was left by a killed builder
LINEARS = (nn.Linear, StackedLinear)  # exact types: a subclass (a quantized linear) has a forward of its own


def enabled() -> bool:
    return os.environ.get("QUIRE_CPU_KERNELS", "1") != "0"


@functools.cache
def extension_module() -> ModuleType | None:
    """The compiled CPU extension (paged decode, vision attention, thread binding), or None when it is disabled or
    cannot be built."""
    if not enabled():
        return None
    try:
        return _built_module()
    except Exception as exc:  # no compiler, no ninja, an exotic platform: the torch path serves
        log.warning("CPU paged-decode kernel unavailable, using the torch path: %s", exc)
        return None


def _built_module() -> ModuleType:
    """The module from its build directory, built there first if it is not yet.

    The directory is named by a digest of the source, flags and torch version, so every checkout and virtualenv on
    the machine shares one build and a change makes a new one (torch's own versioning rebuilt in place whenever two
    checkouts alternated, every process waiting on the rebuild's lock). A built library is imported directly,
    without torch's build lock: a process killed while holding that lock leaves it behind, and every later load
    would wait on it forever. A lock older than STALE_LOCK_S is such a leftover and is removed before building.
    """
    from torch.utils.cpp_extension import get_default_build_root, load

    code = b"".join(path.read_bytes() for path in sorted(CSRC.iterdir()) if path.suffix in (".cpp", ".h"))
    digest = hashlib.sha256(code + repr((CFLAGS, LDFLAGS, torch.__version__)).encode()).hexdigest()
    name = f"quire_cpu_kernels_{digest[:16]}"
    directory = Path(get_default_build_root()) / name
    library = directory / f"{name}.so"
    if library.exists():
        return _import_library(name, library)
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / "lock"
    if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
        lock.unlink(missing_ok=True)
    ensure_ninja_on_path()
    return load(name=name, sources=[str(path) for path in SOURCES], build_directory=str(directory), verbose=False,
                extra_cflags=CFLAGS, extra_ldflags=LDFLAGS)


def _import_library(name: str, library: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ensure_ninja_on_path() -> None:
    """torch's builder runs `ninja` from PATH; without a system one, use the pip package's (a dependency)."""
    if shutil.which("ninja") is None:
        import ninja

        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def vision_kernel_usable(dtype: torch.dtype, device: torch.device) -> bool:
    """Whether KernelVisionAttention serves a tower of this dtype on this device: bf16 on a CPU whose build has the
    AVX512-BF16 kernel (elsewhere SDPA serves, and fp32 keeps SDPA's exact fp32 arithmetic)."""
    if dtype != torch.bfloat16 or device.type != "cpu":
        return False
    module = extension_module()
    return module is not None and module.vision_attention_supported()


class KernelVisionAttention:
    """The vision tower's attention as one call of the compiled flash kernel over every frame: on a CPU with
    AVX512-BF16 about twice as fast as SDPA frame by frame (SplitAttention), whose bf16 path reaches only a third of
    the bf16 GEMM's rate. Takes the model's strided q/k/v views as they are."""

    def __init__(self, layout: VisionLayout) -> None:
        self.lengths = layout.lengths
        self.module = extension_module()

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.module.vision_attention(q, k, v, self.lengths, q.shape[-1] ** -0.5)


def packable_dtypes() -> frozenset[torch.dtype]:
    """fp32 always; bf16 where oneDNN has a bf16 GEMM for this CPU (AVX512BW/VL/DQ or AVX-NE-CONVERT): on AVX2 alone
    it refuses to reorder a bf16 weight."""
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return frozenset({torch.float32, torch.bfloat16})
    return frozenset({torch.float32})


class PrepackedLinear(nn.Module):
    """An nn.Linear whose weight oneDNN has reordered once for its GEMM, as vLLM's CPU backend does.

    F.linear repacks the weight on every call, which at decode sizes costs more than the arithmetic
    (the 103k-row lm_head most of all): the prepacked GEMM is about twice as fast there and no slower at
    prefill sizes. The packed tensor replaces the weight under its name: its shape, dtype and device are the
    weight's (what the model's readers ask), and reading its values fails loudly instead of keeping a second copy
    of every weight. A `shared` weight (a head tied to the embedding, which still looks rows up in it) stays as it is.
    """

    def __init__(self, linear: nn.Linear, batch_size: int, shared: bool = False) -> None:
        super().__init__()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), batch_size)
        self.weight = linear.weight if shared else nn.Parameter(self.packed, requires_grad=False)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [None], "")


def prepack_linears(model: nn.Module, batch_size: int) -> int:
    """Swap every CPU nn.Linear of `model` whose dtype oneDNN packs for a PrepackedLinear; returns how many.

    One at a time, each original freed before the next is packed, so the model never takes twice its memory.
    """
    if not enabled() or not torch.backends.mkldnn.is_available():
        return 0
    dtypes, shared = packable_dtypes(), _weights_outside_linears(model)
    targets = [(parent, name) for parent in model.modules() for name, child in parent.named_children()
               if type(child) in LINEARS and child.weight.device.type == "cpu" and child.weight.dtype in dtypes]
    for parent, name in targets:
        linear = parent._modules.pop(name)
        parent._modules[name] = PrepackedLinear(linear, batch_size, id(linear.weight) in shared)
        del linear
    return len(targets)


def _weights_outside_linears(model: nn.Module) -> set[int]:
    """Parameters some other module reads too (a tied embedding): their float values must stay."""
    others = (module for module in model.modules() if type(module) not in LINEARS)
    return {id(p) for module in others for p in module.parameters(recurse=False)}


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
