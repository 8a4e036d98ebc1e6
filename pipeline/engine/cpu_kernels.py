"""The engine's CPU fast paths: kernels compiled once per machine from csrc/, and prepacked GEMM weights.

Building needs a C++ compiler and ninja; where either is missing the engine keeps its torch path, so a
kernel is always an optimisation, never a requirement. Set QUIRE_CPU_KERNELS=0 to use the torch path.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import shutil
import time
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from .model.paddleocr_vl import StackedLinear

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("csrc") / "paged_decode.cpp"
CFLAGS = ["-O3", "-march=native", "-fopenmp"]
LDFLAGS = ["-fopenmp"]
STALE_LOCK_S = 600  # a build takes well under a minute; a lock this old was left by a killed builder


def enabled() -> bool:
    return os.environ.get("QUIRE_CPU_KERNELS", "1") != "0"


@functools.cache
def paged_decode_module() -> ModuleType | None:
    """The compiled paged-decode module, or None when it is disabled or cannot be built here."""
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

    digest = hashlib.sha256(SOURCE.read_bytes() + repr((CFLAGS, LDFLAGS, torch.__version__)).encode()).hexdigest()
    name = f"quire_paged_decode_{digest[:16]}"
    directory = Path(get_default_build_root()) / name
    library = directory / f"{name}.so"
    if library.exists():
        return _import_library(name, library)
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / "lock"
    if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
        lock.unlink(missing_ok=True)
    ensure_ninja_on_path()
    return load(name=name, sources=[str(SOURCE)], build_directory=str(directory), verbose=False,
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


class PrepackedLinear(nn.Module):
    """An nn.Linear whose weight oneDNN has reordered once for its fp32 GEMM, as vLLM's CPU backend does.

    F.linear repacks the weight on every call, which at decode sizes costs more than the arithmetic
    (the 103k-row lm_head most of all): the prepacked GEMM is about twice as fast there and no slower at
    prefill sizes. The original parameters stay, under their names, for everything that reads them.
    """

    def __init__(self, linear: nn.Linear, batch_size: int) -> None:
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), batch_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [None], "")


def prepack_linears(model: nn.Module, batch_size: int) -> int:
    """Swap every fp32 CPU nn.Linear of `model` for a PrepackedLinear; returns how many (0 when unavailable)."""
    weight = next(model.parameters())
    usable = weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()
    if not usable or not enabled():
        return 0
    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) in (nn.Linear, StackedLinear):
                parent._modules[name] = PrepackedLinear(child, batch_size)
                swapped += 1
    return swapped
