"""The engine's CPU fast paths: kernels compiled once per machine from csrc/, and the lm_head's GEMM layout.

Building needs a C++ compiler and ninja; where either is missing the engine keeps its torch path, so a
kernel is always an optimisation, never a requirement. Set QUIRE_CPU_KERNELS=0 to use the torch path.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("csrc") / "paged_decode.cpp"


@functools.cache
def paged_decode_module() -> ModuleType | None:
    """The compiled paged-decode module, or None when it is disabled or cannot be built here."""
    if os.environ.get("QUIRE_CPU_KERNELS", "1") == "0":
        return None
    try:
        from torch.utils.cpp_extension import load

        return load(name="quire_paged_decode", sources=[str(SOURCE)], verbose=False,
                    extra_cflags=["-O3", "-march=native", "-fopenmp"], extra_ldflags=["-fopenmp"])
    except Exception as exc:  # no compiler, no ninja, an exotic platform: the torch path serves
        log.warning("CPU paged-decode kernel unavailable, using the torch path: %s", exc)
        return None


def lm_head_linear(weight: torch.Tensor, batch_size: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """`x @ weight.T` for a large weight (the 103k-row lm_head) and decode-sized batches, fp32 on the CPU.

    F.linear repacks the whole weight on every call, which costs more than the arithmetic at decode sizes.
    A transposed copy, kept once, is read as a plain GEMM; for a handful of rows (up to a quarter of
    `batch_size`, but more than one), streaming the weight once as `weight @ x.T` is faster still.
    """
    usable = weight.device.type == "cpu" and weight.dtype == torch.float32
    if not usable or os.environ.get("QUIRE_CPU_KERNELS", "1") == "0":
        return lambda x: F.linear(x, weight)
    transposed = weight.t().contiguous()

    def linear(x: torch.Tensor) -> torch.Tensor:
        if 1 < x.shape[0] <= batch_size // 4:
            return (weight @ x.t()).t().contiguous()
        return x @ transposed

    return linear
