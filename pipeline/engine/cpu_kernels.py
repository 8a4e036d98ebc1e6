"""The engine's CPU fast paths: kernels compiled once per machine from csrc/, and prepacked GEMM weights.

Building needs a C++ compiler and ninja; where either is missing the engine keeps its torch path, so a
kernel is always an optimisation, never a requirement. Set QUIRE_CPU_KERNELS=0 to use the torch path.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from .model.paddleocr_vl import StackedLinear

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("csrc") / "paged_decode.cpp"


def enabled() -> bool:
    return os.environ.get("QUIRE_CPU_KERNELS", "1") != "0"


@functools.cache
def paged_decode_module() -> ModuleType | None:
    """The compiled paged-decode module, or None when it is disabled or cannot be built here."""
    if not enabled():
        return None
    try:
        from torch.utils.cpp_extension import load

        ensure_ninja_on_path()
        return load(name="quire_paged_decode", sources=[str(SOURCE)], verbose=False,
                    extra_cflags=["-O3", "-march=native", "-fopenmp"], extra_ldflags=["-fopenmp"])
    except Exception as exc:  # no compiler, no ninja, an exotic platform: the torch path serves
        log.warning("CPU paged-decode kernel unavailable, using the torch path: %s", exc)
        return None


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
